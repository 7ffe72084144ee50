"""A hanging transaction on real Ray, found and aborted by an operator (KIP-664): a
transactional batch lands at a partition with no coordinator behind it (a write straight to
the leader, as a late write from an ended transaction would on a cluster whose leaders do not
verify transactions, KIP-890's check turned off), so the LSO stops there and
read_committed readers never pass it. `kcoord transactions find-hanging` and
``Admin.find_hanging_transactions`` find it (and not a live transaction its coordinator holds),
kafka-python's ``KafkaAdminClient.abort_transaction`` aborts it over the wire (WriteTxnMarkers),
and then the LSO reaches the HW and read_committed readers (kcoord's and confluent-kafka's) go
on. Bad input gets Kafka's error codes at once."""

from __future__ import annotations

import json
import uuid

import pytest

from kcoord import record as R
from kcoord.client.admin import Admin
from kcoord.client.types import TopicPartition
from kcoord.protocol.errors import ErrorCode, KafkaError
from kcoord.protocol.replication import LATEST_TIMESTAMP, ProduceRequest, ProduceResponse

from waiting import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.kafka]


@pytest.fixture(scope="module")
def txn_cluster(ray_session, tmp_path_factory):
    """A one-broker cluster whose leaders do not verify transactional batches with the
    coordinator (``transaction.partition.verification.enable=false``): with KIP-890's check
    on (the default) a stray transactional write is refused and cannot hang a partition."""
    from tests.conftest import TEST_CONTROLLER_CONFIG, own_cluster

    yield from own_cluster(
        tmp_path_factory, "hang", controller_config=TEST_CONTROLLER_CONFIG, broker_config={"transaction.partition.verification.enable": "false"}
    )


@pytest.fixture(scope="module")
def kafka_bootstrap(txn_cluster):
    from kcoord.cluster.listeners import start_listeners, stop_listeners

    bootstrap = start_listeners(txn_cluster.name, txn_cluster.namespace, port=0, local=True)
    yield bootstrap
    stop_listeners(txn_cluster.name, txn_cluster.namespace)


def _produce(cluster, topic: str, data: bytes) -> int:
    resp = cluster.call_leader(topic, 0, "produce", lambda epoch: ProduceRequest(topic, 0, data, acks=-1, current_leader_epoch=epoch), ProduceResponse)
    assert resp.error_code == 0, resp
    return resp.base_offset


def _offsets(cluster, topic: str) -> tuple[int, int]:
    """(HW, LSO) of ``topic``-0."""
    tp = TopicPartition(topic, 0)
    hw = cluster.list_offsets([tp], LATEST_TIMESTAMP)[tp]
    lso = cluster.list_offsets([tp], LATEST_TIMESTAMP, isolation_level=1)[tp]
    return hw, lso


