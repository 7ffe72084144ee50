"""kcoord.spark and kcoord.ray_data on a real RayDP Spark session and the shared 3-broker
cluster: round trips, the Kafka source schema, group offsets, exactly-once writes under
task retries, reads across a leader failover, and the errors users see."""

from __future__ import annotations

import threading
import uuid

import pytest

from ray_data_support import check_write_retried_once_and_read_back
from waiting import wait_until
from kcoord.cluster.group_coordinators import configure_group_coordinators
from kcoord import spark as ks
from kcoord.client.admin import Admin
from kcoord.client.consumer import Consumer
from kcoord.client.producer import Producer
from kcoord.client.producer.partitioner import partition_for_key
from kcoord.client.types import OffsetAndMetadata, TopicPartition
from kcoord.protocol.errors import ErrorCode, KafkaError

pytestmark = [pytest.mark.spark, pytest.mark.ray]


def new_topic(cluster, prefix: str, partitions: int, rf: int = 3) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    Admin(cluster).create_topic(name, partitions=partitions, replication_factor=rf, config={"min.insync.replicas": 2 if rf > 1 else 1})
    return name


def produce_values(cluster, topic: str, count: int, size: int = 20, batch_size: int | None = None) -> list[bytes]:
    values = [b"%0*d" % (size, i) for i in range(count)]
    p = Producer(cluster, acks="all")
    try:
        p.send_batch(topic, values=values, keys=[b"k%d" % (i % 97) for i in range(count)], timeout=120, batch_size=batch_size)
    finally:
        p.close()
    return values


def kafka_source_schema():
    """The schema of Spark's Kafka source, written out independently of kcoord."""
    from pyspark.sql.types import ArrayType, BinaryType, IntegerType, LongType, StringType, StructField, StructType, TimestampType

    return StructType(
        [
            StructField("key", BinaryType(), True),
            StructField("value", BinaryType(), True),
            StructField("topic", StringType(), True),
            StructField("partition", IntegerType(), True),
            StructField("offset", LongType(), True),
            StructField("timestamp", TimestampType(), True),
            StructField("timestampType", IntegerType(), True),
            StructField("headers", ArrayType(StructType([StructField("key", StringType(), True), StructField("value", BinaryType(), True)]), True), True),
        ]
    )


# ------------------------------------------------------------------------------------------
def test_write_100k_rows_and_read_them_back_equal(spark, kcluster):
    from pyspark.sql import functions as F

    topic = new_topic(kcluster, "spark-rt", partitions=6)
    n = 100_000
    src = (
        spark.range(0, n, 1, 4)
        .select(
            F.when(F.col("id") % 100 == 0, F.lit(None)).otherwise(F.concat(F.lit("user-"), (F.col("id") % 5000).cast("string"))).alias("k"),
            F.concat(F.lit("value-"), F.col("id").cast("string")).cast("binary").alias("v"),
            F.when(F.col("id") % 10 == 0, F.array().cast("array<struct<key:string,value:binary>>")).otherwise(
                F.array(
                    F.struct(F.lit("src").alias("key"), F.lit("spark").cast("binary").alias("value")),
                    F.struct(F.lit("id").alias("key"), F.col("id").cast("string").cast("binary").alias("value")),
                )
            ).alias("h"),
        )
    )
    result = ks.write(src, kcluster, topic, key_col="k", value_col="v", headers_col="h")
    assert result.records == n and sum(result.partitions.values()) == n
    assert sorted(result.tasks) == [0, 1, 2, 3] and sum(result.tasks.values()) == n
    assert result.exactly_once and len(result.producer_ids) == 4 and result.duplicate_batches == 0

    got = ks.read(spark, kcluster, topic, min_partitions=9).cache()
    assert got.rdd.getNumPartitions() == 9
    assert got.count() == n
    # Values are unique: match every written row with the row read back (one shuffle).
    expected = src.select(F.col("v").alias("value"), F.col("k").cast("binary").alias("key_w"), F.col("h").alias("headers_w"))
    joined = expected.join(got.select("value", "key", "headers"), "value", "full_outer")
    mismatched = joined.where(~F.col("key").eqNullSafe(F.col("key_w")) | ~F.col("headers").eqNullSafe(F.col("headers_w")))
    assert mismatched.count() == 0
    per_partition = (
        got.groupBy("partition", "topic")
        .agg(F.min("offset").alias("lo"), F.max("offset").alias("hi"), F.count("*").alias("n"), F.collect_set("key").alias("keys"))
        .collect()
    )
    # Offsets are dense from 0 in every partition, and the topic column is right.
    assert sorted(r.partition for r in per_partition) == list(range(6))
    assert all(r.topic == topic and r.lo == 0 and r.hi == r.n - 1 for r in per_partition)
    assert {r.partition: r.n for r in per_partition} == result.partitions
    # Keyed rows sit where the producer's murmur2 partitioner puts them.
    placed = [(bytes(k), r.partition) for r in per_partition for k in r.keys]
    assert len(placed) == 4950  # user-0..4999 but those with id % 100 == 0 (null keys)
    assert all(partition_for_key(k, 6) == p for k, p in placed)
    got.unpersist()


