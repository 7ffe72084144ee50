"""Durable partition log: segments, sparse index, leader-epoch cache, HW checkpoint, recovery.

Pure Python and Ray-free; the replica actor owns one :class:`Log` per partition, and the
replication simulation uses :class:`MemoryLog`, which behaves the same in memory, or the
real :class:`Log` on a simulated disk (any :class:`FileSystem`, ``Log(..., fs=disk)``).

Layout of a log directory::

    00000000000000000000.log              batches, exactly as appended
    00000000000000000000.index            sparse offset index of that segment
    00000000000000001234.log / .index     the next segment, starting at offset 1234
    leader-epoch-checkpoint               epoch -> start offset (text)
    high-watermark-checkpoint             last checkpointed HW (text)
    recovery-point-checkpoint             segments ending at or before it are fsynced (text)
    log-start-offset-checkpoint           the log start offset, when above the first segment's base
                                          (DeleteRecords, a follower that learnt it from its leader)
    cleaner-offset-checkpoint             compacted topics: where the cleaner's dirty section starts
    tombstone-horizon-checkpoint          compacted topics: one past the last tombstone the cleaner removed
    tombstone-clock-checkpoint            compacted topics: (end, ms) of the cleaner's passes, when each
                                          part of the log was first passed (tombstone_clock.py)
    fetched-compacted-checkpoint          a follower's: the HW of the leader whose compacted batches it
                                          fetched (its log may lack superseded records below it)
    00000000000000001234.producer-snapshot  producer state as of offset 1234 (msgpack)
    00000000000000001234.txnindex         aborted transactions whose ABORT marker is in that
                                          segment (Kafka's 34-byte entries, txn_index.py)
    .kcoord-clean-shutdown                present only between close() and the next open
    .lock                                 flock'ed while a Log has the directory open
"""

from .base import AppendInfo, BaseLog
from .config import LogConfig
from .epochs import EpochEntry, LeaderEpochCache
from .errors import LogStorageError, OffsetOutOfRange
from .fs import FileSystem, OsFileSystem
from .log import Log, SegmentInfo
from .memory import MemoryLog
from .producer_state import ProducerCheck, ProducerStateManager
from .recovery import RecoveryReport

__all__ = [
    "AppendInfo",
    "BaseLog",
    "EpochEntry",
    "FileSystem",
    "LeaderEpochCache",
    "Log",
    "LogConfig",
    "LogStorageError",
    "MemoryLog",
    "OffsetOutOfRange",
    "OsFileSystem",
    "ProducerCheck",
    "ProducerStateManager",
    "RecoveryReport",
    "SegmentInfo",
]
