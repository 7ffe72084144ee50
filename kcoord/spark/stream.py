"""Continuous micro-batch queries on Spark-on-Ray: ``stream(spark, cluster, "in", ...)``.

Each trigger reads what the consumer group has not processed (one Spark task per input
partition, or per 50k records if fewer: a small batch is one task; Spark's Kafka source columns, read committed), hands it to ``transform(df,
batch_id)`` and writes the result to ``sink`` with Spark's Kafka sink columns -- each
output task in a prepared transaction -- and commits the input offsets atomically with the
output (:mod:`kcoord.streaming.protocol`). ``foreach_batch(df, batch_id)`` instead hands
the batch to the user's own sink (at least once there, with the batch id to make it
idempotent, as in Spark); the offsets are committed after it returns.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Callable

from ..client.cluster import ClusterClient
from ..protocol.replication import READ_COMMITTED
from ..streaming import protocol as P
from ..streaming.driver import StreamDriver, StreamingQueryException
from ..streaming.query import StreamingQuery
from ..txn_write import PreparedTask, prepared_from_rows
from . import frames
from . import tasks as _tasks
from .offsets import OffsetPlan, topic_metadata

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: Spark's Kafka sink columns: ``value`` is required.
SINK_COLUMNS = ("key", "value", "headers", "partition", "topic")
STARTING_OFFSETS = ("earliest", "latest")


def check_name(name: Any, what: str = "name") -> str:
    if not isinstance(name, str) or not name.strip() or "/" in name or " " in name:
        raise ValueError(f"{what} must be a non-empty string without '/' or spaces (it names the query's transactions and membership), got {name!r}")
    return name


def output_columns(df: "DataFrame") -> dict[str, str | None]:
    """The sink columns of a transform's output, checked: ``value`` required; ``key``,
    ``headers``, ``partition``, ``topic`` optional (``topic`` is overridden by the sink, as
    Spark's ``topic`` option does); anything else is a :class:`frames.ColumnError` naming it."""
    names = [f.name for f in df.schema.fields]
    unknown = [n for n in names if n not in SINK_COLUMNS]
    if "value" not in names or unknown:
        problem = "has no 'value' column" if "value" not in names else f"has columns the Kafka sink does not take: {unknown}"
        raise frames.ColumnError(
            f"the transform's output {problem}; its columns are {names}. Spark's Kafka sink takes value (required, string or binary), "
            f"key, headers, partition and topic -- select or rename, e.g. df.selectExpr('key', 'CAST(x AS STRING) AS value')"
        )
    return {c: (c if c in names else None) for c in ("key", "value", "headers", "partition")}


class SparkEngine:
    """Runs a batch's tasks on Spark (see the module doc)."""

    def __init__(self, spark: "SparkSession", cluster: ClusterClient, sink: str | None, transform: Any, foreach_batch: Any, value_format: str) -> None:
        self.spark = spark
        self.cluster = cluster
        self.sink = sink
        self.transform = transform
        self.foreach_batch = foreach_batch
        self.value_format = value_format

    def run_tasks(self, plan: P.BatchPlan, attempt_tag: str) -> tuple[list[PreparedTask], int]:
        ranges = [r for r in plan.ranges if r.size]
        if not ranges:
            return [], 0  # a batch that only commits positions (a new partition, "latest")
        first = ranges[0].topic
        offsets = OffsetPlan(first, {}, {}, {}, {}, ranges=ranges, isolation_level=READ_COMMITTED)
        # a small batch in few tasks: each output task is a transaction to open, prepare and commit
        df = frames.read_plan(self.spark, self.cluster, offsets, tasks=frames.read_tasks(sum(r.size for r in ranges), len(ranges)))
        if self.foreach_batch is not None:
            self.foreach_batch(df, plan.batch)
            return [], 0
        out = self.transform(df, plan.batch)
        if not hasattr(out, "schema") or not hasattr(out, "mapInArrow"):
            raise TypeError(f"transform must return a DataFrame, got {type(out).__name__}")
        cols = output_columns(out)
        projected = frames._project(out, cols["key"], "value", cols["headers"], cols["partition"], self.value_format)
        with frames._sql_conf(self.spark, {"spark.sql.adaptive.enabled": "false"}):
            n = projected._jdf.rdd().getNumPartitions()
            if n == 0:
                return [], 0
            fn = functools.partial(
                frames._write_task,
                ref=_tasks.ClusterRef.of(self.cluster),
                topic=self.sink,
                base_id=None,
                tasks=n,
                acks="all",
                value_format=self.value_format,
                chunk_bytes=_tasks.DEFAULT_CHUNK_BYTES,
                batch_bytes=_tasks.DEFAULT_BATCH_BYTES,
                on_task_written=None,
                txn_prefix=plan.prefix,
                attempt_tag=attempt_tag,
            )
            rows = projected.mapInArrow(fn, frames._stats_ddl()).collect()
        return list(prepared_from_rows(rows).values()), sum(r.records for r in rows)


def start_query(
    cluster: ClusterClient,
    engine: Any,
    source: str | list[str] | None,
    *,
    group_id: str,
    sink: str | None,
    transform: Any,
    foreach_batch: Any,
    trigger_interval_ms: int,
    max_records_per_trigger: int | None,
    starting_offsets: str,
    name: str | None,
    pattern: str | None,
) -> StreamingQuery:
    """Check the options (a bad one raises here, before anything runs) and start the query's
    driver thread. Shared by :func:`stream` and :func:`kcoord.ray_data.stream`."""
    if not isinstance(cluster, ClusterClient):
        raise TypeError(f"stream() needs a ClusterClient, got {type(cluster).__name__}")
    check_name(group_id, "group_id")
    name = check_name(name if name is not None else group_id)
    if (transform is None) == (foreach_batch is None):
        raise ValueError("give exactly one of transform=fn(df, batch_id) (its output is written to sink) and foreach_batch=fn(df, batch_id)")
    if transform is not None and not sink:
        raise ValueError("transform= needs sink=<topic>, the topic its output is written to")
    if foreach_batch is not None and sink:
        raise ValueError("foreach_batch= writes where it likes: give no sink")
    if starting_offsets not in STARTING_OFFSETS:
        raise ValueError(f"starting_offsets must be one of {STARTING_OFFSETS} (for a group with no commits), got {starting_offsets!r}")
    if not isinstance(trigger_interval_ms, int) or trigger_interval_ms < 0:
        raise ValueError(f"trigger_interval_ms must be an int >= 0, got {trigger_interval_ms!r}")
    if max_records_per_trigger is not None and (not isinstance(max_records_per_trigger, int) or max_records_per_trigger < 1):
        raise ValueError(f"max_records_per_trigger must be a positive int or None, got {max_records_per_trigger!r}")
    if (source is None) == (pattern is None):
        raise ValueError("give the source topics (a name or a list) or pattern=<regex>, not both")
    topics = [source] if isinstance(source, str) else (list(source) if source is not None else None)
    for t in topics or []:
        topic_metadata(cluster, t)  # UNKNOWN_TOPIC_OR_PARTITION, with a hint
    if sink:
        topic_metadata(cluster, sink)
    core = P.StreamCore(
        name, group_id, trigger_interval_s=trigger_interval_ms / 1000, starting_offsets=starting_offsets, max_records_per_trigger=max_records_per_trigger
    )

    def make_driver(q: StreamingQuery) -> StreamDriver:
        return StreamDriver(
            cluster, core, engine, topics=topics, pattern=pattern, sink=sink or "", stop=q._stop, on_batch=q._on_batch, on_caught_up=q._on_caught_up
        )

    return StreamingQuery(name, group_id, make_driver)


def stream(
    spark: "SparkSession",
    cluster: ClusterClient,
    source: str | list[str] | None = None,
    *,
    group_id: str,
    transform: Callable[["DataFrame", int], "DataFrame"] | None = None,
    foreach_batch: Callable[["DataFrame", int], Any] | None = None,
    sink: str | None = None,
    trigger_interval_ms: int = 500,
    max_records_per_trigger: int | None = None,
    starting_offsets: str = "latest",
    name: str | None = None,
    pattern: str | None = None,
    value_format: str = "json",
) -> StreamingQuery:
    """Start a continuous query over ``source`` (a topic, a list, or ``pattern=`` a regex)
    for the consumer group ``group_id``; returns a :class:`StreamingQuery` (PySpark's
    names: ``processAllAvailable()``, ``lastProgress``, ``recentProgress``, ``isActive``,
    ``awaitTermination(timeout)``, ``stop()``, ``exception()``).

    Every ``trigger_interval_ms`` it reads what the group has not processed (at most
    ``max_records_per_trigger`` records, shared out by lag), one Spark task per input
    partition (or per 50k records if fewer), as a DataFrame with Spark's Kafka source columns (read committed), calls
    ``transform(df, batch_id)`` and writes its output (Spark's Kafka sink columns:
    ``value`` required, string or binary; ``key``, ``headers``, ``partition`` optional;
    keyed rows partitioned by key) to the topic ``sink``, exactly once together with the
    group's offsets: a read_committed consumer of ``sink`` sees each input record's output
    once, whatever dies when (the driver, an executor, a broker), and a restarted query
    with the same ``name`` and group resumes from the last committed batch.

    ``starting_offsets``: where a group without commits starts (``"latest"``, the default
    as in Spark and Kafka consumers, or ``"earliest"``). ``name`` (default ``group_id``)
    ties the query to its transactions and group membership: the query is the group's one
    static member ``name``, so a second copy of it fences the first, and another member in
    the group stops the query with an error.

    Errors raised here: an unknown source or sink topic (KafkaError
    UNKNOWN_TOPIC_OR_PARTITION), bad options (ValueError). A transform that raises or
    returns the wrong columns stops the query: ``exception()`` says why, nothing of that
    batch is committed, and a restart processes it again.
    """
    if value_format not in frames.VALUE_FORMATS:
        raise ValueError(f"value_format must be one of {frames.VALUE_FORMATS}, got {value_format!r}")
    engine = SparkEngine(spark, cluster, sink, transform, foreach_batch, value_format)
    return start_query(
        cluster, engine, source, group_id=group_id, sink=sink, transform=transform, foreach_batch=foreach_batch,
        trigger_interval_ms=trigger_interval_ms, max_records_per_trigger=max_records_per_trigger,
        starting_offsets=starting_offsets, name=name, pattern=pattern,
    )


__all__ = ["SINK_COLUMNS", "SparkEngine", "StreamingQuery", "StreamingQueryException", "output_columns", "start_query", "stream"]
