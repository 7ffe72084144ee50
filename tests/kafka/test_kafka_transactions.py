"""Transactions with unchanged Kafka clients through the listener (docs/transactions.md
section 4, docs/kafka-wire.md): confluent-kafka's and kafka-python's transactional producers
commit (visible to read_committed consumers, kcat's too) and abort (invisible), a second
instance of a transactional id fences the first, a consumer's offsets committed in a
transaction move only when it commits, and bad transactional requests get Kafka's error codes
at once."""

from __future__ import annotations

import time
import uuid

import pytest

from kcoord.client.admin import Admin

from waiting import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.kafka]


@pytest.fixture(scope="module")
def txn_cluster(kcluster):
    """The shared cluster, once its transaction coordinators run."""
    import ray

    from kcoord.protocol import names

    actor = names.transaction_coordinator(kcluster.name, 0)
    try:
        ray.get_actor(actor, namespace=kcluster.namespace)
    except ValueError:
        pytest.skip(f"no transaction coordinator actor ({actor}) in the test cluster: its driver and actor (branch txn-driver) are not merged yet")
    return kcluster


def new_topic(cluster, partitions: int = 2) -> str:
    name = f"ktx-{uuid.uuid4().hex[:8]}"
    Admin(cluster).create_topic(name, partitions=partitions, replication_factor=3, config={"min.insync.replicas": 2})
    return name


def tid() -> str:
    return f"tx-{uuid.uuid4().hex[:8]}"


def confluent_producer(bootstrap: str, transactional_id: str, **extra):
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "transaction.timeout.ms": 60000, "linger.ms": 5, **extra})


def read_values(bootstrap: str, topic: str, isolation: str, until: bytes, timeout: float = 60.0, times: int = 1) -> list[bytes]:
    """The values of ``topic`` (from the start) read by a confluent consumer at ``isolation``
    until ``until`` was read ``times`` times (once per partition it was written to)."""
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest", "enable.auto.commit": False, "isolation.level": isolation})
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while got.count(until) < times and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value())
    finally:
        c.close()
    assert got.count(until) >= times, f"{until!r} not read {times} times within {timeout} s at {isolation}; read {got!r}"
    return got


def commit_marker(bootstrap: str, topic: str, value: bytes) -> None:
    """A committed transaction after the ones under test: a read_committed reader that sees it
    has seen everything before it that was committed."""
    p = confluent_producer(bootstrap, tid())
    p.init_transactions(30)
    p.begin_transaction()
    for partition in (0, 1):
        p.produce(topic, value=value, partition=partition)
    p.commit_transaction(30)


# -- confluent-kafka (librdkafka) -------------------------------------------------------------


