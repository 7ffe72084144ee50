"""Continuous micro-batch queries on Spark-on-Ray: ``stream(spark, cluster, "in", ...)``.

Each trigger reads what the consumer group has not processed (one Spark task per input
partition, or per 50k records if fewer: a small batch is one task; Spark's Kafka source columns, read committed), hands it to ``transform(df,
batch_id)`` and writes the result to ``sink`` with Spark's Kafka sink columns -- each
output task in a prepared transaction -- and commits the input offsets atomically with the
output (:mod:`kcoord.streaming.protocol`). ``foreach_batch(df, batch_id)`` instead hands
the batch to the user's own sink (at least once there, with the batch id to make it
idempotent, as in Spark); the offsets are committed after it returns. ``update_state`` keeps
state per key across batches (:mod:`kcoord.streaming.state`), committed with the output and
the offsets.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Callable

from ..client.cluster import ClusterClient
from ..protocol.replication import READ_COMMITTED
from ..streaming import protocol as P
from ..streaming import state as S
from ..streaming.driver import StreamDriver, StreamingQueryException, source_partitions
from ..streaming.query import StreamingQuery
from ..txn_write import PreparedTask, prepared_from_rows, task_transactional_id
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


def _with_partitions(batches: Any, *, key: str, partitions: int) -> Any:
    for batch in batches:
        yield S.with_partitions(batch, key, partitions)


def _state_group(
    rows: Any, *, ref: _tasks.ClusterRef, spec: S.StateSpec, prefix: str, attempt_tag: str, ends: dict[int, int], sink: str, value_format: str
) -> Any:
    """One changelog partition's rows of a batch (``applyInPandas``), in the task's own
    prepared transaction; returns its write statistics."""
    from pyspark import TaskContext

    _tasks.drop_jars_from_sys_path()
    ctx = TaskContext.get()
    partition = int(rows[S.PARTITION_COLUMN].iloc[0])
    tid = task_transactional_id(prefix, partition, f"{attempt_tag}{ctx.attemptNumber()}.{ctx.taskAttemptId()}")

    def produce(producer: Any, table: Any) -> dict[int, list[int]]:
        return _tasks.produce_batches(ref, sink, table.to_batches(), producer_id=None, value_format=value_format, producer=producer)

    prepared, stats, counts = S.update_partition(
        ref.client(), spec, transactional_id=tid, partition=partition, rows=rows, end=ends[partition], sink_columns=SINK_COLUMNS, produce=produce
    )
    return S.with_counts(_tasks.stats_batch(partition, ctx.attemptNumber(), prepared.producer_id, stats, tid, prepared.epoch).to_pandas(), counts)


class SparkEngine:
    """Runs a batch's tasks on Spark (see the module doc)."""

    def __init__(
        self, spark: "SparkSession", cluster: ClusterClient, sink: str | None, transform: Any, foreach_batch: Any, value_format: str, state: S.StateSpec | None = None
    ) -> None:
        self.spark = spark
        self.cluster = cluster
        self.sink = sink
        self.transform = transform
        self.foreach_batch = foreach_batch
        self.value_format = value_format
        self.state = state

    def _run_state(self, plan: P.BatchPlan, df: "DataFrame", attempt_tag: str) -> tuple[list[PreparedTask], int, S.StateCounts]:
        """A stateful batch: shuffle the rows by changelog partition, one task per partition
        with rows (:mod:`kcoord.streaming.state`)."""
        spec = self.state
        assert spec is not None and self.sink
        ends = S.changelog_ends(self.cluster, spec.query, spec.partitions)
        if spec.key not in df.columns:
            raise frames.ColumnError(f"state_key={spec.key!r}: the rows have no column {spec.key!r}; their columns are {df.columns}")
        from pyspark.sql.types import IntegerType, StructType

        schema = StructType(list(df.schema.fields)).add(S.PARTITION_COLUMN, IntegerType(), False)
        keyed = df.mapInArrow(functools.partial(_with_partitions, key=spec.key, partitions=spec.partitions), schema)
        fn = functools.partial(
            _state_group, ref=_tasks.ClusterRef.of(self.cluster), spec=spec, prefix=plan.prefix, attempt_tag=attempt_tag,
            ends=ends, sink=self.sink, value_format=self.value_format,
        )
        settings = {"spark.sql.adaptive.enabled": "false", "spark.sql.shuffle.partitions": str(spec.partitions)}
        with frames._sql_conf(self.spark, settings):
            rows = keyed.groupBy(S.PARTITION_COLUMN).applyInPandas(fn, schema=frames.stats_schema(S.COUNT_DDL)).collect()
        return list(prepared_from_rows(rows).values()), sum(r.records for r in rows if r.partition >= 0), S.counts_of_rows(rows)

    def run_tasks(self, plan: P.BatchPlan, attempt_tag: str) -> tuple[list[PreparedTask], int, S.StateCounts | None]:
        ranges = [r for r in plan.ranges if r.size]
        if not ranges:
            return [], 0, None  # a batch that only commits positions (a new partition, "latest")
        first = ranges[0].topic
        offsets = OffsetPlan(first, {}, {}, {}, {}, ranges=ranges, isolation_level=READ_COMMITTED)
        # a small batch in few tasks: each output task is a transaction to open, prepare and commit
        df = frames.read_plan(self.spark, self.cluster, offsets, tasks=frames.read_tasks(sum(r.size for r in ranges), len(ranges)))
        if self.foreach_batch is not None:
            self.foreach_batch(df, plan.batch)
            return [], 0, None
        out = self.transform(df, plan.batch) if self.transform is not None else df
        if not hasattr(out, "schema") or not hasattr(out, "mapInArrow"):
            raise TypeError(f"transform must return a DataFrame, got {type(out).__name__}")
        if self.state is not None:
            return self._run_state(plan, out, attempt_tag)
        cols = output_columns(out)
        projected = frames._project(out, cols["key"], "value", cols["headers"], cols["partition"], self.value_format)
        with frames._sql_conf(self.spark, {"spark.sql.adaptive.enabled": "false"}):
            # No count of the output's Spark partitions first: it would plan the query twice
            # (tens of ms a batch). Each task names its own transaction; the decision lists
            # those that prepared.
            fn = functools.partial(
                frames._write_task,
                ref=_tasks.ClusterRef.of(self.cluster),
                topic=self.sink,
                base_id=None,
                tasks=None,
                acks="all",
                value_format=self.value_format,
                chunk_bytes=_tasks.DEFAULT_CHUNK_BYTES,
                batch_bytes=_tasks.DEFAULT_BATCH_BYTES,
                on_task_written=None,
                txn_prefix=plan.prefix,
                attempt_tag=attempt_tag,
            )
            rows = projected.mapInArrow(fn, frames.stats_schema()).collect()
        return list(prepared_from_rows(rows).values()), sum(r.records for r in rows), None


