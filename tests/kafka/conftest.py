"""A Kafka listener on the shared test cluster (``kcluster``), for real Kafka clients."""

from __future__ import annotations

import shutil

import pytest


@pytest.fixture(scope="session")
def kafka_bootstrap(kcluster):
    from kcoord.cluster.listeners import start_listeners, stop_listeners

    bootstrap = start_listeners(kcluster.name, kcluster.namespace, port=0, local=True)
    yield bootstrap
    stop_listeners(kcluster.name, kcluster.namespace)


@pytest.fixture(scope="session")
def kcat():
    path = shutil.which("kcat") or shutil.which("kafkacat")
    if path is None:
        pytest.skip("kcat is not installed (Debian: apt-get install -y kcat); the kcat tests need it")
    return path


def pytest_collection_modifyitems(session, config, items):
    """The secured listener's tests run leg by leg (each leg restarts the listener): their
    items are sorted by leg in the slots they already hold."""
    slots = [i for i, item in enumerate(items) if item.nodeid.startswith("tests/kafka/test_kafka_security_clients.py")]
    if not slots:
        return
    module = items[slots[0]].module
    ordered = sorted((items[i] for i in slots), key=lambda item: module.LEG_ORDER.index(module.leg_of(item)))
    for i, item in zip(slots, ordered):
        items[i] = item
