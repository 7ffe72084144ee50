"""What the simulation records of one partition, and the invariants checked on it as
records are written, committed and read (``checks.py`` lists them all).

* **3** one writer per (partition, leader epoch), stamping its own epoch;
* **4** readers are only served data below the HW they are served with, the same batch at
  an offset, and a HW that never goes back;
* **2** what a leader committed with the durability promise is never committed again with
  other bytes;
* **5** an idempotent producer's record committed with the promise is never committed
  again at another offset;
* and what the final checks (``final_checks.py``) and **deleted** need: acknowledged
  batches, committed batches, the floors below which nothing may be read, and when an
  unclean election or an operator voided the promise.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kcoord import records
from kcoord.replication.metadata import PartitionState

from .log_reading import consistent, is_tombstone, read_log, record_value

if TYPE_CHECKING:
    from .checks import History
    from .liveness import IsrWatch
    from .scenario import TopicSpec


@dataclass
class AckedBatch:
    producer_id: int
    base_sequence: int
    count: int
    base_offset: int  # -1 when the leader only knew it was a duplicate of an older batch
    acked_ms: int
    leader_epoch: int = -1  # of the leader that acknowledged it
    promised: bool = True  # whether the ISR it was committed under made it a promise


@dataclass
class Committed:
    """A batch some leader's HW moved past, and whether the system promised to keep it."""

    data: bytes
    strong: bool
    leader: int
    epoch: int
    at_ms: int


