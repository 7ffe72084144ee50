"""What the controller core asks its driver to do, and how it names replicas.

The driver executes these in order: a :class:`Persist` completes before anything after it
runs, which is how "persist before telling anyone" holds. A request's answer is the kit's
:class:`~kcoord.runtime.actions.Reply`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from ..protocol.controller import HeartbeatRequest, LeaderAndIsrRequest
from ..runtime.actions import Action, Reply


class ReplicaId(NamedTuple):
    topic: str
    partition: int
    broker: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}@{self.broker}"


@dataclass(frozen=True)
class Persist(Action):
    """Write ``value`` under ``key`` in the metadata store (None deletes). Must complete
    before any later action runs."""

    key: str
    value: bytes | None


@dataclass(frozen=True)
class CreateReplica(Action):
    """Make sure the actor for ``replica`` exists (create it if missing), with this topic
    config, on ``node`` (None: wherever the scheduler likes; see placement.py); report
    through ``on_replica_ensured``. A replica that exists is left alone -- unless the
    runtime has been restarting it for longer than ``restart_stuck_ms``
    (``ControllerState.restart_stuck``), then it is replaced. The outcome goes to
    ``on_replica_ensured``: one of the results below."""

    replica: ReplicaId
    config: dict[str, str]
    node: str | None = None


# CreateReplica's outcomes
EXISTS = "exists"
CREATED = "created"
REPLACED = "replaced"  # it was stuck restarting and was killed; the next ensure creates it
FAILED = "failed"


@dataclass(frozen=True)
class DeleteReplica(Action):
    """Stop the replica actor and delete its data."""

    replica: ReplicaId


@dataclass(frozen=True)
class SendLeaderAndIsr(Action):
    replica: ReplicaId
    request: LeaderAndIsrRequest


@dataclass(frozen=True)
class SendHeartbeat(Action):
    replica: ReplicaId
    request: HeartbeatRequest


ControllerAction = Persist | CreateReplica | DeleteReplica | SendLeaderAndIsr | SendHeartbeat | Reply
