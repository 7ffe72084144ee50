"""DataFrames in and out of kcoord topics.

``write`` produces from inside the executors: the DataFrame is projected in the JVM to
binary ``key``/``value`` (+ ``headers``, ``partition``) columns and handed to Python as
Arrow batches (``mapInArrow``), which go to :meth:`Producer.send_batch` as columns.

``read`` resolves offsets on the driver (:mod:`kcoord.spark.offsets`), then runs one task
per offset range over ``spark.range(n, numPartitions=n)``: task i fetches range i from the
partition leader and returns Arrow batches in exactly the schema of Spark's Kafka source.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

import pyarrow as pa

from ..client.cluster import ClusterClient
from ..protocol.controller import InitProducerIdRequest, InitProducerIdResponse
from ..protocol.errors import ErrorCode, KafkaError, raise_for_error
from . import tasks as _tasks
from ..txn_write import Decision, TransactionalWrite, check_prefix, prepare_task, prepared_from_rows, task_transactional_id
from .offsets import ISOLATION_LEVELS, OffsetPlan, isolation_level_id, plan_offsets, topic_metadata

ISOLATION_NAMES = {v: k for k, v in ISOLATION_LEVELS.items()}

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

KAFKA_SCHEMA_DDL = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
    "timestampType int, headers array<struct<key:string,value:binary>>"
)
VALUE_FORMATS = ("json", "msgpack")
_ACKS = ("all", -1, "-1", 1, "1", 0, "0")


class ColumnError(ValueError):
    """A column named in a write is missing or has a type that cannot be sent."""


def kafka_schema() -> Any:
    """Spark's Kafka source schema as a StructType (every field nullable, as Spark has it)."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    return StructType(
        [
            StructField("key", BinaryType()),
            StructField("value", BinaryType()),
            StructField("topic", StringType()),
            StructField("partition", IntegerType()),
            StructField("offset", LongType()),
            StructField("timestamp", TimestampType()),
            StructField("timestampType", IntegerType()),
            StructField("headers", ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))),
        ]
    )


# ------------------------------------------------------------------------------------------
# write
# ------------------------------------------------------------------------------------------
@dataclass
class WriteResult:
    """What :func:`write` did. ``partitions``: records per topic partition;
    ``tasks``: records per Spark partition; ``producer_ids``: the block of producer ids
    (the write id; Spark partition i used ``producer_ids[0] + i``), empty unless
    ``exactly_once``; ``duplicate_batches``: batches the leaders already had (re-sent by a
    retried task attempt and dropped). A transactional write (``transactional_id``, the
    prefix): ``transactions``, the transactional id committed per task;
    ``already_written``, True when an earlier run under this prefix had written it (nothing
    was written now; the counts are that run's)."""

    topic: str
    records: int = 0
    partitions: dict[int, int] = field(default_factory=dict)
    tasks: dict[int, int] = field(default_factory=dict)
    attempts: dict[int, int] = field(default_factory=dict)
    batches: int = 0
    duplicate_batches: int = 0
    producer_ids: range = field(default_factory=lambda: range(0))
    exactly_once: bool = True
    transactional_id: str | None = None
    transactions: dict[int, str] = field(default_factory=dict)
    already_written: bool = False

    def add(self, task: int, partition: int, records: int, batches: int, duplicate_batches: int) -> None:
        """Count what ``task`` wrote to ``partition`` (-1: a task that wrote nothing)."""
        self.tasks[task] = self.tasks.get(task, 0) + records
        if partition >= 0:
            self.partitions[partition] = self.partitions.get(partition, 0) + records
        self.records += records
        self.batches += batches
        self.duplicate_batches += duplicate_batches

    def sort(self) -> "WriteResult":
        self.partitions = dict(sorted(self.partitions.items()))
        self.tasks = dict(sorted(self.tasks.items()))
        return self