def test_confluent_transaction_commit_is_visible_to_read_committed_consumers_and_kcat(txn_cluster, kafka_bootstrap, kcat):
    import subprocess

    topic = new_topic(txn_cluster)
    p = confluent_producer(kafka_bootstrap, tid())
    p.init_transactions(30)
    p.begin_transaction()
    sent = [f"c-{i}".encode() for i in range(20)] + [b"end", b"end"]
    for i, v in enumerate(sent):
        p.produce(topic, value=v, partition=i % 2)
    p.commit_transaction(30)
    got = read_values(kafka_bootstrap, topic, "read_committed", until=b"end", times=2)
    assert sorted(got) == sorted(sent)
    out = subprocess.run([kcat, "-b", kafka_bootstrap, "-C", "-t", topic, "-e", "-X", "isolation.level=read_committed", "-f", "%s\n"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.split()) == sorted(v.decode() for v in sent)


def test_confluent_transaction_abort_is_invisible_to_read_committed(txn_cluster, kafka_bootstrap):
    topic = new_topic(txn_cluster)
    p = confluent_producer(kafka_bootstrap, tid())
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(10):
        p.produce(topic, value=f"aborted-{i}".encode(), partition=i % 2)
    p.flush(30)  # written to the partitions before the abort
    p.abort_transaction(30)
    p.begin_transaction()  # the same producer goes on after an abort
    p.produce(topic, value=b"after-abort", partition=0)
    p.commit_transaction(30)
    commit_marker(kafka_bootstrap, topic, b"end")
    committed = read_values(kafka_bootstrap, topic, "read_committed", until=b"end", times=2)
    assert not [v for v in committed if v.startswith(b"aborted")]
    assert b"after-abort" in committed
    uncommitted = read_values(kafka_bootstrap, topic, "read_uncommitted", until=b"end", times=2)
    assert sum(v.startswith(b"aborted") for v in uncommitted) == 10  # they were written


def test_a_second_instance_fences_the_first_and_its_open_transaction_is_aborted(txn_cluster, kafka_bootstrap):
    from confluent_kafka import KafkaException

    topic = new_topic(txn_cluster)
    shared = tid()
    zombie = confluent_producer(kafka_bootstrap, shared)
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie", partition=0)
    zombie.flush(30)
    fresh = confluent_producer(kafka_bootstrap, shared)
    fresh.init_transactions(60)  # aborts the zombie's transaction, bumps the epoch
    fresh.begin_transaction()
    fresh.produce(topic, value=b"fresh", partition=1)
    fresh.commit_transaction(30)
    with pytest.raises(KafkaException) as caught:
        zombie.produce(topic, value=b"zombie-2", partition=0)
        zombie.commit_transaction(30)
    err = caught.value.args[0]
    assert err.fatal() or "fenced" in err.str().lower(), err
    commit_marker(kafka_bootstrap, topic, b"end")
    committed = read_values(kafka_bootstrap, topic, "read_committed", until=b"end", times=2)
    assert b"fresh" in committed and b"zombie" not in committed and b"zombie-2" not in committed


def test_send_offsets_to_transaction_moves_the_groups_offsets_only_on_commit(txn_cluster, kafka_bootstrap):
    from confluent_kafka import Consumer, TopicPartition

    source, sink = new_topic(txn_cluster, partitions=1), new_topic(txn_cluster, partitions=1)
    seed = confluent_producer(kafka_bootstrap, tid())
    seed.init_transactions(30)
    seed.begin_transaction()
    for i in range(6):
        seed.produce(source, value=f"in-{i}".encode(), partition=0)
    seed.commit_transaction(30)
    group = f"g-{uuid.uuid4().hex[:6]}"
    c = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False, "isolation.level": "read_committed"})
    c.subscribe([source])
    p = confluent_producer(kafka_bootstrap, tid())
    p.init_transactions(30)
    try:
        batch = []
        deadline = time.monotonic() + 60
        while len(batch) < 3 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                batch.append(m)
        assert len(batch) == 3
        # aborted: the group's offset stays where it was
        p.begin_transaction()
        for m in batch:
            p.produce(sink, value=m.value().upper(), partition=0)
        p.send_offsets_to_transaction([TopicPartition(source, 0, batch[-1].offset() + 1)], c.consumer_group_metadata(), 30)
        p.abort_transaction(30)
        assert c.committed([TopicPartition(source, 0)], 30)[0].offset < 0
        # committed: it moves
        p.begin_transaction()
        for m in batch:
            p.produce(sink, value=m.value().upper(), partition=0)
        p.send_offsets_to_transaction([TopicPartition(source, 0, batch[-1].offset() + 1)], c.consumer_group_metadata(), 30)
        p.commit_transaction(30)
        assert c.committed([TopicPartition(source, 0)], 30)[0].offset == batch[-1].offset() + 1
    finally:
        c.close()
    out = read_values(kafka_bootstrap, sink, "read_committed", until=b"IN-2")
    assert out == [b"IN-0", b"IN-1", b"IN-2"]


# -- kafka-python 3 ---------------------------------------------------------------------------


