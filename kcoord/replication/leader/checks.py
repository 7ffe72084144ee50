"""The checks every request to the leader shares: its leader epoch, its partition, its
isolation level, and min.insync.replicas for writes. Each returns ``(error_code, message)``
or None."""

from __future__ import annotations

from typing import Any

from ...protocol import names
from ...protocol.errors import ErrorCode
from ...protocol.replication import READ_COMMITTED, READ_UNCOMMITTED, InternalProduceRequest, ProduceRequest
from ..context import ReplicaContext

Refusal = tuple[int, str]


def epoch_error(st: ReplicaContext, current_leader_epoch: int) -> Refusal | None:
    """A request that names a leader epoch (-1: none) must name ours."""
    epoch = st.leader_epoch
    if current_leader_epoch >= 0:
        if current_leader_epoch < epoch:
            return ErrorCode.FENCED_LEADER_EPOCH, f"request epoch {current_leader_epoch} < leader epoch {epoch}"
        if current_leader_epoch > epoch:
            return ErrorCode.UNKNOWN_LEADER_EPOCH, f"request epoch {current_leader_epoch} > leader epoch {epoch}"
    return None


def partition_error(st: ReplicaContext, req: Any) -> Refusal | None:
    """:func:`epoch_error`, then: the request is for this replica's partition."""
    err = epoch_error(st, req.current_leader_epoch)
    if err is None and (req.topic != st.topic or req.partition != st.partition):
        err = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"this replica holds {st.name}")
    return err


def internal_topic_error(req: ProduceRequest) -> Refusal | None:
    """Only coordinators write internal topics, and only through InternalProduceRequest."""
    internal = names.is_internal_topic(req.topic)
    if internal and type(req) is not InternalProduceRequest:
        return ErrorCode.INVALID_TOPIC_EXCEPTION, f"{req.topic!r} is an internal topic: only its coordinators write it"
    if not internal and type(req) is InternalProduceRequest:
        return ErrorCode.INVALID_REQUEST, f"{req.topic!r} is not an internal topic"
    return None


def isolation_error(isolation_level: int) -> Refusal | None:
    if isolation_level not in (READ_UNCOMMITTED, READ_COMMITTED):
        return ErrorCode.INVALID_REQUEST, f"isolation_level must be 0 (read_uncommitted) or 1 (read_committed), got {isolation_level}"
    return None


def min_isr_error(st: ReplicaContext) -> Refusal | None:
    """An acks=all write (or a marker) is refused while the ISR is below min.insync.replicas."""
    if len(st.isr) < st.config.min_insync_replicas:
        return (
            ErrorCode.NOT_ENOUGH_REPLICAS,
            f"ISR {st.isr} has {len(st.isr)} member(s); min.insync.replicas is {st.config.min_insync_replicas}",
        )
    return None
