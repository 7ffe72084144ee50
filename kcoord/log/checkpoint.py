"""Small state files written atomically: leader epochs, high watermark, recovery point,
producer snapshots.

A crash may stop a write half way, so each file is written to a temporary name, fsynced,
renamed over the old one and the directory fsynced: a reader sees the old file or the new
one, never a mix. All I/O goes through the log's :class:`~kcoord.log.fs.FileSystem`. The two text checkpoints start with a format version line so a later
layout can be told apart; a file that does not parse raises :class:`CheckpointError` and the
log falls back to rebuilding what it can from the segments.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgpack

from .fs import FileSystem

EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
HW_CHECKPOINT = "high-watermark-checkpoint"
RECOVERY_POINT = "recovery-point-checkpoint"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
TOMBSTONE_HORIZON = "tombstone-horizon-checkpoint"
TOMBSTONE_CLOCK = "tombstone-clock-checkpoint"
FETCHED_COMPACTED = "fetched-compacted-checkpoint"
CLEAN_SHUTDOWN = ".kcoord-clean-shutdown"
# How many times an I/O error took this log offline (see FileLog.storage_generation).
LOST_PAGES = ".kcoord-lost-pages"
# Which directory this is: written once, when the log is first opened in it (KIP-858's
# directory id, per replica). A log that reports another id than before is a new directory
# -- its disk was wiped or replaced -- however it got there.
DIRECTORY_ID = "directory.id"
PRODUCER_SNAPSHOT_SUFFIX = ".producer-snapshot"
TMP_SUFFIX = ".tmp"
_VERSION = 0


class CheckpointError(ValueError):
    """A state file exists but does not parse."""


def write_synced(fs: FileSystem, path: Path, data: bytes) -> None:
    """Create (or truncate) ``path`` with ``data`` and fsync it: the first half of every
    crash-safe replacement (the rename is the caller's)."""
    fd = fs.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[fs.write(fd, view) :]
        fs.fsync(fd)
    finally:
        fs.close(fd)


def write_atomic(fs: FileSystem, path: Path, data: bytes, *, sync_dir: bool = True) -> None:
    """Replace ``path`` with ``data`` all at once. ``sync_dir=False`` leaves the directory
    fsync to a caller that is about to make more changes in it."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    write_synced(fs, tmp, data)
    fs.replace(tmp, path)
    if sync_dir:
        fs.fsync_dir(path.parent)


def _read_lines(fs: FileSystem, path: Path) -> list[str] | None:
    """The lines after the version line; None when there is no file. A read error is an
    OSError (the disk failed), not a CheckpointError (the file is bad)."""
    try:
        raw = fs.read_file(path)
    except FileNotFoundError:
        return None
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError as exc:
        raise CheckpointError(f"{path.name}: unreadable ({exc})") from None
    lines = text.splitlines()
    if not lines or lines[0].strip() != str(_VERSION):
        raise CheckpointError(f"{path.name}: unknown format version line {lines[0] if lines else '<empty>'!r}")
    return lines[1:]


def write_pairs(fs: FileSystem, path: Path, entries: list[tuple[int, int]]) -> None:
    """Format: version line, entry count, then one ``a b`` line per entry (the leader epoch
    checkpoint: ``epoch start_offset``; the tombstone clock: ``end ms``)."""
    body = "".join(f"{a} {b}\n" for a, b in entries)
    write_atomic(fs, path, f"{_VERSION}\n{len(entries)}\n{body}".encode("ascii"))


def read_pairs(fs: FileSystem, path: Path) -> list[tuple[int, int]] | None:
    """Entries of :func:`write_pairs`, or None when the file does not exist."""
    lines = _read_lines(fs, path)
    if lines is None:
        return None
    try:
        count = int(lines[0])
        if count != len(lines) - 1:
            raise ValueError(f"says {count} entries, has {len(lines) - 1}")
        entries = []
        for line in lines[1:]:
            a, b = line.split()
            entries.append((int(a), int(b)))
    except (ValueError, IndexError) as exc:
        raise CheckpointError(f"{path.name}: malformed ({exc})") from None
    return entries


write_epochs = write_pairs


def read_epochs(fs: FileSystem, path: Path) -> list[tuple[int, int]] | None:
    """Entries, or None when the file does not exist."""
    entries = read_pairs(fs, path)
    if entries is None:
        return None
    for (e1, s1), (e2, s2) in zip(entries, entries[1:]):
        if not (e1 < e2 and s1 < s2):
            raise CheckpointError(f"{path.name}: entries not ascending at ({e1}, {s1}), ({e2}, {s2})")
    return entries


def write_offset(fs: FileSystem, path: Path, offset: int) -> None:
    """A one-offset checkpoint (high watermark, recovery point): version line, offset."""
    write_atomic(fs, path, f"{_VERSION}\n{offset}\n".encode("ascii"))


def read_offset(fs: FileSystem, path: Path) -> int | None:
    lines = _read_lines(fs, path)
    if lines is None:
        return None
    try:
        (value,) = lines
        return int(value)
    except ValueError as exc:
        raise CheckpointError(f"{path.name}: malformed ({exc})") from None


def read_offset_or(fs: FileSystem, path: Path, what: str, default: int, notes: list[str]) -> int:
    """:func:`read_offset`, or ``default`` when there is no file or it does not parse (noted
    in ``notes``: recovery goes on without it)."""
    try:
        value = read_offset(fs, path)
    except CheckpointError as exc:
        notes.append(f"{what} checkpoint ignored: {exc}")
        value = None
    return default if value is None else value


def producer_snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{PRODUCER_SNAPSHOT_SUFFIX}"


def write_producer_snapshot(
    fs: FileSystem, path: Path, snapshot: dict[int, dict[str, Any]], *, sync_dir: bool = True
) -> None:
    data = msgpack.packb({"version": _VERSION, "producers": snapshot}, use_bin_type=True)
    write_atomic(fs, path, data, sync_dir=sync_dir)


def read_producer_snapshot(fs: FileSystem, path: Path) -> dict[int, dict[str, Any]]:
    raw = fs.read_file(path)  # an OSError here is the disk's, not the file's
    try:
        data = msgpack.unpackb(raw, raw=False, strict_map_key=False)
        if data["version"] != _VERSION:
            raise ValueError(f"version {data['version']}")
        producers = data["producers"]
        if not isinstance(producers, dict):
            raise ValueError("producers is not a map")
        return producers
    except Exception as exc:  # any garbage: the caller rebuilds from the log instead
        raise CheckpointError(f"{path.name}: unreadable ({exc})") from None


def read_lost_pages(fs: FileSystem, directory: Path) -> int:
    """The storage generation recorded in ``directory`` (:data:`LOST_PAGES`; 0 when none or
    unreadable)."""
    try:
        return int(fs.read_file(directory / LOST_PAGES).decode().strip() or 0)
    except (OSError, ValueError):
        return 0


def write_lost_pages(fs: FileSystem, directory: Path, generation: int) -> bool:
    """Record the storage generation; never raises (False when the write failed). Written
    without an fsync: it only has to outlive the process (a power loss changes the
    machine's lineage anyway), and the failing disk may refuse an fsync."""
    try:
        fd = fs.open(directory / LOST_PAGES, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            fs.write(fd, str(generation).encode())
        finally:
            fs.close(fd)
    except OSError:
        return False
    return True


def read_directory_id(fs: FileSystem, directory: Path) -> str:
    """The id recorded in ``directory`` ("" when there is none). A read error is an OSError
    (the disk failed); a file that does not hold an id raises :class:`CheckpointError`."""
    try:
        raw = fs.read_file(directory / DIRECTORY_ID)
    except FileNotFoundError:
        return ""
    text = raw.decode("ascii", "replace").strip()
    if not text or not text.isprintable() or len(text) > 128:
        raise CheckpointError(f"{directory / DIRECTORY_ID} does not hold a directory id: {raw[:64]!r}")
    return text


def write_directory_id(fs: FileSystem, directory: Path, directory_id: str) -> None:
    """Record ``directory_id`` durably (file and name fsynced) before anything else is
    written: an id lost in a crash would make a directory that holds data look new."""
    write_atomic(fs, directory / DIRECTORY_ID, directory_id.encode("ascii") + b"\n")
