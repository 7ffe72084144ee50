"""What the replica core asks its driver to do, besides replying.

The core never sends, sleeps or awaits. Each entry point returns a list of actions
(:class:`~kcoord.runtime.actions.Action`); the driver performs them and feeds each outcome
back (``on_fetch_response`` and friends). A request's answer is the kit's
:class:`~kcoord.runtime.actions.Reply`, naming the token the driver chose.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..protocol.controller import AlterPartitionRequest
from ..protocol.replication import FetchRequest, OffsetsForLeaderEpochRequest
from ..runtime.actions import Action, Reply


@dataclass(frozen=True)
class SendFetch(Action):
    """Follower: send ``request`` to the leader (broker ``leader``); report the answer via
    ``Replica.on_fetch_response``. At most one is outstanding."""

    leader: int
    request: FetchRequest


@dataclass(frozen=True)
class SendOffsetsForLeaderEpoch(Action):
    """Follower: ask the leader where an epoch ends, to find the divergence point; report
    via ``Replica.on_offsets_for_leader_epoch_response``."""

    leader: int
    request: OffsetsForLeaderEpochRequest


@dataclass(frozen=True)
class SendAlterPartition(Action):
    """Leader: ask the controller to change the ISR; report via
    ``Replica.on_alter_partition_response``. At most one is outstanding."""

    request: AlterPartitionRequest


ReplicaAction = Reply | SendFetch | SendOffsetsForLeaderEpoch | SendAlterPartition

__all__ = ["Action", "Reply", "ReplicaAction", "SendAlterPartition", "SendFetch", "SendOffsetsForLeaderEpoch"]
