"""Log compaction (``cleanup.policy=compact``): keep the last record per key.

One pass of :func:`clean` over a :class:`~kcoord.log.Log`, Kafka's LogCleaner rules:

- Only *cleanable* segments are touched: sealed ones (never the active segment) that lie
  wholly below the high watermark and whose newest record is older than
  ``min.compaction.lag.ms``.
- The *dirty* section is what the last pass did not see (from the cleaner offset, a
  checkpoint of the log). A pass runs only when dirty bytes / cleanable bytes reach
  ``min.cleanable.dirty.ratio``.
- The pass maps each key of the dirty section to its last offset, then rewrites every
  cleanable segment keeping a record when no later record of its key exists below the
  cleanable end. A tombstone (null value) that is the last of its key is kept until
  ``delete.retention.ms`` after the first pass that covered it (KIP-534; the log's
  :class:`~kcoord.log.tombstone_clock.TombstoneClock`, not the record's timestamp, which
  its producer's clock wrote), so consumers that are reading see it; a pass is due once one
  has expired, however clean the log. Then it goes too -- except the log's last record, so
  that every offset below the log end
  still reads a batch at or after it (an idle roll can leave the active segment empty), and
  a tombstone after a value of its key that a batch kept whole (below) still holds: without
  it, that superseded value would be the key's last again. Before a segment losing
  tombstones is replaced, the log persists its *tombstone horizon* (one past the newest
  removed): a follower that fetches from below it while holding older records could hold a
  value such a tombstone deleted, so the leader has it start over.
  Records without a key are kept (a compacted topic refuses new ones).
- Offsets never change. A batch that loses records is rebuilt as one batch per run of kept
  records, each with its first record's base offset (so every batch stays contiguous inside,
  as every reader expects, and the log has gaps between batches instead). A segment may
  end early or be left empty.
- Every batch the producer state remembers (the last five of each producer, its dedup
  window) keeps its producer epoch and sequences (Kafka's RETAIN_EMPTY keeps the last
  one; a rebuilt replica must dedup a retry of any of the five): it stays whole while any
  of its records survives (superseded ones too; split into runs it would no longer match
  the retry, sim seed 3039), and losing all of them it stays as an empty batch with its
  header (``records.empty_batch``). A replica that rebuilds producer state from the
  compacted log (new, wiped or truncated) then answers the producer's retry of that batch
  as a duplicate instead of appending it after newer values. An empty batch that is no
  longer remembered goes. Recovery tells such a gap from lost data by the recovery
  point: the pass first makes every sealed segment durable (moving the recovery point to
  the active segment), and a gap before a segment below the recovery point can only be the
  cleaner's (fsynced data is not lost); above it a gap is still cut as before.
- Transactions: nothing at or past the first unstable offset is cleaned (the cleanable end
  is below the LSO, not only the HW), so every transaction in the cleaned segments has its
  outcome durable in the log. The data batches of aborted transactions (per the
  aborted-transaction index, walked as a read_committed consumer does:
  :class:`~kcoord.record.control.AbortedFilter`) are removed, but a batch of a producer's
  dedup window stays as an empty batch (above). Markers are kept whole. Committed
  transactional data is compacted like any other (Kafka's too: a compacted topic written
  only in transactions, such as a stateful query's changelog, must compact): its records
  supersede and are superseded, while aborted data supersedes nothing (the key map skips
  it, walking the index from the dirty section). The aborted-transaction index is
  left as it is: its entries stay true ranges, whatever of their data is gone. Kafka also
  removes markers once their transaction's data is gone and delete.retention.ms has
  passed; kcoord keeps them.
- Each segment is replaced crash-safely (``Log.replace_segment``): a crash at any point
  reopens either the old or the new segment.

A pass works through :class:`CompactableLog`, the part of :class:`~kcoord.log.Log` made for
the cleaner; :meth:`Log.clean <kcoord.log.Log.clean>` runs it (and handles I/O errors).

Replicas clean independently (Kafka does the same): their logs can differ in which
superseded records and expired tombstones are still there, never in the last value of a key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence

from ..record import CONTROL_BIT, TRANSACTIONAL_BIT, BatchHeader, DecodedBatch, decode_batch, empty_batch, read_header, rebuild_batch
from .config import LogConfig
from ..record.control import AbortedFilter
from .producer_state import ProducerStateManager
from .segment import Segment
from .tombstone_clock import TombstoneClock
from .txn_index import TxnIndex

_READ_CHUNK = 4 * 2**20


@dataclass
class CleanResult:
    """What one pass did (all zeros when it found nothing worth cleaning)."""

    segments_cleaned: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_removed: int = 0
    tombstones_removed: int = 0
    tombstone_end: int = 0  # one past the newest tombstone removed
    aborted_removed: int = 0  # records of aborted transactions
    keys: int = 0
    dirty_ratio: float = 0.0
    cleanable_end: int = -1
    skipped: str = ""  # why nothing was cleaned
    segments: list[int] = field(default_factory=list)


class CompactableLog(Protocol):
    """What a cleaner pass uses of a log; the log calls :func:`compact` on itself from its
    ``clean``, which checks it is open and takes it offline on an I/O error."""

    config: LogConfig
    producer_state: ProducerStateManager
    txn_index: TxnIndex

    @property
    def high_watermark(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def cleaner_offset(self) -> int:
        """Where the dirty (not yet compacted) part of the log starts."""

    def log_segments(self) -> list[Segment]:
        """Every segment, oldest first; the last is the active one, never rewritten."""

    def sync_sealed_segments(self) -> bool:
        """Make every sealed segment durable (the recovery point moves to the active one)."""

    def replace_segment(self, seg: Segment, data: bytes, headers: Sequence[BatchHeader], positions: Sequence[int]) -> Segment:
        """Replace a sealed segment's batches with ``data``, crash-safely."""

    def checkpoint_cleaner_offset(self, offset: int) -> None:
        """Persist where the next pass's dirty section starts."""

    @property
    def tombstone_horizon(self) -> int: ...

    @property
    def tombstone_clock(self) -> TombstoneClock: ...

    def note_cleaner_pass(self, end: int, now_ms: int) -> None:
        """Persist that a pass at ``now_ms`` covered everything below ``end``."""

    def note_tombstones_removed(self, end: int) -> None:
        """Persist that tombstones below ``end`` are being removed."""


