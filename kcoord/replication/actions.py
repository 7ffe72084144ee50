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
from ..protocol.txn import AddPartitionsToTxnRequest
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


@dataclass(frozen=True)
class VerifyTxn(Action):
    """Leader: ask the transaction coordinator of ``request.transactional_id`` whether this
    partition is in the producer's ongoing transaction (``request.verify_only``, KIP-890);
    report via ``Replica.on_txn_verified(verify_id, response, now_ms)`` (None: no answer)."""

    verify_id: int
    request: AddPartitionsToTxnRequest


ReplicaAction = Reply | SendFetch | SendOffsetsForLeaderEpoch | SendAlterPartition | VerifyTxn

__all__ = ["Action", "Reply", "ReplicaAction", "SendAlterPartition", "SendFetch", "SendOffsetsForLeaderEpoch", "VerifyTxn"]
