"""What a partition replica and its current role share: one explicit object, the context.

A :class:`~kcoord.replication.replica.Replica` plays one role at a time -- a
:class:`~kcoord.replication.leader.Leader` or a :class:`~kcoord.replication.follower.Follower`
-- and both read and change the same facts about the partition: the log, the epochs and
assignment the controller announced, the high watermark, the counters, and the actions
decided so far. They get this object in their constructor instead of sharing attributes
through mixins; everything a role keeps to itself (waiters, follower progress, the fetch
loop's phase) stays in the role.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..runtime.actions import Outbox
from .config import ReplicationConfig
from .roles import NONE, Role


def new_metrics() -> dict[str, int]:
    return {
        "produce_requests": 0,
        "produce_bytes": 0,
        "fetch_requests": 0,
        "fetch_bytes": 0,
        "isr_shrinks": 0,
        "isr_expands": 0,
        "truncations": 0,
        "truncated_records": 0,
    }


@dataclass
class ReplicaContext(Outbox):
    """The partition's facts the replica and its role share, and the actions decided so far
    (the :class:`~kcoord.runtime.actions.Outbox` every core's context is)."""

    topic: str
    partition: int
    broker: int
    log: Any  # kcoord.log.Log or MemoryLog
    config: ReplicationConfig
    # Where this replica runs (a Ray node id): fetches from the same node are answered with
    # file hints instead of bytes. Empty: never.
    node_id: str = ""
    # Which process this is (changes on every restart), reported in heartbeats.
    incarnation: str = ""
    # Which page cache its unflushed writes live in (HeartbeatResponse.storage).
    storage: str = ""
    # The version of the topic config it runs (LeaderAndIsrRequest.config_version); -1:
    # the config it was created with, which may be stale (Ray replays an actor's
    # constructor arguments when it restarts it), until the controller says.
    config_version: int = -1
    role: Role = NONE
    offline_reason: str = ""
    leader: int = -1
    leader_epoch: int = -1
    partition_epoch: int = -1
    controller_epoch: int = -1
    replicas: list[int] = field(default_factory=list)
    isr: list[int] = field(default_factory=list)
    hw: int = 0
    # A process that starts on a log with history, in a topic whose appends are not each
    # fsynced, may have lost its unflushed tail in a crash; until it has caught up with a
    # leader's HW it refuses the first leadership it is offered.
    may_have_lost_data: bool = False
    metrics: dict[str, int] = field(default_factory=new_metrics)
    # The last id given to a transaction verification (KIP-890): unique across leaderships,
    # so an answer from an earlier tenure is recognised as stale.
    last_verify_id: int = 0

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"
