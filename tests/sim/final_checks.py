"""The final checks, once the healed cluster is quiet, of each partition's final logs
(``checks.py`` lists every invariant):

* **1** every record acknowledged with acks=all while the promise held is in the final
  leader's log at its offset;
* **2** replicas agree below the HW (on compacted topics: in every record both hold and in
  each key's last record);
* **1**, **4** what a leader committed with the promise, and what a reader was served, is
  still there;
* **5** each producer's records appear exactly once, in order, in epochs that never go
  back.

Records below the log start (retention, DeleteRecords) and, on compacted topics, records a
later record of the same key supersedes, and tombstones (with what they superseded) once
``delete.retention.ms`` let the cleaner remove them, may be gone: the checks are exact
about the first two and allow the third for any tombstone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kcoord import records

from .log_reading import first_difference, read_log, records_of

if TYPE_CHECKING:
    from .checks import History
    from .partition_history import PartitionHistory


def check_partition_logs(history: "History", tp: tuple[str, int], leader: int, logs: dict[int, Any], hw: int, now: int) -> None:
    part = history.parts[tp]
    final = logs[leader]
    data = read_log(history, tp, leader, final, final.log_start_offset) if final.log_end_offset > final.log_start_offset else b""
    batches: dict[int, tuple[records.BatchHeader, bytes]] = {}
    values: dict[int, bytes | None] = {}
    last_of_key: dict[bytes, int] = {}
    for pos, h in records.iter_headers(data, check_crc=True):
        batch = bytes(data[pos : pos + h.size])
        batches[h.base_offset] = (h, batch)
        for rec in records.decode_batch(batch).records():
            values[rec.offset] = rec.value
            if rec.key is not None:
                last_of_key[rec.key] = rec.offset
    view = FinalLog(final.log_start_offset, batches, values, last_of_key, part.compacted, part.tombstone_offsets() if part.compacted else {})
    _check_acked(history, part, leader, view, now)
    _check_replicas_agree(history, part, leader, logs, hw, now)
    _check_committed(history, part, leader, view, now)
    _check_producers(history, part, view, now)


def _check_acked(history: "History", part: PartitionHistory, leader: int, view: "FinalLog", now: int) -> None:
    where_is: dict[tuple[int, int], int] = {}
    for base in sorted(view.batches):
        h, _ = view.batches[base]
        if h.producer_id >= 0 and h.base_sequence >= 0:
            for i in range(h.record_count):
                where_is.setdefault((h.producer_id, h.base_sequence + i), base + i)
    for a in part.acked:
        if not a.promised or part.voided(a.acked_ms, a.leader_epoch):
            continue
        for i in range(a.count):
            seq = a.base_sequence + i
            where = where_is.get((a.producer_id, seq))
            want = a.base_offset + i if a.base_offset >= 0 else None
            if want is None and (a.producer_id, seq) in part.first_commit:
                want = part.first_commit[(a.producer_id, seq)][0]
            if where is None:
                if want is not None and view.gone(want, part.keys.get((a.producer_id, seq)), part.is_tombstone(a.producer_id, seq)):
                    continue  # deleted (below the log start), superseded or an expired tombstone (compaction)
                part.fail("1", now, f"record {a.producer_id}:{seq} acked at offset {want} ({a.acked_ms} ms) is missing from leader {leader}'s final log")
            elif want is not None and where != want:
                part.fail("1", now, f"record {a.producer_id}:{seq} acked at offset {want} is at offset {where} in the final log")
            elif view.values.get(where) != part.value_of(a.producer_id, seq):
                part.fail("1", now, f"offset {where} holds {view.values.get(where)!r}, not record {a.producer_id}:{seq}")


def _check_replicas_agree(history: "History", part: PartitionHistory, leader: int, logs: dict[int, Any], hw: int, now: int) -> None:
    ref = logs[leader]
    for broker in sorted(logs):
        log = logs[broker]
        start = max(log.log_start_offset, ref.log_start_offset)
        end = min(hw, log.log_end_offset)
        if start >= end:
            continue
        mine = read_log(history, part.tp, broker, log, start, end)
        theirs = read_log(history, part.tp, leader, ref, start, end)
        if mine == theirs:
            continue
        if not part.compacted:
            part.fail("2", now, f"replica {broker} and leader {leader} differ below HW {hw}: {first_difference(mine, theirs)}")
            continue
        # Replicas clean on their own: they may differ in which superseded records and
        # expired tombstones are still there, never in a record both hold, nor in a key's
        # last value (a key whose last record is a tombstone reads as one with none).
        a = {o: r for o, r in records_of(mine).items() if start <= o < end}
        b = {o: r for o, r in records_of(theirs).items() if start <= o < end}
        differ = sorted(o for o in a.keys() & b.keys() if a[o] != b[o])
        last_a, last_b = _live_keys(a), _live_keys(b)
        if differ or last_a != last_b:
            keys = sorted(k for k in last_a.keys() | last_b.keys() if last_a.get(k) != last_b.get(k))[:5]
            part.fail(
                "2",
                now,
                f"replica {broker} and leader {leader} differ below HW {hw} (compacted): records at {differ[:5]} differ; "
                f"last offsets of keys {[(k, last_a.get(k), last_b.get(k)) for k in keys]}",
            )


def _live_keys(records: dict[int, tuple]) -> dict:
    """key -> offset of its last record, for the keys whose last record is not a tombstone."""
    last = {k: o for o, (k, _) in sorted(records.items()) if k is not None}
    return {k: o for k, o in last.items() if records[o][1] is not None}


def _check_committed(history: "History", part: PartitionHistory, leader: int, view: "FinalLog", now: int) -> None:
    for base in sorted(part.committed):
        c = part.committed[base]
        if not c.strong or part.voided(c.at_ms, c.epoch):
            continue
        got = view.batches.get(base)
        if (got is not None and got[1] == c.data) or view.rightly_changed(c.data):
            continue
        part.fail(
            "1",
            now,
            f"batch at offset {base} committed by leader {c.leader} at epoch {c.epoch} ({c.at_ms} ms) "
            f"is {'missing from' if got is None else 'different in'} the final log of leader {leader}",
        )
    for base in sorted(part.consumed):
        data, strong = part.consumed[base]
        if not strong or part.lost_any:
            continue
        got = view.batches.get(base)
        if (got is None or got[1] != data) and not view.rightly_changed(data):
            part.fail("4", now, f"a reader read a batch at offset {base} that the final log does not hold")


def _check_producers(history: "History", part: PartitionHistory, view: "FinalLog", now: int) -> None:
    """Per producer id: epochs never go back in log order (an older incarnation of a
    fenced writer, such as a group coordinator, never lands after a newer one), and
    within an epoch sequences rise in offset order -- no duplicate, no reordering, and
    no gap but records deleted below the log start or superseded by a later record of
    their key on compacted topics (of the simulation's producers, whose keys are known,
    exactly; of others, any gap there). Records of the simulation's producers also name
    their sequence."""
    state: dict[int, tuple[int, int]] = {}  # producer id -> (epoch, next sequence)
    lossy_ok = part.lost_any
    ours = history.sim_producer_ids
    start = view.log_start
    for base in sorted(view.batches):
        h, _ = view.batches[base]
        if h.producer_id < 0 or h.base_sequence < 0:
            continue
        first = h.producer_id not in state
        epoch, nxt = state.get(h.producer_id, (h.producer_epoch, 0))
        if h.producer_epoch < epoch:
            part.fail("5", now, f"producer {h.producer_id}: batch at offset {base} has epoch {h.producer_epoch} after epoch {epoch} (a fenced writer landed)")
            continue
        if h.producer_epoch > epoch:
            epoch, nxt = h.producer_epoch, 0
        if h.base_sequence < nxt:
            part.fail("5", now, f"producer {h.producer_id} epoch {epoch}: batch at offset {base} has sequence {h.base_sequence}, expected {nxt} (duplicate)")
        elif h.base_sequence > nxt and not lossy_ok and not _gap_explained(history, part, view, h.producer_id, nxt, h.base_sequence, first and start > 0):
            part.fail("5", now, f"producer {h.producer_id} epoch {epoch}: batch at offset {base} has sequence {h.base_sequence}, expected {nxt} (gap/reorder)")
        state[h.producer_id] = (epoch, max(nxt, h.base_sequence + h.record_count))
        if h.producer_id in ours:
            for i in range(h.record_count):
                if view.values.get(base + i) != part.value_of(h.producer_id, h.base_sequence + i):
                    part.fail("5", now, f"offset {base + i}: value {view.values.get(base + i)!r} is not producer {h.producer_id} sequence {h.base_sequence + i}")
    if not lossy_ok:  # an unclean election may lose acknowledged batches: sequences then break
        for pid, anomaly in part.producer_anomalies:
            if all(a.promised for a in part.acked if a.producer_id == pid):
                part.fail("5", now, anomaly)


def _gap_explained(history: "History", part: PartitionHistory, view: "FinalLog", pid: int, lo: int, hi: int, at_start: bool) -> bool:
    """Whether sequences ``lo..hi-1`` of producer ``pid`` may be missing from the final log."""
    if pid not in history.sim_producer_ids:
        # a coordinator's: its records' keys are not known here
        return at_start or part.compacted
    for seq in range(lo, hi):
        commit = part.first_commit.get((pid, seq))
        if commit is None or not view.gone(commit[0], part.keys.get((pid, seq)), part.is_tombstone(pid, seq)):
            return False
    return True


@dataclass
class FinalLog:
    """The final leader's log, as the final checks read it."""

    log_start: int
    batches: dict[int, tuple[records.BatchHeader, bytes]]
    values: dict[int, bytes | None]
    last_of_key: dict[bytes, int]
    compacted: bool
    tombstones: dict[bytes, int]  # key -> the highest offset a tombstone of it was committed at

    def gone(self, offset: int, key: bytes | None, tombstone: bool = False) -> bool:
        """Whether a record that was at ``offset`` may rightly be gone: below the log start,
        or (compacted topics) a later record of its key is in the log, or a later tombstone
        of its key was (the cleaner removes a tombstone after delete.retention.ms, and it
        superseded what came before), or it is a tombstone itself."""
        if offset < self.log_start:
            return True
        if not self.compacted or key is None:
            return False
        return tombstone or self.last_of_key.get(key, -1) > offset or self.tombstones.get(key, -1) > offset

    def rightly_changed(self, batch: bytes) -> bool:
        """Whether a batch that is not in the log as it was (``batch``) may rightly have
        changed: wholly below the log start, or (compacted topics) every record of it
        still there or superseded."""
        h = records.read_header(batch)
        if h.last_offset < self.log_start:
            return True
        return self.compacted and self.holds(batch)

    def holds(self, batch: bytes) -> bool:
        """Whether every record of ``batch`` is in the log, or rightly gone."""
        for pos, h in records.iter_headers(batch):
            if h.last_offset < self.log_start:
                continue
            d = records.decode_batch(batch, pos)
            keys = d.keys if d.keys is not None else [None] * len(d.values)
            for i, (k, v) in enumerate(zip(keys, d.values)):
                o = h.base_offset + i
                if self.gone(o, k, v is None):
                    continue
                if o not in self.values or self.values[o] != v:
                    return False
        return True
