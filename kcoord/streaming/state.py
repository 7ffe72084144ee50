"""State across micro-batches: ``update_state(key, rows, state) -> (output, new state)`` per
key, kept in a compacted changelog topic written in the batch's own transactions.

Layout: the changelog ``{name}-state-changelog`` has ``P`` partitions, fixed when it is
created; key ``k`` lives in partition ``murmur2(encode_key(k)) % P`` (the producer's
partitioner) for the life of the query. A batch groups its rows by that partition -- one
task per changelog partition that has rows -- and each task

1. loads its partition's state, read committed up to the end the driver gave it (cached
   per process by offset: a task reads only what was committed since it last ran there);
2. calls ``update_state`` once per key, with the key's rows in input order (by source
   partition and offset);
3. writes the outputs to the sink and each changed key's new state (None: a tombstone, the
   key's state is removed) to its changelog partition, in one transaction left prepared.

So output, state and input offsets commit through the batch's one decision
(:mod:`kcoord.streaming.protocol`): after any kill the state is exactly that of the
batches committed. The end the driver hands the tasks is the changelog's high watermark
once its last stable offset has reached it (:func:`kcoord.txn_write.stable_ends`), so a task
never reads state without the previous batch's commit markers.

State values are msgpack values (None, bool, int, float, str, bytes, lists, dicts; numpy
scalars and arrays are converted; tuples come back as lists): a state the changelog cannot
hold stops the query with a TypeError naming the key.

Engine-neutral (pandas and Arrow, no Spark or Ray Data import).
"""

from __future__ import annotations

import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import msgpack
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..client.producer.partitioner import murmur2_many, partition_for_key
from ..client.types import TopicPartition
from ..protocol.errors import ErrorCode, KafkaError
from ..txn_write import STATE_ONLY, PreparedTask, prepare_task, stable_ends

if TYPE_CHECKING:
    import pandas as pd

    from ..client.cluster import ClusterClient

#: The column a state query's rows carry their changelog partition in between the engine's
#: shuffle and the task (dropped before ``update_state`` sees the rows).
PARTITION_COLUMN = "__kcoord_state_partition"
#: The source columns that give a key's rows their input order.
ORDER_COLUMNS = ("topic", "partition", "offset")

UpdateState = Callable[[Any, "pd.DataFrame", Any], "tuple[pd.DataFrame | None, Any]"]


def changelog_topic(name: str) -> str:
    """The changelog of query ``name`` (Kafka Streams names its ``<app>-<store>-changelog``)."""
    return f"{name}-state-changelog"


@dataclass(frozen=True)
class StateSpec:
    """A stateful query's state: ``update(key, rows, state)`` per value of column ``key``,
    in query ``query``'s changelog of ``partitions`` partitions."""

    query: str
    key: str
    update: UpdateState
    partitions: int

    @property
    def topic(self) -> str:
        return changelog_topic(self.query)


# -- encodings -----------------------------------------------------------------------------
def _plain(value: Any) -> Any:
    """A numpy scalar or array as its Python value (msgpack's ``default`` hook)."""
    item = getattr(value, "item", None)
    if item is not None and getattr(value, "shape", None) == ():
        return item()
    tolist = getattr(value, "tolist", None)
    if tolist is not None:
        return tolist()
    raise TypeError(f"{type(value).__name__} is not a msgpack value")


def plain_key(key: Any) -> Any:
    """A group key as pandas hands it (numpy scalars, NaN for a null) as a Python value."""
    if isinstance(key, float) and math.isnan(key):
        return None
    if hasattr(key, "item") and getattr(key, "shape", None) == ():
        key = key.item()
        if isinstance(key, float) and math.isnan(key):
            return None
    return key


def encode_key(key: Any) -> bytes:
    return msgpack.packb(plain_key(key), use_bin_type=True, default=_plain)


def encode_state(key: Any, state: Any) -> bytes:
    try:
        return msgpack.packb(state, use_bin_type=True, default=_plain)
    except (TypeError, ValueError, OverflowError) as exc:
        raise TypeError(
            f"update_state returned a state for key {plain_key(key)!r} that the changelog cannot hold ({exc}): "
            f"a state must be a msgpack value (None, bool, int, float, str, bytes, list, dict)"
        ) from None


