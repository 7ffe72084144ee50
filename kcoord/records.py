"""Compatibility: the record batch format moved to :mod:`kcoord.record` (a package, one
concept per module). ``kcoord.records`` re-exports it for code and processes that import
it by this name; kcoord itself imports :mod:`kcoord.record`."""

from __future__ import annotations

from .protocol.errors import ErrorCode, KafkaError  # noqa: F401 (callers reached them here)
from .record import *  # noqa: F401,F403
from .record import __all__ as _record_all
from .record.compression import CODEC_IDS as _CODEC_IDS, CODECS as _CODECS  # noqa: F401
from .record.crc import crc32 as _crc32  # noqa: F401
from .record.header import HEAD as _HEAD, PREFIX as _PREFIX, STAMP as _STAMP, TAIL as _TAIL  # noqa: F401
from .record.header import invalid_record as _invalid  # noqa: F401

__all__ = list(_record_all)
