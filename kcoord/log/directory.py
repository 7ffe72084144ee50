"""The log directory itself: created durably, its identity, and its count of I/O errors.

*Identity* (``directory.id``, KIP-858's idea per replica): an id given when a log is first
opened in the directory. The replica reports it; the controller remembers it, and a replica
that comes back with another id has lost its disk, whatever its log now says.

*Storage generation* (``lost-pages``): how many times an I/O error took a log of this
directory offline. A failed fsync may make the kernel drop the dirty pages it could not
write (Linux does), so the page cache no longer holds every byte the log's processes wrote.
A replica restarted on the same machine would otherwise count as having kept them (a
process crash loses nothing of the page cache) and could be trusted to lead with a tail
that is gone. The replica adds this number to the storage lineage it reports, so the
controller sees changed storage after such an error even when it never saw the log go
offline (it was down, or the process died first).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable

from .checkpoint import CheckpointError, read_directory_id, read_lost_pages, write_directory_id, write_lost_pages
from .fs import FileSystem

logger = logging.getLogger("kcoord.log")


def make_directory(fs: FileSystem, directory: Path) -> None:
    """Create ``directory`` (and missing parents), each made durable in its parent: a new
    directory whose name is lost in a crash would take its fsynced files along."""
    missing = []
    path = directory
    while not fs.exists(path):
        missing.append(path)
        if path.parent == path:
            break
        path = path.parent
    if missing:
        fs.makedirs(directory)
        for created in reversed(missing):
            fs.fsync_dir(created.parent)


def load_directory_id(fs: FileSystem, directory: Path, new_id: Callable[[], str], where: str) -> str:
    """The directory's id; one from ``new_id()``, written durably, if it has none."""
    try:
        known = read_directory_id(fs, directory)
    except CheckpointError as exc:
        # Unreadable: this directory cannot show it is the one it was, so it counts as a
        # new one (the controller then treats it as having lost its disk).
        logger.warning("%s: %s; giving the directory a new id", where, exc)
        known = ""
    if known:
        return known
    new = new_id()
    write_directory_id(fs, directory, new)
    return new


def record_lost_pages(fs: FileSystem, directory: Path, generation: int) -> int:
    """Count one more I/O error in the directory; the storage generation now (``generation``
    unchanged if the write failed: the controller still learns of the error from
    KAFKA_STORAGE_ERROR if it asks in time). Never raises."""
    new = max(generation, read_lost_pages(fs, directory)) + 1
    return new if write_lost_pages(fs, directory, new) else generation
