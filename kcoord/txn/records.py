"""Records of the internal ``__transaction_state`` topic: what a transaction coordinator writes
and replays.

* transaction metadata  key ``[1, transactional_id]`` -> :class:`TxnValue`, or ``None`` (a
  tombstone: the id expired after ``transactional.id.expiration.ms``);
* coordinator epoch     key ``[3, partition]`` -> ``{"v": 1, "epoch": E}``: written by each
  coordinator incarnation when it takes its partition over (the fence the group coordinators
  write too, ``kcoord.group.records``); carries no transaction state, so replay skips it like
  any key version it does not know.

Each value is the *whole* state of its id after a transition, so the last record of a key is
the id's state: replay keeps the last one per key, exactly what log compaction keeps. Keys are
msgpack arrays (one logical key, one byte string); values are msgpack maps with a ``"v"``
version and named fields, so a later version can add fields that older readers ignore.
Readers skip keys of unknown versions (a newer kcoord wrote them) and raise
:class:`DecodeError` (CORRUPT_MESSAGE) on malformed records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from ..coordination.records import COORDINATOR_KEY_VERSION, coordinator_epoch_record
from ..coordination.records import field_of as _field
from ..coordination.records import pack as _pack
from ..coordination.records import unpack as _unpack
from ..protocol import names
from ..protocol.errors import DecodeError, ErrorCode
from .state import MAX_PRODUCER_EPOCH, PERSISTED_STATES, TransactionState

TRANSACTION_STATE_TOPIC = names.TRANSACTION_STATE_TOPIC

# segment.bytes of __transaction_state: 16 MiB, as __consumer_offsets (kcoord.group.records):
# the cleaner never touches the active segment, so a load replays the live ids plus up to
# about one segment of history.
TRANSACTION_STATE_SEGMENT_BYTES = 16 * 2**20

TXN_KEY_VERSION = 1
TXN_VALUE_VERSION = 1

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1

Record = tuple[bytes, "bytes | None"]
TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class TxnKey:
    transactional_id: str


@dataclass(frozen=True)
class TxnValue:
    """A transactional id's state after a transition (Kafka's TransactionLogValue).

    ``producer_id``/``producer_epoch``: the current identity. ``prev_producer_id``: the
    producer id before the last transition (it differs after a rotation: KIP-360 lets a retry
    of that rotation in). ``next_producer_id``: the id a PREPARE_* transaction rotates to when
    it completes, because its epoch ran out (KIP-890 part 2), else -1.
    ``last_producer_epoch``: the epoch before the last bump made for this producer (a retried
    InitProducerId or EndTxn is recognised by it), -1 after a bump that fenced someone.
    ``partitions``: the transaction's, sorted. ``start_ms``: when it began (-1: none since the
    last InitProducerId); ``start_epoch``: the epoch its writes carry, which stays when a new
    two-phase instance keeps it at a bumped epoch (KIP-939: the new instance compares it with
    what the old one prepared). ``two_phase``: KIP-939, no timeout. ``bump_epoch``: the last
    EndTxn asked for an epoch per transaction (Kafka's transaction version 2)."""

    producer_id: int
    producer_epoch: int
    state: TransactionState
    timeout_ms: int
    last_update_ms: int
    partitions: tuple[TopicPartition, ...] = ()
    start_ms: int = -1
    start_epoch: int = NO_PRODUCER_EPOCH
    prev_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    two_phase: bool = False
    bump_epoch: bool = False


# -- encoding --------------------------------------------------------------------------------


def encode_key(key: TxnKey) -> bytes:
    return _pack([TXN_KEY_VERSION, key.transactional_id])


def encode_value(value: TxnValue) -> bytes:
    return _pack(
        {
            "v": TXN_VALUE_VERSION,
            "pid": value.producer_id,
            "epoch": value.producer_epoch,
            "state": value.state.kafka_id,
            "timeout_ms": value.timeout_ms,
            "update_ms": value.last_update_ms,
            "partitions": [[t, p] for t, p in value.partitions],
            "start_ms": value.start_ms,
            "start_epoch": value.start_epoch,
            "prev_pid": value.prev_producer_id,
            "next_pid": value.next_producer_id,
            "last_epoch": value.last_producer_epoch,
            "two_phase": value.two_phase,
            "bump": value.bump_epoch,
        }
    )


def txn_record(transactional_id: str, value: TxnValue | None) -> Record:
    """The record of a transition (``None``: the id's tombstone)."""
    return encode_key(TxnKey(transactional_id)), None if value is None else encode_value(value)


# -- decoding --------------------------------------------------------------------------------


def decode_key(data: bytes) -> TxnKey | None:
    """The key, or None for a key version this reader does not know (skip the record)."""
    what = "__transaction_state key"
    obj = _unpack(data, what)
    if not isinstance(obj, list) or not obj or type(obj[0]) is not int:
        raise DecodeError(ErrorCode.CORRUPT_MESSAGE, f"{what}: expected [version, ...]")
    if obj[0] != TXN_KEY_VERSION:
        return None
    if len(obj) == 2 and type(obj[1]) is str and obj[1]:
        return TxnKey(obj[1])
    raise DecodeError(ErrorCode.CORRUPT_MESSAGE, f"{what}: malformed {obj!r}")


def _bad(what: str, why: str) -> DecodeError:
    return DecodeError(ErrorCode.CORRUPT_MESSAGE, f"{what}: {why}")


def decode_value(data: bytes) -> TxnValue:
    what = "transaction metadata value"
    obj = _unpack(data, what)
    if not isinstance(obj, dict) or type(obj.get("v")) is not int:
        raise _bad(what, "expected a versioned map")
    state_id = _field(obj, "state", (int,), what)
    try:
        state = TransactionState.from_kafka_id(state_id)
    except ValueError:
        raise _bad(what, f"unknown state id {state_id}") from None
    if state not in PERSISTED_STATES:
        raise _bad(what, f"state {state.value} is never written")
    raw_partitions = _field(obj, "partitions", (list,), what)
    partitions = []
    for tp in raw_partitions:
        if not (isinstance(tp, list) and len(tp) == 2 and type(tp[0]) is str and type(tp[1]) is int and tp[1] >= 0):
            raise _bad(what, f"malformed partition {tp!r}")
        partitions.append((tp[0], tp[1]))
    value = TxnValue(
        producer_id=_field(obj, "pid", (int,), what),
        producer_epoch=_field(obj, "epoch", (int,), what),
        state=state,
        timeout_ms=_field(obj, "timeout_ms", (int,), what),
        last_update_ms=_field(obj, "update_ms", (int,), what),
        partitions=tuple(sorted(set(partitions))),
        start_ms=_field(obj, "start_ms", (int,), what),
        start_epoch=_field(obj, "start_epoch", (int,), what),
        prev_producer_id=_field(obj, "prev_pid", (int,), what),
        next_producer_id=_field(obj, "next_pid", (int,), what),
        last_producer_epoch=_field(obj, "last_epoch", (int,), what),
        two_phase=_field(obj, "two_phase", (bool,), what),
        bump_epoch=_field(obj, "bump", (bool,), what),
    )
    if value.producer_id < 0:
        raise _bad(what, f"producer id {value.producer_id}")
    if not 0 <= value.producer_epoch <= MAX_PRODUCER_EPOCH:
        raise _bad(what, f"producer epoch {value.producer_epoch}")
    return value


def decode_record(key: bytes, value: bytes | None) -> tuple[TxnKey, TxnValue | None] | None:
    """Decode one record of the topic; None when its key version is unknown (skip it)."""
    k = decode_key(key)
    if k is None:
        return None
    return k, None if value is None else decode_value(value)


def replay(records: Iterable[Record]) -> dict[str, TxnValue]:
    """The state of every live transactional id after ``records``, in log order (the last
    record of a key wins; a tombstone removes). Raises DecodeError on a malformed record."""
    out: dict[str, TxnValue] = {}
    for key, value in records:
        decoded = decode_record(key, value)
        if decoded is None:
            continue
        k, v = decoded
        if v is None:
            out.pop(k.transactional_id, None)
        else:
            out[k.transactional_id] = v
    return out