def test_kafka_python_transactional_producer_commits_and_aborts(txn_cluster, kafka_bootstrap):
    from kafka import KafkaConsumer, KafkaProducer

    topic = new_topic(txn_cluster, partitions=1)
    p = KafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=tid(), transaction_timeout_ms=60000)
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send(topic, b"kp-aborted", partition=0)
        p.flush()
        p.abort_transaction()
        p.begin_transaction()
        for i in range(5):
            p.send(topic, f"kp-{i}".encode(), partition=0)
        p.commit_transaction()
    finally:
        p.close()
    c = KafkaConsumer(topic, bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest", isolation_level="read_committed", enable_auto_commit=False, consumer_timeout_ms=20000)
    try:
        got = []
        for m in c:
            got.append(m.value)
            if m.value == b"kp-4":
                break
    finally:
        c.close()
    assert got == [f"kp-{i}".encode() for i in range(5)]


# -- bad input, request by request --------------------------------------------------------------


def test_bad_transactional_requests_get_kafka_error_codes(txn_cluster, kafka_bootstrap):
    from kafka.protocol.producer import (
        AddPartitionsToTxnRequest as A,
        AddPartitionsToTxnResponse,
        EndTxnRequest,
        EndTxnResponse,
        InitProducerIdRequest,
        InitProducerIdResponse,
        ProduceRequest,
        ProduceResponse,
    )

    from kcoord.kafka.batches import build_kafka_batch
    from kcoord.protocol.errors import ErrorCode as E

    from wire import RawClient

    topic = new_topic(txn_cluster, partitions=2)
    c = RawClient(int(kafka_bootstrap.split(",")[0].rsplit(":", 1)[1]), timeout=60)
    try:
        # EndTxn for a transactional id nobody initialised
        resp = c.call(EndTxnRequest(transactional_id=tid(), producer_id=123456, producer_epoch=0, committed=True), 3, EndTxnResponse)
        assert resp.error_code == E.INVALID_PRODUCER_ID_MAPPING
        t = tid()

        def init() -> InitProducerIdResponse:
            return wait_until(lambda: (r := c.call(InitProducerIdRequest(transactional_id=t, transaction_timeout_ms=60000), 4, InitProducerIdResponse)).error_code == 0 and r, timeout=60, what="InitProducerId")

        first = init()
        second = init()  # fences the first
        assert (second.producer_id, second.producer_epoch) == (first.producer_id, first.producer_epoch + 1)
        # the stale epoch: PRODUCER_FENCED from v2, INVALID_PRODUCER_EPOCH before (KIP-588)
        assert c.call(EndTxnRequest(transactional_id=t, producer_id=first.producer_id, producer_epoch=first.producer_epoch, committed=True), 3, EndTxnResponse).error_code == E.PRODUCER_FENCED
        assert c.call(EndTxnRequest(transactional_id=t, producer_id=first.producer_id, producer_epoch=first.producer_epoch, committed=True), 1, EndTxnResponse).error_code == E.INVALID_PRODUCER_EPOCH
        # AddPartitionsToTxn to a topic that does not exist: that one UNKNOWN, the others not attempted
        add = A(
            v3_and_below_transactional_id=t,
            v3_and_below_producer_id=second.producer_id,
            v3_and_below_producer_epoch=second.producer_epoch,
            v3_and_below_topics=[A.AddPartitionsToTxnTopic(name=topic, partitions=[0]), A.AddPartitionsToTxnTopic(name=f"missing-{uuid.uuid4().hex[:6]}", partitions=[0])],
        )
        resp = c.call(add, 3, AddPartitionsToTxnResponse)
        codes = {r.name: r.results_by_partition[0].partition_error_code for r in resp.results_by_topic_v3_and_below}
        assert codes == {topic: E.OPERATION_NOT_ATTEMPTED, add.v3_and_below_topics[1].name: E.UNKNOWN_TOPIC_OR_PARTITION}
        # a transactional batch to a partition never added to the transaction
        batch = build_kafka_batch([(None, b"stray", [], int(time.time() * 1000))], producer_id=second.producer_id, producer_epoch=second.producer_epoch, base_sequence=0, transactional=True)
        T = ProduceRequest.TopicProduceData
        resp = c.call(ProduceRequest(transactional_id=t, acks=-1, timeout_ms=10000, topic_data=[T(name=topic, partition_data=[T.PartitionProduceData(index=1, records=batch)])]), 8, ProduceResponse)
        assert resp.responses[0].partition_responses[0].error_code == E.INVALID_TXN_STATE
        # EndTxn commit with nothing in the transaction
        assert c.call(EndTxnRequest(transactional_id=t, producer_id=second.producer_id, producer_epoch=second.producer_epoch, committed=True), 3, EndTxnResponse).error_code == E.INVALID_TXN_STATE
    finally:
        c.close()
    # nothing of it is visible, and the partition's LSO did not hang on the stray batch
    from kafka import KafkaConsumer, TopicPartition as KTP

    kc = KafkaConsumer(bootstrap_servers=kafka_bootstrap, isolation_level="read_committed")
    try:
        assert kc.end_offsets([KTP(topic, 1)])[KTP(topic, 1)] == 0
    finally:
        kc.close()


def test_kafka_python_consume_transform_produce_commits_the_groups_offsets_with_the_output(txn_cluster, kafka_bootstrap):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition as KTP
    from kafka.structs import OffsetAndMetadata

    source, sink = new_topic(txn_cluster, partitions=1), new_topic(txn_cluster, partitions=1)
    seed = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    for i in range(4):
        seed.send(source, f"x{i}".encode(), partition=0)
    seed.flush()
    seed.close()
    group = f"g-{uuid.uuid4().hex[:6]}"
    c = KafkaConsumer(source, bootstrap_servers=kafka_bootstrap, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False, isolation_level="read_committed")
    p = KafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=tid())
    try:
        got = []
        deadline = time.monotonic() + 60
        while len(got) < 4 and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=500).values():
                got += recs
        assert [r.value for r in got] == [b"x0", b"x1", b"x2", b"x3"]
        p.init_transactions()
        p.begin_transaction()
        for r in got:
            p.send(sink, r.value + b"!", partition=0)
        p.send_offsets_to_transaction({KTP(source, 0): OffsetAndMetadata(got[-1].offset + 1, "", -1)}, c.group_metadata())
        p.commit_transaction()
        assert wait_until(lambda: c.committed(KTP(source, 0)) == got[-1].offset + 1, timeout=30, what="the group's offset after the commit")
    finally:
        p.close()
        c.close()
    assert read_values(kafka_bootstrap, sink, "read_committed", until=b"x3!") == [b"x0!", b"x1!", b"x2!", b"x3!"]
