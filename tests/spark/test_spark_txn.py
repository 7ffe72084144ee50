"""Transactions through kcoord.spark on the shared RayDP session and 3-broker cluster:
read_committed batch reads (aborted transactions dropped, the read stopping at the LSO of an
open one), transactional writes visible exactly once when task attempts fail after writing,
and a driver that died between prepare and commit finished or undone by a re-run
(kcoord.txn_write; docs/transactions.md, "Spark and Ray Data")."""

from __future__ import annotations

import uuid

import pytest

from kcoord import ray_data as krd
from kcoord import spark as ks
from kcoord.client.admin import Admin
from kcoord.client.consumer import Consumer
from kcoord.client.producer import Producer
from kcoord.txn_write import COMMIT, Decision, TransactionalWrite, prepare_task, task_transactional_id
from waiting import wait_until

pytestmark = [pytest.mark.spark, pytest.mark.ray]


def new_topic(cluster, prefix: str, partitions: int) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    Admin(cluster).create_topic(name, partitions=partitions, replication_factor=3, config={"min.insync.replicas": 2})
    return name


def committed_values(spark, cluster, topic: str) -> list[bytes]:
    return sorted(bytes(r.value) for r in ks.read(spark, cluster, topic, isolation_level="read_committed").select("value").collect())


def source(spark, n: int, parts: int, tag: str = "row"):
    from pyspark.sql import functions as F

    return spark.range(0, n, 1, parts).select(F.col("id").cast("string").alias("key"), F.concat(F.lit(f"{tag}-"), F.col("id").cast("string")).alias("value"))


def test_read_committed_drops_an_aborted_transaction_and_stops_at_the_lso_of_an_open_one(spark, kcluster):
    topic = new_topic(kcluster, "rc", partitions=1)
    tid = f"{topic}-tx"
    with Producer(kcluster, transactional_id=tid, linger_ms=0) as p:
        p.init_transactions()
        for name, commit in (("c1", True), ("ab", False), ("c2", True)):
            p.begin_transaction()
            p.send_batch(topic, values=[f"{name}-{i}".encode() for i in range(50)], partition=0)
            p.commit_transaction() if commit else p.abort_transaction()
    with Producer(kcluster, acks="all") as plain:
        plain.send_batch(topic, values=[b"plain"], partition=0)
    committed = sorted([f"c1-{i}".encode() for i in range(50)] + [f"c2-{i}".encode() for i in range(50)] + [b"plain"])
    open_txn = Producer(kcluster, transactional_id=f"{tid}-open", linger_ms=0)
    try:
        open_txn.init_transactions()
        open_txn.begin_transaction()
        open_txn.send_batch(topic, values=[b"open-0", b"open-1"], partition=0)  # acknowledged, not committed
        with Producer(kcluster, acks="all") as plain:
            plain.send_batch(topic, values=[b"after-open"], partition=0)  # past the LSO
        hw = Admin(kcluster).list_offsets(topic, "latest")[0]

        assert committed_values(spark, kcluster, topic) == committed
        rows = ks.read(spark, kcluster, topic, options={"kafka.isolation.level": "read_committed"}).select("offset").collect()
        assert max(r.offset for r in rows) < hw - 3  # stopped at the open transaction's first offset
        everything = sorted(bytes(r.value) for r in ks.read(spark, kcluster, topic).select("value").collect())
        assert b"ab-0" in everything and b"open-0" in everything and b"after-open" in everything and len(everything) == 154
        # Ray Data reads the same.
        t = krd.read(kcluster, topic, isolation_level="read_committed").to_pandas()
        assert sorted(t["value"]) == committed
        # The consumer (and so kcoord consume --isolation-level) agrees with the batch readers.
        with Consumer(topic, cluster=kcluster, auto_offset_reset="earliest", enable_auto_commit=False, isolation_level="read_committed") as c:
            got: list[bytes] = []
            for _ in range(40):
                for recs in c.poll(timeout_ms=250).values():
                    got.extend(r.value for r in recs)
                if len(got) >= len(committed):
                    break
        assert sorted(got) == committed

        # Once the open transaction commits, "latest" moves past it: when its marker is
        # written, which (as in Kafka) follows commit_transaction()'s answer.
        open_txn.commit_transaction()
        everything_committed = sorted(committed + [b"open-0", b"open-1", b"after-open"])
        wait_until(lambda: committed_values(spark, kcluster, topic) == everything_committed, timeout=60, interval=0.2,
                   what="the committed transaction to be read read_committed")
    finally:
        open_txn.close()

    with pytest.raises(ValueError, match="isolation_level must be one of"):
        ks.read(spark, kcluster, topic, isolation_level="serializable")
    with pytest.raises(ValueError, match="isolation_level must be one of"):
        krd.read(kcluster, topic, options={"kafka.isolation.level": "snapshot"})


