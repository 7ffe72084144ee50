"""WriteTxnMarker on a partition leader: the transaction coordinator's COMMIT or ABORT of a
producer's transaction in this partition (docs/transactions.md section 1, "Markers").

The leader appends the control batch at its own epoch, with the producer state's checks (a
marker from an older coordinator epoch than the producer's last one is
TRANSACTION_COORDINATOR_FENCED, an older producer epoch INVALID_PRODUCER_EPOCH), and answers
once the marker is below the high watermark, as an acks=all produce: a marker that a
failover could undo was never written. A marker for a producer with no ongoing transaction
is written all the same (the coordinator retries markers until they land).

:func:`append_marker` checks and appends on the shared context; the produce path
(:mod:`.produce`) answers or waits for the HW.
"""

from __future__ import annotations

from ...protocol import names
from ...protocol.errors import ErrorCode, KafkaError
from ...protocol.txn import WriteTxnMarkerRequest, WriteTxnMarkerResponse
from ..context import ReplicaContext
from .checks import min_isr_error, partition_error


def append_marker(st: ReplicaContext, req: WriteTxnMarkerRequest, now_ms: int) -> tuple[WriteTxnMarkerResponse, int]:
    """``(response, required_offset)``: the marker appended, to answer once the HW reaches
    ``required_offset``; or a refusal to answer now (``required_offset`` -1)."""
    err = partition_error(st, req)
    if err is None and names.is_internal_topic(req.topic):
        err = (
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"{req.topic!r} is an internal topic: its coordinators write it (a transaction ends there by TxnOffsetMarker)",
        )
    if err is None and (req.producer_id < 0 or req.producer_epoch < 0):
        err = (ErrorCode.INVALID_REQUEST, f"a marker needs a producer id and epoch, got {req.producer_id}/{req.producer_epoch}")
    if err is None:
        err = min_isr_error(st)
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
