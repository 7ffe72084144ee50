"""kcoord's transactional producer on real Ray (issue 34, docs/transactions.md section 5):
committed transactions visible to a read_committed Consumer, aborted ones never, a second
instance fencing the first, consume-transform-produce with send_offsets_to_transaction,
many transactions in a row (an epoch per transaction), KIP-939's prepared transactions,
and AIOProducer's ``async with producer.transaction()``."""

from __future__ import annotations

import asyncio
import time

import pytest
import ray

import kcoord
from kcoord.protocol.errors import ErrorCode
from kcoord.client.admin import Admin
from kcoord.client.aio import AIOProducer
from kcoord.client.consumer import Consumer
from kcoord.client.errors import IllegalStateError, TransactionAbortedError
from kcoord.client.producer import Producer
from kcoord.client.types import OffsetAndMetadata, TopicPartition
from kcoord.protocol import names
from kcoord.protocol.errors import KafkaError
from kcoord.protocol.services import GROUP_COORDINATOR
from waiting import wait_until

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def txn_cluster(kcluster):
    """The shared cluster, if it runs transaction coordinators (they come with branch
    txn-driver: the actor, its driver and the deploy code)."""
    try:
        ray.get_actor(names.transaction_coordinator(kcluster.name, 0), namespace=kcluster.namespace)
    except ValueError:
        pytest.skip("no transaction coordinator actor in this cluster: the actor and its deployment (branch txn-driver) are not merged")
    return kcluster


@pytest.fixture
def make_topic(txn_cluster, topic_name):
    admin = Admin(txn_cluster)
    made: list[str] = []

    def make(partitions: int = 1, suffix: str = "") -> str:
        name = topic_name + suffix
        admin.create_topic(name, partitions=partitions, replication_factor=1)
        made.append(name)
        return name

    yield make
    for name in made:
        try:
            admin.delete_topic(name)
        except KafkaError:
            pass


def read_values(cluster, topic: str, expected: int, isolation_level: str = "read_committed", timeout: float = 30) -> list[bytes]:
    """Every value of ``topic`` a fresh consumer reads, waiting until ``expected`` arrived
    and then one more empty poll (nothing more may follow)."""
    with Consumer(topic, cluster=cluster, auto_offset_reset="earliest", isolation_level=isolation_level) as c:
        got: list[bytes] = []
        deadline = time.monotonic() + timeout
        while len(got) < expected and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=200).values():
                got += [r.value for r in recs]
        for recs in c.poll(timeout_ms=300).values():
            got += [r.value for r in recs]
        return got


def test_a_commit_is_visible_to_read_committed_and_an_abort_never(txn_cluster, make_topic, topic_name):
    topic = make_topic(partitions=2)
    with Producer(txn_cluster, transactional_id=f"{topic_name}-tx", linger_ms=1) as p:
        p.init_transactions()
        first_epoch = p.producer_epoch
        p.begin_transaction()
        committed = [p.send(topic, value=b"c1-%d" % i, partition=i % 2) for i in range(10)]
        p.commit_transaction()
        assert all(f.succeeded() for f in committed)
        assert p.producer_epoch == first_epoch + 1  # EndTxn bumped it (KIP-890 part 2)

        p.begin_transaction()
        aborted = [p.send(topic, value=b"a-%d" % i, partition=i % 2) for i in range(10)]
        p.flush()
        p.abort_transaction()
        assert all(f.succeeded() for f in aborted)  # written, then aborted by the marker

        p.begin_transaction()
        p.send(topic, value=b"c2", partition=1)
        p.commit_transaction()

    got = read_values(txn_cluster, topic, 11)
    assert sorted(got) == sorted([b"c1-%d" % i for i in range(10)] + [b"c2"])
    raw = read_values(txn_cluster, topic, 21, isolation_level="read_uncommitted")
    assert sorted(raw) == sorted([b"c1-%d" % i for i in range(10)] + [b"a-%d" % i for i in range(10)] + [b"c2"])


