"""Planning a bulk write (:meth:`kcoord.client.producer.Producer.send_batch`).

A bulk write is cut into batches deterministically: the same input gives the same
partitions and the same batch boundaries, so a retried writer with the same producer
identity re-sends identical batches and the leaders deduplicate them. Here: the plan
(which records go to which partition, in which batches), the sealed batches built from it,
and the per-partition summary (:class:`PartitionWrite`) send_batch returns. Per-record work
is done by numpy or C-level list operations.
"""

from __future__ import annotations

import time
from operator import itemgetter
from typing import Any, Callable, NamedTuple, Sequence

from ...protocol.errors import ErrorCode, KafkaError
from . import partitioner as _part
from .accumulator import TopicQueue
from .batch import RECORD_OVERHEAD, ProducerBatch, headers_size, split_batches_array, split_uniform

_monotonic = time.monotonic

Plan = list[tuple[int, list[tuple[int, int]], Callable[[Sequence], list]]]


class PartitionWrite(NamedTuple):
    """What :meth:`Producer.send_batch` wrote to one partition.

    ``first_offset``/``last_offset`` are -1 when unknown: with ``acks=0``, or when every
    batch was written by an earlier attempt of a retried bulk write and not sent again
    (the leader held it committed, beyond its dedup window of five batches)."""

    partition: int
    count: int
    batches: int
    first_offset: int
    last_offset: int
    duplicate_batches: int


def plan_bulk(
    t: TopicQueue,
    values: Sequence,
    keys: Sequence | None,
    headers: Sequence | None,
    partition: int | None,
    partitions: Sequence[int] | None,
    batch_size: int | None,
    *,
    partitioner: Any,
    seed: int,
    partition_for: Callable[[TopicQueue, bytes | None], int],
) -> Plan:
    """[(partition, [(start, end) batch ranges], column gatherer)] for a bulk write.

    The gatherer picks a partition's records out of a full column (in input order);
    ranges index into the gathered column. Pure and deterministic; per-record work is
    done by numpy or C-level list operations (a million keyed records plan in ~0.5 s).

    ``partitioner`` is the producer's (resolved) partitioner, ``seed`` where null-key
    chunks start, ``partition_for(t, key)`` the producer's per-record choice for a custom
    partitioner."""
    import numpy as np

    n = len(values)
    nparts = t.num_partitions
    limit = t.batch_limit if batch_size is None else max(1, min(batch_size, t.max_message_bytes))
    sizes = _record_sizes_array(values, keys, headers)
    uniform = int(sizes[0]) if n and bool((sizes == sizes[0]).all()) else -1
    too_big = int(sizes.max()) if n else 0
    if too_big > t.record_limit:
        raise KafkaError(
            ErrorCode.MESSAGE_TOO_LARGE, f"a record of ~{too_big} bytes does not fit max.message.bytes={t.max_message_bytes} of topic {t.name!r}"
        )

    def ranges(part_sizes: Any) -> list[tuple[int, int]]:
        if uniform >= 0:
            return split_uniform(len(part_sizes), uniform, limit)
        return split_batches_array(part_sizes, limit)

    def identity(col: Sequence) -> list:
        return col if isinstance(col, list) else list(col)

    if partition is not None:
        if type(partition) is not int or not 0 <= partition < nparts:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {t.name!r} has no partition {partition!r} (it has {nparts})")
        return [(partition, ranges(sizes), identity)]
    if partitions is not None:
        if len(partitions) != n:
            raise ValueError(f"partitions has {len(partitions)} entries for {n} values")
        bad = [p for p in set(partitions) if type(p) is not int or not 0 <= p < nparts]
        if bad:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {t.name!r} has no partition(s) {sorted(map(str, bad))} (it has {nparts})")
        assign = np.fromiter(partitions, dtype=np.int64, count=n)
    elif partitioner is _part.DEFAULT and keys is None:
        # No keys at all: chunks of the input in order, round-robin over partitions.
        per_part: dict[int, list[tuple[int, int]]] = {}
        for j, (s, e) in enumerate(ranges(sizes)):
            per_part.setdefault((seed + j) % nparts, []).append((s, e))
        return [(p, per_part[p], identity) for p in sorted(per_part)]
    elif partitioner is _part.DEFAULT:
        assert keys is not None
        assign = np.empty(n, dtype=np.int64)
        nulls = keys.count(None)
        if nulls == 0:
            assign[:] = (_part.murmur2_array(keys) & np.uint32(0x7FFFFFFF)) % nparts
        else:
            is_null = np.fromiter((k is None for k in keys), dtype=bool, count=n)
            keyed_idx = np.flatnonzero(~is_null)
            null_idx = np.flatnonzero(is_null)
            if len(keyed_idx):
                keyed_keys = _gatherer(keyed_idx.tolist())(keys)
                assign[keyed_idx] = (_part.murmur2_array(keyed_keys) & np.uint32(0x7FFFFFFF)) % nparts
            # Null keys: their own chunks of batch size, round-robin (as above).
            for j, (s, e) in enumerate(ranges(sizes[null_idx])):
                assign[null_idx[s:e]] = (seed + j) % nparts
    elif partitioner is _part.ROUND_ROBIN:
        assign = (np.arange(n, dtype=np.int64) + seed) % nparts
    else:
        assign = np.fromiter((partition_for(t, keys[i] if keys is not None else None) for i in range(n)), dtype=np.int64, count=n)
    # Group record indices by partition, keeping input order within each (stable sort).
    order = np.argsort(assign, kind="stable")
    sorted_parts = assign[order]
    plan = []
    for p in np.unique(sorted_parts).tolist():
        lo = int(np.searchsorted(sorted_parts, p, side="left"))
        hi = int(np.searchsorted(sorted_parts, p, side="right"))
        idx = order[lo:hi]
        plan.append((p, ranges(sizes[idx]), _gatherer(idx.tolist())))
    return plan


