"""Crash consistency of the real Log on a simulated disk that loses power.

Each seed drives a Log on a :class:`SimDisk` through random appends (leader and replicated,
idempotent producers among them), leader-epoch changes, truncations, rolls (tiny
segments), HW checkpoints, flushes, retention, full truncations and clean reopens, and
cuts the power at random moments -- between operations, in the middle of one (the disk
fails at a random I/O call, the log goes offline, then the power goes) and in the middle of
the recovery that follows. After every power loss the reopened log must be consistent
(``assert_consistent``: CRCs, contiguity, index, epoch cache, producer state, HW) and must
be the log the model allows: a run of the batches appended, starting at the log start,
holding at least everything that had been made durable (flushed, fsynced by
flush.messages=1, or kept by a truncation), with the HW checkpoint as last written.

``KCOORD_LOG_CRASH_SEEDS`` sets how many seeds run (default 120).
"""

from __future__ import annotations

import errno
import os
import random
from dataclasses import dataclass, field, replace

import pytest

from kcoord.log import Log, LogConfig, LogStorageError
from kcoord.records import build_batch_columns, stamp

from log_helpers import assert_consistent, stored_batches
from sim.disk import SimDisk

SEEDS = int(os.environ.get("KCOORD_LOG_CRASH_SEEDS", "120"))
DIR = "/node/t-0"
PID = 7  # the idempotent producer


@dataclass
class Model:
    """What the log must hold: batches (base, next, bytes) from ``start``; ``durable``:
    every offset below it must survive a power loss; ``hw``: the HW checkpoint (None: never
    written, and a reopened log reports its log start)."""

    start: int = 0
    batches: list[tuple[int, int, bytes]] = field(default_factory=list)
    durable: int = 0
    hw: int | None = None

    @property
    def leo(self) -> int:
        return self.batches[-1][1] if self.batches else self.start


