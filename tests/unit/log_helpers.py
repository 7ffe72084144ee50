"""Batches and logs for the file-log tests (test_log.py, test_log_recovery.py)."""

from __future__ import annotations

from pathlib import Path

from kcoord.log import Log, LogConfig
from kcoord.log.fs import FileSystem
from kcoord.records import build_batch_columns, iter_headers, stamp

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
