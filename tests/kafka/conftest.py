"""A Kafka listener on the shared test cluster (``kcluster``), for real Kafka clients."""

from __future__ import annotations

import shutil

import pytest


@pytest.fixture(scope="session")
def kafka_bootstrap(kcluster):
    from kcoord.kafka.deploy import start_listeners, stop_listeners

    bootstrap = start_listeners(kcluster.name, kcluster.namespace, port=0, local=True)
    yield bootstrap
    stop_listeners(kcluster.name, kcluster.namespace)


@pytest.fixture(scope="session")
def kcat():
    path = shutil.which("kcat") or shutil.which("kafkacat")
    if path is None:
        pytest.skip("kcat is not installed (Debian: apt-get install -y kcat); the kcat tests need it")
    return path