class Run:
    """One seed: a log, its model, and the random operations."""

    def __init__(self, seed: int, *, chaos: bool = True, config: LogConfig | None = None) -> None:
        """``chaos``: cut the power now and then on its own (else only when told)."""
        self.rng = random.Random(seed)
        self.disk = SimDisk(random.Random(seed + 1_000_000), torn=self.rng.choice([0.0, 0.5, 1.0]))
        self.chaos = chaos
        rng = self.rng
        self.config = config or LogConfig(
            segment_bytes=rng.choice([300, 600, 1500]),
            index_interval_bytes=rng.choice([0, 64, 256]),
            flush_messages=rng.choice([None, None, 1]),
            retention_bytes=rng.choice([-1, 1200]),
        )
        self.now = 1_000_000
        self.epoch = 0
        self.seq = 0  # the idempotent producer's next sequence
        self.producer_epoch = 0
        self.tag = 0
        self.model = Model()
        self.log = self.open()
        self.power_losses = 0

    def open(self) -> Log:
        return Log(DIR, self.config, now_ms=self.now, fs=self.disk)

    def batch(self, idempotent: bool) -> bytes:
        self.tag += 1
        self.now += self.rng.randint(0, 50)
        n = self.rng.randint(1, 4)
        values = [bytes([self.tag % 256]) * self.rng.randint(0, 60) for _ in range(n)]
        if not idempotent:
            return build_batch_columns(values, timestamp_ms=self.now)
        data = build_batch_columns(values, timestamp_ms=self.now, producer_id=PID, producer_epoch=self.producer_epoch, base_sequence=self.seq)
        self.seq += n
        return data

    # -- operations ------------------------------------------------------------------------
    # Each sets ``self.inflight`` to the states the disk may already be in should the power
    # go in its middle (besides the state before it), then updates the model once it returned.

    def op_append_leader(self) -> None:
        m = self.model
        if self.rng.random() < 0.15:
            self.epoch += 1
        data = self.batch(self.rng.random() < 0.4)
        n = int.from_bytes(data[23:27], "big") + 1
        new = (m.leo, m.leo + n, stamp(data, m.leo, self.epoch))
        self.inflight = [replace(m, batches=m.batches + [new])]
        info = self.log.append_as_leader(data, leader_epoch=self.epoch, now_ms=self.now)
        assert (info.base_offset, info.last_offset + 1, info.duplicate) == (new[0], new[1], False)
        m.batches.append(new)
        if self.config.flush_messages == 1:
            m.durable = m.leo  # acknowledged means fsynced

    def op_append_follower(self) -> None:
        m = self.model
        if self.rng.random() < 0.2:
            self.epoch += 1
        base, new = m.leo, []
        for _ in range(self.rng.randint(1, 5)):
            data = self.batch(self.rng.random() < 0.3)
            n = int.from_bytes(data[23:27], "big") + 1
            new.append((base, base + n, stamp(data, base, self.epoch)))
            base += n
        self.inflight = [replace(m, batches=m.batches + new)]
        self.log.append_as_follower(b"".join(b[2] for b in new), now_ms=self.now)
        m.batches.extend(new)
        if self.config.flush_messages == 1:
            m.durable = m.leo

    def op_become_leader(self) -> None:
        self.epoch += 1
        self.log.epoch_cache.assign(self.epoch, self.log.log_end_offset)

    def op_truncate(self) -> None:
        m = self.model
        offset = self.rng.randint(m.start, m.leo)
        kept = [b for b in m.batches if b[1] <= offset]
        new_leo = kept[-1][1] if kept else m.start
        # any prefix down to the cut may be left, durable or not
        self.inflight = [replace(m, durable=min(m.durable, new_leo))]
        self.log.truncate_to(offset)
        if offset < m.leo:
            m.batches = kept
            m.durable = new_leo  # a truncation fsyncs what it keeps
            self.producer_lost_batches()

    def op_truncate_fully(self) -> None:
        m = self.model
        offset = m.leo + self.rng.randint(0, 20)
        # the new empty log (its HW checkpoint written last, at the offset), or what is left
        # of the old one (deleted newest segment first)
        self.inflight = [Model(start=offset, durable=offset, hw=offset), Model(start=offset, durable=offset, hw=m.hw),
                         replace(m, durable=m.start)]
        self.log.truncate_fully_and_start_at(offset)
        self.model = Model(start=offset, durable=offset, hw=offset)
        self.producer_lost_batches()

    def op_checkpoint_hw(self) -> None:
        m = self.model
        hw = self.rng.randint(m.start, m.leo)
        self.inflight = [replace(m, hw=hw)]
        self.log.checkpoint_high_watermark(hw)
        m.hw = hw

    def op_flush(self) -> None:
        self.log.flush()
        self.model.durable = self.model.leo

    def op_maybe_flush(self) -> None:
        self.log.maybe_flush(self.now)  # flush.ms unset: syncs segments rolled since the last flush
        self.model.durable = max(self.model.durable, self.log.segments[-1].base_offset)

    def op_retention(self) -> None:
        self.now += self.rng.randint(0, 500)
        hw = self.log.high_watermark if self.rng.random() < 0.5 else None
        self.log.apply_retention(self.now, hw)
        m = self.model
        m.start = self.log.log_start_offset
        m.batches = [b for b in m.batches if b[0] >= m.start]

    def op_reopen(self) -> None:
        self.log.close()
        self.log = self.open()
        assert self.log.recovery_report.clean_shutdown and not self.log.recovery_report.cut
        self.model.durable = self.model.leo

    def producer_lost_batches(self) -> None:
        """The idempotent producer starts over after its batches were truncated away (a
        new producer epoch), so later appends are never out of sequence."""
        self.producer_epoch += 1
        self.seq = 0

    OPS = [
        (op_append_leader, 30),
        (op_append_follower, 15),
        (op_become_leader, 3),
        (op_truncate, 5),
        (op_truncate_fully, 1),
        (op_checkpoint_hw, 6),
        (op_flush, 4),
        (op_maybe_flush, 4),
        (op_retention, 3),
        (op_reopen, 1),
    ]

    # -- power loss and the check ------------------------------------------------------------

    def power_loss_and_check(self, before: Model, inflight: list[Model], op: str) -> None:
        """Cut the power; reopen (maybe crashing again inside recovery); check the log is
        one the model allows: ``before`` (the model before the interrupted operation) or
        one of ``inflight`` (where it may have got to)."""
        self.disk.power_loss()
        self.power_losses += 1
        while True:
            if self.rng.random() < 0.2:  # the power goes again during recovery
                crash_at = self.disk.op_count + self.rng.randint(1, 40)
                self.disk.fault_hook = lambda _op, _path: errno.EIO if self.disk.op_count >= crash_at else None
            try:
                log = self.open()
            except LogStorageError:
                self.disk.fault_hook = None
                self.disk.power_loss()
                continue
            self.disk.fault_hook = None
            break
        self.log = log
        assert_consistent(log)
        got = stored_batches(log)
        start, leo = log.log_start_offset, log.log_end_offset
        options = [before] + inflight
        errors = []
        for m in options:
            problem = self.matches(m, start, leo, got, op)
            if problem is None:
                break
            errors.append(problem)
        else:
            raise AssertionError(f"after a power loss during {op}: {errors}")
        # The HW checkpoint as last written (or, for an interrupted write, the new value);
        # a checkpoint equal to the log start then may never have been written at all.
        hws = {m.hw if m.hw is not None else start for m in options}
        ckpt = log.checkpointed_high_watermark
        assert ckpt in hws or (ckpt == start and min(hws) <= start), (ckpt, hws)
        # From here on the model is what recovery found (it fsyncs all it kept).
        by_base = {b[0]: b for b in m.batches}
        self.model = Model(start=start, batches=[by_base[b] for b, _ in got], durable=leo, hw=log.checkpointed_high_watermark)
        entry = log.producer_state.get(PID)
        if entry is None or (entry.epoch, entry.last_seq) != (self.producer_epoch, self.seq - 1):
            self.producer_lost_batches()
        self.epoch = max(self.epoch, log.epoch_cache.latest_epoch)

    @staticmethod
    def matches(m: Model, start: int, leo: int, got: list[tuple[int, bytes]], op: str) -> str | None:
        """Why the recovered log is not one ``m`` allows (None if it is)."""
        bases = [b[0] for b in m.batches]
        if op == "op_retention":
            if start != m.start and start not in bases:  # retention deletes whole segments from the front
                return f"log start {start} is not a batch boundary of {bases[:3]}..."
        elif start != m.start:
            return f"log start {start} != {m.start}"
        if start < m.start:
            return f"log start {start} went back before {m.start}"
        if got and start not in bases:
            return f"a batch at {start}, where none was appended"
        i = bases.index(start) if got else 0
        want = [(b, data) for b, _, data in m.batches[i : i + len(got)]]
        if got != want:
            return f"batches differ from the appended ones at {[b for b, _ in got]} vs {[b for b, _ in want]}"
        if leo < min(m.durable, m.leo) and m.durable > start:
            return f"LEO {leo} lost durable data below {m.durable}"
        return None

    def step(self, fn=None, crash_after: int | None = None) -> bool:
        """One operation (random unless ``fn``); the power may go in its middle (at its
        ``crash_after``-th I/O call when given). Returns whether it did."""
        rng = self.rng
        if fn is None:
            fn = rng.choices([f for f, _ in self.OPS], [w for _, w in self.OPS])[0]
        before = replace(self.model, batches=list(self.model.batches))
        self.inflight = None
        if crash_after is None and self.chaos and rng.random() < 0.08:
            crash_after = rng.randint(0, 24)
        mid_op_crash = crash_after is not None
        if mid_op_crash:
            crash_at = self.disk.op_count + 1 + crash_after
            self.disk.fault_hook = lambda _op, _path: errno.EIO if self.disk.op_count >= crash_at else None
        try:
            fn(self)
        except LogStorageError as exc:
            assert mid_op_crash and exc.errno == errno.EIO, exc
            if not (fn is Run.op_reopen and self.log.closed):  # else the reopen failed
                assert self.log.offline
                with pytest.raises(LogStorageError):
                    self.log.read(self.model.start, 100)
            self.disk.fault_hook = None
            self.power_loss_and_check(before, self.inflight or [], fn.__name__)
            return True
        finally:
            self.disk.fault_hook = None
        if self.chaos and rng.random() < 0.06:
            self.power_loss_and_check(self.model, [], "nothing")
        return False


