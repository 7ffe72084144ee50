"""What the controller state machine asks its shell to do, and how it names replicas.

The shell (actors/controller.py) executes these in order: a :class:`Persist` completes
before anything after it runs, which is how "persist before telling anyone" holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from ..protocol.controller import HeartbeatRequest, LeaderAndIsrRequest
from .actions import Reply  # a controller answers a request like a replica does


class ReplicaId(NamedTuple):
    topic: str
    partition: int
    broker: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}@{self.broker}"


@dataclass(frozen=True)
class Persist:
    """Write ``value`` under ``key`` in the metadata store (None deletes). Must complete
    before any later action runs."""

    key: str
    value: bytes | None


@dataclass(frozen=True)
class CreateReplica:
    """Make sure the actor for ``replica`` exists (create it if missing), with this topic
    config, on ``node`` (None: wherever the scheduler likes; see placement.py); report
    through ``on_replica_created``. A replica that exists is left alone -- unless the
    runtime has been restarting it for longer than ``restart_stuck_ms``
    (``ControllerState.restart_stuck``), then it is replaced."""

    replica: ReplicaId
    config: dict[str, str]
    node: str | None = None


@dataclass(frozen=True)
class DeleteReplica:
    """Stop the replica actor and delete its data."""

    replica: ReplicaId


@dataclass(frozen=True)
class SendLeaderAndIsr:
    replica: ReplicaId
    request: LeaderAndIsrRequest


@dataclass(frozen=True)
class SendHeartbeat:
    replica: ReplicaId
    request: HeartbeatRequest


ControllerAction = Persist | CreateReplica | DeleteReplica | SendLeaderAndIsr | SendHeartbeat | Reply
