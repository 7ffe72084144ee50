"""Batches and logs for the file-log tests (test_log.py, test_log_recovery.py, ...).

The ``where`` fixture gives a log directory on the real disk and, as a second parameter,
on the simulated disk of tests/sim/disk.py: behaviour checks that take it run the same
Log code on both file systems.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path

import pytest

from kcoord.log import Log, LogConfig
from kcoord.log.fs import OS_FILE_SYSTEM, FileSystem
from kcoord.records import build_batch_columns, iter_headers, stamp
from sim.disk import SimDisk

NOW = 1_000_000


def batch(n: int = 3, size: int = 40, *, ts: int = NOW, tag: int = 0, **kw) -> bytes:
    """n records of ``size`` bytes; ``tag`` makes batches distinguishable."""
    return build_batch_columns([bytes([tag % 256]) * size] * n, timestamp_ms=ts, **kw)


def open_log(path: Path, now: int = NOW, *, fs: FileSystem | None = None, **cfg) -> Log:
    cfg.setdefault("index_interval_bytes", 256)
    return Log(path, LogConfig(**cfg), now_ms=now, fs=fs)


def headers(data: bytes):
    return [h for _, h in iter_headers(data, check_crc=True)]


def fill(log: Log, count: int, *, epoch: int = 0, n: int = 3, now: int = NOW) -> list[bytes]:
    """Append ``count`` batches on the leader path; return them as stored (stamped)."""
    out = []
    for i in range(count):
        data = batch(n, tag=len(out) + log.log_end_offset)
        info = log.append_as_leader(data, leader_epoch=epoch, now_ms=now)
        out.append(stamp(data, info.base_offset, epoch))
    return out


@dataclass
class LogDir:
    """A log directory on some file system, with the few file operations tests need."""

    path: Path
    fs: FileSystem

    def open(self, sub: str = "", now: int = NOW, **cfg) -> Log:
        return open_log(self.path / sub if sub else self.path, now, fs=self.fs, **cfg)

    def names(self, suffix: str = "") -> list[str]:
        return sorted(n for n in self.fs.listdir(self.path) if n.endswith(suffix))

    def exists(self, name: str) -> bool:
        return self.fs.exists(self.path / name)

    def read_text(self, name: str) -> str:
        return self.fs.read_file(self.path / name).decode()

    def write_text(self, name: str, text: str) -> None:
        self.write_bytes(name, text.encode())

    def write_bytes(self, name: str, data: bytes) -> None:
        fd = self.fs.open(self.path / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            self.fs.write(fd, data)
        finally:
            self.fs.close(fd)

    def unlink(self, name: str) -> None:
        self.fs.unlink(self.path / name)


@pytest.fixture(params=["disk", "simdisk"])
def where(request, tmp_path) -> LogDir:
    if request.param == "disk":
        return LogDir(tmp_path, OS_FILE_SYSTEM)
    return LogDir(Path("/sim/log"), SimDisk(random.Random(0)))


def stored_batches(log: Log) -> list[tuple[int, bytes]]:
    """(base offset, bytes) of every batch the log holds, read back one by one."""
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 0)  # exactly the batch holding ``offset``
        h = headers(data)[0]
        out.append((h.base_offset, data))
        offset = h.next_offset
    return out


def assert_consistent(log: Log) -> None:
    """Everything a reopened log must satisfy whatever happened before: whole CRC-valid
    contiguous batches from the log start to the LEO, segments and indexes that agree with
    them, an epoch cache that gives every batch its own epoch, producer state equal to what
    the batches say, and a HW inside the log."""
    from kcoord.log import ProducerStateManager
    from kcoord.log.index import OffsetIndex

    start, leo = log.log_start_offset, log.log_end_offset
    data = log.read(start, 1 << 30) if leo > start else b""
    hs = headers(data)  # CRCs checked
    if hs:
        assert hs[0].base_offset == start and hs[-1].next_offset == leo
        assert all(a.next_offset == b.base_offset for a, b in zip(hs, hs[1:]))
    else:
        assert start == leo
    assert log.size_bytes == len(data)
    assert [b for b, _ in stored_batches(log)] == [h.base_offset for h in hs]
    # segments: contiguous; each index entry points at the batch it names; the index file
    # holds a prefix of the entries (the active segment's may lag)
    segs = log._segments
    assert segs[0].base_offset == start and segs[-1].next_offset == leo
    assert all(a.next_offset == b.base_offset for a, b in zip(segs, segs[1:]))
    assert sum(s.size for s in segs) == len(data)
    for seg in segs:
        assert seg.fs.fstat(seg.fd).st_size == seg.size
        for offset, position in seg.index.entries:
            assert headers(seg.pread(seg.size - position, position))[0].base_offset == offset
        on_file, problem = OffsetIndex.load(seg.index_path, seg.base_offset, seg.size, seg.fs)
        if problem is None:
            assert seg.index.entries[: len(on_file)] == on_file.entries
    # the epoch cache
    cache = log.epoch_cache
    entries = cache.entries
    assert all(a.epoch < b.epoch and a.start_offset < b.start_offset for a, b in zip(entries, entries[1:]))
    assert all(start <= e.start_offset <= leo for e in entries)
    for h in hs:
        assert cache.epoch_for_offset(h.base_offset) == h.leader_epoch, (h, entries)
    # producer state: what the batches say; a producer snapshot may also remember
    # producers (and older batches) that retention removed
    rebuilt = ProducerStateManager()
    rebuilt.rebuild(hs)
    want, got = rebuilt.snapshot(), log.producer_state.snapshot()
    for pid, entry in want.items():
        assert got[pid]["epoch"] == entry["epoch"]
        assert got[pid]["batches"][-len(entry["batches"]):] == entry["batches"], pid
    for pid, entry in got.items():
        if pid not in want:
            assert all(b[3] < start for b in entry["batches"]), (pid, entry)
    assert start <= log.high_watermark <= leo