def _batches(seg: Segment):
    """``(position, decoded batch)`` of each batch in a segment, read in large chunks."""
    pending: list[tuple[int, int]] = []
    start = -1
    for pos, h in seg.iter_headers():
        if start < 0:
            start = pos
        pending.append((pos, h.size))
        if pos + h.size - start >= _READ_CHUNK:
            yield from _decode_chunk(seg, start, pending)
            pending, start = [], -1
    if pending:
        yield from _decode_chunk(seg, start, pending)


def _decode_chunk(seg: Segment, start: int, pending: list[tuple[int, int]]):
    end = pending[-1][0] + pending[-1][1]
    buf = seg.pread(end - start, start)
    for pos, size in pending:
        yield pos, buf[pos - start : pos - start + size], decode_batch(buf, pos - start, check_crc=True)


def cleanable_segments(segs: list[Segment], config: LogConfig, now_ms: int, high_watermark: int) -> list[Segment]:
    """Of a log's segments (oldest first, the active one last), the sealed ones a pass may
    rewrite, oldest first (see the module docstring)."""
    out = []
    lag = config.min_compaction_lag_ms
    for i, seg in enumerate(segs[:-1]):
        if segs[i + 1].base_offset > high_watermark:
            break
        if lag > 0 and seg.max_timestamp > now_ms - lag:
            break
        out.append(seg)
    return out


