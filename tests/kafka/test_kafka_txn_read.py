"""Transactions on the partition side against real Ray (docs/transactions.md section 1):
transactional batches and WriteTxnMarker through the replica actors, read back by kcoord's
Consumer and by kafka-python over the listener, read_committed and read_uncommitted. Until
the transaction coordinator runs, the test writes the markers it would write."""

from __future__ import annotations

import uuid

import pytest

from kcoord import records as R
from kcoord.client.admin import Admin
from kcoord.client.consumer import Consumer
from kcoord.client.types import TopicPartition
from kcoord.protocol.replication import ProduceRequest, ProduceResponse
from kcoord.client.coordinator.txn_coordinators import TransactionCoordinators
from kcoord.protocol.txn import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    TxnInitProducerIdRequest,
    TxnInitProducerIdResponse,
    WriteTxnMarkerRequest,
    WriteTxnMarkerResponse,
)

pytestmark = pytest.mark.ray


def _produce(cluster, topic: str, data: bytes, transactional_id: str | None = None) -> int:
    resp = cluster.call_leader(
        topic, 0, "produce", lambda epoch: ProduceRequest(topic, 0, data, acks=-1, current_leader_epoch=epoch, transactional_id=transactional_id), ProduceResponse
    )
    assert resp.error_code == 0, resp
    return resp.base_offset


def _open_transaction(cluster, tid: str, topic: str) -> int:
    """A transaction of ``tid`` holding ``topic``-0 at its coordinator (the leader verifies a
    transaction's first batch with it, KIP-890); its producer id (epoch 0). The markers are
    written by hand below; the coordinator's own transaction is aborted at teardown."""
    tcs = TransactionCoordinators(cluster)
    index = tcs.index_for(tid)
    init = tcs.call(index, "init_producer_id", TxnInitProducerIdRequest(tid, transaction_timeout_ms=900_000), TxnInitProducerIdResponse, 60)
    assert init.error_code == 0 and init.producer_epoch == 0, init
    added = tcs.call(index, "add_partitions_to_txn", AddPartitionsToTxnRequest(tid, init.producer_id, 0, {topic: [0]}), AddPartitionsToTxnResponse, 60)
    assert added.error_code == 0 and added.results == {topic: {0: 0}}, added
    return init.producer_id


def _abort_transaction(cluster, tid: str, pid: int) -> None:
    tcs = TransactionCoordinators(cluster)
    tcs.call(tcs.index_for(tid), "end_txn", EndTxnRequest(tid, pid, 0, commit=False), EndTxnResponse, 60)


def _marker(cluster, topic: str, pid: int, commit: bool) -> int:
    resp = cluster.call_leader(
        topic, 0, "write_txn_marker", lambda epoch: WriteTxnMarkerRequest(pid, 0, 1, commit, topic, 0, current_leader_epoch=epoch), WriteTxnMarkerResponse
    )
    assert resp.error_code == 0, resp
    return resp.offset


@pytest.fixture
def txn_topic(kcluster):
    """t: 2 records of producer A aborted, 2 of B committed, 1 plain, A's second transaction
    committed; the log ends with a marker."""
    topic = f"txn-read-{uuid.uuid4().hex[:6]}"
    admin = Admin(kcluster)
    admin.create_topic(topic, partitions=1, replication_factor=3, config={"min.insync.replicas": 2})
    tid_a, tid_b = f"{topic}-a", f"{topic}-b"
    a, b = _open_transaction(kcluster, tid_a, topic), _open_transaction(kcluster, tid_b, topic)
    tid = {a: tid_a, b: tid_b}

    def txn(pid: int, seq: int, values: list[bytes]) -> bytes:
        return R.build_batch([(None, v) for v in values], producer_id=pid, producer_epoch=0, base_sequence=seq, transactional=True)

    _produce(kcluster, topic, txn(a, 0, [b"a-aborted-1", b"a-aborted-2"]), tid[a])
    _produce(kcluster, topic, txn(b, 0, [b"b-1", b"b-2"]), tid[b])
    _produce(kcluster, topic, R.build_batch([(None, b"plain")]))
    _marker(kcluster, topic, a, commit=False)
    _marker(kcluster, topic, b, commit=True)
    _produce(kcluster, topic, txn(a, 2, [b"a-3"]), tid[a])  # still in A's transaction at its coordinator
    end = _marker(kcluster, topic, a, commit=True) + 1
    yield topic, end
    admin.delete_topic(topic)
    _abort_transaction(kcluster, tid_a, a)
    _abort_transaction(kcluster, tid_b, b)


def _drain(consumer, topic: str, want: int, end: int) -> list[bytes]:
    """Poll until ``want`` records arrived and the position reached ``end`` (30 s at most)."""
    import time

    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (len(got) < want or consumer.position(TopicPartition(topic, 0)) < end):
        for recs in consumer.poll(timeout_ms=200).values():
            got.extend(r.value for r in recs)
    return got


def test_kcoord_consumer_read_committed_drops_aborted_records_and_reaches_the_end(kcluster, txn_topic):
    topic, end = txn_topic
    with Consumer(topic, cluster=kcluster, auto_offset_reset="earliest", isolation_level="read_committed") as c:
        got = _drain(c, topic, 4, end)
        assert got == [b"b-1", b"b-2", b"plain", b"a-3"]
        assert c.position(TopicPartition(topic, 0)) == end  # past the last marker: lag 0
        assert c.end_offsets([TopicPartition(topic, 0)]) == {TopicPartition(topic, 0): end}
    with Consumer(topic, cluster=kcluster, auto_offset_reset="earliest") as c:
        got = _drain(c, topic, 6, end)
        assert got == [b"a-aborted-1", b"a-aborted-2", b"b-1", b"b-2", b"plain", b"a-3"]  # no marker as a record


def test_kafka_python_read_committed_through_the_listener(kcluster, kafka_bootstrap, txn_topic):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    topic, end = txn_topic
    for level, want in (("read_committed", [b"b-1", b"b-2", b"plain", b"a-3"]), ("read_uncommitted", [b"a-aborted-1", b"a-aborted-2", b"b-1", b"b-2", b"plain", b"a-3"])):
        consumer = KafkaConsumer(bootstrap_servers=kafka_bootstrap, enable_auto_commit=False, consumer_timeout_ms=5000, isolation_level=level, auto_offset_reset="earliest")
        try:
            consumer.assign([KTP(topic, 0)])
            got = [m.value for m in consumer]
            assert got == want, level
            assert consumer.end_offsets([KTP(topic, 0)])[KTP(topic, 0)] == end
        finally:
            consumer.close()
