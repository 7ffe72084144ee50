"""What the replica state machine asks its shell to do.

The core never sends, sleeps or awaits. Each entry point returns a list of actions; the
actor shell performs them and feeds results back (``on_fetch_response`` and friends).
Pending client requests are identified by an opaque ``token`` the shell chose.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..protocol.codec import Message
from ..protocol.controller import AlterPartitionRequest
from ..protocol.replication import FetchRequest, OffsetsForLeaderEpochRequest


@dataclass(frozen=True)
class Reply:
    """Complete the pending request ``token`` with ``response``. (The controller's answers
    come after the Persist actions they depend on; a topic creation or deletion is answered
    once the replicas were told: its driver waits for the batch's calls.)"""

    token: Any
    response: Message


@dataclass(frozen=True)
class SendFetch:
    """Follower: send ``request`` to the leader (broker ``leader``); report the answer via
    ``Replica.on_fetch_response``. At most one is outstanding."""

    leader: int
    request: FetchRequest


@dataclass(frozen=True)
class SendOffsetsForLeaderEpoch:
    """Follower: ask the leader where an epoch ends, to find the divergence point; report
    via ``Replica.on_offsets_for_leader_epoch_response``."""

    leader: int
    request: OffsetsForLeaderEpochRequest


@dataclass(frozen=True)
class SendAlterPartition:
    """Leader: ask the controller to change the ISR; report via
    ``Replica.on_alter_partition_response``. At most one is outstanding."""

    request: AlterPartitionRequest


Action = Reply | SendFetch | SendOffsetsForLeaderEpoch | SendAlterPartition
