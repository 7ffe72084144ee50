"""The log's exceptions: a read outside the offsets the log holds, and a failed disk.

Both are :class:`KafkaError` so the replica can return the code as is:
OFFSET_OUT_OF_RANGE carries the valid range so a consumer can reset without another round
trip; KAFKA_STORAGE_ERROR carries the errno of the I/O error that took the log offline.
"""

from __future__ import annotations

import errno as _errno

from ..protocol.errors import ErrorCode, KafkaStorageError, OffsetOutOfRangeError  # type: ignore[attr-defined]


class OffsetOutOfRange(OffsetOutOfRangeError):
    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(
            ErrorCode.OFFSET_OUT_OF_RANGE,
            f"offset {offset} is outside the log's range [{log_start_offset}, {log_end_offset}]",
        )
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset

    def __reduce__(self):
        return (self.__class__, (self.offset, self.log_start_offset, self.log_end_offset))


class LogStorageError(KafkaStorageError):
    """The file system failed under a log (Kafka's KIP-112 "offline log directory").

    A log that saw one I/O error cannot know what of its last operation reached the disk,
    so it goes offline: this error is raised by the failing call and by every later call on
    the same object. Reopening the directory (after a restart) runs recovery, which finds a
    consistent log again. ``errno`` is the original OS error's (None if it had none), not
    the Kafka code (that is ``code``).
    """

    def __init__(self, message: str, errno: int | None = None) -> None:
        super().__init__(ErrorCode.KAFKA_STORAGE_ERROR, message)
        self.errno = errno

    @property
    def errno_name(self) -> str:
        return _errno.errorcode.get(self.errno, str(self.errno)) if self.errno is not None else "-"

    def __reduce__(self):  # survive pickling across Ray
        return (self.__class__, (self.message, self.errno))
