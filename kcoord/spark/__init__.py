"""Spark on Ray (RayDP) for kcoord: DataFrames produce into topics, read topics back, and
read and commit consumer-group offsets.

    from kcoord import spark as ks
    spark = ks.session(cluster, executors=2)           # RayDP Spark on the cluster's Ray
    ks.write(df, cluster, "events", key_col="key", value_col="value")
    df = ks.read(spark, cluster, "events", starting_offsets="group:g1")   # Kafka source schema
    ks.committed_offsets(spark, cluster, "g1")         # group, topic, partition, offset, ...
    ks.commit(cluster, "g1", {"events": {0: 120, 1: 98}})
    q = ks.stream(spark, cluster, "events", group_id="etl", sink="out",     # continuous, exactly once
                  transform=lambda df, batch_id: df.selectExpr("key", "upper(CAST(value AS STRING)) AS value"))
    ks.stop()

Executor tasks reach kcoord's actors directly (RayDP executors are Ray actors); the data
moves as Arrow batches between the JVM and Python (``mapInArrow``). Importing this package
does not import pyspark; the functions do.

Modules: :mod:`.session` (the RayDP session), :mod:`.frames` (write/read),
:mod:`.groups` (offsets as DataFrame, standalone commit), :mod:`.stream` (micro-batch
queries, :mod:`kcoord.streaming`), :mod:`.offsets` (offset specs
and ranges) and :mod:`.tasks` (the executor-side I/O, shared with :mod:`kcoord.ray_data`).
"""

from __future__ import annotations

from ..extras import require

require("spark", "kcoord.spark", "pyarrow")

from .frames import KAFKA_SCHEMA_DDL, ColumnError, WriteResult, allocate_producer_ids, kafka_schema, read, read_plan, write
from .groups import commit, committed_offsets
from .offsets import OffsetPlan, OffsetRange, OffsetSpecError, plan_offsets
from .session import JAVA_OPTIONS, session, spark_configs, stop
from .stream import StreamingQuery, StreamingQueryException, stream

__all__ = [
    "ColumnError",
    "JAVA_OPTIONS",
    "KAFKA_SCHEMA_DDL",
    "OffsetPlan",
    "OffsetRange",
    "OffsetSpecError",
    "WriteResult",
    "allocate_producer_ids",
    "commit",
    "committed_offsets",
    "kafka_schema",
    "plan_offsets",
    "read",
    "read_plan",
    "session",
    "spark_configs",
    "stop",
    "stream",
    "StreamingQuery",
    "StreamingQueryException",
    "write",
]