def test_misuse_raises_at_once_and_unsent_records_of_an_abort_fail(txn_cluster, make_topic, topic_name):
    topic = make_topic()
    with Producer(txn_cluster, transactional_id=f"{topic_name}-tx", linger_ms=10_000) as p:
        with pytest.raises(IllegalStateError):
            p.send(topic, value=b"x")
        p.init_transactions()
        with pytest.raises(IllegalStateError, match="outside a transaction"):
            p.send(topic, value=b"x")
        with pytest.raises(IllegalStateError):
            p.commit_transaction()
        p.begin_transaction()
        with pytest.raises(IllegalStateError):
            p.begin_transaction()
        lingering = p.send(topic, value=b"never")  # linger_ms: still queued when we abort
        p.abort_transaction()
        with pytest.raises(TransactionAbortedError):
            lingering.get(timeout=10)
        p.begin_transaction()  # not fatal: the next transaction works
        p.send(topic, value=b"after")
        p.commit_transaction()
    with Producer(txn_cluster) as plain, pytest.raises(IllegalStateError, match="transactional_id"):
        plain.begin_transaction()
    assert read_values(txn_cluster, topic, 1) == [b"after"]


def test_a_second_instance_fences_the_first(txn_cluster, make_topic, topic_name):
    topic = make_topic(partitions=2)
    tid = f"{topic_name}-tx"
    old = Producer(txn_cluster, transactional_id=tid, linger_ms=1)
    new = Producer(txn_cluster, transactional_id=tid, linger_ms=1)
    try:
        old.init_transactions()
        old.begin_transaction()
        old.send(topic, value=b"zombie", partition=0).get(timeout=30)
        new.init_transactions()  # aborts the old instance's transaction, fences it
        assert (new.producer_id, new.producer_epoch) > (old.producer_id, old.producer_epoch)
        stray = old.send(topic, value=b"zombie-2", partition=1)  # a partition new to its transaction
        # implicit adds (KIP-890 part 2): the leader's add is fenced and the batch fails
        # INVALID_PRODUCER_EPOCH (abortable, KIP-588, as Kafka 4.0); the abort's EndTxn says fenced
        with pytest.raises(kcoord.KafkaError) as failed:
            stray.get(timeout=30)
        assert failed.value.code in (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED), failed.value
        with pytest.raises(kcoord.KafkaError):
            old.commit_transaction()
        with pytest.raises(kcoord.ProducerFencedError):
            old.abort_transaction()
        with pytest.raises(kcoord.ProducerFencedError):
            old.send(topic, value=b"zombie-3", partition=1)
        new.begin_transaction()
        new.send(topic, value=b"new", partition=0)
        new.commit_transaction()
    finally:
        old.close()
        new.close()
    assert read_values(txn_cluster, topic, 1) == [b"new"]


def test_commit_after_being_fenced_raises_producer_fenced(txn_cluster, make_topic, topic_name):
    topic = make_topic()
    tid = f"{topic_name}-tx"
    with Producer(txn_cluster, transactional_id=tid, linger_ms=1) as old, Producer(txn_cluster, transactional_id=tid) as new:
        old.init_transactions()
        old.begin_transaction()
        old.send(topic, value=b"zombie").get(timeout=30)
        new.init_transactions()
        with pytest.raises(kcoord.ProducerFencedError):
            old.commit_transaction()
        with pytest.raises(kcoord.ProducerFencedError):
            old.begin_transaction()
        new.begin_transaction()
        new.send(topic, value=b"new")
        new.commit_transaction()
    assert read_values(txn_cluster, topic, 1) == [b"new"]  # read past the zombie's record: dropped


def test_many_transactions_in_a_row_each_with_its_own_epoch(txn_cluster, make_topic, topic_name):
    topic = make_topic(partitions=2)
    n = 40
    with Producer(txn_cluster, transactional_id=f"{topic_name}-tx", linger_ms=0) as p:
        p.init_transactions()
        start = (p.producer_id, p.producer_epoch)
        for i in range(n):
            p.begin_transaction()
            p.send(topic, value=b"%d-0" % i, partition=0)
            p.send(topic, value=b"%d-1" % i, partition=1)
            if i % 5 == 4:
                p.flush()  # written, so the coordinator has the transaction and ends it at the next epoch
                p.abort_transaction()
            else:
                p.commit_transaction()
        assert (p.producer_id, p.producer_epoch) == (start[0], start[1] + n)  # one epoch per transaction
    expected = sorted(b"%d-%d" % (i, q) for i in range(n) if i % 5 != 4 for q in (0, 1))
    assert sorted(read_values(txn_cluster, topic, len(expected))) == expected


def _serves_txn_offset_commit() -> bool:
    return "txn_offset_commit" in GROUP_COORDINATOR.methods


