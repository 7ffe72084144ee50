"""The leader role: one entry point per request it serves, and the timers; the work is its
parts', each a concept with its own file, all sharing the replica's
:class:`~kcoord.replication.context.ReplicaContext` and the leadership's
:class:`~kcoord.replication.isr.IsrState`:

* :mod:`.produce` -- Produce and WriteTxnMarker: checks, parked out-of-order batches, the append;
* :mod:`.txn_verification` -- KIP-890: a transaction's first batch here verified with its coordinator;
* :mod:`.watermark` -- the high watermark and the acks=all writes waiting for it;
* :mod:`.fetch` -- followers' and consumers' fetches, long-polled;
* :mod:`.isr_proposals` -- AlterPartition proposals to the controller and their answers;
* :mod:`.deletes` -- DeleteRecords and the low watermark it waits for;
* :mod:`.queries` -- ListOffsets, OffsetsForLeaderEpoch, DescribeProducers.

The ISR and HW rules themselves are :mod:`kcoord.replication.isr`; what the leader keeps to
itself is who waits for what (acks=all producers, parked fetches) and the proposal in flight.
The parts that need the HW are handed the :class:`~.watermark.HighWatermark`; whatever
else follows an append, a follower's fetch or an AlterPartition answer across parts is
ordered once, here (:meth:`Leader._appended`, :meth:`Leader._follower_fetched`,
:meth:`Leader.maybe_advance_hw`, :meth:`Leader.on_alter_partition_response`).
"""

from __future__ import annotations

from typing import Any

from ...protocol.controller import AlterPartitionRequest, AlterPartitionResponse
from ...protocol.replication import (
    DeleteRecordsRequest,
    DescribeProducersRequest,
    FetchRequest,
    ListOffsetsRequest,
    OffsetsForLeaderEpochRequest,
    ProduceRequest,
)
from ...protocol.txn import WriteTxnMarkerRequest
from ..context import ReplicaContext
from ..isr import IsrState
from . import queries
from .deletes import RecordDeletion
from .fetch import FetchServing
from .isr_proposals import IsrProposals
from .produce import ProducePath
from .watermark import HighWatermark


