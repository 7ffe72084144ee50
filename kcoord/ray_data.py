"""Ray Data for kcoord: read a topic as a ``ray.data.Dataset``, write a Dataset to a topic.

    from kcoord import ray_data as krd
    ds = krd.read(cluster, "events", starting_offsets="group:g1")   # Spark Kafka columns
    krd.write(ds.map_batches(process), cluster, "out", key_col="key", value_col="value")

Same columns, offset specs and guarantees as :mod:`kcoord.spark` (they share
:mod:`kcoord.spark.offsets` and :mod:`kcoord.spark.tasks`; no Spark is needed): a read is a
snapshot resolved on the driver, one read task per offset range; a write is exactly once
per dataset block under Ray task retries, because block i is produced as producer
``base + i`` of a block of producer ids with deterministic batches.
"""

from __future__ import annotations

from .extras import require

require("data", "kcoord.ray_data", "pyarrow", "ray.data")

import functools
import uuid
from typing import Any, Callable, Iterable, Mapping, NamedTuple

import pyarrow as pa
import ray

from .client.cluster import ClusterClient
from .protocol.errors import KafkaError
from .spark import tasks as _tasks
from .spark.frames import VALUE_FORMATS, WriteResult, allocate_producer_ids
from .spark.frames import ISOLATION_NAMES, begin_write, check_transactional_write, result_of_decision
from .txn_write import PreparedTask, prepare_task, prepared_from_rows, task_transactional_id
from .spark.offsets import OffsetPlan, isolation_level_id, plan_offsets, topic_metadata
from .streaming.protocol import DEFAULT_MAX_RECORDS_PER_TRIGGER

__all__ = ["read", "read_plan", "stream", "write", "ARROW_SCHEMA"]

ARROW_SCHEMA = _tasks.ARROW_SCHEMA


class _StatsRow(NamedTuple):
    """One block's writes to one partition, shaped like a Spark write's stats row."""

    task: int
    partition: int
    records: int
    batches: int
    duplicate_batches: int


def read(
    cluster: ClusterClient,
    topic: str,
    starting_offsets: Any = "earliest",
    ending_offsets: Any = "latest",
    min_partitions: int | None = None,
    *,
    max_fetch_bytes: int = _tasks.DEFAULT_FETCH_BYTES,
    timeout_s: float = 120.0,
    ray_remote_args: dict[str, Any] | None = None,
    isolation_level: str | None = None,
    options: Mapping[str, Any] | None = None,
) -> "ray.data.Dataset":
    """``topic`` as a Dataset with the columns of Spark's Kafka source (``key``, ``value``,
    ``topic``, ``partition``, ``offset``, ``timestamp`` (UTC), ``timestampType``,
    ``headers``); offsets and ``isolation_level`` (or ``options={"kafka.isolation.level":
    ...}``) as in :func:`kcoord.spark.read`. Lazy: the records are fetched when the Dataset
    executes, one read task per range."""
    level = isolation_level_id(isolation_level, options)
    plan = plan_offsets(cluster, topic, starting_offsets, ending_offsets, min_partitions, isolation_level=ISOLATION_NAMES[level])
    return read_plan(cluster, plan, max_fetch_bytes=max_fetch_bytes, timeout_s=timeout_s, ray_remote_args=ray_remote_args)


class _RangeDatasource(ray.data.Datasource):
    """One ReadTask per offset range of a resolved plan."""

    def __init__(self, ref: _tasks.ClusterRef, plan: OffsetPlan, max_bytes: int, timeout_s: float) -> None:
        self._ref = ref
        self._plan = plan
        self._max_bytes = max_bytes
        self._timeout_s = timeout_s

    def estimate_inmemory_data_size(self) -> int | None:
        return None

    def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None, data_context: Any = None) -> list:
        from ray.data import ReadTask
        from ray.data.block import BlockMetadata

        out = []
        for r in self._plan.ranges:
            def read_fn(
                r: Any = r, ref: _tasks.ClusterRef = self._ref, max_bytes: int = self._max_bytes, timeout_s: float = self._timeout_s, level: int = self._plan.isolation_level
            ) -> Iterable[pa.Table]:
                batches = list(_tasks.read_range(ref, r.topic, r.partition, r.start, r.end, max_bytes=max_bytes, timeout_s=timeout_s, isolation_level=level))
                yield pa.Table.from_batches(batches, schema=ARROW_SCHEMA)

            out.append(ReadTask(read_fn, BlockMetadata(num_rows=r.size, size_bytes=None, exec_stats=None, input_files=None), schema=ARROW_SCHEMA))
        return out


