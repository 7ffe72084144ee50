"""kcoord.spark.stream on the shared RayDP session and cluster: a query's output is exactly
once with its offsets across batches and a restart, and bad input stops it with a clear
error and nothing committed (kcoord.streaming). Kills mid-batch: tests/spark/test_stream_kill.py
(make stream-kill) and tests/integration/test_stream_faults_ray.py."""

from __future__ import annotations

import uuid

import msgpack

import pytest

from kcoord import spark as ks
from kcoord.client.admin import Admin
from kcoord.client.consumer import Consumer
from kcoord.client.producer import Producer
from kcoord.client.types import TopicPartition
from kcoord.protocol.errors import ErrorCode, KafkaError
from kcoord.spark.offsets import group_offsets

pytestmark = [pytest.mark.spark, pytest.mark.ray]


def new_topic(cluster, prefix: str, partitions: int) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    Admin(cluster).create_topic(name, partitions=partitions, replication_factor=3, config={"min.insync.replicas": 2})
    return name


def produce(cluster, topic: str, start: int, n: int, keys: int = 5) -> list[tuple[bytes, bytes]]:
    rows = [(f"k{i % keys}".encode(), f"v{i}".encode()) for i in range(start, start + n)]
    with Producer(cluster, acks="all", linger_ms=0) as p:
        p.send_batch(topic, values=[v for _, v in rows], keys=[k for k, _ in rows])
    return rows