def decode_state(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def partitions_of(keys: Any, partitions: int) -> list[int]:
    """The changelog partition of every key in ``keys`` (an iterable, e.g. a pandas Series)."""
    return [(h & 0x7FFFFFFF) % partitions for h in murmur2_many([encode_key(k) for k in keys])]


def _column_partitions(column: pa.Array | pa.ChunkedArray, partitions: int) -> pa.Array:
    """:func:`partitions_of` a column, hashing each distinct key once (a batch repeats its
    keys; the per-row work is one numpy gather)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    try:
        encoded = pc.dictionary_encode(column, null_encoding="encode")
    except pa.ArrowNotImplementedError:  # nested key types: row by row
        return pa.array(partitions_of(column.to_pylist(), partitions), pa.int32())
    distinct = np.array(partitions_of(encoded.dictionary.to_pylist(), partitions), dtype=np.int32)
    return pa.array(distinct[encoded.indices.to_numpy(zero_copy_only=False)], pa.int32())


def with_partitions(batch: pa.RecordBatch | pa.Table, key: str, partitions: int) -> pa.RecordBatch | pa.Table:
    """``batch`` with :data:`PARTITION_COLUMN`: each row's changelog partition (the engines
    shuffle on it, so that one task holds every row of a changelog partition)."""
    if key not in batch.schema.names:
        raise KeyError(f"state_key={key!r}: the rows have no column {key!r}; their columns are {batch.schema.names}")
    column = _column_partitions(batch.column(key), partitions)
    if isinstance(batch, pa.Table):
        return batch.append_column(PARTITION_COLUMN, column)
    return pa.RecordBatch.from_arrays(list(batch.columns) + [column], names=list(batch.schema.names) + [PARTITION_COLUMN])


# -- the changelog, on the driver -----------------------------------------------------------
def ensure_changelog(cluster: "ClusterClient", name: str, partitions: int | None, default_partitions: int, timeout_s: float = 120.0) -> int:
    """Create query ``name``'s changelog if it does not exist (``partitions``, else
    ``default_partitions``; compacted); returns its partition count. An existing changelog
    keeps its count: a different ``partitions`` is a ValueError (keys would move)."""
    from ..client.admin import Admin

    topic = changelog_topic(name)
    try:
        have = len(cluster.topic(topic, refresh=True).partitions)
    except KafkaError as exc:
        if exc.code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise
        admin = Admin(cluster)
        rf = admin.default_replication_factor()
        want = partitions or max(1, default_partitions)
        try:
            admin.create_topic(
                topic, partitions=want, replication_factor=rf,
                config={"cleanup.policy": "compact", "min.insync.replicas": min(2, rf)}, timeout_ms=int(timeout_s * 1000),
            )
        except KafkaError as exc2:
            if exc2.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise
            admin.wait_for_leaders(topic, timeout_ms=int(timeout_s * 1000))
        have = len(cluster.topic(topic, refresh=True).partitions)
    if partitions is not None and partitions != have:
        raise ValueError(
            f"state_partitions={partitions}, but query {name!r}'s changelog {topic!r} has {have} partitions: a key's state lives in "
            f"one partition for the life of the query; leave state_partitions out, or start the query under a new name"
        )
    return have


def changelog_ends(cluster: "ClusterClient", name: str, partitions: int, timeout_s: float = 120.0) -> dict[int, int]:
    """Where each changelog partition's committed state ends now (see the module doc)."""
    topic = changelog_topic(name)
    ends = stable_ends(cluster, [TopicPartition(topic, p) for p in range(partitions)], timeout_s)
    return {tp.partition: end for tp, end in ends.items()}


# -- the task side ---------------------------------------------------------------------------
@dataclass
class _Loaded:
    next_offset: int
    states: dict[bytes, bytes]  # encoded key -> encoded state: decoded per use, so a user
    # mutating the state it was handed cannot change the cache


_cache: dict[tuple[str, str, str, int], _Loaded] = {}
_cache_lock = threading.Lock()