@pytest.mark.parametrize("seed", range(SEEDS))
def test_power_loss_leaves_a_consistent_prefix(seed):
    run = Run(seed)
    for _ in range(80):
        run.step()
    run.power_loss_and_check(run.model, [], "the end")
    assert run.power_losses >= 1


# -- every crash point of each operation --------------------------------------------------

CRASH_POINT_OPS = ["op_append_leader", "op_append_follower", "op_become_leader", "op_truncate", "op_truncate_fully",
                   "op_checkpoint_hw", "op_flush", "op_maybe_flush", "op_retention", "op_reopen"]


def prepared(seed: int) -> Run:
    """A log that retention has already shortened at the front, with several segments
    (some unsynced), an HW checkpoint, producer state and snapshots: the same one every
    time for the same seed."""
    config = LogConfig(segment_bytes=500, index_interval_bytes=64, retention_bytes=1500)
    run = Run(seed, chaos=False, config=config)
    steps = [Run.op_append_leader] * 12 + [Run.op_retention, Run.op_flush, Run.op_checkpoint_hw]
    for fn in steps + [Run.op_append_leader] * 3 + [Run.op_append_follower] * 2:
        run.step(fn)
    assert run.model.start > 0 and len(run.log.segments) >= 3
    return run


@pytest.mark.parametrize("op", CRASH_POINT_OPS)
def test_power_loss_at_every_io_call_of(op):
    """The power goes at the 1st, 2nd, ... I/O call of ``op`` (on a torn-free disk, one
    that keeps everything it may, and a random one), or right after it once the log has
    been refilled to where it was and flushed: every time the reopened log must be one the
    model allows."""
    fn = getattr(Run, op)
    probe = prepared(0)
    start = probe.disk.op_count
    probe.step(fn)
    calls = probe.disk.op_count - start
    assert calls >= 1
    for k in [*range(calls), None]:
        for torn in (0.0, 1.0, 0.5):
            run = prepared(0)
            run.disk.torn = torn
            old_leo = run.model.leo
            if k is not None:
                assert run.step(fn, crash_after=k), f"{op} did not reach its I/O call {k}"
                run.step(Run.op_append_leader)  # the reopened log carries on
            else:
                assert not run.step(fn)
                while run.model.leo <= old_leo:
                    run.step(Run.op_append_leader)
                run.step(Run.op_flush)
            run.power_loss_and_check(run.model, [], "the end")


# -- regressions the simulated disk found ------------------------------------------------


def test_a_truncated_away_producer_snapshot_stays_deleted():
    """Truncating below a producer snapshot deletes it; if that deletion were not durable,
    a power loss after the log grew past the snapshot's offset again would bring it back,
    and recovery would load a producer state for batches that no longer exist."""
    disk = SimDisk(random.Random(0), torn=0.0)
    config = LogConfig(segment_bytes=250, index_interval_bytes=64)
    log = Log(DIR, config, now_ms=0, fs=disk)
    for i in range(6):  # single-record batches of 108 bytes: a roll every 2 batches
        log.append_as_leader(build_batch_columns([bytes(40)], timestamp_ms=1, producer_id=PID, producer_epoch=0, base_sequence=i), leader_epoch=0)
    bases = [s.base_offset for s in log.segments]
    assert bases == [0, 2, 4] and disk.exists(f"{DIR}/{4:020d}.producer-snapshot")
    log.flush()
    log.truncate_to(2)  # segment 2 is emptied; segment 4 and snapshot 4 go
    # offsets 2..9 in one small batch of no producer: no roll, and no new leader epoch
    # (whose checkpoint would fsync the directory as a side effect)
    log.append_as_leader(build_batch_columns([b"v"] * 8, timestamp_ms=1), leader_epoch=0)
    log.flush()
    disk.power_loss()
    again = Log(DIR, config, now_ms=0, fs=disk)
    assert again.log_end_offset == 10
    assert again.producer_state.get(PID).last_seq == 1  # not 3, as the old snapshot at 4 says
    assert_consistent(again)