def _cli(cluster, *args: str) -> str:
    from click.testing import CliRunner

    from kcoord.cli import cli

    result = CliRunner().invoke(cli, ["--name", cluster.name, "--namespace", cluster.namespace, "transactions", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def _read_committed_kcoord(cluster, topic: str, want: bytes) -> list[bytes]:
    from kcoord.client.consumer import Consumer

    c = Consumer(topic, cluster=cluster, group_id=None, auto_offset_reset="earliest", isolation_level="read_committed")
    got: list[bytes] = []
    try:
        def seen() -> bool:
            for records in c.poll(timeout_ms=200).values():
                got.extend(r.value for r in records)
            return want in got

        wait_until(seen, timeout=60, what=f"{want!r} read committed from {topic}")
    finally:
        c.close()
    return got


def test_a_hanging_transaction_is_found_aborted_over_the_wire_and_readers_move_on(txn_cluster, kafka_bootstrap):
    from confluent_kafka import Consumer as ConfluentConsumer
    from kafka import KafkaAdminClient
    from kafka.admin import AbortTransactionSpec
    from kafka.errors import InvalidProducerEpochError
    from kafka.structs import TopicPartition as KTP

    import kcoord

    cluster = txn_cluster
    admin = Admin(cluster)
    topic = f"hang-{uuid.uuid4().hex[:6]}"
    admin.create_topic(topic, partitions=1, replication_factor=1)
    tp = TopicPartition(topic, 0)
    pid, epoch = 8_000_001 + uuid.uuid4().int % 100_000, 3

    _produce(cluster, topic, R.build_batch([(None, b"before")]))
    start = _produce(cluster, topic, R.build_batch([(None, b"hanging")], producer_id=pid, producer_epoch=epoch, base_sequence=0, transactional=True))
    _produce(cluster, topic, R.build_batch([(None, b"after")]))
    hw, lso = _offsets(cluster, topic)
    assert (hw, lso) == (start + 2, start), "the open transaction holds the LSO at its first offset"

    # a live transaction its coordinator holds, at the same partition: not hanging
    live = kcoord.Producer(cluster, transactional_id=f"live-{uuid.uuid4().hex[:6]}", acks="all")
    live.init_transactions()
    live.begin_transaction()
    live.send(topic, value=b"live", partition=0).get(timeout=60)
    try:
        producers = {p.producer_id: p for p in admin.describe_producers([tp])[tp].active_producers}
        assert producers[pid].current_transaction_start_offset == start and producers[pid].producer_epoch == epoch
        assert producers[pid].last_timestamp > 0

        hanging = admin.find_hanging_transactions(topics=[topic], max_transaction_timeout_ms=0)
        assert [(h.topic_partition, h.producer_id, h.producer_epoch, h.start_offset, h.transactional_id) for h in hanging] == [(tp, pid, epoch, start, None)]
        # the default threshold (15 min) leaves a transaction written just now alone
        assert admin.find_hanging_transactions(topics=[topic]) == []
        found = json.loads(_cli(cluster, "find-hanging", "--topic", topic, "--max-transaction-timeout-ms", "0", "--json"))
        assert [(h["topic"], h["partition"], h["producer_id"], h["start_offset"]) for h in found] == [(topic, 0, pid, start)]
        assert str(pid) in _cli(cluster, "describe-producers", "--topic", topic)

        # bad input: each a Kafka error code, nothing written
        with pytest.raises(KafkaError) as err:
            admin.abort_transaction(tp, pid, epoch - 1)
        assert err.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
        with pytest.raises(KafkaError) as err:
            admin.abort_transaction(TopicPartition(topic, 7), pid, epoch)
        assert err.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        with pytest.raises(KafkaError) as err:
            admin.describe_transactions([f"nobody-{uuid.uuid4().hex[:6]}"])
        assert err.value.code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
        with pytest.raises(KafkaError) as err:
            admin.describe_producers([TopicPartition(f"missing-{uuid.uuid4().hex[:6]}", 0)])
        assert err.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert _offsets(cluster, topic)[1] == start

        # kafka-python's admin over the listener: the producers, a refused epoch, then the abort
        kadmin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap, request_timeout_ms=60_000)
        try:
            described = kadmin.describe_producers([KTP(topic, 0)])[KTP(topic, 0)].active_producers
            assert {p.producer_id: p.current_transaction_start_offset for p in described}[pid] == start
            with pytest.raises(InvalidProducerEpochError):
                kadmin.abort_transaction(AbortTransactionSpec(KTP(topic, 0), pid, epoch - 1, 0))
            kadmin.abort_transaction(AbortTransactionSpec(KTP(topic, 0), pid, epoch, 0))
        finally:
            kadmin.close()

        # the LSO moves up to the live transaction's first offset, no further
        live_start = {p.producer_id: p.current_transaction_start_offset for p in admin.describe_producers([tp])[tp].active_producers if p.producer_id != pid}
        (live_first,) = [o for o in live_start.values() if o >= 0]
        wait_until(lambda: _offsets(cluster, topic)[1] == live_first, timeout=30, what="the LSO at the live transaction")
        assert admin.find_hanging_transactions(topics=[topic], max_transaction_timeout_ms=0) == []
        live.commit_transaction()
    finally:
        live.close()
    # EndTxn is answered once the decision is durable; the markers follow
    wait_until(lambda: _offsets(cluster, topic)[0] == _offsets(cluster, topic)[1], timeout=30, what="nothing open: the LSO at the HW")

    got = _read_committed_kcoord(cluster, topic, b"live")
    assert got == [b"before", b"after", b"live"]  # the aborted write is never handed out
    c = ConfluentConsumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"r-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    c.subscribe([topic])
    seen: list[bytes] = []
    try:
        def read() -> bool:
            m = c.poll(0.5)
            if m is not None and not m.error():
                seen.append(m.value())
            return b"live" in seen

        wait_until(read, timeout=60, interval=0, what="confluent read_committed reaching the end")
    finally:
        c.close()
    assert seen == [b"before", b"after", b"live"]
