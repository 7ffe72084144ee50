"""The exceptions of the client API beyond :class:`~kcoord.protocol.errors.KafkaError` (which
every client call raises with Kafka's error code and a message naming the problem)."""

from __future__ import annotations

from ..protocol.errors import ErrorCode, KafkaError


class ClusterNotFoundError(LookupError):
    """There is no kcoord cluster of that name on the Ray cluster."""


class NoOffsetForPartitionError(KafkaError):
    """A partition has no position and ``auto_offset_reset="none"`` forbids guessing one."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.OFFSET_OUT_OF_RANGE, message)

    def __reduce__(self):
        return (self.__class__, (self.message,))


class CommitFailedError(KafkaError):
    """The commit was rejected because this member's generation is over (the group
    rebalanced, or the member was removed). Its partitions may belong to another member
    now; poll() to rejoin, and commit only what you processed after the new assignment."""
