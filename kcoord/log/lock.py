"""An exclusive lock on a log directory, so two processes never write one log.

On Ray a replica actor can be recreated while its old process is still winding down;
two writers appending to the same segment would interleave batches and corrupt it. An
advisory ``flock`` on a ``.lock`` file makes the second open fail instead. The kernel
drops the lock when its holder dies, even by SIGKILL, so a crash never leaves it stuck --
but dying takes a moment, and on a loaded node Ray may start the replacement before the
old process is gone. ``wait_s`` lets the new opener wait that out instead of failing.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from ..protocol.errors import ErrorCode, KafkaError

LOCK_FILE = ".lock"


class DirectoryLock:
    def __init__(self, directory: Path, wait_s: float = 0.0) -> None:
        """Take the lock, retrying for up to ``wait_s`` seconds while another holder has it;
        KAFKA_STORAGE_ERROR if it is still held then."""
        self.path = directory / LOCK_FILE
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.05)  # the holder is (most likely) a process that is exiting
        os.close(self._fd)
        self._fd = None
        waited = f" after waiting {wait_s:g} s" if wait_s > 0 else ""
        raise KafkaError(
            ErrorCode.KAFKA_STORAGE_ERROR, f"log directory {directory} is already open (locked by another Log){waited}"
        )

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None
