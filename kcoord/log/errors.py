"""The one log-specific exception: a read outside the offsets the log holds.

It is a :class:`KafkaError` with OFFSET_OUT_OF_RANGE so the fetch path can return the code
as is, and it carries the valid range so a consumer can reset without another round trip.
"""

from __future__ import annotations

from ..protocol.errors import ErrorCode, KafkaError


class OffsetOutOfRange(KafkaError):
    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(
            ErrorCode.OFFSET_OUT_OF_RANGE,
            f"offset {offset} is outside the log's range [{log_start_offset}, {log_end_offset}]",
        )
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset
