"""Property-based: random append/read/truncate/retention/reopen sequences against a model.

The model is the obvious one: a list of stamped batches plus a log start offset. The file
log (with tiny segments, so rolls, multi-segment reads and segment deletions happen all
the time) and the memory log run side by side; both must agree with the model after every
step, and with each other on segment layout, errors and results.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from kcoord.log import Log, LogConfig, MemoryLog, OffsetOutOfRange
from kcoord.log.fs import OsFileSystem
from kcoord.protocol.errors import KafkaError
from kcoord.records import build_batch_columns, stamp

# Files in RAM when the machine has a tmpfs: this test is about logic, not disks.
RAM_DIR = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


class NoSyncFileSystem(OsFileSystem):
    """The real file system without fsyncs: this test is about logic, and a process crash
    (what ``reopen`` simulates) keeps the page cache anyway."""

    def fsync(self, fd: int) -> None:
        pass


NO_SYNC = NoSyncFileSystem()
SETTINGS = settings(max_examples=60, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@dataclass
class Model:
    start: int = 0
    batches: list[tuple[int, int, bytes, int]] = field(default_factory=list)  # base, last, bytes, timestamp
    hw: int = 0
    checkpointed_hw: int = 0
    epochs: list[tuple[int, int]] = field(default_factory=list)  # the leader-epoch cache, by its rules

    def add(self, base: int, last: int, data: bytes, ts: int) -> None:
        self.batches.append((base, last, data, ts))
        epoch = int.from_bytes(data[12:16], "big", signed=True)
        if not self.epochs or epoch > self.epochs[-1][0]:
            self.epochs = [e for e in self.epochs if e[1] < base] + [(epoch, base)]

    @property
    def leo(self) -> int:
        return self.batches[-1][1] + 1 if self.batches else self.start

    def clamp(self, hw: int) -> int:
        return max(self.start, min(hw, self.leo))

    def read(self, offset: int, max_bytes: int, max_offset: int | None) -> bytes:
        out, total = [], 0
        for base, last, data, _ in self.batches:
            if last < offset:
                continue
            if max_offset is not None and last >= max_offset:
                break
            if out and total + len(data) > max_bytes:
                break
            out.append(data)
            total += len(data)
        return b"".join(out)

    def truncate(self, offset: int) -> None:
        if offset >= self.leo:  # no record goes, but an epoch starting at the log end does
            self.epochs = [e for e in self.epochs if e[1] < self.leo]
            return
        self.batches = [b for b in self.batches if b[1] < offset]
        self.hw = min(self.hw, self.leo)
        self.epochs = [e for e in self.epochs if e[1] < self.leo]

    def delete_before(self, start: int) -> None:
        self.batches = [b for b in self.batches if b[0] >= start]
        self.start = start
        self.hw = max(self.hw, start)
        later = [i for i, e in enumerate(self.epochs) if e[1] <= start]
        if later:  # the epoch holding the new start survives, clipped to it
            self.epochs = [(self.epochs[later[-1]][0], start)] + self.epochs[later[-1] + 1 :]


class LogMachine(RuleBasedStateMachine):
    """Drives a file Log and a MemoryLog with the same operations; both must match the
    model, and the memory log must lay out the same segments as the file log."""

    def __init__(self) -> None:
        super().__init__()
        self.model = Model()
        self.epoch = 0
        self.now = 1_000_000
        self.tag = 0
        self.dir: str | None = None

    @initialize(
        segment_bytes=st.sampled_from([200, 400, 1000]),
        segment_ms=st.sampled_from([10**9, 1500]),
        index_interval=st.sampled_from([0, 100, 4096]),
        retention_bytes=st.sampled_from([-1, 1500]),
    )
    def open(self, segment_bytes, segment_ms, index_interval, retention_bytes):
        self.config = LogConfig(
            segment_bytes=segment_bytes,
            segment_ms=segment_ms,
            index_interval_bytes=index_interval,
            retention_bytes=retention_bytes,
            retention_ms=3000,
            flush_messages=1,  # so the memory log's crash loses nothing, like a process crash
        )
        self.dir = tempfile.mkdtemp(prefix="kcoord-log-prop-", dir=RAM_DIR)
        self.log = Log(self.dir, self.config, now_ms=self.now, fs=NO_SYNC)
        self.mem = MemoryLog(self.config, now_ms=self.now)

    def teardown(self) -> None:
        if self.dir is not None:
            try:
                self.log.close()
            finally:
                shutil.rmtree(self.dir, ignore_errors=True)

    def both(self, op: str, *args, **kwargs):
        """Apply an operation to both logs; they must agree on the result or the error."""
        results = []
        for log in (self.log, self.mem):
            try:
                results.append(("ok", getattr(log, op)(*args, **kwargs)))
            except KafkaError as exc:
                results.append(("error", type(exc), exc.code))
        assert results[0] == results[1], (op, results)
        if results[0][0] == "error":
            raise KafkaError(results[0][2], f"both logs refused {op}")
        return results[0][1]

    def _batch(self, n: int, size: int) -> bytes:
        self.tag += 1
        self.now += 100
        return build_batch_columns([bytes([self.tag % 256]) * size] * n, timestamp_ms=self.now)

    # -- rules ------------------------------------------------------------------------------

    @rule(n=st.integers(1, 5), size=st.integers(0, 120), bump=st.booleans())
    def append_leader(self, n, size, bump):
        if bump:
            self.epoch += 1
        data = self._batch(n, size)
        info = self.both("append_as_leader", data, leader_epoch=self.epoch, now_ms=self.now)
        base = self.model.leo
        assert (info.base_offset, info.last_offset, info.record_count) == (base, base + n - 1, n)
        self.model.add(base, base + n - 1, stamp(data, base, self.epoch), self.now)

    @rule(count=st.integers(2, 10), size=st.integers(0, 60))
    def append_leader_many(self, count, size):
        for _ in range(count):
            self.append_leader(1 + count % 3, size, False)

    @rule(counts=st.lists(st.integers(1, 4), min_size=1, max_size=5), size=st.integers(0, 200))
    def append_follower(self, counts, size):
        base = self.model.leo
        stored = []
        for n in counts:
            stored.append((base, base + n - 1, stamp(self._batch(n, size), base, self.epoch), self.now))
            base += n
        info = self.both("append_as_follower", b"".join(b[2] for b in stored), now_ms=self.now)
        assert info.last_offset == base - 1
        for b in stored:
            self.model.add(*b)

    @rule(skew=st.sampled_from([-1, -3]))  # before the LEO (after it is a gap, which compaction leaves)
    def append_follower_wrong_offset(self, skew):
        base = self.model.leo + skew
        if base < 0:
            return
        try:
            self.both("append_as_follower", stamp(self._batch(1, 10), base, self.epoch), now_ms=self.now)
        except KafkaError:
            pass
        else:
            raise AssertionError("a batch before the LEO was accepted")

    @rule(data=st.data(), max_bytes=st.integers(0, 3000), limit=st.one_of(st.none(), st.integers(0, 40)))
    def read(self, data, max_bytes, limit):
        m = self.model
        offset = data.draw(st.integers(m.start, m.leo))
        max_offset = None if limit is None else m.start + limit
        got = self.both("read", offset, max_bytes, max_offset)
        want = b"" if max_offset is not None and offset >= max_offset else m.read(offset, max_bytes, max_offset)
        assert got == want

    @rule(below=st.integers(1, 5), above=st.integers(1, 5))
    def read_out_of_range(self, below, above):
        m = self.model
        for offset in (m.start - below, m.leo + above):
            if offset < 0:
                continue
            try:
                self.both("read", offset, 100)
            except KafkaError as exc:
                assert exc.code == OffsetOutOfRange(0, 0, 0).code
            else:
                raise AssertionError(f"read at {offset} outside [{m.start}, {m.leo}] did not raise")

    @rule(data=st.data())
    def truncate_to(self, data):
        m = self.model
        offset = data.draw(st.integers(max(0, m.start - 2), m.leo + 2))
        self.both("truncate_to", offset)
        if offset < m.start:  # below the log start: the log restarts empty there, HW checkpointed
            self.model = Model(start=offset, hw=offset, checkpointed_hw=offset)
        else:
            m.truncate(offset)

    @rule(gap=st.integers(0, 50))
    def truncate_fully_and_start_at(self, gap):
        offset = self.model.leo + gap
        self.both("truncate_fully_and_start_at", offset)  # the new log's HW is checkpointed
        self.model = Model(start=offset, hw=offset, checkpointed_hw=offset)

    @rule(data=st.data())
    def checkpoint_hw(self, data):
        m = self.model
        hw = data.draw(st.integers(m.start, m.leo))
        self.both("checkpoint_high_watermark", hw)
        m.hw = m.checkpointed_hw = hw

    @rule(ts_back=st.integers(0, 3000))
    def offset_for_timestamp(self, ts_back):
        target = self.now - ts_back
        want = next(((b, ts) for b, _, _, ts in self.model.batches if ts >= target), None)
        assert self.both("offset_for_timestamp", target) == want

    @rule(use_hw=st.booleans(), advance=st.integers(0, 4000))
    def retention(self, use_hw, advance):
        m = self.model
        self.now += advance
        hw = m.hw if use_hw else None
        before = m.start
        deleted = self.both("apply_retention", self.now, hw)
        start = self.log.log_start_offset
        assert (deleted > 0) == (start > before)
        assert start <= m.leo
        if hw is not None:
            assert start <= max(hw, before)
        assert start == m.leo or any(b[0] == start for b in m.batches)  # a batch boundary
        for base, last, _, ts in m.batches:
            if last < start:  # only expired or over-size data was deleted
                assert self.now - ts > self.config.retention_ms or self.config.retention_bytes >= 0
        m.delete_before(start)

    @rule(clean=st.booleans())
    def reopen(self, clean):
        if clean:
            self.log.close()
            self.mem.close()
        else:  # like a SIGKILL: files stay as written, no shutdown marker
            for seg in self.log._segments:
                seg.close()
            self.log._lock.release()  # the kernel drops a dead process's flock
        self.log = Log(self.dir, self.config, now_ms=self.now, fs=NO_SYNC)
        self.mem = self.mem.crash()
        report = self.log.recovery_report
        assert report.clean_shutdown == clean
        assert not report.cut, report
        self.model.hw = self.model.clamp(self.model.checkpointed_hw)

    # -- invariants -------------------------------------------------------------------------

    @invariant()
    def offsets_size_segments_and_caches_agree(self):
        if not hasattr(self, "log"):
            return
        m = self.model
        for log in (self.log, self.mem):
            assert (log.log_start_offset, log.log_end_offset) == (m.start, m.leo)
            assert log.size_bytes == sum(len(b[2]) for b in m.batches)
            assert log.high_watermark == m.hw
            assert log.epoch_cache.entries == m.epochs
        segs = self.log.segments
        assert [(s.base_offset, s.size_bytes, s.next_offset) for s in segs] == [
            (s.base_offset, s.size_bytes, s.next_offset) for s in self.mem.segments
        ]
        assert [s.max_timestamp for s in segs] == [s.max_timestamp for s in self.mem.segments]
        assert segs[0].base_offset == m.start and segs[-1].next_offset == m.leo
        assert all(a.next_offset == b.base_offset for a, b in zip(segs, segs[1:]))
        for s in segs:  # over segment.bytes only when a single batch is that big
            inside = [b for b in m.batches if s.base_offset <= b[0] < s.next_offset]
            assert s.size_bytes == sum(len(b[2]) for b in inside)
            assert s.size_bytes <= self.config.segment_bytes or len(inside) == 1


TestLogMachine = LogMachine.TestCase
TestLogMachine.settings = SETTINGS


class _Drawn:
    """A fixed draw, to replay an example hypothesis found."""

    def __init__(self, value: int) -> None:
        self.value = value

    def draw(self, strategy) -> int:
        return self.value


def test_truncating_below_the_start_checkpoints_the_new_hw_and_a_crash_reopens_at_it():
    """The log checkpoints the HW of a log restarted empty (so a crash cannot reopen above the
    records that followed): the model must expect that checkpoint, not the one before."""
    state = LogMachine()
    try:
        state.open(segment_bytes=200, segment_ms=1_000_000_000, index_interval=0, retention_bytes=-1)
        state.truncate_fully_and_start_at(gap=1)
        state.checkpoint_hw(_Drawn(1))
        state.truncate_to(_Drawn(0))
        state.append_leader_many(count=2, size=0)
        state.reopen(clean=False)
        state.offsets_size_segments_and_caches_agree()
        assert state.log.high_watermark == 0
    finally:
        state.teardown()
