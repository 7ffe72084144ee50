"""What the simulation records while it runs, and the invariants it checks (design.md).

Some invariants are checked as events happen (who appended as leader at which epoch, the
leader's HW within a tenure, what consumers were served); the rest once the healed system
has quiesced, against the final logs and the clients' view of what was acknowledged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kcoord import records
from kcoord.log import MemoryLog


def record_value(producer_id: int, seq: int) -> bytes:
    """Every record's value names its producer and sequence number, so any copy of it in any
    log can be traced back to the one send it came from."""
    return b"%d:%d" % (producer_id, seq)


@dataclass
class Violation:
    invariant: str  # "1".."5", or "liveness" / "timer"
    at_ms: int
    message: str

    def __str__(self) -> str:
        return f"[inv {self.invariant} @ {self.at_ms} ms] {self.message}"


@dataclass
class AckedBatch:
    producer_id: int
    base_sequence: int
    count: int
    base_offset: int  # -1 when the leader only knew it was a duplicate of an older batch
    acked_ms: int


@dataclass
class Committed:
    """A batch some leader's HW moved past: its bytes, and whether the system promised to
    keep it (the leader's maximal ISR had >= min.insync.replicas members, or every append
    is fsynced so that one durable copy suffices)."""

    data: bytes
    strong: bool
    leader: int
    epoch: int
    at_ms: int


@dataclass
class History:
    min_insync: int
    every_append_durable: bool
    violations: list[Violation] = field(default_factory=list)
    # invariant 3
    writer_of_epoch: dict[int, int] = field(default_factory=dict)  # leader epoch -> broker that appended
    last_append_epoch: dict[int, int] = field(default_factory=dict)  # broker -> newest epoch it appended at
    leader_appends: int = 0
    # invariant 4 and the committed prefix
    committed: dict[int, Committed] = field(default_factory=dict)  # base offset -> batch
    max_hw: int = 0
    # base offset -> (bytes a consumer was served, whether they were committed with the
    # durability promise at the time)
    consumed: dict[int, tuple[bytes, bool]] = field(default_factory=dict)
    consumer_batches: int = 0
    # invariant 1 and 5 (the clients' view)
    acked: list[AckedBatch] = field(default_factory=list)
    producer_anomalies: list[str] = field(default_factory=list)
    # controller metadata as persisted: partition key -> last leader epoch written
    stored_epochs: dict[str, int] = field(default_factory=dict)
    controller_epoch: int = -1

    def fail(self, invariant: str, now: int, message: str) -> None:
        self.violations.append(Violation(invariant, now, message))

    # -- invariant 3 ------------------------------------------------------------------------
    def on_leader_append(self, broker: int, epoch: int, stamped_epochs: list[int], now: int) -> None:
        self.leader_appends += 1
        if any(e != epoch for e in stamped_epochs):
            self.fail("3", now, f"broker {broker} appended as leader at epoch {epoch} but stamped {stamped_epochs}")
        writer = self.writer_of_epoch.setdefault(epoch, broker)
        if writer != broker:
            self.fail("3", now, f"two leaders accepted writes at epoch {epoch}: brokers {writer} and {broker}")
        last = self.last_append_epoch.get(broker, -1)
        if epoch < last:
            self.fail("3", now, f"broker {broker} appended as leader at epoch {epoch} after epoch {last}")
        self.last_append_epoch[broker] = max(last, epoch)

    def on_replica_epoch(self, broker: int, before: int, after: int, now: int) -> None:
        if after < before:
            self.fail("3", now, f"replica {broker} went from leader epoch {before} back to {after}")

    def on_persist_partition(self, key: str, epoch: int, now: int) -> None:
        last = self.stored_epochs.get(key, -1)
        if epoch < last:
            self.fail("3", now, f"controller persisted {key} at leader epoch {epoch} after {last}")
        self.stored_epochs[key] = max(last, epoch)

    def on_persist_cluster(self, controller_epoch: int, now: int) -> None:
        if controller_epoch < self.controller_epoch:
            self.fail("3", now, f"controller epoch went back from {self.controller_epoch} to {controller_epoch}")
        self.controller_epoch = max(self.controller_epoch, controller_epoch)

    # -- invariant 4 and the committed prefix -----------------------------------------------
    def on_leader_hw(self, broker: int, epoch: int, old_hw: int, new_hw: int, log: MemoryLog, strong: bool, now: int) -> None:
        """A leader's HW moved from ``old_hw`` to ``new_hw``: remember the batches it
        committed, and complain if they differ from what an earlier leader committed."""
        self.max_hw = max(self.max_hw, new_hw)
        start = max(old_hw, log.log_start_offset)
        if start >= new_hw:
            return
        data = log.read(start, 1 << 30, new_hw)
        for pos, h in records.iter_headers(data):
            batch = bytes(data[pos : pos + h.size])
            prev = self.committed.get(h.base_offset)
            if prev is not None and prev.data != batch:
                if prev.strong:
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
                self.fail("4", now, f"consumer was served offsets {h.base_offset}..{h.last_offset} by broker {served_by} under HW {high_watermark}")
            batch = bytes(data[pos : pos + h.size])
            c = self.committed.get(h.base_offset)
            # Served below a HW, so some leader committed it; if the record of that commit
            # is missing or differs, treat it as promised (the stricter reading).
            strong = c is None or c.data != batch or c.strong
            seen = self.consumed.get(h.base_offset)
            if seen is not None and seen[0] != batch and seen[1]:
                self.fail("4", now, f"consumers were served two different batches at offset {h.base_offset}, the first one committed with the durability promise")
            self.consumed[h.base_offset] = (batch, strong)

    # -- clients ----------------------------------------------------------------------------
    def on_acked(self, batch: AckedBatch) -> None:
        self.acked.append(batch)

    # -- final checks -----------------------------------------------------------------------
    def final_checks(self, leader: int, logs: dict[int, MemoryLog], hw: int, now: int) -> None:
        final = logs[leader]
        data = final.read(final.log_start_offset, 1 << 40) if final.log_end_offset > final.log_start_offset else b""
        batches: dict[int, tuple[records.BatchHeader, bytes]] = {}
        values: dict[int, bytes | None] = {}
        for pos, h in records.iter_headers(data, check_crc=True):
            batch = bytes(data[pos : pos + h.size])
            batches[h.base_offset] = (h, batch)
            for r in records.decode_batch(batch).records():
                values[r.offset] = r.value
        self._check_acked(leader, batches, values, now)
        self._check_replicas_agree(leader, logs, hw, now)
        self._check_committed(leader, batches, now)
        self._check_producers(batches, values, now)

    def _check_acked(self, leader: int, batches: dict, values: dict[int, bytes | None], now: int) -> None:
        """Invariant 1: every acks=all success is in the final leader's log, at its offset."""
        where_is: dict[tuple[int, int], int] = {}
        for base in sorted(batches):
            h, _ = batches[base]
            if h.producer_id >= 0:
                for i in range(h.record_count):
                    where_is.setdefault((h.producer_id, h.base_sequence + i), base + i)
        for a in self.acked:
            for i in range(a.count):
                seq = a.base_sequence + i
                where = where_is.get((a.producer_id, seq))
                want = a.base_offset + i if a.base_offset >= 0 else None
                if where is None:
                    self.fail(
                        "1",
                        now,
                        f"record {a.producer_id}:{seq} acked at offset {want} ({a.acked_ms} ms) is missing from leader {leader}'s final log",
                    )
                elif want is not None and where != want:
                    self.fail("1", now, f"record {a.producer_id}:{seq} acked at offset {want} is at offset {where} in the final log")
                elif values.get(where) != record_value(a.producer_id, seq):
                    self.fail("1", now, f"offset {where} holds {values.get(where)!r}, not record {a.producer_id}:{seq}")

    def _check_replicas_agree(self, leader: int, logs: dict[int, MemoryLog], hw: int, now: int) -> None:
        """Invariant 2: below the HW, every replica that has an offset has the same bytes."""
        ref = logs[leader]
        for broker in sorted(logs):
            log = logs[broker]
            start = max(log.log_start_offset, ref.log_start_offset)
            end = min(hw, log.log_end_offset)
            if start >= end:
                continue
            mine = log.read(start, 1 << 40, end)
            theirs = ref.read(start, 1 << 40, end)
            if mine != theirs:
                self.fail("2", now, f"replica {broker} and leader {leader} differ below HW {hw}: {_first_difference(mine, theirs)}")

    def _check_committed(self, leader: int, batches: dict, now: int) -> None:
        """Whatever a leader committed with the durability promise still stands, and so
        does every batch a consumer was served from it."""
        for base in sorted(self.committed):
            c = self.committed[base]
            if not c.strong:
                continue
            got = batches.get(base)
            if got is None or got[1] != c.data:
                self.fail(
                    "1",
                    now,
                    f"batch at offset {base} committed by leader {c.leader} at epoch {c.epoch} ({c.at_ms} ms) "
                    f"is {'missing from' if got is None else 'different in'} the final log of leader {leader}",
                )
        for base in sorted(self.consumed):
            data, strong = self.consumed[base]
            if not strong:
                continue
            got = batches.get(base)
            if got is None or got[1] != data:
                self.fail("4", now, f"a consumer read a batch at offset {base} that the final log does not hold")

    def _check_producers(self, batches: dict, values: dict[int, bytes | None], now: int) -> None:
        """Invariant 5: per producer, sequences in the log run 0, 1, 2, ... in offset order:
        no duplicate, no reordering; every record's value matches its sequence."""
        expected: dict[int, int] = {}
        for base in sorted(batches):
            h, _ = batches[base]
            if h.producer_id < 0:
                continue
            nxt = expected.get(h.producer_id, 0)
            if h.base_sequence != nxt:
                kind = "duplicate" if h.base_sequence < nxt else "gap/reorder"
                self.fail("5", now, f"producer {h.producer_id}: batch at offset {base} has sequence {h.base_sequence}, expected {nxt} ({kind})")
            expected[h.producer_id] = max(nxt, h.base_sequence + h.record_count)
            for i in range(h.record_count):
                if values.get(base + i) != record_value(h.producer_id, h.base_sequence + i):
                    self.fail("5", now, f"offset {base + i}: value {values.get(base + i)!r} is not producer {h.producer_id} sequence {h.base_sequence + i}")
        for anomaly in self.producer_anomalies:
            self.fail("5", now, anomaly)


def _first_difference(a: bytes, b: bytes) -> str:
    ha = [(h.base_offset, h.record_count, h.crc) for _, h in records.iter_headers(a)]
    hb = [(h.base_offset, h.record_count, h.crc) for _, h in records.iter_headers(b)]
    for x, y in zip(ha, hb):
        if x != y:
            return f"first differing batch (base, count, crc): {x} vs {y}"
    return f"{len(ha)} vs {len(hb)} batches"