def read_plan(
    cluster: ClusterClient,
    plan: OffsetPlan,
    *,
    max_fetch_bytes: int = _tasks.DEFAULT_FETCH_BYTES,
    timeout_s: float = 120.0,
    ray_remote_args: dict[str, Any] | None = None,
) -> "ray.data.Dataset":
    """The records of a resolved :class:`~kcoord.spark.offsets.OffsetPlan` as a Dataset."""
    if not plan.ranges:
        return ray.data.from_arrow(ARROW_SCHEMA.empty_table())
    source = _RangeDatasource(_tasks.ClusterRef.of(cluster), plan, max_fetch_bytes, timeout_s)
    return ray.data.read_datasource(source, ray_remote_args=ray_remote_args or {})


@ray.remote(num_cpus=0.5, max_retries=3, retry_exceptions=[KafkaError])
def _write_block(
    block: pa.Table,
    index: int,
    ref: _tasks.ClusterRef,
    topic: str,
    producer_id: int | None,
    acks: Any,
    value_format: str,
    columns: dict[str, str],
    on_block_written: Callable[[int], Any] | None,
    txn_prefix: str | None = None,
    attempt_tag: str = "",
) -> tuple[int, int, dict[int, list[int]], PreparedTask | None]:
    renamed = {}
    for target, source in columns.items():
        renamed[target] = block.column(source)
    table = pa.table(renamed)
    if txn_prefix is not None:
        # Every attempt in its own transaction, left prepared for the driver (kcoord.txn_write);
        # Ray does not tell a task its attempt number, so a random one names the attempt.
        # (attempt_tag: a streaming driver's epoch, kcoord.streaming)
        tid = task_transactional_id(txn_prefix, index, attempt_tag + uuid.uuid4().hex[:12])

        def produce(producer: Any) -> dict[int, list[int]]:
            return _tasks.produce_batches(ref, topic, table.to_batches(), producer_id=None, value_format=value_format, producer=producer)

        prepared, stats = prepare_task(ref.client(), tid, index, produce, linger_ms=0, batch_size=_tasks.DEFAULT_BATCH_BYTES)
        if on_block_written is not None:
            on_block_written(index)
        return index, prepared.producer_id, stats, prepared
    stats = _tasks.produce_batches(ref, topic, table.to_batches(), producer_id=producer_id, acks=acks, value_format=value_format)
    if on_block_written is not None:
        on_block_written(index)
    return index, producer_id if producer_id is not None else -1, stats, None


def write(
    ds: "ray.data.Dataset",
    cluster: ClusterClient,
    topic: str,
    key_col: str | None = None,
    value_col: str = "value",
    headers_col: str | None = None,
    partition_col: str | None = None,
    acks: str | int = "all",
    *,
    value_format: str = "json",
    on_block_written: Callable[[int], Any] | None = None,
    transactional_id: str | None = None,
) -> WriteResult:
    """Produce every row of ``ds`` to ``topic``, one Ray task per dataset block; columns and
    value encodings as in :func:`kcoord.spark.write`.

    Exactly once under Ray task retries (``acks="all"``): the dataset is materialized, so
    its blocks are fixed; block i is produced as producer ``base + i`` at epoch 0 with
    deterministic batches, so a retried task's re-sent batches are dropped by the leaders.
    ``WriteResult.tasks`` counts records per block.

    ``on_block_written(index)``, if given, runs in the task after block ``index`` was
    produced and acknowledged; a KafkaError it raises fails the task, which Ray retries (up
    to 3 times). It must be picklable (a function or closure).

    ``transactional_id="<prefix>"``: a transactional write as in :func:`kcoord.spark.write`
    (every block attempt in its own prepared transaction ``<prefix>/<block>/<random>``; the
    driver commits the one per block whose result it got and aborts the others; a re-run
    under the same prefix writes nothing twice). Needs ``acks="all"``.
    """
    from .spark.frames import ColumnError

    if value_format not in VALUE_FORMATS:
        raise ValueError(f"value_format must be one of {VALUE_FORMATS}, got {value_format!r}")
    check_transactional_write(transactional_id, acks)
    topic_metadata(cluster, topic)
    schema = ds.schema()
    names = list(schema.names) if schema is not None else []
    columns: dict[str, str] = {}
    for target, name, what in (("value", value_col, "value_col"), ("key", key_col, "key_col"), ("headers", headers_col, "headers_col"), ("partition", partition_col, "partition_col")):
        if name is None:
            continue
        if name not in names:
            raise ColumnError(f"{what}={name!r}: the dataset has no column {name!r}; its columns are {names}")
        columns[target] = name
    result, txn, done = begin_write(cluster, topic, transactional_id, acks)
    if done:
        return result
    refs = ds.to_arrow_refs()  # materializes: the blocks, and their order, are now fixed
    if not refs:
        return result
    if txn is not None:
        ref = _tasks.ClusterRef.of(cluster)
        futures = [_write_block.remote(block, i, ref, topic, None, acks, value_format, columns, on_block_written, transactional_id) for i, block in enumerate(refs)]
        try:
            answers = ray.get(futures)
        except BaseException:
            txn.abort_open()  # nothing was decided: no attempt's transaction may stay open
            raise
        rows = [
            _StatsRow(index, p, records, batches, dups)
            for index, _, stats, _ in answers
            for p, (records, batches, dups) in (stats.items() or [(-1, (0, 0, 0))])
        ]
        return result_of_decision(result, txn.commit(prepared for *_, prepared in answers), rows=rows)
    ids = allocate_producer_ids(cluster, len(refs)) if result.exactly_once else range(0)
    result.producer_ids = ids
    ref = _tasks.ClusterRef.of(cluster)
    futures = [
        _write_block.remote(block, i, ref, topic, ids.start + i if result.exactly_once else None, acks, value_format, columns, on_block_written)
        for i, block in enumerate(refs)
    ]
    for index, _, stats, _ in ray.get(futures):
        for p, (records, batches, dups) in stats.items():
            result.add(index, p, records, batches, dups)
    return result.sort()