def test_schema_is_exactly_the_spark_kafka_source_schema(spark, kcluster):
    topic = new_topic(kcluster, "spark-schema", partitions=2, rf=1)
    produce_values(kcluster, topic, 10)
    df = ks.read(spark, kcluster, topic)
    assert df.schema == kafka_source_schema()
    assert df.schema == ks.kafka_schema()
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        "timestampType:int,headers:array<struct<key:string,value:binary>>>"
    )
    # An empty read has the same schema.
    empty = ks.read(spark, kcluster, topic, starting_offsets="latest")
    assert empty.schema == kafka_source_schema() and empty.count() == 0
    row = df.orderBy("partition", "offset").first()
    assert row.timestampType == 0 and row.headers == [] and row.timestamp is not None


def test_group_offsets_start_where_the_consumer_group_committed(spark, kcluster):
    configure_group_coordinators(kcluster, {"group.min.session.timeout.ms": 500, "group.initial.rebalance.delay.ms": 300})
    topic = new_topic(kcluster, "spark-group", partitions=3, rf=1)
    produce_values(kcluster, topic, 600)
    ends = Admin(kcluster).list_offsets(topic, "latest")
    assert sum(ends.values()) == 600
    group = f"spark-g-{uuid.uuid4().hex[:6]}"
    # A real group member reads, then commits part of partitions 0 and 1 (2: no commit).
    consumer = Consumer(cluster=kcluster, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False, heartbeat_interval_ms=100, session_timeout_ms=5000)
    committed = {0: ends[0] // 2, 1: 7}
    try:
        consumer.subscribe([topic])
        seen: set[int] = set()

        def polled_all_partitions() -> bool:
            for tp, recs in consumer.poll(timeout_ms=200).items():
                if recs:
                    seen.add(tp.partition)
            return seen == {0, 1, 2}

        wait_until(polled_all_partitions, timeout=60, what="the group member to read every partition")
        consumer.commit({TopicPartition(topic, p): OffsetAndMetadata(o) for p, o in committed.items()})
        # While the member is active a standalone commit is refused.
        with pytest.raises(KafkaError) as err:
            ks.commit(kcluster, group, {topic: {0: 1}})
        assert err.value.code in (ErrorCode.NON_EMPTY_GROUP, ErrorCode.REBALANCE_IN_PROGRESS) and "active member" in str(err.value)
    finally:
        consumer.close()

    df = ks.read(spark, kcluster, topic, starting_offsets=f"group:{group}")
    from pyspark.sql import functions as F

    stats = df.groupBy("partition").agg(F.min("offset").alias("lo"), F.count("*").alias("n")).collect()
    lows = {r.partition: (r.lo, r.n) for r in stats}
    assert lows[0] == (committed[0], ends[0] - committed[0])
    assert lows[1] == (committed[1], ends[1] - committed[1])
    assert lows[2] == (0, ends[2])  # no commit: earliest
    assert df.count() == 600 - committed[0] - committed[1]

    offsets = {r.partition: r for r in ks.committed_offsets(spark, kcluster, group).collect()}
    assert set(offsets) == {0, 1}
    assert all(r.group == group and r.topic == topic for r in offsets.values())
    assert offsets[0].offset == committed[0] and offsets[0].log_end_offset == ends[0] and offsets[0].lag == ends[0] - committed[0]

    # The batch pipeline commits the ranges it read; the group then has no lag.
    plan = ks.plan_offsets(kcluster, topic, f"group:{group}", "latest")
    assert plan.rows == df.count()
    assert ks.commit(kcluster, group, plan) == {topic: ends}
    assert all(r.lag == 0 for r in ks.committed_offsets(spark, kcluster, group).collect())
    assert ks.read(spark, kcluster, topic, starting_offsets=f"group:{group}").count() == 0
    assert ks.committed_offsets(spark, kcluster, f"never-{uuid.uuid4().hex[:6]}").count() == 0


def test_exactly_once_when_a_task_fails_after_producing(spark, kcluster):
    from pyspark.sql import functions as F

    topic = new_topic(kcluster, "spark-eo", partitions=3)
    n = 20_000
    src = spark.range(0, n, 1, 4).select(F.col("id").cast("string").alias("key"), F.concat(F.lit("row-"), F.col("id").cast("string")).alias("value"))
    # Tasks 1 and 2 produce everything, then their first attempt fails: Spark retries them.
    def fail_first_attempt(task: int, attempt: int) -> None:
        if attempt == 0 and task in (1, 2):
            raise RuntimeError(f"injected failure: task {task} (attempt 0) after it produced")

    result = ks.write(src, kcluster, topic, key_col="key", value_col="value", on_task_written=fail_first_attempt)
    assert result.attempts == {0: 0, 1: 1, 2: 1, 3: 0}
    assert result.duplicate_batches > 0  # the retries re-sent batches the leaders already had
    assert result.records == n
    ends = Admin(kcluster).list_offsets(topic, "latest")
    assert sum(ends.values()) == n  # nothing was appended twice
    counts = ks.read(spark, kcluster, topic).agg(F.count("*").alias("rows"), F.countDistinct("value").alias("values")).first()
    assert counts.rows == n and counts.values == n


def test_read_returns_every_acknowledged_row_once_while_a_leader_is_killed(spark, kcluster, ray_session):
    from pyspark.sql import functions as F

    topic = new_topic(kcluster, "spark-kill", partitions=3)
    # Small record batches, so that reads take many fetches and a kill lands mid-read.
    values = produce_values(kcluster, topic, 60_000, size=100, batch_size=32 << 10)

    def kill_leader(partition: int) -> int:
        md = kcluster.partition_metadata(topic, partition, refresh=True)
        ray_session.kill(kcluster.replica(topic, partition, md.leader), no_restart=False)
        return md.leader_epoch

    # 1. The leader dies after the read was planned, before its tasks run.
    df = ks.read(spark, kcluster, topic, max_fetch_bytes=64 << 10)
    epoch0 = kill_leader(0)
    rows = df.select("partition", "offset", "value").collect()
    assert len(rows) == len(values) and len({(r.partition, r.offset) for r in rows}) == len(values)
    assert sorted(bytes(r.value) for r in rows) == values
    wait_until(lambda: kcluster.partition_metadata(topic, 0, refresh=True).leader_epoch > epoch0, timeout=60, what="a new leader of partition 0")

    # 2. A leader dies while the read runs (small fetches make the read take a while).
    df = ks.read(spark, kcluster, topic, min_partitions=6, max_fetch_bytes=16 << 10)
    sc = spark.sparkContext
    killed = threading.Event()

    epochs: list[int] = []

    def killer() -> None:
        wait_until(lambda: sc.statusTracker().getActiveStageIds(), timeout=120, interval=0.01, what="the read to start")
        epochs.append(kill_leader(1))
        killed.set()

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    got = df.groupBy("partition", "offset").agg(F.count("*").alias("n"), F.first("value").alias("value"))
    rows = got.collect()
    t.join(60)
    assert killed.is_set()
    assert all(r.n == 1 for r in rows) and len(rows) == len(values)
    assert sorted(bytes(r.value) for r in rows) == values
    wait_until(lambda: kcluster.partition_metadata(topic, 1, refresh=True).leader_epoch > epochs[0], timeout=60, what="a new leader of partition 1")


def test_ray_data_round_trip(spark, kcluster, ray_session, tmp_path):
    """Ray Data next to a running Spark session (whose executors must leave Ray a CPU)."""
    topic = new_topic(kcluster, "raydata", partitions=3)
    check_write_retried_once_and_read_back(kcluster, topic, 6000, 300, tmp_path)


def test_clear_errors(spark, kcluster):
    topic = new_topic(kcluster, "spark-err", partitions=2, rf=1)
    produce_values(kcluster, topic, 50)
    ends = Admin(kcluster).list_offsets(topic, "latest")
    df = spark.range(3).selectExpr("cast(id as string) as value", "id as n")

    with pytest.raises(KafkaError) as err:
        ks.read(spark, kcluster, "no-such-topic")
    assert err.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and "'no-such-topic' does not exist" in str(err.value)
    with pytest.raises(KafkaError) as err:
        ks.write(df, kcluster, "no-such-topic")
    assert err.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and "does not exist" in str(err.value)

    with pytest.raises(ks.ColumnError, match=r"no column 'payload'; its columns are \['value', 'n'\]"):
        ks.write(df, kcluster, topic, value_col="payload")
    with pytest.raises(ks.ColumnError, match="key_col='k'"):
        ks.write(df, kcluster, topic, key_col="k")
    with pytest.raises(ks.ColumnError, match="has type bigint; it must be binary, string"):
        ks.write(df, kcluster, topic, value_col="n")

    with pytest.raises(KafkaError) as err:
        ks.read(spark, kcluster, topic, starting_offsets={topic: {"0": ends[0] + 5}})
    assert err.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert f"starting offset {ends[0] + 5} for {topic}-0 is outside the log: the valid range is [0, {ends[0]}]" in str(err.value)
    with pytest.raises(KafkaError, match=r"ending offset 9999 .* valid range is \[0, "):
        ks.read(spark, kcluster, topic, ending_offsets=f'{{"{topic}": {{"1": 9999}}}}')

    for spec, needle in [
        ("newest", "is not understood"),
        ('{"x": ', "not valid JSON"),
        ({"other-topic": {"0": 1}}, "names topic(s) ['other-topic']"),
        ({topic: {"7": 1}}, "has no partition 7"),
        ({topic: {"0": -5}}, "is negative"),
        ("group:", "names no group"),
        (42, "must be a string or a dict"),
    ]:
        with pytest.raises(ks.OffsetSpecError) as err:
            ks.read(spark, kcluster, topic, starting_offsets=spec)
        assert needle in str(err.value), (spec, str(err.value))
    with pytest.raises(ks.OffsetSpecError, match="before its starting offset"):
        ks.read(spark, kcluster, topic, starting_offsets={topic: {"0": 3}}, ending_offsets={topic: {"0": 2}})
    with pytest.raises(ks.OffsetSpecError, match="only starting_offsets"):
        ks.read(spark, kcluster, topic, ending_offsets="group:g")

    # Explicit offsets, -2/-1 and the int-key shorthand read exactly the named range.
    part = ks.read(spark, kcluster, topic, starting_offsets={topic: {"0": 2, "1": -1}}, ending_offsets={0: 5})
    assert sorted((r.partition, r.offset) for r in part.select("partition", "offset").collect()) == [(0, 2), (0, 3), (0, 4)]
