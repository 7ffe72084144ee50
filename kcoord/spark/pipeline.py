"""Batch pipelines over a topic and a consumer group, shared by ``examples/spark_pipeline.py``
and the Spark stage of ``kcoord demo``.

* :func:`topic_report` -- what a batch job sees: the topic's records per partition and
  key (optionally written back as per-key counts from the executors), the group's
  committed offsets with lag, and the records the group has not consumed yet (read from
  ``group:<g>``), checked against each other.
* :func:`catch_up` -- the batch consumer: read what the group has not consumed, process it
  (count per key), write the result to an output topic, then commit the offsets it read,
  so the next run starts there.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..client.cluster import ClusterClient
from . import frames, groups
from .offsets import plan_offsets

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def topic_report(
    spark: "SparkSession", cluster: ClusterClient, topic: str, group: str, counts_topic: str | None = None, top: int = 3
) -> dict[str, Any]:
    """What a batch job sees of ``topic`` and of ``group``'s progress on it, from Spark.

    Reads the whole topic as a DataFrame and counts records per key (and per partition);
    with ``counts_topic`` (which must exist) writes one record per key to it from the
    executors (key, value = the count as text); reads the group's committed offsets as a
    DataFrame; and reads the records the group has not consumed yet from
    ``group:<group>``. ``consistent`` says those agree: the records left to read are
    exactly the group's lag (partitions without a commit count from the log start).
    """
    from pyspark.sql import functions as F

    t0 = time.monotonic()
    # One pass over the topic (one Spark job): records per (partition, key).
    cells = frames.read(spark, cluster, topic).groupBy("partition", "key").count().collect()
    per_partition: dict[int, int] = {}
    by_key: dict[Any, int] = {}
    for r in cells:
        per_partition[r.partition] = per_partition.get(r.partition, 0) + r["count"]
        key = bytes(r.key) if r.key is not None else None
        by_key[key] = by_key.get(key, 0) + r["count"]
    rows = sum(per_partition.values())
    per_key = sorted(
        ((k.decode("utf-8", "replace") if k is not None else None, n) for k, n in by_key.items()),
        key=lambda kn: (-kn[1], kn[0] or ""),
    )
    written = None
    if counts_topic is not None:
        counts = spark.createDataFrame([(k, str(n)) for k, n in by_key.items()], "key binary, value string")
        written = frames.write(counts, cluster, counts_topic, key_col="key", value_col="value")
    committed = [r.asDict() for r in groups.committed_offsets(spark, cluster, group).where(F.col("topic") == topic).orderBy("partition").collect()]
    plan = plan_offsets(cluster, topic, f"group:{group}", "latest")
    remaining = frames.read_plan(spark, cluster, plan).count()
    return {
        "topic": topic,
        "group": group,
        "rows_read": rows,
        "partitions": dict(sorted(per_partition.items())),
        "keys": len(per_key),
        "per_key": per_key,
        "top_keys": per_key[:top],
        "counts_written": written.records if written is not None else None,
        "committed": committed,
        "group_committed": sum(r["offset"] for r in committed),
        "group_lag": plan.rows,
        "remaining_rows": remaining,
        "consistent": remaining == plan.rows and sum(c for _, c in per_key) == rows,
        "seconds": round(time.monotonic() - t0, 2),
    }


def catch_up(spark: "SparkSession", cluster: ClusterClient, topic: str, group: str, output_topic: str) -> dict[str, Any]:
    """Consume, as a batch, what ``group`` has not consumed of ``topic``: count the records
    per key, write one record per key to ``output_topic`` (key, value = the count as
    text), then commit the offsets read. Refused (KafkaError NON_EMPTY_GROUP) while the
    group has active members. Safe to re-run after a failure before the commit: the same
    records are read again (the output is then written again, at-least-once)."""
    from pyspark.sql import functions as F

    t0 = time.monotonic()
    plan = plan_offsets(cluster, topic, f"group:{group}", "latest")
    df = frames.read_plan(spark, cluster, plan)
    counts = df.groupBy("key").agg(F.count("*").cast("string").alias("value"))
    written = frames.write(counts, cluster, output_topic, key_col="key", value_col="value")
    committed = groups.commit(cluster, group, plan)
    return {
        "read_rows": plan.rows,
        "from": plan.start,
        "to": plan.end,
        "keys_written": written.records,
        "committed": committed[topic],
        "seconds": round(time.monotonic() - t0, 2),
    }