def read_committed(cluster, topic: str) -> list[tuple[bytes, bytes]]:
    """Every committed record of ``topic``, per partition in offset order."""
    with Consumer(cluster=cluster, isolation_level="read_committed", auto_offset_reset="earliest", enable_auto_commit=False) as c:
        tps = [TopicPartition(topic, p) for p in cluster.partitions_for(topic)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        end = c.end_offsets(tps)
        out: dict[int, list] = {tp.partition: [] for tp in tps}
        for _ in range(200):
            if all(c.position(tp) >= end[tp] for tp in tps):
                break
            for tp, records in c.poll(timeout_ms=200).items():
                out[tp.partition].extend((r.key, r.value) for r in records)
    return [kv for p in sorted(out) for kv in out[p]]


def upper(df, batch_id):
    return df.selectExpr("key", "upper(CAST(value AS STRING)) AS value")


def check_exactly_once(cluster, source: str, sink: str, inputs: list[tuple[bytes, bytes]], group: str) -> None:
    got = read_committed(cluster, sink)
    assert sorted(got) == sorted((k, v.upper()) for k, v in inputs)  # each once
    for key in {k for k, _ in inputs}:  # input order per key
        assert [v for k, v in got if k == key] == [v.upper() for k, v in inputs if k == key]
    ends = Admin(cluster).list_offsets(source, "latest")
    assert {p: o for p, (o, _) in group_offsets(cluster, group)[source].items()} == dict(ends)


def test_a_query_writes_each_input_once_with_its_offsets_and_resumes_after_a_restart(spark, kcluster):
    src, out = new_topic(kcluster, "st-in", 2), new_topic(kcluster, "st-out", 2)
    group = f"g-{src}"
    inputs = produce(kcluster, src, 0, 60)
    q = ks.stream(spark, kcluster, src, group_id=group, transform=upper, sink=out, trigger_interval_ms=200, starting_offsets="earliest", max_records_per_trigger=40)
    try:
        q.processAllAvailable(timeout_s=180)
        inputs += produce(kcluster, src, 60, 30)
        q.processAllAvailable(timeout_s=180)
        assert q.isActive and q.exception() is None
        progress = q.recentProgress
        assert [p["batchId"] for p in progress] == list(range(len(progress))) and len(progress) >= 3  # 60 records over 40 a trigger, then 30
        assert sum(p["numInputRows"] for p in progress) == 90
        last = q.lastProgress
        assert {"id", "name", "batchId", "numInputRows", "inputRowsPerSecond", "processedRowsPerSecond", "durationMs", "sources"} <= set(last)
        assert last["sources"][0]["endOffset"][src] == {str(p): o for p, o in Admin(kcluster).list_offsets(src, "latest").items()}
        assert last["stateOperators"] == []  # stateless
        phases = last["durationMs"]  # every step of a batch with rows, within the whole
        assert set(phases) == {"latestOffset", "addBatch", "prepareOffsets", "walCommit", "commitOffsets", "triggerExecution"}
        assert sum(v for k, v in phases.items() if k != "triggerExecution") <= phases["triggerExecution"] + 5
    finally:
        q.stop()
    assert not q.isActive and q.exception() is None
    check_exactly_once(kcluster, src, out, inputs, group)
    batches = q.lastProgress["batchId"]

    inputs += produce(kcluster, src, 90, 20)
    q2 = ks.stream(spark, kcluster, src, group_id=group, transform=upper, sink=out, trigger_interval_ms=200)
    try:
        q2.processAllAvailable(timeout_s=180)
        assert q2.id == q.id and q2.runId != q.runId
        assert q2.recentProgress[0]["batchId"] == batches + 1 and q2.recentProgress[0]["numInputRows"] == 20
    finally:
        q2.stop()
    check_exactly_once(kcluster, src, out, inputs, group)


def test_a_transform_that_raises_stops_the_query_with_nothing_committed_and_a_restart_works(spark, kcluster):
    src, out = new_topic(kcluster, "sx-in", 2), new_topic(kcluster, "sx-out", 2)
    group = f"g-{src}"
    inputs = produce(kcluster, src, 0, 20)

    def poisoned(df, batch_id):
        from pyspark.sql import functions as F

        # fails in the executors, after some tasks may have written
        return df.select("key", F.when(F.col("value") == F.lit(b"v7"), F.raise_error(F.lit("poison v7"))).otherwise(F.upper(F.col("value").cast("string"))).alias("value"))

    q = ks.stream(spark, kcluster, src, group_id=group, transform=poisoned, sink=out, trigger_interval_ms=100, starting_offsets="earliest")
    with pytest.raises(ks.StreamingQueryException, match="poison v7"):
        q.awaitTermination(180)
    assert not q.isActive and "poison v7" in str(q.exception())
    assert read_committed(kcluster, out) == []
    assert not _group_exists(kcluster, group) or src not in group_offsets(kcluster, group)
    assert open_transactions(kcluster, group) == []  # the failed batch's own were aborted

    q2 = ks.stream(spark, kcluster, src, group_id=group, transform=upper, sink=out, trigger_interval_ms=100, starting_offsets="earliest")
    try:
        q2.processAllAvailable(timeout_s=180)
    finally:
        q2.stop()
    check_exactly_once(kcluster, src, out, inputs, group)
    assert open_transactions(kcluster, group) == []


def open_transactions(cluster, name: str) -> list[str]:
    import re

    from kcoord.txn_write import TransactionalWrite

    return TransactionalWrite(cluster, f"{name}/0", batch=True).open_transactions(re.compile(re.escape(name) + r"/.*"))


def _group_exists(cluster, group) -> bool:
    try:
        return bool(group_offsets(cluster, group))
    except KafkaError as exc:
        return exc.code != ErrorCode.GROUP_ID_NOT_FOUND


def test_bad_output_columns_a_missing_sink_and_a_group_in_use(spark, kcluster):
    src, out = new_topic(kcluster, "sb-in", 1), new_topic(kcluster, "sb-out", 1)
    produce(kcluster, src, 0, 5)
    with pytest.raises(KafkaError) as missing:
        ks.stream(spark, kcluster, src, group_id=f"g-{src}", transform=upper, sink=f"{out}-nope")
    assert missing.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    q = ks.stream(spark, kcluster, src, group_id=f"g-{src}", transform=lambda df, b: df.selectExpr("key", "value AS vaule"), sink=out, starting_offsets="earliest")
    with pytest.raises(ks.StreamingQueryException, match=r"no 'value' column.*\['key', 'vaule'\]"):
        q.awaitTermination(180)
    assert read_committed(kcluster, out) == []

    group = f"g2-{src}"
    first = ks.stream(spark, kcluster, src, group_id=group, transform=upper, sink=out, name="first", starting_offsets="earliest")
    try:
        first.processAllAvailable(timeout_s=180)
        other = ks.stream(spark, kcluster, src, group_id=group, transform=upper, sink=out, name="other")
        with pytest.raises(ks.StreamingQueryException, match="in use by other members"):
            other.awaitTermination(180)
    finally:
        first.stop()


def counting():
    """A running count per key: emits (key, count so far) once per batch the key is in.
    (A closure: Spark pickles it by value to the executors, as a script's function.)"""

    def running_count(key, rows, state):
        import pandas as pd

        n = (state or 0) + len(rows)
        return pd.DataFrame({"key": [key], "value": [str(n)]}), n

    return running_count


def numbering():
    """Each input's result with its key's running count: ``V7`` -> ``"V7:3"`` for the key's
    third record. Exactly once, input order and the count in one check (:func:`check_numbered`)."""

    def number(key, rows, state):
        import pandas as pd

        n = state or 0
        values = [f"{bytes(v).decode().upper()}:{n + i + 1}" for i, v in enumerate(rows["value"])]
        return pd.DataFrame({"key": [key] * len(values), "value": values}), n + len(values)

    return number


def check_numbered(cluster, source: str, sink: str, inputs: list[tuple[bytes, bytes]], group: str) -> None:
    """What :func:`numbering` must give: each key's inputs, once each, in input order, each
    with its count computed from the input; and the group's offsets at the input's end."""
    got = read_committed(cluster, sink)
    for key in {k for k, _ in inputs}:
        want = [f"{v.decode().upper()}:{i + 1}".encode() for i, v in enumerate(v for k, v in inputs if k == key)]
        assert [v for k, v in got if k == key] == want, key
    assert len(got) == len(inputs)
    ends = Admin(cluster).list_offsets(source, "latest")
    assert {p: o for p, (o, _) in group_offsets(cluster, group)[source].items()} == dict(ends)


def changelog_state(cluster, name: str, partitions: int) -> dict:
    """The state a fresh process loads from query ``name``'s changelog (no cache)."""
    from kcoord.streaming import state as S
    from kcoord.txn_write import stable_ends

    ends = stable_ends(cluster, [TopicPartition(S.changelog_topic(name), p) for p in range(partitions)])
    found = {}
    for tp, end in ends.items():
        S._cache.pop((cluster.name, cluster.namespace, tp.topic, tp.partition), None)
        found.update({msgpack.unpackb(k): S.decode_state(v) for k, v in S.load_partition(cluster, tp.topic, tp.partition, end).items()})
    return found


def check_counts(cluster, out: str, inputs: list[tuple[bytes, bytes]]) -> None:
    """Each key's outputs are its running count, strictly rising, ending at its input count:
    a batch committed twice would repeat a count, a lost one would skip the end."""
    got = read_committed(cluster, out)
    for key in {k for k, _ in inputs}:
        counts = [int(v) for k, v in got if k == key]
        assert counts == sorted(set(counts)) and counts[-1] == sum(1 for k, _ in inputs if k == key), (key, counts)


def test_state_per_key_is_exact_across_batches_and_a_restart_and_lives_in_its_changelog(spark, kcluster):
    src, out = new_topic(kcluster, "ss-in", 2), new_topic(kcluster, "ss-out", 2)
    group = f"g-{src}"
    inputs = produce(kcluster, src, 0, 50, keys=4)
    options = dict(group_id=group, update_state=counting(), state_key="key", sink=out, trigger_interval_ms=200, starting_offsets="earliest")
    q = ks.stream(spark, kcluster, src, max_records_per_trigger=25, **options)
    try:
        q.processAllAvailable(timeout_s=180)
        assert len(q.recentProgress) >= 2  # 50 records, 25 a trigger
        # PySpark's stateOperators: each batch of 25 reaches all 4 keys, new in the first
        ops = [p["stateOperators"] for p in q.recentProgress if p["numInputRows"]]
        assert [len(o) for o in ops] == [1] * len(ops) and ops[0][0]["operatorName"] == "applyInPandasWithState"
        assert [(o[0]["numRowsTotal"], o[0]["numRowsUpdated"], o[0]["numRowsRemoved"]) for o in ops] == [(4, 4, 0)] * len(ops)
    finally:
        q.stop()
    assert q.exception() is None
    check_counts(kcluster, out, inputs)
    # stateless queries have no changelog; this one has the source's partition count
    assert len(kcluster.partitions_for(f"{group}-state-changelog")) == 2
    assert changelog_state(kcluster, group, 2) == {f"k{i}".encode(): 50 // 4 + (i < 50 % 4) for i in range(4)}

    inputs += produce(kcluster, src, 50, 30, keys=4)
    q2 = ks.stream(spark, kcluster, src, **options)
    try:
        q2.processAllAvailable(timeout_s=180)
    finally:
        q2.stop()
    check_counts(kcluster, out, inputs)
    check_offsets = Admin(kcluster).list_offsets(src, "latest")
    assert {p: o for p, (o, _) in group_offsets(kcluster, group)[src].items()} == dict(check_offsets)
    assert changelog_state(kcluster, group, 2) == {f"k{i}".encode(): 80 // 4 for i in range(4)}


def test_bad_state_options_are_refused_before_anything_runs(spark, kcluster):
    src, out = new_topic(kcluster, "so-in", 1), new_topic(kcluster, "so-out", 1)
    base = dict(group_id=f"g-{src}", sink=out)
    with pytest.raises(ValueError, match="needs state_key"):
        ks.stream(spark, kcluster, src, update_state=counting(), **base)
    with pytest.raises(ValueError, match="go with update_state"):
        ks.stream(spark, kcluster, src, transform=upper, state_key="key", **base)
    with pytest.raises(ValueError, match="state_partitions must be a positive int"):
        ks.stream(spark, kcluster, src, update_state=counting(), state_key="key", state_partitions=0, **base)
    with pytest.raises(TypeError, match="update_state must be a function"):
        ks.stream(spark, kcluster, src, update_state="count", state_key="key", **base)
    q = ks.stream(spark, kcluster, src, update_state=counting(), state_key="user", starting_offsets="earliest", **base)
    produce(kcluster, src, 0, 3)
    with pytest.raises(ks.StreamingQueryException, match="state_key='user': the rows have no column 'user'"):
        q.awaitTermination(180)
    with pytest.raises(ValueError, match="has 1 partitions"):  # the changelog's count is fixed
        ks.stream(spark, kcluster, src, update_state=counting(), state_key="key", state_partitions=3, **base)