def compact(log: CompactableLog, now_ms: int, high_watermark: int | None = None, *, force: bool = False) -> CleanResult:
    """One cleaning pass over ``log`` (a no-op unless its cleanup.policy includes compact).
    ``high_watermark`` defaults to the log's; ``force`` ignores min.cleanable.dirty.ratio."""
    result = CleanResult()
    cfg = log.config
    if not cfg.compact:
        result.skipped = "cleanup.policy does not compact"
        return result
    hw = log.high_watermark if high_watermark is None else high_watermark
    log.sync_sealed_segments()  # the recovery point passes every sealed segment (see above)
    first_unstable = log.producer_state.first_unstable_offset(hw)
    if first_unstable is not None and first_unstable < hw:
        hw = first_unstable  # an open (or not yet replicated) transaction: nothing from there on
    all_segments = log.log_segments()
    segs = cleanable_segments(all_segments, cfg, now_ms, hw)
    if not segs:
        result.skipped = "no cleanable segment"
        return result
    end = all_segments[len(segs)].base_offset  # the first offset not cleaned
    result.cleanable_end = end
    first_dirty = log.cleaner_offset
    total = sum(s.size for s in segs)
    dirty = sum(s.size for s in segs if s.base_offset >= first_dirty)
    # the segment holding first_dirty counts as dirty too
    for s in segs:
        if s.base_offset < first_dirty < s.next_offset:
            dirty += s.size
    result.dirty_ratio = dirty / total if total else 0.0
    horizon = now_ms - cfg.delete_retention_ms
    clock = log.tombstone_clock
    if not force and (dirty == 0 or result.dirty_ratio < cfg.min_cleanable_dirty_ratio) and not clock.due(horizon):
        result.skipped = f"dirty ratio {result.dirty_ratio:.2f} below min.cleanable.dirty.ratio {cfg.min_cleanable_dirty_ratio}"
        return result

    # 1. the last offset of each key in the dirty section (aborted data and markers not)
    last: dict = {}
    dirty_segs = [seg for seg in segs if seg.next_offset > first_dirty]
    dirty_base = dirty_segs[0].base_offset if dirty_segs else end
    skip = AbortedFilter((e.producer_id, e.first_offset) for e in log.txn_index.collect(dirty_base, end))
    for seg in dirty_segs:
        for _, raw, d in _batches(seg):
            if skip.drops(raw, 0, d.header):
                continue
            keys = d.keys
            if keys is None:
                continue
            base = d.header.base_offset
            last.update(zip(keys, range(base, base + len(keys))))
    last.pop(None, None)
    result.keys = len(last)

    # 2. rewrite each cleanable segment with what survives
    clock.waiting_since = None  # the pass sees every tombstone of the cleanable segments
    # The log's last record stays even as an expired tombstone: a read below the log end
    # must find a batch, and a segment rolled while idle leaves the active one empty.
    last_record = log.log_end_offset - 1
    retained = log.producer_state.retained_batches()
    aborted = AbortedFilter((e.producer_id, e.first_offset) for e in log.txn_index.collect(segs[0].base_offset, end))
    # Keys whose latest record kept so far in this pass holds a value: a batch of the dedup
    # window kept whole keeps superseded values, and the tombstone that superseded one must
    # stay, expired or not, or that value would be the key's last.
    live: set = set()
    for seg in segs:
        parts: list[bytes] = []
        headers = []
        positions = []
        changed = False
        size = 0
        for _, raw, d in _batches(seg):
            result.bytes_read += len(raw)
            n = len(d.values)
            result.records_read += n
            h = d.header
            kept_for_dedup = h.producer_id >= 0 and (h.producer_id, h.last_offset) in retained
            dropped = aborted.drops(raw, 0, h)  # called for every batch, in order
            if h.attributes & CONTROL_BIT or (h.attributes & TRANSACTIONAL_BIT and not n):
                positions.append(size)  # markers: whole
                headers.append(h)
                parts.append(raw)
                size += len(raw)
                continue
            if h.attributes & TRANSACTIONAL_BIT and dropped:
                keep = []  # an aborted transaction's data
                result.records_removed += n
                result.aborted_removed += n
            else:
                keep = _survivors(d, last, clock, horizon, now_ms, result, last_record, live)
            if n and len(keep) == n or kept_for_dedup and (keep or not n):
                pieces = [raw]  # a batch of the dedup window stays whole while any record does
                _note_whole(live, d)  # _survivors noted only the records it kept
            else:
                changed = True
                pieces = [rebuild_batch(d, run) for run in _runs(keep)]
                if kept_for_dedup:  # every record went: the header stays, emptied
                    pieces.append(empty_batch(h, 0))
            for p in pieces:
                positions.append(size)
                headers.append(read_header(p))
                parts.append(p)
                size += len(p)
        if changed:
            data = b"".join(parts)
            if result.tombstone_end > log.tombstone_horizon:
                log.note_tombstones_removed(result.tombstone_end)  # first: see the module doc
            log.replace_segment(seg, data, headers, positions)
            result.segments_cleaned += 1
            result.segments.append(seg.base_offset)
            result.bytes_written += len(data)
        else:
            result.bytes_written += size
    log.note_cleaner_pass(end, now_ms)
    log.checkpoint_cleaner_offset(end)
    return result


def _note_whole(live: set, d: DecodedBatch) -> None:
    """Record in ``live`` what ``d``, kept whole, leaves as its keys' latest kept records: a
    value adds the key, a tombstone removes it."""
    keys = d.keys
    if keys is None:
        return
    values = d.values
    for i in range(len(values)):
        k = keys[i]
        if k is None:
            continue
        if values[i] is None:
            live.discard(k)
        else:
            live.add(k)


def _survivors(d: DecodedBatch, last: dict, clock: TombstoneClock, horizon: int, now_ms: int, result: CleanResult, last_record: int, live: set) -> list[int]:
    """Positions of the records of ``d`` that stay (the log's ``last_record`` always does;
    so does an expired tombstone of a key in ``live``: a value before it is still kept --
    ``live`` follows the records kept, in this batch too). A tombstone has expired when an
    earlier pass first covered it at or before ``horizon``; the clock notes when the ones
    kept for not having expired were first passed."""
    h = d.header
    base = h.base_offset
    n = len(d.values)
    keys = d.keys
    if keys is None:
        return list(range(n))  # no keys: nothing to compact
    values = d.values
    keep = []
    get = last.get
    for i in range(n):
        k = keys[i]
        off = base + i
        if k is None:
            keep.append(i)
            continue
        newest = get(k, -1)
        if newest > off:
            result.records_removed += 1
            continue
        if values[i] is None and off != last_record and k not in live:
            if not clock.expired(off, horizon):
                first = clock.first_passed(off)
                first = now_ms if first is None else first
                if clock.waiting_since is None or first < clock.waiting_since:
                    clock.waiting_since = first
            else:
                result.records_removed += 1
                result.tombstones_removed += 1
                result.tombstone_end = max(result.tombstone_end, off + 1)
                continue
        keep.append(i)
        if values[i] is None:
            live.discard(k)
        else:
            live.add(k)
    return keep


def _runs(keep: list[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for i in keep:
        if runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


__all__ = ["CleanResult", "CompactableLog", "cleanable_segments", "compact"]
