"""KIP-360 recovery and expiry on real Ray actors: a cluster whose coordinators expire idle
transactional ids after 3 s (``transactional.id.expiration.ms``, which deploy hands to the
group coordinators too). A producer idle past it finds its id forgotten (its next
AddPartitionsToTxn is INVALID_PRODUCER_ID_MAPPING), aborts, which re-initialises with
InitProducerId carrying its old id and epoch, and carries on under a new producer id; the
group coordinator forgets the idle producer's fencing record, also across a restart."""

from __future__ import annotations

import time
import uuid

import pytest
import ray

import kcoord
from kcoord.client.admin import Admin
from kcoord.client.consumer import Consumer
from kcoord.client.producer import Producer
from kcoord.client.types import OffsetAndMetadata, TopicPartition
from kcoord.protocol import names
from kcoord.protocol.errors import ErrorCode as E
from kcoord.protocol.services import RESPONSE_FOR, TRANSACTION_COORDINATOR
from kcoord.protocol.txn import DescribeTransactionsRequest
from waiting import wait_until

pytestmark = pytest.mark.ray

HORIZON_MS = 3_000


@pytest.fixture(scope="module")
def expiring_cluster(ray_session, tmp_path_factory):
    from tests.conftest import own_cluster

    yield from own_cluster(tmp_path_factory, "exp", txn_config={"transactional.id.expiration.ms": HORIZON_MS})


def _describe_txn(cluster, tid: str):
    actor = ray.get_actor(names.transaction_coordinator(cluster.name, 0), namespace=cluster.namespace)
    method = {t: n for n, t in TRANSACTION_COORDINATOR.methods.items()}[DescribeTransactionsRequest]
    raw = ray.get(getattr(actor, method).remote(DescribeTransactionsRequest([tid]).encode()), timeout=30)
    return RESPONSE_FOR[DescribeTransactionsRequest].decode(raw).transactions[0]


def _group_view(cluster) -> dict:
    actor = ray.get_actor(names.group_coordinator(cluster.name, 0), namespace=cluster.namespace)
    return ray.get(actor.describe.remote(), timeout=30)


def test_an_expired_id_recovers_by_kip360_and_the_group_side_forgets_the_idle_producer(expiring_cluster):
    c = expiring_cluster
    Admin(c).create_topic("out", partitions=1, replication_factor=1)
    assert _group_view(c)["config"]["transactional_id_expiration_ms"] == HORIZON_MS
    with Producer(c, transactional_id="exp-tx", linger_ms=1) as p:
        p.init_transactions()
        old_pid = p.producer_id
        p.begin_transaction()
        p.send("out", value=b"one", partition=0)
        p.send_offsets_to_transaction({TopicPartition("out", 0): OffsetAndMetadata(1, "")}, "g-exp")
        p.commit_transaction()
        assert old_pid in _group_view(c)["txn_producers"]

        # idle past the horizon: both coordinators forget the producer
        wait_until(lambda: _describe_txn(c, "exp-tx").error_code == E.TRANSACTIONAL_ID_NOT_FOUND, timeout=60, interval=0.2, what="the transactional id expired")
        wait_until(lambda: old_pid not in _group_view(c)["txn_producers"], timeout=60, interval=0.2, what="the [5] record expired")
        # a restarted group coordinator loads the same: the tombstone, and the group's offset
        gc = ray.get_actor(names.group_coordinator(c.name, 0), namespace=c.namespace)
        before = _group_view(c)["incarnation"]
        ray.kill(gc, no_restart=False)
        wait_until(lambda: (lambda v: v["incarnation"] != before and v["loaded"])(_group_view(c)), timeout=90, interval=0.2, what="the group coordinator restarted")
        view = _group_view(c)
        assert old_pid not in view["txn_producers"] and view["groups"]["g-exp"]["offsets"] == {"out-0": 1}

        # the same instance goes on: its next transaction is abortable, the abort recovers
        p.begin_transaction()
        lost = p.send("out", value=b"lost", partition=0)
        with pytest.raises(kcoord.InvalidProducerIdMappingError):
            lost.get(timeout=60)
        with pytest.raises(kcoord.InvalidProducerIdMappingError, match="abort_transaction"):
            p.commit_transaction()
        p.abort_transaction()  # InitProducerId(old id, old epoch): a new producer id
        assert p.producer_id not in (old_pid, -1) and p.producer_epoch == 0
        p.begin_transaction()
        p.send("out", value=b"two", partition=0)
        p.send_offsets_to_transaction({TopicPartition("out", 0): OffsetAndMetadata(2, "")}, "g-exp")
        p.commit_transaction()
        assert _describe_txn(c, "exp-tx").producer_id == p.producer_id
        assert p.producer_id in _group_view(c)["txn_producers"]

    with Consumer("out", cluster=c, auto_offset_reset="earliest", isolation_level="read_committed") as consumer:
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 2 and time.monotonic() < deadline:
            for recs in consumer.poll(timeout_ms=200).values():
                got += [r.value for r in recs]
    assert sorted(got) == [b"one", b"two"]


def test_a_confluent_producer_whose_id_expired_recovers_over_the_wire(expiring_cluster):
    """librdkafka after INVALID_PRODUCER_ID_MAPPING: an abortable error that needs an epoch
    bump; its abort sends InitProducerId v3+ with the old producer id and epoch (KIP-360),
    and the coordinator that forgot the id answers a new producer id."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from kcoord.cluster.listeners import start_listeners, stop_listeners

    c = expiring_cluster
    Admin(c).create_topic("wire-out", partitions=1, replication_factor=1)
    bootstrap = start_listeners(c.name, c.namespace, port=0, local=True)
    try:
        p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": "exp-wire", "transaction.timeout.ms": 60000, "linger.ms": 5})
        p.init_transactions(30)
        p.begin_transaction()
        p.produce("wire-out", b"one", partition=0)
        p.commit_transaction(30)
        wait_until(lambda: _describe_txn(c, "exp-wire").error_code == E.TRANSACTIONAL_ID_NOT_FOUND, timeout=60, interval=0.2, what="the transactional id expired")
        failed: list = []
        p.begin_transaction()
        p.produce("wire-out", b"lost", partition=0, on_delivery=lambda err, msg: failed.append(err))
        with pytest.raises(confluent_kafka.KafkaException) as raised:
            p.commit_transaction(30)
        assert raised.value.args[0].txn_requires_abort() and not raised.value.args[0].fatal()
        p.abort_transaction(30)
        described = _describe_txn(c, "exp-wire")
        assert described.error_code == E.NONE and described.producer_epoch == 0
        p.begin_transaction()
        p.produce("wire-out", b"two", partition=0)
        p.commit_transaction(30)
        consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
        consumer.subscribe(["wire-out"])
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        while b"two" not in got and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
        consumer.close()
        assert got == [b"one", b"two"]
    finally:
        stop_listeners(c.name, c.namespace)
