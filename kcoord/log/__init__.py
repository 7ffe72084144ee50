"""Durable partition log: segments, sparse index, leader-epoch cache, HW checkpoint, recovery.

Pure Python and Ray-free; the replica actor owns one :class:`Log` per partition, and the
replication simulation uses :class:`MemoryLog`, which behaves the same in memory, or the
real :class:`Log` on a simulated disk (any :class:`FileSystem`, ``Log(..., fs=disk)``).
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