def load_partition(client: "ClusterClient", topic: str, partition: int, end: int, timeout_s: float = 120.0) -> dict[bytes, bytes]:
    """The committed state of one changelog partition up to offset ``end``: what this
    process read before (cached by offset) plus what was committed since."""
    from ..client.consumer import Consumer

    key = (client.name, client.namespace, topic, partition)
    with _cache_lock:
        cached = _cache.get(key)
    if cached is None or cached.next_offset > end:  # a first read, or the topic was recreated
        cached = _Loaded(0, {})
    states = dict(cached.states)
    if cached.next_offset < end:
        tp = TopicPartition(topic, partition)
        deadline = time.monotonic() + timeout_s
        with Consumer(cluster=client, enable_auto_commit=False, auto_offset_reset="earliest", isolation_level="read_committed") as consumer:
            consumer.assign([tp])
            consumer.seek(tp, cached.next_offset)
            while consumer.position(tp) < end:
                if time.monotonic() > deadline:
                    raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"loading state from {topic}-{partition} up to offset {end} took over {timeout_s:.0f} s")
                for records in consumer.poll(timeout_ms=200).values():
                    for r in records:
                        if r.offset >= end or r.key is None:
                            continue
                        if r.value is None:
                            states.pop(r.key, None)
                        else:
                            states[r.key] = r.value
    with _cache_lock:
        _cache[key] = _Loaded(end, states)
    return states


def _ordered(rows: "pd.DataFrame") -> "pd.DataFrame":
    order = [c for c in ORDER_COLUMNS if c in rows.columns]
    return rows.sort_values(order, kind="stable") if order else rows


def _output_table(frames: list["pd.DataFrame"], sink_columns: tuple[str, ...]) -> pa.Table | None:
    if not frames:
        return None
    import pandas as pd

    out = pd.concat(frames, ignore_index=True)
    names = list(out.columns)
    unknown = [n for n in names if n not in sink_columns]
    if "value" not in names or unknown:
        problem = "has no 'value' column" if "value" not in names else f"has columns the Kafka sink does not take: {unknown}"
        raise ValueError(f"update_state's output {problem}; its columns are {names}. The sink takes value (required, string or binary), key, headers and partition")
    keep = [c for c in ("key", "value", "headers", "partition") if c in names]
    return pa.Table.from_pandas(out[keep], preserve_index=False)


def apply_updates(
    spec: StateSpec, partition: int, rows: "pd.DataFrame", states: dict[bytes, bytes], sink_columns: tuple[str, ...]
) -> tuple[pa.Table | None, dict[bytes, bytes | None]]:
    """``spec.update`` once per key of ``rows`` (one changelog partition's, in input order)
    against ``states`` (encoded, as :func:`load_partition` returns them; not modified):
    the output table (None: no output) and every key whose encoded state changed (None: removed)."""
    rows = _ordered(rows.drop(columns=[PARTITION_COLUMN], errors="ignore"))
    outputs: list["pd.DataFrame"] = []
    changed: dict[bytes, bytes | None] = {}
    for key, group in rows.groupby(spec.key, sort=False, dropna=False):
        key = plain_key(key)
        kb = encode_key(key)
        if partition_for_key(kb, spec.partitions) != partition:
            raise AssertionError(f"key {key!r} reached the task of changelog partition {partition}, not its own")
        old = states.get(kb)
        result = spec.update(key, group.reset_index(drop=True), decode_state(old) if old is not None else None)
        if not isinstance(result, tuple) or len(result) != 2:
            raise TypeError(f"update_state must return (output DataFrame or None, new state or None), got {type(result).__name__} for key {key!r}")
        out, new = result
        if out is not None:
            if not hasattr(out, "columns"):
                raise TypeError(f"update_state's output for key {key!r} must be a pandas DataFrame or None, got {type(out).__name__}")
            if len(out):
                outputs.append(out)
        encoded = encode_state(key, new) if new is not None else None
        if encoded != old:
            changed[kb] = encoded
    return _output_table(outputs, sink_columns), changed