class Leader:
    def __init__(self, state: ReplicaContext, now_ms: int) -> None:
        """Take the lead at ``state.leader_epoch``. The new epoch starts at our log end even
        before we append: a follower asking where its older epoch ends is told "here". (The
        epoch checkpoint is written before anything else: if that fails the replica goes
        offline, never a leader without its state.)"""
        self.state = state
        log = state.log
        leo = log.log_end_offset
        log.epoch_cache.assign(state.leader_epoch, leo)
        state.hw = min(state.hw, leo)
        self.isr = IsrState.start(state.broker, state.leader_epoch, leo, state.replicas, state.isr, state.partition_epoch, now_ms)
        self.watermark = HighWatermark(state, self.isr)
        self.producing = ProducePath(state, self.watermark, self._appended)
        self.fetching = FetchServing(state, self.isr, self.watermark, self._follower_fetched)
        self.proposals = IsrProposals(state, self.isr)
        self.deletion = RecordDeletion(state, self.isr, self.watermark, now_ms)

    # -- requests ----------------------------------------------------------------------------
    def produce(self, req: ProduceRequest, token: Any, now_ms: int) -> None:
        self.producing.produce(req, token, now_ms)

    def write_txn_marker(self, req: WriteTxnMarkerRequest, token: Any, now_ms: int) -> None:
        self.producing.write_txn_marker(req, token, now_ms)

    def on_txn_verified(self, verify_id: int, response: Any, now_ms: int) -> None:
        self.producing.on_txn_verified(verify_id, response, now_ms)

    def fetch(self, req: FetchRequest, token: Any, now_ms: int) -> None:
        self.fetching.fetch(req, token, now_ms)

    def delete_records(self, req: DeleteRecordsRequest, token: Any, now_ms: int) -> None:
        self.deletion.delete_records(req, token, now_ms)

    def list_offsets(self, req: ListOffsetsRequest, token: Any, now_ms: int) -> None:
        self.state.reply(token, queries.list_offsets(self.state, self.watermark, req))

    def offsets_for_leader_epoch(self, req: OffsetsForLeaderEpochRequest, token: Any, now_ms: int) -> None:
        self.state.reply(token, queries.offsets_for_leader_epoch(self.state, req))

    def describe_producers(self, req: DescribeProducersRequest, token: Any, now_ms: int) -> None:
        self.state.reply(token, queries.describe_producers(self.state, req))

    # -- what follows an append, a follower's fetch, an answer -------------------------------
    def _appended(self, now_ms: int) -> None:
        """New records in the log: followers' parked fetches get them, and the HW moves if
        the ISR allows (a partition with one in-sync replica commits at once)."""
        self.fetching.wake(followers=True)
        self.maybe_advance_hw(now_ms)

    def _follower_fetched(self, now_ms: int) -> None:
        """A follower's fetch moved its progress: the HW, the ISR and the low watermark may
        follow."""
        self.maybe_advance_hw(now_ms)
        self.proposals.propose(now_ms)
        self.deletion.complete(now_ms)

    def maybe_advance_hw(self, now_ms: int) -> None:
        """Move the HW if the ISR allows; consumers' parked fetches see the new one."""
        if self.watermark.advance():
            self.fetching.wake(followers=False)

    def hw_is_stale(self) -> bool:
        return self.watermark.stale()

    def low_watermark(self, now_ms: int) -> int:
        return self.deletion.low_watermark(now_ms)

    def on_alter_partition_response(self, request: AlterPartitionRequest, response: AlterPartitionResponse | None, now_ms: int) -> None:
        """The answer to our AlterPartition ``request``; None means the controller could
        not be reached (or could not say whether it applied the change)."""
        adopted = self.proposals.on_response(request, response, now_ms)
        if adopted is None:
            return
        changed, accepted = adopted
        if changed:
            # their LEOs count for the HW again only after a new fetch (see isr.py); a
            # parked fetch would hold the HW until its wait ends, and proves nothing about
            # the follower's process today (it may have lost power since sending it)
            self.fetching.wake(followers=True, force=True)
        self.maybe_advance_hw(now_ms)
        self.deletion.complete(now_ms)  # a member that left counts no more
        if accepted:
            self.proposals.propose(now_ms)

    def on_controller_epoch(self, epoch: int, now_ms: int) -> None:
        """A controller at ``epoch`` spoke to us (a heartbeat, a LeaderAndIsr)."""
        self.proposals.on_controller_epoch(epoch, now_ms)

    def on_assignment(self, now_ms: int) -> None:
        """A LeaderAndIsr at our epoch with a newer partition epoch (the controller changed
        the ISR or the replicas): adopt it and drop any proposal built on the old view."""
        st = self.state
        if self.isr.update_from_controller(st.isr, st.replicas, st.partition_epoch, now_ms):
            self.fetching.wake(followers=True, force=True)  # as in on_alter_partition_response
        self.maybe_advance_hw(now_ms)
        self.deletion.complete(now_ms)

    # -- timers and stepping down ------------------------------------------------------------
    def tick(self, now_ms: int) -> None:
        self.watermark.expire(now_ms)
        self.fetching.expire(now_ms)
        self.deletion.expire(now_ms)
        self.producing.expire(now_ms)
        self.proposals.propose(now_ms)

    def next_deadline(self) -> int | None:
        deadlines = [
            d
            for d in (self.watermark.next_deadline(), self.fetching.next_deadline(), self.producing.next_deadline())
            if d is not None
        ]
        deadlines += self.deletion.next_deadlines()
        deadlines += self.proposals.next_deadlines()
        return min(deadlines) if deadlines else None

    def step_down(self, code: int, message: str) -> None:
        """Leadership moved (or the log failed): every pending produce and fetch gets
        ``code`` now (an idempotent producer's retry is deduplicated by whoever leads next)."""
        self.watermark.fail_all(code, message)
        self.fetching.fail_all(code, message)
        self.producing.fail_all(code, message)
        self.deletion.fail_all(code, message)

    # -- views -------------------------------------------------------------------------------
    def heard(self, now_ms: int) -> dict[int, tuple[int, int, str, str, int, str]]:
        return self.fetching.heard(now_ms)

    def parked_fetches(self) -> dict[str, int]:
        return self.fetching.parked()