# ------------------------------------------------------------------------------------------
# streaming (kcoord.streaming)
# ------------------------------------------------------------------------------------------
def _state_group(
    rows: Any, *, ref: _tasks.ClusterRef, spec: Any, prefix: str, attempt_tag: str, ends: dict[int, int], sink: str, value_format: str
) -> Any:
    """One changelog partition's rows of a batch (``map_groups``), in the task's own
    prepared transaction (a random attempt name: Ray does not number attempts); returns its
    write statistics."""
    import pandas as pd

    from .spark.stream import SINK_COLUMNS
    from .streaming import state as S

    if not len(rows):
        return pd.DataFrame({c: [] for c in _tasks.WRITE_STATS_SCHEMA.names + list(S.COUNT_COLUMNS)})
    partition = int(rows[S.PARTITION_COLUMN].iloc[0])
    tid = task_transactional_id(prefix, partition, attempt_tag + uuid.uuid4().hex[:12])

    def produce(producer: Any, table: pa.Table) -> dict[int, list[int]]:
        return _tasks.produce_batches(ref, sink, table.to_batches(), producer_id=None, value_format=value_format, producer=producer)

    prepared, stats, counts = S.update_partition(
        ref.client(), spec, transactional_id=tid, partition=partition, rows=rows, end=ends[partition], sink_columns=SINK_COLUMNS, produce=produce
    )
    return S.with_counts(_tasks.stats_batch(partition, 0, prepared.producer_id, stats, tid, prepared.epoch).to_pandas(), counts)


