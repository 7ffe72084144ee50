"""What the coordinators' record formats share: msgpack keys and versioned-map values, strict
decoding (a malformed record is a DecodeError naming what is wrong), and the fence record an
incarnation appends first (key ``[3, partition]``, the same in ``__consumer_offsets`` and
``__transaction_state``)."""

from __future__ import annotations

from typing import Any

import msgpack

from ..protocol.errors import DecodeError, ErrorCode

Record = tuple[bytes, "bytes | None"]

# The key version of the coordinator-epoch (fence) record in both coordinators' topics.
COORDINATOR_KEY_VERSION = 3


def pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def unpack(data: bytes, what: str) -> Any:
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception as exc:
        raise DecodeError(ErrorCode.CORRUPT_MESSAGE, f"{what}: not msgpack ({exc})") from None


def field_of(obj: dict, name: str, types: tuple[type, ...], what: str) -> Any:
    """``obj[name]``, which must be present and of one of ``types`` (exactly: a bool is no int)."""
    if name not in obj:
        raise DecodeError(ErrorCode.CORRUPT_MESSAGE, f"{what}: missing field {name!r}")
    v = obj[name]
    if type(v) not in types:
        raise DecodeError(ErrorCode.CORRUPT_MESSAGE, f"{what}: field {name!r} has type {type(v).__name__}")
    return v


def coordinator_epoch_record(partition: int, epoch: int) -> Record:
    """The record a coordinator incarnation writes first, at its new producer epoch."""
    return pack([COORDINATOR_KEY_VERSION, partition]), pack({"v": 1, "epoch": epoch})
