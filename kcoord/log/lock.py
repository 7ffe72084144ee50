"""An exclusive lock on a log directory, so two processes never write one log.

On Ray a replica actor can be recreated while its old process is still winding down;
two writers appending to the same segment would interleave batches and corrupt it. An
advisory ``flock`` on a ``.lock`` file makes the second open fail instead. The kernel
drops the lock when its holder dies, even by SIGKILL, so a crash never leaves it stuck --
but dying takes a moment, and on a loaded node Ray may start the replacement before the
old process is gone. ``wait_s`` lets the new opener wait that out instead of failing.

The lock itself is the file system's (:meth:`FileSystem.lock`), so a simulated disk can
drop it when its simulated process dies.
"""

from __future__ import annotations

import time
from pathlib import Path

from ..protocol.errors import ErrorCode, KafkaError
from .fs import OS_FILE_SYSTEM, FileSystem

LOCK_FILE = ".lock"


class DirectoryLock:
    def __init__(self, directory: Path, wait_s: float = 0.0, fs: FileSystem = OS_FILE_SYSTEM) -> None:
        """Take the lock, retrying for up to ``wait_s`` seconds while another holder has it;
        KAFKA_STORAGE_ERROR if it is still held then."""
        self.path = Path(directory) / LOCK_FILE
        self._fs = fs
        self._handle = fs.lock(self.path)
        if self._handle is not None:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            time.sleep(0.05)  # the holder is (most likely) a process that is exiting
            self._handle = fs.lock(self.path)
            if self._handle is not None:
                return
        waited = f" after waiting {wait_s:g} s" if wait_s > 0 else ""
        raise KafkaError(
            ErrorCode.KAFKA_STORAGE_ERROR, f"log directory {directory} is already open (locked by another Log){waited}"
        )

    @property
    def held(self) -> bool:
        return self._handle is not None

    def release(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            self._fs.unlock(handle)