class _RayDataEngine:
    """Runs a streaming batch on Ray Data: read the plan's ranges (one read task per input
    partition, read committed), ``transform(ds, batch_id)``, then one prepared
    transaction per output block; with state, one per changelog partition with rows
    (:mod:`kcoord.streaming`)."""

    def __init__(self, cluster: ClusterClient, sink: str | None, transform: Any, foreach_batch: Any, value_format: str, state: Any = None) -> None:
        self.cluster = cluster
        self.sink = sink
        self.transform = transform
        self.foreach_batch = foreach_batch
        self.value_format = value_format
        self.state = state

    def _run_state(self, plan: Any, ds: "ray.data.Dataset", attempt_tag: str) -> tuple[list[PreparedTask], int, Any]:
        import types

        from .spark.frames import ColumnError
        from .streaming import state as S

        spec = self.state
        ends = S.changelog_ends(self.cluster, spec.query, spec.partitions)
        names = list(ds.schema().names)
        if spec.key not in names:
            raise ColumnError(f"state_key={spec.key!r}: the rows have no column {spec.key!r}; their columns are {names}")
        keyed = ds.map_batches(S.with_partitions, fn_kwargs={"key": spec.key, "partitions": spec.partitions}, batch_format="pyarrow")
        fn = functools.partial(
            _state_group, ref=_tasks.ClusterRef.of(self.cluster), spec=spec, prefix=plan.prefix, attempt_tag=attempt_tag,
            ends=ends, sink=self.sink, value_format=self.value_format,
        )
        rows = [types.SimpleNamespace(**r) for r in keyed.groupby(S.PARTITION_COLUMN).map_groups(fn, batch_format="pandas").take_all()]
        return list(prepared_from_rows(rows).values()), sum(r.records for r in rows if r.partition >= 0), S.counts_of_rows(rows)

    def run_tasks(self, plan: Any, attempt_tag: str) -> tuple[list[PreparedTask], int, Any]:
        from .protocol.replication import READ_COMMITTED
        from .spark.frames import ColumnError
        from .spark.stream import SINK_COLUMNS

        ranges = [r for r in plan.ranges if r.size]
        if not ranges:
            return [], 0, None
        ds = read_plan(self.cluster, OffsetPlan(ranges[0].topic, {}, {}, {}, {}, ranges=ranges, isolation_level=READ_COMMITTED))
        if self.foreach_batch is not None:
            self.foreach_batch(ds, plan.batch)
            return [], 0, None
        out = self.transform(ds, plan.batch) if self.transform is not None else ds
        if not isinstance(out, ray.data.Dataset):
            raise TypeError(f"transform must return a ray.data.Dataset, got {type(out).__name__}")
        if self.state is not None:
            return self._run_state(plan, out, attempt_tag)
        # Per-key order: blocks written by concurrent tasks would interleave in an output
        # partition, so the blocks are taken in order and written by one task.
        out.context.execution_options.preserve_order = True
        refs = out.to_arrow_refs()  # materialized: the blocks are fixed
        if len(refs) > 1:
            refs = [ray.put(pa.concat_tables(ray.get(refs)))]
        schema = out.schema()
        names = list(schema.names) if schema is not None else []
        unknown = [n for n in names if n not in SINK_COLUMNS]
        if refs and ("value" not in names or unknown):
            problem = "has no 'value' column" if "value" not in names else f"has columns the Kafka sink does not take: {unknown}"
            raise ColumnError(f"the transform's output {problem}; its columns are {names}. The sink takes value (required), key, headers, partition and topic")
        columns = {c: c for c in ("value", "key", "headers", "partition") if c in names}
        ref = _tasks.ClusterRef.of(self.cluster)
        futures = [
            _write_block.remote(block, i, ref, self.sink, None, "all", self.value_format, columns, None, plan.prefix, attempt_tag)
            for i, block in enumerate(refs)
        ]
        answers = ray.get(futures)
        prepared = [p for *_, p in answers if p is not None]
        return prepared, sum(p.records for p in prepared), None


def stream(
    cluster: ClusterClient,
    source: str | list[str] | None = None,
    *,
    group_id: str,
    transform: Callable[["ray.data.Dataset", int], "ray.data.Dataset"] | None = None,
    foreach_batch: Callable[["ray.data.Dataset", int], Any] | None = None,
    sink: str | None = None,
    trigger_interval_ms: int = 500,
    max_records_per_trigger: int | None = DEFAULT_MAX_RECORDS_PER_TRIGGER,
    starting_offsets: str = "latest",
    name: str | None = None,
    pattern: str | None = None,
    value_format: str = "json",
    update_state: Callable[[Any, Any, Any], tuple[Any, Any]] | None = None,
    state_key: str | None = None,
    state_partitions: int | None = None,
) -> Any:
    """:func:`kcoord.spark.stream` on Ray Data: ``transform(ds, batch_id)`` gets a Dataset
    with Spark's Kafka source columns and returns one with the sink's columns (``value``
    required; ``key``, ``headers``, ``partition`` optional), written to ``sink`` exactly
    once with the group's offsets; ``update_state``/``state_key``/``state_partitions`` keep
    state per key as there (``rows`` a pandas DataFrame). Returns a
    :class:`kcoord.streaming.query.StreamingQuery`."""
    from .spark.stream import start_query

    if value_format not in VALUE_FORMATS:
        raise ValueError(f"value_format must be one of {VALUE_FORMATS}, got {value_format!r}")
    return start_query(
        cluster, lambda state: _RayDataEngine(cluster, sink, transform, foreach_batch, value_format, state), source,
        group_id=group_id, sink=sink, transform=transform, foreach_batch=foreach_batch,
        trigger_interval_ms=trigger_interval_ms, max_records_per_trigger=max_records_per_trigger,
        starting_offsets=starting_offsets, name=name, pattern=pattern,
        update_state=update_state, state_key=state_key, state_partitions=state_partitions,
    )
