"""The CRC of a batch: zlib's CRC-32 for kcoord's own format (magic 1), CRC-32C for Kafka's
v2 batches (magic 2), over bytes [CRC_START, end)."""

from __future__ import annotations

import zlib
from typing import Any, Callable

from .header import CRC_START, FORMAT_VERSION, KAFKA_FORMAT, MAGIC_AT, CorruptRecordError


def crc32(data: Any) -> int:
    """zlib's CRC-32 (magic 1)."""
    return zlib.crc32(data) & 0xFFFFFFFF


try:
    from crc32c import crc32c as _crc32c  # hardware CRC-32C (SSE4.2/ARMv8), C fallback
except ImportError:  # pragma: no cover - crc32c is a pinned dependency
    _crc32c = None


def crc32c(data: Any) -> int:
    """CRC-32C (magic 2); CorruptRecordError when the crc32c package is missing."""
    if _crc32c is None:
        raise CorruptRecordError("Kafka-format batch, but the crc32c package is not installed")
    return _crc32c(data)


# magic -> the CRC function of that payload format
CRC_FUNCTIONS: dict[int, Callable[[Any], int]] = {FORMAT_VERSION: crc32, KAFKA_FORMAT: crc32c}


def compute_crc(buf: bytes | bytearray | memoryview, pos: int, size: int) -> int:
    """The CRC of the batch at ``pos``, with the function its magic byte names."""
    mv = memoryview(buf)
    fn = CRC_FUNCTIONS.get(mv[pos + MAGIC_AT] if len(mv) > pos + MAGIC_AT else FORMAT_VERSION, crc32)
    return fn(mv[pos + CRC_START : pos + size])