def test_recovery_point_never_stays_past_the_log_end():
    """A crash inside truncate_fully_and_start_at can leave a prefix of the old log with
    the old recovery point past its end; the reopened log must move it back, or segments
    written later below it would be trusted unverified after the next crash."""
    disk = SimDisk(random.Random(0), torn=0.0)
    config = LogConfig(segment_bytes=250, index_interval_bytes=64)
    log = Log(DIR, config, now_ms=0, fs=disk)
    for _ in range(8):  # segments 0, 2, 4, 6
        log.append_as_leader(build_batch_columns([bytes(40)], timestamp_ms=1), leader_epoch=0)
    log.close()  # recovery point 8
    log = Log(DIR, config, now_ms=0, fs=disk)
    disk.fail("unlink", f"{DIR}/{4:020d}.log")  # after segment 6 went, newest first
    with pytest.raises(LogStorageError):
        log.truncate_fully_and_start_at(100)
    disk.kill()  # the process dies; the page cache stays
    again = Log(DIR, config, now_ms=0, fs=disk)
    assert (again.log_start_offset, again.log_end_offset) == (0, 6)
    assert disk.contents(f"{DIR}/recovery-point-checkpoint").split() == [b"0", b"6"]
    assert_consistent(again)


def test_epochs_recovery_sees_below_the_log_start_stay_out_of_the_cache():
    """Recovery scans whole segments, so it sees the epochs of batches below a log start
    that DeleteRecords moved into a segment. When a power loss then takes every batch
    above the log start (and so every checkpointed epoch), those epochs must not return
    with their old start offsets: the cache must not reach below the log start."""
    disk = SimDisk(random.Random(0), torn=0.0)
    config = LogConfig(segment_bytes=1 << 20, index_interval_bytes=64)
    log = Log(DIR, config, now_ms=0, fs=disk)
    for _ in range(10):  # offsets 0..29 in epoch 4, made durable
        log.append_as_leader(build_batch_columns([bytes(20)] * 3, timestamp_ms=1), leader_epoch=4)
    log.flush()
    for _ in range(4):  # offsets 30..41 in epoch 5, only in the page cache
        log.append_as_leader(build_batch_columns([bytes(20)] * 3, timestamp_ms=1), leader_epoch=5)
    assert log.advance_log_start_offset(36)
    assert [tuple(e) for e in log.epoch_cache.entries] == [(5, 36)]
    disk.power_loss()
    again = Log(DIR, config, now_ms=0, fs=disk)
    assert (again.log_start_offset, again.log_end_offset) == (30, 30)
    assert [tuple(e) for e in again.epoch_cache.entries] == [(4, 30)]
    # (assert_consistent assumes the log start is a segment's base: not so here)
    again.epoch_cache.assign(9, 30)  # elected at the log end: the empty epoch 4 goes
    assert [tuple(e) for e in again.epoch_cache.entries] == [(9, 30)]
