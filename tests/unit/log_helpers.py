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
        info = log.append(data, leader_epoch=epoch, now_ms=now)
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
        fd = self.fs.open(self.path / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            self.fs.write(fd, text.encode())
        finally:
            self.fs.close(fd)

    def unlink(self, name: str) -> None:
        self.fs.unlink(self.path / name)


@pytest.fixture(params=["disk", "simdisk"])
def where(request, tmp_path) -> LogDir:
    if request.param == "disk":
        return LogDir(tmp_path, OS_FILE_SYSTEM)
    return LogDir(Path("/sim/log"), SimDisk(random.Random(0)))
