"""What the transaction coordinator's core asks its driver to do.

Every entry point of :class:`~kcoord.txn.coordinator.TransactionCoordinatorState` returns a
list of these; the driver performs them in order and feeds each outcome back through the
entry point the action names. :class:`Reply` and :class:`AppendRecords` (to this
coordinator's partition of ``__transaction_state``) are the kit's
(:mod:`kcoord.runtime.actions`), shared with the group coordinator.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..protocol.txn import TxnOffsetMarkerRequest, WriteTxnMarkerRequest
from ..runtime.actions import Action, AppendRecords, Reply


@dataclass(frozen=True)
class SendWriteTxnMarker(Action):
    """Send ``request`` to the leader of ``request.topic``-``request.partition`` (finding it
    in the cluster's metadata), and report the outcome with ``on_marker_written(marker_id,
    error_code, now_ms)``: 0 once the leader answered that the marker is written, its error
    otherwise, REQUEST_TIMED_OUT when no answer came. A driver that finds no leader reports
    LEADER_NOT_AVAILABLE, and UNKNOWN_TOPIC_OR_PARTITION only when the metadata it just read
    has no such partition. The core re-sends (with a new id) until it is written."""

    marker_id: int
    request: WriteTxnMarkerRequest


@dataclass(frozen=True)
class SendTxnOffsetMarker(Action):
    """Send ``request`` to group coordinator ``request.partition`` (the owner of that
    ``__consumer_offsets`` partition) and report as for :class:`SendWriteTxnMarker`."""

    marker_id: int
    request: TxnOffsetMarkerRequest


@dataclass(frozen=True)
class AllocateProducerIds(Action):
    """Ask the controller for ``count`` consecutive fresh producer ids (its
    ``InitProducerIdRequest(count=...)``: persisted before it answers, never handed out
    twice) and report with ``on_producer_ids(first_id, count, error_code, now_ms)``."""

    count: int


@dataclass(frozen=True)
class RefreshMetadata(Action):
    """Read the topics' partition counts from the controller and report them with
    ``on_metadata(partitions, now_ms)`` ({topic: partition count}); nothing to report on
    failure (the core asks again when it needs to)."""


TxnAction = Reply | AppendRecords | SendWriteTxnMarker | SendTxnOffsetMarker | AllocateProducerIds | RefreshMetadata

__all__ = [
    "Action",
    "AllocateProducerIds",
    "AppendRecords",
    "RefreshMetadata",
    "Reply",
    "SendTxnOffsetMarker",
    "SendWriteTxnMarker",
    "TxnAction",
]
