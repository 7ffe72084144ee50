"""Compression codecs of a batch's payload, by the id in bits 0-2 of its attributes."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Callable

from ..protocol.errors import ErrorCode, KafkaError
from .header import COMPRESSION_MASK

KAFKA_CODECS = (0, 1, 2, 3, 4)  # none, gzip, snappy, lz4, zstd: what every node can read


@dataclass(frozen=True)
class Codec:
    id: int
    name: str
    compress: Callable[[bytes], bytes]
    decompress: Callable[[bytes], bytes]


CODECS: dict[int, Codec] = {}  # id -> codec (register_codec adds to it)
CODEC_IDS: dict[str, int] = {}  # name -> id


def register_codec(codec_id: int, name: str, compress: Callable[[bytes], bytes], decompress: Callable[[bytes], bytes]) -> None:
    """Add a compression codec (ids 1-7; Kafka uses 1 gzip, 2 snappy, 3 lz4, 4 zstd)."""
    if not 0 < codec_id <= COMPRESSION_MASK:
        raise ValueError(f"codec id must be in 1..{COMPRESSION_MASK}, got {codec_id}")
    CODECS[codec_id] = Codec(codec_id, name, compress, decompress)
    CODEC_IDS[name] = codec_id


def codec_id(name: str | None) -> int:
    """Compression id for a ``compression_type`` name (None or "none" -> 0)."""
    if name is None or name == "none":
        return 0
    try:
        return CODEC_IDS[name]
    except KeyError:
        raise KafkaError(
            ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
            f"compression_type {name!r} is not available; known: {sorted(['none', *CODEC_IDS])}",
        ) from None


def available_codecs() -> list[str]:
    return ["none", *sorted(CODEC_IDS)]


# gzip container via zlib (wbits=31): same format as Kafka's gzip codec, C speed.
register_codec(1, "gzip", lambda b: zlib.compress(b, 1, 31), lambda b: zlib.decompress(b, 47))
try:  # snappy, lz4 (frame format, as Kafka) and zstd from one library: cramjam
    import cramjam as _cj  # type: ignore

    register_codec(2, "snappy", lambda b: bytes(_cj.snappy.compress_raw(b)), lambda b: bytes(_cj.snappy.decompress_raw(b)))
    register_codec(3, "lz4", lambda b: bytes(_cj.lz4.compress(b)), lambda b: bytes(_cj.lz4.decompress(b)))
    register_codec(4, "zstd", lambda b: bytes(_cj.zstd.compress(b)), lambda b: bytes(_cj.zstd.decompress(b)))
except ImportError:  # pragma: no cover - cramjam is a pinned dependency
    pass
