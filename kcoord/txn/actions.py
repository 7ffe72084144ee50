"""What the transaction coordinator's core asks its driver to do.

Every entry point of :class:`~kcoord.txn.coordinator.TransactionCoordinatorState` returns a
list of these; the driver performs them in order and feeds each outcome back through the
entry point the action names. Pending client requests are identified by an opaque ``token``
the driver chose when it passed the request in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..protocol.codec import Message
from ..protocol.txn import TxnOffsetMarkerRequest, WriteTxnMarkerRequest


@dataclass(frozen=True)
class Reply:
    """Complete the pending request ``token`` with ``response`` (EndTxn, InitProducerId and
    AddPartitionsToTxn are answered only once their record is appended)."""

    token: Any
    response: Message


@dataclass(frozen=True)
class AppendRecords:
    """Append ``records`` (key, value-or-tombstone) to this coordinator's partition of
    ``__transaction_state`` with acks=all, then report the outcome with
    ``on_persisted(persist_id, error_code, now_ms)`` (0: acknowledged by the ISR).

    Appends must land in the order they were emitted (one append in flight, or an
    order-preserving pipeline; consecutive ones may be merged as long as each id is
    reported), and an append reported failed must never land after a later one (the group
    coordinator's driver moves to a new producer epoch after an unknown outcome). The core
    applies outcomes in emission order, so its memory is what a replay of the log rebuilds."""

    persist_id: int
    records: list[tuple[bytes, bytes | None]] = field(default_factory=list)
    reason: str = ""


@dataclass(frozen=True)
class SendWriteTxnMarker:
    """Send ``request`` to the leader of ``request.topic``-``request.partition`` (finding it
    in the cluster's metadata), and report the outcome with ``on_marker_written(marker_id,
    error_code, now_ms)``: 0 once the leader answered that the marker is written, its error
    otherwise, REQUEST_TIMED_OUT when no answer came. A driver that finds no leader reports
    LEADER_NOT_AVAILABLE, and UNKNOWN_TOPIC_OR_PARTITION only when the metadata it just read
    has no such partition. The core re-sends (with a new id) until it is written."""

    marker_id: int
    request: WriteTxnMarkerRequest


@dataclass(frozen=True)
class SendTxnOffsetMarker:
    """Send ``request`` to group coordinator ``request.partition`` (the owner of that
    ``__consumer_offsets`` partition) and report as for :class:`SendWriteTxnMarker`."""

    marker_id: int
    request: TxnOffsetMarkerRequest


@dataclass(frozen=True)
class AllocateProducerIds:
    """Ask the controller for ``count`` consecutive fresh producer ids (its
    ``InitProducerIdRequest(count=...)``: persisted before it answers, never handed out
    twice) and report with ``on_producer_ids(first_id, count, error_code, now_ms)``."""

    count: int


@dataclass(frozen=True)
class RefreshMetadata:
    """Read the topics' partition counts from the controller and report them with
    ``on_metadata(partitions, now_ms)`` ({topic: partition count}); nothing to report on
    failure (the core asks again when it needs to)."""


Action = Reply | AppendRecords | SendWriteTxnMarker | SendTxnOffsetMarker | AllocateProducerIds | RefreshMetadata
