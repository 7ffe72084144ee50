"""The leader's answers from what it holds, with no waiting: ListOffsets,
OffsetsForLeaderEpoch and DescribeProducers."""

from __future__ import annotations

from ...protocol.replication import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    READ_COMMITTED,
    DescribeProducersRequest,
    DescribeProducersResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetsForLeaderEpochRequest,
    OffsetsForLeaderEpochResponse,
    ProducerState,
)
from ... import record
from ...protocol.errors import ErrorCode, KafkaError
from ..context import ReplicaContext
from .checks import epoch_error, isolation_error
from .watermark import HighWatermark


def list_offsets(st: ReplicaContext, watermark: HighWatermark, req: ListOffsetsRequest) -> ListOffsetsResponse:
    err = epoch_error(st, req.current_leader_epoch)
    if err is None:
        err = isolation_error(req.isolation_level)
    if err is not None:
        return ListOffsetsResponse(err[0], err[1], leader_epoch=st.leader_epoch)
    log = st.log
    if req.timestamp == EARLIEST_TIMESTAMP:
        return ListOffsetsResponse(offset=log.log_start_offset, leader_epoch=st.leader_epoch)
    err = watermark.stale_error()
    if err is not None:
        return ListOffsetsResponse(err[0], err[1], leader_epoch=st.leader_epoch)
    visible = log.last_stable_offset(st.hw) if req.isolation_level == READ_COMMITTED else st.hw
    if req.timestamp == LATEST_TIMESTAMP:
        return ListOffsetsResponse(offset=visible, leader_epoch=st.leader_epoch)
    if req.timestamp < 0:
        return ListOffsetsResponse(ErrorCode.INVALID_REQUEST, f"timestamp {req.timestamp} is not -1, -2 or >= 0")
    found = log.offset_for_timestamp(req.timestamp)
    if found is None or found[0] >= visible:
        return ListOffsetsResponse(offset=-1, timestamp=-1, leader_epoch=st.leader_epoch)
    return ListOffsetsResponse(offset=found[0], timestamp=found[1], leader_epoch=st.leader_epoch)


def offsets_for_leader_epoch(st: ReplicaContext, req: OffsetsForLeaderEpochRequest) -> OffsetsForLeaderEpochResponse:
    err = epoch_error(st, req.current_leader_epoch)
    if err is not None:
        return OffsetsForLeaderEpochResponse(err[0], err[1])
    epoch, end = st.log.epoch_cache.end_offset_for(req.leader_epoch, st.log.log_end_offset)
    return OffsetsForLeaderEpochResponse(leader_epoch=epoch, end_offset=end)


def _batch_timestamp(st: ReplicaContext, offset: int) -> int:
    """The max timestamp of the batch at ``offset`` (Kafka's lastTimestamp of a producer);
    -1 once retention or the cleaner removed it."""
    try:
        data = st.log.read(offset, 1)
    except KafkaError:
        return -1
    if len(data) < record.HEADER_SIZE:
        return -1
    h = record.read_header(data)
    return h.max_timestamp if h.base_offset <= offset <= h.last_offset else -1


def describe_producers(st: ReplicaContext, req: DescribeProducersRequest) -> DescribeProducersResponse:
    """Kafka's DescribeProducers: each idempotent producer's epoch and last sequence, with
    the HW, below which they are committed."""
    err = epoch_error(st, req.current_leader_epoch)
    if err is not None:
        return DescribeProducersResponse(err[0], err[1], leader_epoch=st.leader_epoch)
    state = st.log.producer_state
    wanted = state.producer_ids() if req.producer_ids is None else req.producer_ids
    found = []
    for pid in wanted:
        entry = state.get(pid)
        if entry is not None and (entry.batches or entry.txn_first_offset >= 0 or entry.coordinator_epoch >= 0):
            last = entry.batches[-1].last_offset if entry.batches else -1
            found.append(
                ProducerState(pid, entry.epoch, entry.last_seq, last, entry.coordinator_epoch, entry.txn_first_offset, _batch_timestamp(st, entry.batches[-1].base_offset) if entry.batches else -1)
            )
    return DescribeProducersResponse(producers=found, high_watermark=st.hw, leader_epoch=st.leader_epoch)
