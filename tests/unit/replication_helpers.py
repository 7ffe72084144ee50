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


def make_replica(broker: int, config: ReplicationConfig | None = None, log=None, now: int = 0) -> Replica:
    log = log if log is not None else MemoryLog(LogConfig(flush_messages=1))
    return Replica(TOPIC, 0, broker, log, config or ReplicationConfig(), now)


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


def follower_fetch(leader: Replica, broker: int, offset: int, token, now: int, epoch: int, max_wait_ms: int = 0):
    req = FetchRequest(TOPIC, 0, offset, max_wait_ms=max_wait_ms, replica_id=broker, current_leader_epoch=epoch)
    return leader.fetch(req, token, now)


def consumer_fetch(leader: Replica, offset: int, token, now: int, max_wait_ms: int = 0, epoch: int = -1):
    return leader.fetch(FetchRequest(TOPIC, 0, offset, max_wait_ms=max_wait_ms, current_leader_epoch=epoch), token, now)


def replies(actions) -> dict:
    return {a.token: a.response for a in actions if isinstance(a, Reply)}


def of_type(actions, kind):
    return [a for a in actions if isinstance(a, kind)]