class PartitionHistory:
    def __init__(self, history: "History", tp: tuple[str, int], spec: "TopicSpec") -> None:
        self.history = history
        self.tp = tp
        self.spec = spec
        self.writer_of_epoch: dict[int, int] = {}
        self.last_append_epoch: dict[int | tuple[int, str], int] = {}
        self.leader_appends = 0
        self.committed: dict[int, Committed] = {}
        self.strong_hw = 0
        # a page-cache topic's HW moved under no promise (min.insync.replicas 1, or an ISR
        # below it): what it committed may go with one machine's page cache (see strong)
        self.weak_commits = False
        self.consumed: dict[int, tuple[bytes, bool]] = {}
        self.consumer_batches = 0
        self.acked: list[AckedBatch] = []
        self.producer_anomalies: list[tuple[int, str]] = []  # (producer id, what happened)
        self.reader_hw: dict[str, int] = {}
        self.unclean_at: list[int] = []
        # when operators made the topic lose its promise: min.insync.replicas below 2 on a
        # page-cache topic (README: its one copy's page cache may then be all there is), and
        # what was promised before may go with it
        self.weakened_at: list[int] = []
        self.unclean_epoch = -1  # the newest leader epoch that began with an unclean election
        self.stored: PartitionState | None = None
        # issue 32
        self.compacted = spec.compact
        self.keys: dict[tuple[int, int], bytes] = {}  # (producer id, sequence) -> key
        self.first_commit: dict[tuple[int, int], tuple[int, int, int, bool]] = {}  # -> (offset, ms, epoch, strong)
        self.producer_last: dict[int, int] = {}  # producer id -> the highest offset a record of it committed at
        self.forgotten_recommits = 0  # records committed again by a leader that could not know them (invariant 5)
        # producer id -> (broker, epoch) of a leader that recommitted a record of it it could not know
        self.forgetting: dict[int, tuple[int, int]] = {}
        self.deleted_floor = 0  # below an acknowledged DeleteRecords
        self.deleted_at = -1
        self.log_starts: dict[int, int] = {}  # broker -> its log start, as last seen
        self.retention_floor = 0  # every replica's log start has passed it
        self.retention_at = -1
        self.deletions = 0
        self.isr_watch: dict[tuple[str, int], "IsrWatch"] = {}
        # (the highest HW any leader has shown, since when): when an offset first committed
        self.hw_timeline: list[tuple[int, int]] = []

    def fail(self, invariant: str, now: int, message: str) -> None:
        self.history.fail(invariant, now, f"{self.tp[0]}-{self.tp[1]}: {message}")

    def strong(self, isr_size: int, min_insync: int | None = None) -> bool:
        """Whether an acks=all write committed under an ISR of ``isr_size`` is promised: the
        ISR had at least min.insync.replicas members (the leader's config then: operators
        change it). Page-cache topics only with min.insync.replicas >= 2 (README): with 1,
        the controller may shrink the ISR to one replica at any time, and that replica's
        page cache is then the only copy."""
        min_insync = self.spec.min_insync if min_insync is None else min_insync
        if self.spec.lossy and min_insync < 2:
            return False
        return isr_size >= min_insync

    # -- issue 32 ---------------------------------------------------------------------------
    def on_keys(self, producer_id: int, seq: int, keys: list[bytes]) -> None:
        for i, k in enumerate(keys):
            self.keys[(producer_id, seq + i)] = k

    def is_tombstone(self, producer_id: int, seq: int) -> bool:
        """Whether this record of a simulated producer is a tombstone (a keyed producer's)."""
        return (producer_id, seq) in self.keys and is_tombstone(seq)

    def value_of(self, producer_id: int, seq: int) -> bytes | None:
        """The value a simulated producer's record carries."""
        return None if self.is_tombstone(producer_id, seq) else record_value(producer_id, seq)

    def tombstone_offsets(self) -> dict[bytes, int]:
        """key -> the highest offset a tombstone of it was committed at: every record of
        the key below it may be gone even once the tombstone itself is (expired)."""
        out: dict[bytes, int] = {}
        for (pid, seq), key in self.keys.items():
            commit = self.first_commit.get((pid, seq))
            if commit is not None and is_tombstone(seq) and commit[0] > out.get(key, -1):
                out[key] = commit[0]
        return out

    def committed_at(self, offset: int) -> int | None:
        """When a leader's HW first passed ``offset`` (the earliest, if an unclean election
        reused it), or None if none has."""
        i = bisect_right(self.hw_timeline, (offset, 1 << 62))
        return self.hw_timeline[i][1] if i < len(self.hw_timeline) else None

    def on_records_deleted(self, offset: int, low_watermark: int, broker: int, epoch: int, sent: int, now: int) -> None:
        """An acknowledged DeleteRecords: nothing below max(offset, low watermark) is
        readable from now on."""
        self.deletions += 1
        floor = max(offset, low_watermark)
        self.history.sim.trace(f"admin: DeleteRecords {self.tp[0]}-{self.tp[1]} up to {offset} acknowledged by broker {broker} (epoch {epoch}): low watermark {low_watermark}")
        if floor > self.deleted_floor:
            self.deleted_floor = floor
            self.deleted_at = now

    def read_floor(self) -> tuple[int, int, str]:
        """(offset below which nothing may be read, since when, why)."""
        d = (self.deleted_floor, self.deleted_at, "an acknowledged DeleteRecords") if not self._unclean_since(self.deleted_at) else (0, -1, "")
        r = (self.retention_floor, self.retention_at, "the log start of every replica") if not self._unclean_since(self.retention_at) else (0, -1, "")
        return max(d, r)

    def on_log_start(self, broker: int, log_start: int, assignment: list[int], now: int) -> None:
        if self.log_starts.get(broker) == log_start:
            return
        self.log_starts[broker] = log_start
        low = min(self.log_starts.get(b, 0) for b in assignment)
        if low > self.retention_floor:
            self.retention_floor = low
            self.retention_at = now

    def on_commit_records(self, h: Any, broker: int, epoch: int, strong: bool, ours: set[int], now: int) -> None:
        """Invariant 5 as records commit: an idempotent producer's record committed with the
        promise is never committed again at another offset -- unless the leader committing it
        again has its log start above every record of that producer committed before. Kafka
        rebuilds a producer's dedup state only from batches at or above the log start: a
        replica that began at its leader's log start (retention, DeleteRecords) never saw
        them, and one restarted with no producer snapshot past the log start forgets them;
        elected, it takes a retry of the producer's first batch (sequence 0, unknown
        producer) as new (KIP-360 keeps the producer only where its state survives), and the
        retries that follow it in sequence too (sim seed 60942: two answers lost, both
        batches below the log start): at that leader epoch, a record whose earlier copy is
        below the leader's log start is recommitted on the same path."""
        pid = h.producer_id
        if pid not in ours or h.base_sequence < 0:
            return
        log_start = self.log_starts.get(broker, 0)
        forgotten = self.producer_last.get(pid, -1) < log_start
        if forgotten:
            self.forgetting[pid] = (broker, epoch)
        in_run = self.forgetting.get(pid) == (broker, epoch)
        self.producer_last[pid] = max(self.producer_last.get(pid, -1), h.base_offset + h.record_count - 1)
        first = self.first_commit
        for i in range(h.record_count):
            key = (pid, h.base_sequence + i)
            offset = h.base_offset + i
            prev = first.get(key)
            if prev is None:
                first[key] = (offset, now, epoch, strong)
            elif prev[0] != offset:
                forgotten_here = forgotten or (in_run and prev[0] < log_start)
                if prev[3] and not self.voided(prev[1], prev[2]) and epoch >= self.unclean_epoch and not forgotten_here:
                    self.fail(
                        "5",
                        now,
                        f"record {pid}:{key[1]} was committed at offset {prev[0]} (epoch {prev[2]}, {prev[1]} ms) and again at offset "
                        f"{offset} by leader {broker} (epoch {epoch}): a duplicate{' (compacted topic)' if self.compacted else ''}",
                    )
                elif forgotten_here:
                    self.forgotten_recommits += 1
                first[key] = (offset, now, epoch, strong)
            elif strong and not prev[3]:
                first[key] = (offset, prev[1], prev[2], True)

    # -- invariant 3 ------------------------------------------------------------------------
    def on_leader_append(self, broker: int, epoch: int, stamped: list[int], now: int, ghost: str | None = None) -> None:
        """``ghost``: the name of an older process of ``broker`` still running (twin). It
        keeps leading the epoch it had, cut off from the controller, while the broker's
        next process may lead a newer one: its epochs go forward on their own."""
        self.leader_appends += 1
        if any(e != epoch for e in stamped):
            self.fail("3", now, f"broker {broker} appended as leader at epoch {epoch} but stamped {stamped}")
        writer = self.writer_of_epoch.setdefault(epoch, broker)
        if writer != broker:
            self.fail("3", now, f"two leaders accepted writes at epoch {epoch}: brokers {writer} and {broker}")
        lineage = broker if ghost is None else (broker, ghost)
        last = self.last_append_epoch.get(lineage, -1)
        if epoch < last:
            who = f"broker {broker}" if ghost is None else f"broker {broker}'s older process {ghost}"
            self.fail("3", now, f"{who} appended as leader at epoch {epoch} after epoch {last}")
        self.last_append_epoch[lineage] = max(last, epoch)

    # -- invariant 4 and the committed prefix -----------------------------------------------
    def on_leader_hw(self, broker: int, epoch: int, old_hw: int, new_hw: int, log: Any, strong: bool, now: int) -> None:
        if not self.hw_timeline or new_hw > self.hw_timeline[-1][0]:
            self.hw_timeline.append((new_hw, now))
        start = max(old_hw, log.log_start_offset)
        if strong:
            self.strong_hw = max(self.strong_hw, new_hw)
        if start >= new_hw:
            return
        if not strong and self.spec.lossy:
            self.weak_commits = True
        data = read_log(self.history, self.tp, broker, log, start, new_hw)
        ours = self.history.sim_producer_ids
        for pos, h in records.iter_headers(data):
            batch = bytes(data[pos : pos + h.size])
            if h.producer_id in ours:
                self.on_commit_records(h, broker, epoch, strong, ours, now)
            prev = self.committed.get(h.base_offset)
            if (
                prev is not None
                and prev.strong
                and not consistent(prev.data, batch, self.compacted)
                and not self.voided(prev.at_ms, prev.epoch)
                and epoch >= self.unclean_epoch
            ):
                self.fail(
                    "2",
                    now,
                    f"offset {h.base_offset} was committed by leader {prev.leader} (epoch {prev.epoch}, {prev.at_ms} ms) "
                    f"and is committed again with different bytes by leader {broker} (epoch {epoch})",
                )
            if prev is None or prev.data != batch or (strong and not prev.strong):
                self.committed[h.base_offset] = Committed(batch, strong or (prev is not None and prev.strong and prev.data == batch), broker, epoch, now)

    def on_consumer_fetch(self, served_by: int, high_watermark: int, data: bytes, now: int) -> None:
        for pos, h in records.iter_headers(data):
            self.consumer_batches += 1
            if h.last_offset >= high_watermark:
                self.fail("4", now, f"a reader was served offsets {h.base_offset}..{h.last_offset} by broker {served_by} under HW {high_watermark}")
            batch = bytes(data[pos : pos + h.size])
            c = self.committed.get(h.base_offset)
            strong = c is None or c.data != batch or c.strong
            seen = self.consumed.get(h.base_offset)
            if seen is not None and seen[1] and not self.lost_any and not consistent(seen[0], batch, self.compacted):
                self.fail("4", now, f"readers were served two different batches at offset {h.base_offset}, the first one committed with the durability promise")
            self.consumed[h.base_offset] = (batch, strong)

    def on_reader_hw(self, reader: str, broker: int, hw: int, now: int) -> None:
        """The HW a reader is shown never goes back -- as far as it was reached with the
        durability promise (a HW only a lone copy of a page-cache topic stood behind may
        be lost with that copy, and the HW with it)."""
        seen = self.reader_hw.get(reader, 0)  # the promised part of the highest HW it was shown
        if hw < seen and not self.lost_any:
            self.fail("4", now, f"{reader} saw the HW go back from {seen} to {hw} (served by broker {broker})")
        self.reader_hw[reader] = max(seen, min(hw, self.strong_hw))

    def on_acked(self, batch: AckedBatch) -> None:
        """An acks=all success. It is a promise if the HW that acknowledged it moved under an
        ISR big enough (see :meth:`strong`), which the commit record of its offset says."""
        c = self.committed.get(batch.base_offset) if batch.base_offset >= 0 else None
        if c is not None and not c.strong:
            batch.promised = False
        self.acked.append(batch)

    def voided(self, at_ms: int, epoch: int) -> bool:
        """Whether an unclean election may have lost what was written (or acknowledged, or
        committed) at ``at_ms`` by the leader of ``epoch``: any election of a replica from
        outside the ISR after it, or one whose new epoch is above that leader's (a deposed
        leader that did not know yet still acknowledges at its old epoch)."""
        return any(t >= at_ms for t in self.unclean_at) or epoch < self.unclean_epoch or any(t >= at_ms for t in self.weakened_at)

    @property
    def lost_any(self) -> bool:
        """Whether anything promised may have been lost since the start (an unclean
        election, or an operator's lowering of the promise)."""
        return bool(self.unclean_at or self.weakened_at)

    def _unclean_since(self, at_ms: int) -> bool:
        return any(t >= at_ms for t in self.unclean_at)
