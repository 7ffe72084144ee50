"""WriteTxnMarker on a partition leader: the transaction coordinator's COMMIT or ABORT of a
producer's transaction in this partition (docs/transactions.md section 1, "Markers").

The leader appends the control batch at its own epoch, with the producer state's checks (a
marker from an older coordinator epoch than the producer's last one is
TRANSACTION_COORDINATOR_FENCED, an older producer epoch INVALID_PRODUCER_EPOCH), and answers
once the marker is below the high watermark, as an acks=all produce: a marker that a
failover could undo was never written. A marker for a producer with no ongoing transaction
is written all the same (the coordinator retries markers until they land).

:func:`append_marker` checks and appends on the shared context; the
:class:`~kcoord.replication.leader.Leader` answers or waits for the HW (this module never
imports the leader, so the two do not import each other).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..protocol import names
from ..protocol.errors import ErrorCode, KafkaError
from ..protocol.txn import WriteTxnMarkerRequest, WriteTxnMarkerResponse

if TYPE_CHECKING:
    from .context import ReplicaContext


def append_marker(
    st: "ReplicaContext", req: WriteTxnMarkerRequest, epoch_error: tuple[int, str] | None, now_ms: int
) -> tuple[WriteTxnMarkerResponse, int]:
    """``(response, required_offset)``: the marker appended, to answer once the HW reaches
    ``required_offset``; or a refusal to answer now (``required_offset`` -1).
    ``epoch_error`` is the leader's verdict on the request's leader epoch."""
    err = epoch_error
    if err is None and (req.topic != st.topic or req.partition != st.partition):
        err = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"this replica holds {st.name}")
    if err is None and names.is_internal_topic(req.topic):
        err = (
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"{req.topic!r} is an internal topic: its coordinators write it (a transaction ends there by TxnOffsetMarker)",
        )
    if err is None and (req.producer_id < 0 or req.producer_epoch < 0):
        err = (ErrorCode.INVALID_REQUEST, f"a marker needs a producer id and epoch, got {req.producer_id}/{req.producer_epoch}")
    if err is None and len(st.isr) < st.config.min_insync_replicas:
        err = (
            ErrorCode.NOT_ENOUGH_REPLICAS,
            f"ISR {st.isr} has {len(st.isr)} member(s); min.insync.replicas is {st.config.min_insync_replicas}",
        )
    if err is not None:
        return WriteTxnMarkerResponse(err[0], err[1], leader_epoch=st.leader_epoch), -1
    try:
        info = st.log.append_control_as_leader(
            commit=req.commit,
            producer_id=req.producer_id,
            producer_epoch=req.producer_epoch,
            coordinator_epoch=req.coordinator_epoch,
            leader_epoch=st.leader_epoch,
            now_ms=now_ms,
        )
    except KafkaError as exc:
        if exc.code == ErrorCode.KAFKA_STORAGE_ERROR:
            raise  # the log failed: the replica goes offline
        return WriteTxnMarkerResponse(int(exc.code), exc.message, leader_epoch=st.leader_epoch), -1
    st.metrics["txn_markers"] = st.metrics.get("txn_markers", 0) + 1
    return WriteTxnMarkerResponse(offset=info.base_offset, leader_epoch=st.leader_epoch), info.last_offset + 1