@dataclass(frozen=True)
class StateCounts:
    """What a batch did to the state (PySpark's ``stateOperators`` figures): ``totals``,
    the keys each changelog partition whose task ran holds after it (``(partition,
    keys)``); ``updated`` keys whose state it set; ``removed`` keys it removed."""

    totals: tuple[tuple[int, int], ...]
    updated: int
    removed: int

    @property
    def partitions(self) -> tuple[int, ...]:
        return tuple(p for p, _ in self.totals)

    def __add__(self, other: "StateCounts") -> "StateCounts":
        return StateCounts(self.totals + other.totals, self.updated + other.updated, self.removed + other.removed)


def count_changes(states: dict[bytes, bytes], changed: dict[bytes, bytes | None], partition: int) -> StateCounts:
    """:class:`StateCounts` of one partition: its keys ``states`` before the batch and the
    batch's ``changed`` (as :func:`apply_updates` returns it; None: removed)."""
    removed = sum(1 for k, v in changed.items() if v is None and k in states)
    added = sum(1 for k, v in changed.items() if v is not None and k not in states)
    return StateCounts(((partition, len(states) + added - removed),), sum(1 for v in changed.values() if v is not None), removed)


#: Columns a state task adds to its write statistics rows: its partition's StateCounts.
COUNT_COLUMNS = ("state_partition", "state_total", "state_updated", "state_removed")
COUNT_DDL = "state_partition int, state_total long, state_updated long, state_removed long"


def with_counts(stats: "pd.DataFrame", counts: StateCounts) -> "pd.DataFrame":
    """A state task's statistics rows (one per sink partition written) with its counts."""
    ((partition, total),) = counts.totals
    return stats.assign(state_partition=partition, state_total=total, state_updated=counts.updated, state_removed=counts.removed)


def counts_of_rows(rows: Any) -> StateCounts:
    """The batch's :class:`StateCounts` from its state tasks' rows (:func:`with_counts`;
    a task's counts repeat on each of its rows)."""
    per_partition = {int(r.state_partition): StateCounts(((int(r.state_partition), int(r.state_total)),), int(r.state_updated), int(r.state_removed)) for r in rows}
    return sum((per_partition[p] for p in sorted(per_partition)), StateCounts((), 0, 0))


def update_partition(
    client: "ClusterClient",
    spec: StateSpec,
    *,
    transactional_id: str,
    partition: int,
    rows: "pd.DataFrame",
    end: int,
    sink_columns: tuple[str, ...],
    produce: Callable[[Any, pa.Table], dict[int, list[int]]],
) -> tuple[PreparedTask, dict[int, list[int]], StateCounts]:
    """Run in a task: the batch's rows of changelog partition ``partition``, whose state
    ends at ``end`` (see the module doc). ``produce(producer, table)`` writes the output
    table to the sink and returns ``{partition: [records, batches, duplicate batches]}``.
    Returns the prepared transaction, the sink statistics (``{STATE_ONLY: [0, 0, 0]}`` when
    only state changed) and the partition's :class:`StateCounts`."""
    states = load_partition(client, spec.topic, partition, end)
    table, changed = apply_updates(spec, partition, rows, states, sink_columns)

    def write(producer: Any) -> dict[int, list[int]]:
        # the state goes out on a side thread while the output is written: both are in
        # flight together (one round of replication, not two)
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="kcoord-state") as side:
            state_write = side.submit(producer.send_batch, spec.topic, keys=list(changed), values=list(changed.values()), partition=partition) if changed else None
            stats = produce(producer, table) if table is not None and table.num_rows else {}
            if state_write is not None:
                state_write.result()
        if changed and not stats:
            stats = {STATE_ONLY: [0, 0, 0]}
        return stats

    prepared, stats = prepare_task(client, transactional_id, partition, write, linger_ms=0)
    return prepared, stats, count_changes(states, changed, partition)


__all__ = [
    "ORDER_COLUMNS", "PARTITION_COLUMN", "StateSpec", "apply_updates", "changelog_ends", "changelog_topic", "decode_state", "encode_key", "encode_state",
    "ensure_changelog", "load_partition", "partitions_of", "plain_key", "update_partition", "with_partitions",
]