def test_transactional_write_is_visible_once_when_attempts_fail_after_writing_and_a_rerun_writes_nothing(spark, kcluster):
    topic = new_topic(kcluster, "txw", partitions=3)
    prefix = f"{topic}-w"
    n = 4000

    # Tasks 1 and 2 write and prepare, then their first attempt fails: Spark retries them,
    # and their first attempts' prepared transactions must be aborted, not committed.
    def fail_first_attempt(task: int, attempt: int) -> None:
        if attempt == 0 and task in (1, 2):
            raise RuntimeError(f"injected failure: task {task} (attempt 0) after it prepared")

    result = ks.write(source(spark, n, 4), kcluster, topic, key_col="key", value_col="value", transactional_id=prefix, on_task_written=fail_first_attempt)
    assert result.attempts == {0: 0, 1: 1, 2: 1, 3: 0}
    assert result.records == n and not result.already_written
    assert result.transactions[1].startswith(f"{prefix}/1/1.") and result.transactions[0].startswith(f"{prefix}/0/0.")
    expected = sorted(f"row-{i}".encode() for i in range(n))
    assert committed_values(spark, kcluster, topic) == expected
    # The failed attempts' records are in the log, aborted: read_uncommitted sees them.
    ends = Admin(kcluster).list_offsets(topic, "latest")
    assert len(ks.read(spark, kcluster, topic).collect()) > n
    assert TransactionalWrite(kcluster, prefix).open_transactions() == []

    # The same write again (the driver re-run): recognised, nothing written.
    again = ks.write(source(spark, n, 4), kcluster, topic, key_col="key", value_col="value", transactional_id=prefix)
    assert again.already_written and again.records == n and again.transactions == result.transactions
    assert Admin(kcluster).list_offsets(topic, "latest") == ends

    # Bad combinations are refused before anything runs.
    with pytest.raises(ValueError, match="needs acks='all'"):
        ks.write(source(spark, 3, 1), kcluster, topic, transactional_id=f"{prefix}-x", acks=1)
    with pytest.raises(ValueError, match="must not contain '/'"):
        ks.write(source(spark, 3, 1), kcluster, topic, transactional_id="a/b")


def _prepare_tasks_and_die(kcluster, topic: str, prefix: str, n: int, parts: int, decide: bool) -> None:
    """What a driver and its tasks leave when the driver dies between prepare and commit:
    every task's transaction prepared, and (``decide``) the decision recorded."""
    per = n // parts
    prepared = []
    for task in range(parts):
        values = [f"row-{i}".encode() for i in range(task * per, (task + 1) * per)]
        keys = [str(i).encode() for i in range(task * per, (task + 1) * per)]
        p, _ = prepare_task(kcluster, task_transactional_id(prefix, task, "0.0"), task, lambda producer, v=values, k=keys: producer.send_batch(topic, values=v, keys=k))
        prepared.append(p)
    if decide:
        tw = TransactionalWrite(kcluster, prefix, topic=topic)
        tw._record(Decision(prefix, topic, COMMIT, tuple(prepared)))  # the commit point, then the driver dies


@pytest.mark.parametrize("decided", [False, True], ids=["died-before-deciding", "died-after-deciding"])
def test_a_rerun_finishes_or_aborts_what_a_dead_driver_left_prepared(spark, kcluster, decided):
    topic = new_topic(kcluster, "txd", partitions=2)
    prefix = f"{topic}-w"
    n = 1000
    _prepare_tasks_and_die(kcluster, topic, prefix, n, 2, decided)
    assert len(TransactionalWrite(kcluster, prefix).open_transactions()) == 2
    assert committed_values(spark, kcluster, topic) == []  # prepared: the LSO holds read_committed readers back

    result = ks.write(source(spark, n, 2), kcluster, topic, key_col="key", value_col="value", transactional_id=prefix)
    assert result.already_written == decided and result.records == n
    assert committed_values(spark, kcluster, topic) == sorted(f"row-{i}".encode() for i in range(n))
    assert TransactionalWrite(kcluster, prefix).open_transactions() == []
