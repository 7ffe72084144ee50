"""Shared builders for replication unit tests: replicas on MemoryLogs, explicit clock."""

from __future__ import annotations

from kcoord import records
from kcoord.log import LogConfig, MemoryLog
from kcoord.protocol.controller import LeaderAndIsrRequest
from kcoord.protocol.replication import FetchRequest, ProduceRequest
from kcoord.replication.actions import Reply
from kcoord.replication.config import ReplicationConfig
from kcoord.replication.replica import Replica

TOPIC = "t"


def make_replica(
    broker: int, config: ReplicationConfig | None = None, log=None, now: int = 0, config_version: int = 0, incarnation: str = ""
) -> Replica:
    """A replica whose config is known current (``config_version`` 0) unless told otherwise
    (-1: a process Ray restarted on its creation-time config)."""
    log = log if log is not None else MemoryLog(LogConfig(flush_messages=1))
    return Replica(TOPIC, 0, broker, log, config or ReplicationConfig(), now, config_version=config_version, incarnation=incarnation)


def lai(leader: int, epoch: int, isr, replicas=(0, 1, 2), partition_epoch: int | None = None, controller_epoch: int = 1) -> LeaderAndIsrRequest:
    return LeaderAndIsrRequest(
        controller_epoch=controller_epoch,
        topic=TOPIC,
        partition=0,
        leader=leader,
        leader_epoch=epoch,
        partition_epoch=epoch if partition_epoch is None else partition_epoch,
        isr=list(isr),
        replicas=list(replicas),
    )


def batch(n: int = 3, tag: bytes = b"v", **kw) -> bytes:
    return records.build_batch_columns([tag + b"%d" % i for i in range(n)], timestamp_ms=1000, **kw)


def produce(replica: Replica, data: bytes, token, now: int, acks: int = -1, timeout_ms: int = 1000, epoch: int = -1):
    return replica.produce(ProduceRequest(TOPIC, 0, data, acks=acks, timeout_ms=timeout_ms, current_leader_epoch=epoch), token, now)


def follower_fetch(leader: Replica, broker: int, offset: int, token, now: int, epoch: int, max_wait_ms: int = 0, incarnation: str = "",
                   log_start: int = 0):
    req = FetchRequest(TOPIC, 0, offset, max_wait_ms=max_wait_ms, replica_id=broker, current_leader_epoch=epoch,
                       replica_incarnation=incarnation, replica_log_start_offset=log_start)
    return leader.fetch(req, token, now)


def consumer_fetch(leader: Replica, offset: int, token, now: int, max_wait_ms: int = 0, epoch: int = -1):
    return leader.fetch(FetchRequest(TOPIC, 0, offset, max_wait_ms=max_wait_ms, current_leader_epoch=epoch), token, now)


def replies(actions) -> dict:
    return {a.token: a.response for a in actions if isinstance(a, Reply)}


def of_type(actions, kind):
    return [a for a in actions if isinstance(a, kind)]


_TOKENS = iter(range(10**9, 2 * 10**9))


def call(replica: Replica, request, now: int = 0):
    """Send ``request`` to ``replica``; returns (its immediate response or None, every action)."""
    token = ("call", next(_TOKENS))
    actions = replica.handle(request, token, now)
    return replies(actions).get(token), actions


def leader_and_isr(replica: Replica, request: LeaderAndIsrRequest, now: int = 0):
    """(LeaderAndIsrResponse, the other actions) -- the shape tests are written against."""
    response, actions = call(replica, request, now)
    return response, [a for a in actions if not (isinstance(a, Reply) and a.response is response)]


def list_offsets(replica: Replica, request):
    return call(replica, request)[0]


def offsets_for_epoch(replica: Replica, request):
    return call(replica, request)[0]


def serve_pending(follower: Replica, leader: Replica, now: int):
    """Answer the follower's one request in flight (OffsetsForLeaderEpoch or Fetch) from
    ``leader`` at once (no long poll) and feed the answer back; returns its actions."""
    import dataclasses

    from kcoord.protocol.replication import FetchRequest

    req = follower.follower_state.in_flight
    assert req is not None, "the follower has nothing in flight"
    if isinstance(req, FetchRequest):
        answer = call(leader, dataclasses.replace(req, max_wait_ms=0), now)[0]
        return follower.on_fetch_response(req, answer, now)
    answer = call(leader, req, now)[0]
    return follower.on_offsets_for_leader_epoch_response(req, answer, now)


def pump(follower: Replica, leader: Replica, now: int) -> list:
    """:func:`serve_pending`, returning the *leader's* actions instead (a DeleteRecords or
    an acks=all produce completing there, an ISR proposal)."""
    import dataclasses

    req = follower.follower_state.in_flight
    assert req is not None, "the follower has nothing in flight"
    if isinstance(req, FetchRequest):
        answer, actions = call(leader, dataclasses.replace(req, max_wait_ms=0), now)
        follower.on_fetch_response(req, answer, now)
    else:
        answer, actions = call(leader, req, now)
        follower.on_offsets_for_leader_epoch_response(req, answer, now)
    return actions