@pytest.mark.skipif(not _serves_txn_offset_commit(), reason="the group coordinator's txn_offset_commit (branch txn-group) is not merged")
def test_consume_transform_produce_exactly_once_with_send_offsets(txn_cluster, make_topic, topic_name):
    src, dst = make_topic(partitions=2, suffix="-in"), make_topic(partitions=1, suffix="-out")
    group = f"{topic_name}-g"
    with Producer(txn_cluster) as plain:
        for i in range(60):
            plain.send(src, value=b"v%d" % i, partition=i % 2)
        plain.flush()
    consumer = Consumer(src, cluster=txn_cluster, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False, isolation_level="read_committed")
    producer = Producer(txn_cluster, transactional_id=f"{topic_name}-etl", linger_ms=1)
    try:
        producer.init_transactions()
        done, aborted_once = 0, False
        deadline = time.monotonic() + 60
        while done < 60 and time.monotonic() < deadline:
            polled = consumer.poll(timeout_ms=500, max_records=7)
            if not polled:
                continue
            producer.begin_transaction()
            for recs in polled.values():
                for r in recs:
                    producer.send(dst, value=r.value.upper())
            offsets = {tp: OffsetAndMetadata(recs[-1].offset + 1, "") for tp, recs in polled.items()}
            producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
            if not aborted_once:  # the first batch is aborted: its output and offsets vanish
                aborted_once = True
                producer.abort_transaction()
                assert all(consumer.committed(tp) is None for tp in offsets)
                for tp, recs in polled.items():
                    consumer.seek(tp, recs[0].offset)
                continue
            producer.commit_transaction()
            done += sum(len(recs) for recs in polled.values())
        assert done == 60
        wait_until(lambda: sum(consumer.committed(TopicPartition(src, q)) or 0 for q in (0, 1)) == 60, what="the transaction's offsets")
    finally:
        producer.close()
        consumer.close()
    assert sorted(read_values(txn_cluster, dst, 60)) == sorted(b"V%d" % i for i in range(60))


def test_a_prepared_transaction_is_completed_by_a_new_instance(txn_cluster, make_topic, topic_name):
    topic = make_topic()
    tid = f"{topic_name}-2pc"
    with Producer(txn_cluster, transactional_id=tid, enable_two_phase_commit=True, linger_ms=1) as first:
        first.init_transactions()
        first.begin_transaction()
        first.send(topic, value=b"prepared")
        prepared = first.prepare_transaction()
        assert prepared == (first.producer_id, first.producer_epoch)
        with pytest.raises(IllegalStateError):
            first.send(topic, value=b"late")
    # the first process is gone with its transaction prepared; the decision is "commit"
    with Producer(txn_cluster, transactional_id=tid, enable_two_phase_commit=True) as second:
        second.init_transactions(keep_prepared_txn=True)
        assert second.complete_transaction(prepared) is True
    assert read_values(txn_cluster, topic, 1) == [b"prepared"]
    # a decision that names another transaction aborts the kept one
    with Producer(txn_cluster, transactional_id=tid, enable_two_phase_commit=True, linger_ms=1) as third:
        third.init_transactions()
        third.begin_transaction()
        third.send(topic, value=b"not this one")
        third.prepare_transaction()
    with Producer(txn_cluster, transactional_id=tid, enable_two_phase_commit=True) as fourth:
        fourth.init_transactions(keep_prepared_txn=True)
        assert fourth.complete_transaction(prepared) is False
        with pytest.raises(IllegalStateError, match="no prepared transaction"):
            fourth.complete_transaction(prepared)
        fourth.begin_transaction()
        fourth.send(topic, value=b"end")
        fourth.commit_transaction()
    assert read_values(txn_cluster, topic, 2) == [b"prepared", b"end"]  # "not this one" was aborted


def test_aio_producer_transaction_context(txn_cluster, make_topic, topic_name):
    topic = make_topic()

    async def main() -> None:
        async with AIOProducer(txn_cluster, transactional_id=f"{topic_name}-aio", linger_ms=1) as p:
            async with p.transaction():
                await p.send(topic, value=b"kept")
            with pytest.raises(RuntimeError, match="boom"):
                async with p.transaction():
                    await (await p.send(topic, value=b"dropped"))
                    raise RuntimeError("boom")
            async with p.transaction():
                await p.send(topic, value=b"kept-2")

    asyncio.run(main())
    assert sorted(read_values(txn_cluster, topic, 2)) == [b"kept", b"kept-2"]