def allocate_producer_ids(cluster: ClusterClient, count: int) -> range:
    """A block of ``count`` fresh producer ids from the controller (InitProducerId)."""
    response = cluster.call_controller("init_producer_id", InitProducerIdRequest(count=count), InitProducerIdResponse)
    raise_for_error(response.error_code, response.error_message or "InitProducerId failed")
    got = response.count or 1
    if got < count:
        raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"asked the controller for {count} producer ids, got {got}")
    return range(response.producer_id, response.producer_id + count)


def _column_type(df: "DataFrame", name: str | None, what: str) -> Any:
    if name is None:
        return None
    if not isinstance(name, str):
        raise ColumnError(f"{what} must be a column name (str), got {name!r}")
    fields = {f.name: f.dataType for f in df.schema.fields}
    if name not in fields:
        raise ColumnError(f"{what}={name!r}: the DataFrame has no column {name!r}; its columns are {list(fields)}")
    return fields[name]


def _project(df: "DataFrame", key_col: str | None, value_col: str, headers_col: str | None, partition_col: str | None, value_format: str) -> "DataFrame":
    """The DataFrame as binary key/value (+ headers, partition) columns, converted in the
    JVM where possible (strings to UTF-8, structs to JSON with ``to_json``)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    def payload(name: str, what: str) -> Any:
        t = _column_type(df, name, what)
        c = F.col(f"`{name}`")
        if isinstance(t, T.BinaryType):
            return c
        if isinstance(t, T.StringType):
            return c.cast("binary")
        if isinstance(t, (T.StructType, T.MapType, T.ArrayType)):
            # msgpack is packed in Python (from Arrow); JSON is cheaper in the JVM.
            return c if value_format == "msgpack" else F.to_json(c).cast("binary")
        raise ColumnError(
            f"{what}={name!r} has type {t.simpleString()}; it must be binary, string, or a struct/map/array "
            f"(sent as {value_format}) -- cast it, e.g. df.withColumn({name!r}, col({name!r}).cast('string'))"
        )

    cols = [payload(value_col, "value_col").alias("value")]
    if key_col is not None:
        cols.append(payload(key_col, "key_col").alias("key"))
    if headers_col is not None:
        t = _column_type(df, headers_col, "headers_col")
        c = F.col(f"`{headers_col}`")
        ok_value = (T.BinaryType, T.StringType)
        if isinstance(t, T.MapType) and isinstance(t.keyType, T.StringType) and isinstance(t.valueType, ok_value):
            cols.append(c.alias("headers"))
        elif (
            isinstance(t, T.ArrayType)
            and isinstance(t.elementType, T.StructType)
            and [f.name for f in t.elementType.fields] == ["key", "value"]
            and isinstance(t.elementType["key"].dataType, T.StringType)
            and isinstance(t.elementType["value"].dataType, ok_value)
        ):
            cols.append(c.alias("headers"))
        else:
            raise ColumnError(
                f"headers_col={headers_col!r} has type {t.simpleString()}; it must be array<struct<key:string,value:binary>> "
                f"(Spark's Kafka headers; value may be string) or map<string,binary|string>"
            )
    if partition_col is not None:
        t = _column_type(df, partition_col, "partition_col")
        if not isinstance(t, (T.IntegerType, T.LongType, T.ShortType, T.ByteType)):
            raise ColumnError(f"partition_col={partition_col!r} has type {t.simpleString()}; it must be an integer type")
        cols.append(F.col(f"`{partition_col}`").cast("int").alias("partition"))
    return df.select(*cols)


@contextlib.contextmanager
def _sql_conf(spark: "SparkSession", settings: dict[str, str]) -> Iterator[None]:
    old = {k: spark.conf.get(k, None) for k in settings}
    for k, v in settings.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


def _write_task(
    batches: Iterator[pa.RecordBatch],
    *,
    ref: _tasks.ClusterRef,
    topic: str,
    base_id: int | None,
    tasks: int | None,
    acks: Any,
    value_format: str,
    chunk_bytes: int,
    batch_bytes: int,
    on_task_written: Callable[[int, int], Any] | None,
    txn_prefix: str | None = None,
    attempt_tag: str = "",
) -> Iterator[pa.RecordBatch]:
    from pyspark import TaskContext

    _tasks.drop_jars_from_sys_path()
    ctx = TaskContext.get()
    task, attempt = ctx.partitionId(), ctx.attemptNumber()
    if tasks is not None and task >= tasks:
        raise RuntimeError(f"write planned {tasks} Spark partitions but task {task} ran: the DataFrame's partitioning changed between planning and execution")
    if txn_prefix is not None:
        # Every attempt in its own transaction, left prepared for the driver (kcoord.txn_write).
        # taskAttemptId: unique in the app; attempt_tag: a streaming driver's epoch (kcoord.streaming)
        tid = task_transactional_id(txn_prefix, task, f"{attempt_tag}{attempt}.{ctx.taskAttemptId()}")

        def produce(producer: Any) -> dict[int, list[int]]:
            return _tasks.produce_batches(
                ref, topic, batches, producer_id=None, value_format=value_format, chunk_bytes=chunk_bytes, batch_bytes=batch_bytes, producer=producer
            )

        prepared, stats = prepare_task(ref.client(), tid, task, produce, linger_ms=0, batch_size=batch_bytes)
        if on_task_written is not None:
            on_task_written(task, attempt)
        yield _tasks.stats_batch(task, attempt, prepared.producer_id, stats, tid, prepared.epoch)
        return
    producer_id = base_id + task if base_id is not None else None
    stats = _tasks.produce_batches(
        ref, topic, batches, producer_id=producer_id, acks=acks, value_format=value_format, chunk_bytes=chunk_bytes, batch_bytes=batch_bytes
    )
    if on_task_written is not None:
        on_task_written(task, attempt)
    yield _tasks.stats_batch(task, attempt, -1 if producer_id is None else producer_id, stats)


def write(
    df: "DataFrame",
    cluster: ClusterClient,
    topic: str,
    key_col: str | None = None,
    value_col: str = "value",
    headers_col: str | None = None,
    partition_col: str | None = None,
    acks: str | int = "all",
    *,
    value_format: str = "json",
    chunk_bytes: int = _tasks.DEFAULT_CHUNK_BYTES,
    batch_bytes: int = _tasks.DEFAULT_BATCH_BYTES,
    on_task_written: Callable[[int, int], Any] | None = None,
    transactional_id: str | None = None,
) -> WriteResult:
    """Produce every row of ``df`` to ``topic`` from inside the Spark executors.

    Columns: ``value_col`` (and ``key_col``) may be binary, string (sent as UTF-8) or a
    struct/map/array, sent as compact JSON (``value_format="json"``, via Spark's
    ``to_json``) or msgpack (``value_format="msgpack"``; dates and decimals as strings).
    ``headers_col`` is Spark's Kafka header type ``array<struct<key:string,value:binary>>``
    (string values are encoded as UTF-8) or a ``map<string, binary|string>``.
    ``partition_col`` (integer) picks the partition; rows without one (null), like rows
    of a write without ``partition_col``, go by key (murmur2, the producer's partitioner),
    and rows without a key are spread over all partitions.

    Exactly once under Spark task retries (``acks="all"``, the default): the driver takes
    a block of producer ids from the controller, one per Spark partition; task i produces
    as producer ``base + i`` at epoch 0 and cuts its input deterministically, so a retried
    attempt sends the same batches with the same sequence numbers and the idempotent
    leaders drop the ones they have. This relies on the DataFrame being deterministic:
    recomputing a partition must give the same rows in the same order (true for sources
    such as files, ranges and cached data; not after a non-deterministic shuffle or
    ``rand()`` -- cache or checkpoint such a DataFrame first). Adaptive query execution is
    turned off for the write's query so that the number of partitions planned is the
    number that runs. With ``acks=1``/``0`` the write is at-least-once.

    ``chunk_bytes``: Arrow input per ``send_batch`` call (memory per task is about twice
    that); ``batch_bytes``: the record batch size (capped by the topic's
    ``max.message.bytes``). Both must stay the same between attempts, which they do
    within one write.

    ``on_task_written(task, attempt)``, if given, runs in the executor after a task's rows
    were produced and acknowledged (transactional: prepared), before the task reports them (``task`` is the Spark
    partition, ``attempt`` Spark's attempt number); an exception it raises fails that task
    attempt, and Spark retries the task. It must be picklable (a function or closure).

    ``transactional_id="<prefix>"``: a transactional write, visible to read_committed
    readers exactly once whatever the DataFrame (deterministic or not) and however often a
    task runs (retries, speculation, stage retries, a task killed after writing). Every
    task attempt writes its rows in its own transaction (transactional id
    ``<prefix>/<partition>/<attempt>.<Spark's task attempt id>``) and leaves it prepared (KIP-939);
    the driver records its decision in the topic ``_kcoord-txn-writes``, commits the
    attempt Spark reported for each partition and aborts the others
    (:mod:`kcoord.txn_write`). The prefix names this one write: run again under the same
    prefix (after the driver died, say), it finishes or aborts what the earlier run left
    and writes nothing twice (``WriteResult.already_written``); use a new prefix for new
    data. Needs ``acks="all"`` and transaction coordinators.

    Returns a :class:`WriteResult`; raises if the topic does not exist or a column is
    missing or of the wrong type, before any task runs.
    """
    if value_format not in VALUE_FORMATS:
        raise ValueError(f"value_format must be one of {VALUE_FORMATS}, got {value_format!r}")
    if acks not in _ACKS:
        raise ValueError(f"acks must be 'all' (-1), 1 or 0, got {acks!r}")
    if not isinstance(cluster, ClusterClient):
        raise TypeError(f"write() needs a ClusterClient, got {type(cluster).__name__}")
    check_transactional_write(transactional_id, acks)
    topic_metadata(cluster, topic)  # UNKNOWN_TOPIC_OR_PARTITION with a hint, before any task
    projected = _project(df, key_col, value_col, headers_col, partition_col, value_format)
    spark = df.sparkSession
    result, txn, done = begin_write(cluster, topic, transactional_id, acks)
    if done:
        return result
    with _sql_conf(spark, {"spark.sql.adaptive.enabled": "false"}):
        n = projected._jdf.rdd().getNumPartitions()
        if n == 0:
            return result
        if txn is not None:
            fn = functools.partial(
                _write_task,
                ref=_tasks.ClusterRef.of(cluster),
                topic=topic,
                base_id=None,
                tasks=n,
                acks=acks,
                value_format=value_format,
                chunk_bytes=chunk_bytes,
                batch_bytes=batch_bytes,
                on_task_written=on_task_written,
                txn_prefix=transactional_id,
            )
            try:
                rows = projected.mapInArrow(fn, stats_schema()).collect()
            except BaseException:
                txn.abort_open()  # nothing was decided: no attempt's transaction may stay open
                raise
            for r in rows:
                result.attempts[r.task] = r.attempt
            return result_of_decision(result, txn.commit(prepared_from_rows(rows).values()), rows=rows)
        ids = allocate_producer_ids(cluster, n) if result.exactly_once else range(0)
        result.producer_ids = ids
        fn = functools.partial(
            _write_task,
            ref=_tasks.ClusterRef.of(cluster),
            topic=topic,
            base_id=ids.start if result.exactly_once else None,
            tasks=n,
            acks=acks,
            value_format=value_format,
            chunk_bytes=chunk_bytes,
            batch_bytes=batch_bytes,
            on_task_written=on_task_written,
        )
        rows = projected.mapInArrow(fn, stats_schema()).collect()
    for r in rows:
        result.attempts[r.task] = r.attempt
        result.add(r.task, r.partition, r.records, r.batches, r.duplicate_batches)
    return result.sort()


@functools.lru_cache(maxsize=8)
def _schema(ddl: str) -> Any:
    """``ddl`` parsed once: PySpark parses a DDL schema in the JVM, a round trip each time."""
    from pyspark.sql.types import _parse_datatype_string

    return _parse_datatype_string(ddl)


_STATS_DDL = (
    "task int, attempt int, producer_id long, partition int, records long, batches int, duplicate_batches int, "
    "transactional_id string, producer_epoch int"
)


def stats_schema(*extra_ddl: str) -> Any:
    """The schema of the rows a write task returns (one per partition it wrote), with
    ``extra_ddl`` columns after them; parsed once per shape."""
    return _schema(", ".join((_STATS_DDL, *extra_ddl)))


def check_transactional_write(transactional_id: str | None, acks: Any) -> None:
    """A transactional write's options: a valid prefix, and ``acks="all"``."""
    if transactional_id is None:
        return
    check_prefix(transactional_id)
    if acks not in ("all", -1, "-1"):
        raise ValueError(f"transactional_id needs acks='all' (a transaction's records must survive a leader failover), got acks={acks!r}")


def begin_write(cluster: Any, topic: str, transactional_id: str | None, acks: Any) -> tuple[WriteResult, "TransactionalWrite | None", bool]:
    """A write's result and, for a transactional write, its :class:`TransactionalWrite`
    started: ``done`` when an earlier run with this prefix already decided (the result is
    then complete and nothing is to be written)."""
    result = WriteResult(topic=topic, exactly_once=acks in ("all", -1, "-1"), transactional_id=transactional_id)
    if transactional_id is None:
        return result, None, False
    txn = TransactionalWrite(cluster, transactional_id, topic=topic)
    decision = txn.start()
    if decision is not None:
        result_of_decision(result, decision)
        return result, txn, True
    return result, txn, False


def result_of_decision(result: WriteResult, decision: Decision, rows: Any = None) -> WriteResult:
    """Fill ``result`` from a transactional write's decision (``rows``: the tasks' stats
    rows, for batch counts; without them the write happened in an earlier run)."""
    if rows is None:
        result.already_written = True
        for t in decision.tasks:
            if not t.written:
                result.add(t.task, -1, 0, 0, 0)
            for p, n in t.written.items():
                result.add(t.task, p, n, 0, 0)
    else:
        for r in rows:
            result.add(r.task, r.partition, r.records, r.batches, r.duplicate_batches)
    result.transactions = {t.task: t.transactional_id for t in decision.tasks}
    return result.sort()


# ------------------------------------------------------------------------------------------
# read
# ------------------------------------------------------------------------------------------
def _read_task(
    batches: Iterator[pa.RecordBatch],
    *,
    ref: _tasks.ClusterRef,
    ranges: list[tuple[str, int, int, int]],
    max_bytes: int,
    timeout_s: float,
    isolation_level: int = 0,
) -> Iterator[pa.RecordBatch]:
    _tasks.drop_jars_from_sys_path()
    for batch in batches:
        for i in batch.column(0).to_pylist():
            topic, partition, start, end = ranges[i]
            yield from _tasks.read_range(ref, topic, partition, start, end, max_bytes=max_bytes, timeout_s=timeout_s, isolation_level=isolation_level)


def read(
    spark: "SparkSession",
    cluster: ClusterClient,
    topic: str,
    starting_offsets: Any = "earliest",
    ending_offsets: Any = "latest",
    min_partitions: int | None = None,
    *,
    max_fetch_bytes: int = _tasks.DEFAULT_FETCH_BYTES,
    timeout_s: float = 120.0,
    isolation_level: str | None = None,
    options: Mapping[str, Any] | None = None,
) -> "DataFrame":
    """Read ``topic`` as a DataFrame with exactly the schema of Spark's Kafka source:
    ``key binary, value binary, topic string, partition int, offset long, timestamp
    timestamp, timestampType int, headers array<struct<key string, value binary>>``.

    ``starting_offsets``: ``"earliest"`` (default), ``"latest"``, ``"group:<group_id>"``
    (the group's committed offsets; partitions it never committed start at earliest), or
    per partition as a dict/JSON string ``{"topic": {"0": 23, "1": -2}}`` (-2 earliest,
    -1 latest; partitions not named start at earliest). ``ending_offsets``: ``"latest"``
    (the high watermark now, default) or per partition likewise (-1 latest). An
    :class:`~kcoord.spark.offsets.OffsetPlan`'s ``starting``/``ending`` are accepted too.

    The offsets are resolved here, on the driver, so the DataFrame is a fixed snapshot:
    recomputing it reads the same records. One task per partition range, split further
    to reach ``min_partitions``. Tasks follow leader changes and never read above the
    high watermark. Raises KafkaError UNKNOWN_TOPIC_OR_PARTITION for a missing topic,
    KafkaError OFFSET_OUT_OF_RANGE (with the valid range) for offsets outside the log, and
    OffsetSpecError (a ValueError) for a spec that makes no sense.

    ``isolation_level``: ``"read_uncommitted"`` (default) or ``"read_committed"`` (also as
    Spark's Kafka source option, ``options={"kafka.isolation.level": "read_committed"}``):
    read committed, ``"latest"`` is the last stable offset (LSO), so the read stops before
    the first record of a transaction still open, and the records of aborted transactions
    are dropped (their offsets are missing from the result, as in Spark's Kafka source).
    An unknown level or option is a ValueError.
    """
    level = isolation_level_id(isolation_level, options)
    plan = plan_offsets(cluster, topic, starting_offsets, ending_offsets, min_partitions, isolation_level=ISOLATION_NAMES[level])
    return read_plan(spark, cluster, plan, max_fetch_bytes=max_fetch_bytes, timeout_s=timeout_s)


def read_plan(
    spark: "SparkSession",
    cluster: ClusterClient,
    plan: OffsetPlan,
    *,
    max_fetch_bytes: int = _tasks.DEFAULT_FETCH_BYTES,
    timeout_s: float = 120.0,
    tasks: int | None = None,
) -> "DataFrame":
    """The records of an already resolved :class:`OffsetPlan` as a DataFrame (see
    :func:`read`); lets a pipeline keep the plan it read, to commit its ``ending``. Read at
    the plan's ``isolation_level``. ``tasks``: how many Spark tasks (Spark partitions) read
    the ranges (default: one per range); fewer tasks each read consecutive ranges in turn,
    which saves a small read the fixed cost of a task per range (see :func:`read_tasks`)."""
    schema = kafka_schema()
    if not plan.ranges:
        return spark.createDataFrame([], schema)
    ranges = [(r.topic, r.partition, r.start, r.end) for r in plan.ranges]
    n = len(ranges)
    if tasks is not None and (not isinstance(tasks, int) or tasks < 1):
        raise ValueError(f"tasks must be a positive int or None, got {tasks!r}")
    fn = functools.partial(
        _read_task, ref=_tasks.ClusterRef.of(cluster), ranges=ranges, max_bytes=max_fetch_bytes, timeout_s=timeout_s, isolation_level=plan.isolation_level
    )
    return spark.range(0, n, 1, min(n, tasks or n)).mapInArrow(fn, schema)


#: Records a task of a small read is worth: below this many per range, ranges share tasks.
ROWS_PER_READ_TASK = 50_000


def read_tasks(rows: int, ranges: int, rows_per_task: int = ROWS_PER_READ_TASK) -> int:
    """Spark tasks for a read of ``rows`` records in ``ranges`` ranges: one per
    ``rows_per_task`` records, at least 1 and at most one per range. Each task has a fixed
    cost (scheduling, and for a streaming batch a transaction to open and prepare: 0.3-0.5 s
    on 2 cores), which a micro-batch of a few thousand records should pay once, not once
    per input partition."""
    return max(1, min(ranges, -(-rows // rows_per_task)))