def start_query(
    cluster: ClusterClient,
    make_engine: Callable[[S.StateSpec | None], Any],
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
    update_state: Any = None,
    state_key: str | None = None,
    state_partitions: int | None = None,
) -> StreamingQuery:
    """Check the options (a bad one raises here, before anything runs), create a stateful
    query's changelog, and start the query's driver thread with the engine
    ``make_engine(state)`` builds. Shared by :func:`stream` and :func:`kcoord.ray_data.stream`."""
    if not isinstance(cluster, ClusterClient):
        raise TypeError(f"stream() needs a ClusterClient, got {type(cluster).__name__}")
    check_name(group_id, "group_id")
    name = check_name(name if name is not None else group_id)
    if update_state is not None:
        if not callable(update_state):
            raise TypeError(f"update_state must be a function (key, rows, state) -> (output, new state), got {type(update_state).__name__}")
        if not isinstance(state_key, str) or not state_key:
            raise ValueError("update_state= needs state_key=<column>, the column whose values key the state (e.g. 'key')")
        if foreach_batch is not None:
            raise ValueError("update_state= writes its output to sink: give no foreach_batch")
        if not sink:
            raise ValueError("update_state= needs sink=<topic>, the topic its output is written to")
        if state_partitions is not None and (not isinstance(state_partitions, int) or isinstance(state_partitions, bool) or state_partitions < 1):
            raise ValueError(f"state_partitions must be a positive int or None, got {state_partitions!r}")
    elif state_key is not None or state_partitions is not None:
        raise ValueError("state_key= and state_partitions= go with update_state=fn(key, rows, state)")
    elif (transform is None) == (foreach_batch is None):
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
    state = None
    if update_state is not None:
        assert state_key is not None
        inputs = len(source_partitions(cluster, topics, pattern))
        state = S.StateSpec(name, state_key, update_state, S.ensure_changelog(cluster, name, state_partitions, inputs))
    engine = make_engine(state)
    core = P.StreamCore(
        name, group_id, trigger_interval_s=trigger_interval_ms / 1000, starting_offsets=starting_offsets, max_records_per_trigger=max_records_per_trigger
    )

    def make_driver(q: StreamingQuery) -> StreamDriver:
        return StreamDriver(
            cluster, core, engine, topics=topics, pattern=pattern, sink=sink or "", stop=q._stop, on_batch=q._on_batch, on_caught_up=q._on_caught_up
        )

    return StreamingQuery(name, group_id, make_driver, stateful=state is not None, state_partitions=state.partitions if state is not None else 0)


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
    max_records_per_trigger: int | None = P.DEFAULT_MAX_RECORDS_PER_TRIGGER,
    starting_offsets: str = "latest",
    name: str | None = None,
    pattern: str | None = None,
    value_format: str = "json",
    update_state: Callable[[Any, Any, Any], tuple[Any, Any]] | None = None,
    state_key: str | None = None,
    state_partitions: int | None = None,
) -> StreamingQuery:
    """Start a continuous query over ``source`` (a topic, a list, or ``pattern=`` a regex)
    for the consumer group ``group_id``; returns a :class:`StreamingQuery` (PySpark's
    names: ``processAllAvailable()``, ``lastProgress``, ``recentProgress``, ``isActive``,
    ``awaitTermination(timeout)``, ``stop()``, ``exception()``).

    Every ``trigger_interval_ms`` it reads what the group has not processed (at most
    ``max_records_per_trigger`` records, shared out by lag: 100,000 by default, None for
    no bound; a batch is planned after the previous one commits, so a slow transform slows
    the reads and a backlog drains in bounded batches), one Spark task per input
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

    State across batches (PySpark's ``applyInPandasWithState``): with
    ``update_state=fn(key, rows, state)`` and ``state_key="<column>"`` the batch's rows
    (after ``transform``, if given) are grouped by that column and ``fn`` is called once per
    key with the key's rows as a pandas DataFrame, in input order, and the key's state (None
    the first time). It returns ``(output, new_state)``: ``output`` a pandas DataFrame of
    sink columns or None, ``new_state`` a msgpack value (dict, list, number, str, bytes), or
    None to remove the key's state. The state lives in the compacted topic
    ``{name}-state-changelog`` (``state_partitions`` partitions, default the source's
    partition count; fixed once created), written in the same transactions as the output
    and the offsets, so after any kill a restarted query's state is exactly that of the
    batches committed. Stateless queries create no changelog.

    Errors raised here: an unknown source or sink topic (KafkaError
    UNKNOWN_TOPIC_OR_PARTITION), bad options (ValueError). A transform that raises or
    returns the wrong columns stops the query: ``exception()`` says why, nothing of that
    batch is committed, and a restart processes it again.
    """
    if value_format not in frames.VALUE_FORMATS:
        raise ValueError(f"value_format must be one of {frames.VALUE_FORMATS}, got {value_format!r}")
    return start_query(
        cluster, lambda state: SparkEngine(spark, cluster, sink, transform, foreach_batch, value_format, state), source,
        group_id=group_id, sink=sink, transform=transform, foreach_batch=foreach_batch,
        trigger_interval_ms=trigger_interval_ms, max_records_per_trigger=max_records_per_trigger,
        starting_offsets=starting_offsets, name=name, pattern=pattern,
        update_state=update_state, state_key=state_key, state_partitions=state_partitions,
    )


__all__ = ["SINK_COLUMNS", "SparkEngine", "StreamingQuery", "StreamingQueryException", "output_columns", "start_query", "stream"]
