"""Small state files written atomically: leader epochs, high watermark, recovery point,
producer snapshots.

A crash may stop a write half way, so each file is written to a temporary name, fsynced,
renamed over the old one and the directory fsynced: a reader sees the old file or the new
one, never a mix. The two text checkpoints start with a format version line so a later
layout can be told apart; a file that does not parse raises :class:`CheckpointError` and the
log falls back to rebuilding what it can from the segments.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgpack

EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
HW_CHECKPOINT = "high-watermark-checkpoint"
RECOVERY_POINT = "recovery-point-checkpoint"
CLEAN_SHUTDOWN = ".kcoord-clean-shutdown"
PRODUCER_SNAPSHOT_SUFFIX = ".producer-snapshot"
TMP_SUFFIX = ".tmp"
_VERSION = 0


class CheckpointError(ValueError):
    """A state file exists but does not parse."""


def fsync_dir(directory: Path) -> None:
    """Make renames, creations and deletions in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, *, sync_dir: bool = True) -> None:
    """Replace ``path`` with ``data`` all at once. ``sync_dir=False`` leaves the directory
    fsync to a caller that is about to make more changes in it."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync_dir:
        fsync_dir(path.parent)


def _read_lines(path: Path) -> list[str] | None:
    try:
        text = path.read_text("ascii")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path.name}: unreadable ({exc})") from None
    lines = text.splitlines()
    if not lines or lines[0].strip() != str(_VERSION):
        raise CheckpointError(f"{path.name}: unknown format version line {lines[0] if lines else '<empty>'!r}")
    return lines[1:]


def write_epochs(path: Path, entries: list[tuple[int, int]]) -> None:
    """Format: version line, entry count, then one ``epoch start_offset`` line per entry."""
    body = "".join(f"{epoch} {start}\n" for epoch, start in entries)
    write_atomic(path, f"{_VERSION}\n{len(entries)}\n{body}".encode("ascii"))


def read_epochs(path: Path) -> list[tuple[int, int]] | None:
    """Entries, or None when the file does not exist."""
    lines = _read_lines(path)
    if lines is None:
        return None
    try:
        count = int(lines[0])
        if count != len(lines) - 1:
            raise ValueError(f"says {count} entries, has {len(lines) - 1}")
        entries = []
        for line in lines[1:]:
            epoch, start = line.split()
            entries.append((int(epoch), int(start)))
    except (ValueError, IndexError) as exc:
        raise CheckpointError(f"{path.name}: malformed ({exc})") from None
    for (e1, s1), (e2, s2) in zip(entries, entries[1:]):
        if not (e1 < e2 and s1 < s2):
            raise CheckpointError(f"{path.name}: entries not ascending at ({e1}, {s1}), ({e2}, {s2})")
    return entries


def write_offset(path: Path, offset: int) -> None:
    """A one-offset checkpoint (high watermark, recovery point): version line, offset."""
    write_atomic(path, f"{_VERSION}\n{offset}\n".encode("ascii"))


def read_offset(path: Path) -> int | None:
    lines = _read_lines(path)
    if lines is None:
        return None
    try:
        (value,) = lines
        return int(value)
    except ValueError as exc:
        raise CheckpointError(f"{path.name}: malformed ({exc})") from None


def producer_snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{PRODUCER_SNAPSHOT_SUFFIX}"


def write_producer_snapshot(path: Path, snapshot: dict[int, dict[str, Any]], *, sync_dir: bool = True) -> None:
    data = msgpack.packb({"version": _VERSION, "producers": snapshot}, use_bin_type=True)
    write_atomic(path, data, sync_dir=sync_dir)


def read_producer_snapshot(path: Path) -> dict[int, dict[str, Any]]:
    try:
        data = msgpack.unpackb(path.read_bytes(), raw=False, strict_map_key=False)
        if data["version"] != _VERSION:
            raise ValueError(f"version {data['version']}")
        producers = data["producers"]
        if not isinstance(producers, dict):
            raise ValueError("producers is not a map")
        return producers
    except Exception as exc:  # any garbage: the caller rebuilds from the log instead
        raise CheckpointError(f"{path.name}: unreadable ({exc})") from None