def build_bulk_batches(
    t: TopicQueue,
    plan: Plan,
    values: list,
    keys: list | None,
    headers: list | None,
    timestamps: Sequence[int] | None,
    default_ts: int,
) -> tuple[list[ProducerBatch], dict[int, list[ProducerBatch]]]:
    """The sealed batches of ``plan`` in plan order, and per partition. Records without a
    timestamp get ``default_ts``."""
    batches: list[ProducerBatch] = []
    created = _monotonic()
    by_partition: dict[int, list[ProducerBatch]] = {}
    for p, idx_ranges, gather in plan:
        v = gather(values)
        k = gather(keys) if keys is not None else None
        h = gather(headers) if headers is not None else None
        ts_col = gather(timestamps) if timestamps is not None else None
        for s, e in idx_ranges:
            b = ProducerBatch(t.name, p, created, sealed=True)
            b.values = v[s:e]
            b.keys = k[s:e] if k is not None else None
            b.headers = h[s:e] if h is not None else None
            b.timestamps = ts_col[s:e] if ts_col is not None else [default_ts] * (e - s)
            batches.append(b)
            by_partition.setdefault(p, []).append(b)
    return batches, by_partition


def partition_writes(by_partition: dict[int, list[ProducerBatch]]) -> dict[int, PartitionWrite]:
    """What the acknowledged batches of a bulk write wrote to each partition."""
    out: dict[int, PartitionWrite] = {}
    for p, bs in sorted(by_partition.items()):
        first_offset = bs[0].base_offset
        last = bs[-1]
        last_offset = last.base_offset + len(last) - 1 if last.base_offset >= 0 else -1
        out[p] = PartitionWrite(p, sum(len(b) for b in bs), len(bs), first_offset, last_offset, sum(1 for b in bs if b.duplicate))
    return out


def _lengths(column: Sequence) -> Any:
    """len() of every bytes/None entry (None counts 0) as a numpy int64 array."""
    import numpy as np

    n = len(column)
    if column.count(None) == 0:
        return np.fromiter(map(len, column), dtype=np.int64, count=n)
    return np.fromiter((0 if x is None else len(x) for x in column), dtype=np.int64, count=n)


def _record_sizes_array(values: Sequence, keys: Sequence | None, headers: Sequence | None) -> Any:
    """:func:`kcoord.client.producer.batch.record_size` of every record, vectorised."""
    import numpy as np

    sizes = _lengths(values) + RECORD_OVERHEAD
    if keys is not None:
        sizes += _lengths(keys)
    if headers is not None:
        sizes += np.fromiter((headers_size(h) for h in headers), dtype=np.int64, count=len(headers))
    return sizes


def _gatherer(idx: list[int]) -> Callable[[Sequence], list]:
    """A function picking ``idx`` out of a column, as a list (C-speed via itemgetter)."""
    if len(idx) == 1:
        i = idx[0]
        return lambda col: [col[i]]
    get = itemgetter(*idx)
    return lambda col: list(get(col))
