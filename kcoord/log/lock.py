"""An exclusive lock on a log directory, so two processes never write one log.

On Ray a replica actor can be recreated while its old process is still winding down;
two writers appending to the same segment would interleave batches and corrupt it. An
advisory ``flock`` on a ``.lock`` file makes the second open fail instead. The kernel
drops the lock when its holder dies, even by SIGKILL, so a crash never leaves it stuck.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from ..protocol.errors import ErrorCode, KafkaError

LOCK_FILE = ".lock"


class DirectoryLock:
    def __init__(self, directory: Path) -> None:
        self.path = directory / LOCK_FILE
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._fd)
            self._fd = None
            raise KafkaError(
                ErrorCode.KAFKA_STORAGE_ERROR, f"log directory {directory} is already open (locked by another Log)"
            ) from None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None
