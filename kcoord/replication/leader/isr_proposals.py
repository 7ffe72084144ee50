"""The leader's ISR proposals to the controller (AlterPartition) and what it adopts from the
answers. Who is in sync, and the proposal in flight, are :class:`~kcoord.replication.isr.IsrState`'s."""

from __future__ import annotations

from ...protocol.controller import AlterPartitionRequest, AlterPartitionResponse
from ...protocol.errors import ErrorCode
from ..actions import SendAlterPartition
from ..context import ReplicaContext
from ..isr import IsrState

# Answers that say the controller could not tell whether it applied a change (its
# metadata-store write failed or timed out): the same as no answer.
UNKNOWN_OUTCOME = frozenset({ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_CONTROLLER, ErrorCode.UNKNOWN_SERVER_ERROR})


class IsrProposals:
    def __init__(self, state: ReplicaContext, isr: IsrState) -> None:
        self.state = state
        self.isr = isr

    def propose(self, now_ms: int) -> None:
        """Send an AlterPartition when the ISR should change and none is in flight or
        backing off."""
        st = self.state
        isr = self.isr
        if isr.alter_request is not None or now_ms < isr.retry_alter_at_ms:
            return
        isr.retry_alter_at_ms = 0  # the backoff is over (a stale value would be a past deadline)
        proposal = isr.proposed_isr(st.log.log_end_offset, st.hw, now_ms, st.config.replica_lag_time_max_ms, st.log.log_start_offset)
        if proposal is None:
            return
        request = AlterPartitionRequest(
            topic=st.topic,
            partition=st.partition,
            leader=st.broker,
            leader_epoch=st.leader_epoch,
            partition_epoch=st.partition_epoch,
            new_isr=proposal,
            incarnations={b: p.incarnation for b, p in isr.followers.items() if b in proposal and p.incarnation},
            config_version=st.config_version,
        )
        isr.admit(request)  # a pending addition counts for the HW (KIP-497), from that process only
        isr.pending_isr = proposal
        isr.alter_request = request
        isr.alter_controller_epoch = isr.controller_epoch = max(isr.controller_epoch, st.controller_epoch)
        st.emit(SendAlterPartition(request))

    def on_controller_epoch(self, epoch: int, now_ms: int) -> None:
        """A controller at ``epoch`` spoke to us. If it replaced the one our AlterPartition
        went to, that request will never be answered (the controller that took it is gone;
        waiting meant the driver's call timeout, 10 s, while a caught-up follower stayed out
        of the ISR): its outcome is unknown, and it is proposed again now, as Kafka's
        controller channel resends in-flight requests to a new active controller."""
        isr = self.isr
        if epoch <= isr.controller_epoch:
            return
        isr.controller_epoch = epoch
        request = isr.alter_request
        if request is None or epoch <= isr.alter_controller_epoch:
            return
        self.on_response(request, None, now_ms)
        isr.retry_alter_at_ms = 0  # no backoff: the new controller is up and answering
        self.propose(now_ms)

    def on_response(self, request: AlterPartitionRequest, response: AlterPartitionResponse | None, now_ms: int) -> tuple[bool, bool] | None:
        """The answer to our AlterPartition ``request``; None means the controller could
        not be reached (or could not say whether it applied the change). Returns None when
        there is nothing to adopt, else whether the ISR's membership changed and whether the
        proposal was accepted."""
        st = self.state
        isr = self.isr
        if isr.alter_request is not request:
            return None  # an answer to a proposal we no longer wait for
        isr.alter_request = None
        isr.pending_isr = None
        if response is not None and response.error_code in UNKNOWN_OUTCOME:
            response = None
        if response is None:
            # Unknown outcome: the controller may have applied it. Its members keep counting
            # for the HW until a LeaderAndIsr or an answer tells the truth.
            isr.unconfirmed = sorted(set(isr.unconfirmed) | set(request.new_isr))
        newer = (
            response is not None
            and response.leader == st.broker
            and response.leader_epoch == st.leader_epoch
            and response.partition_epoch > st.partition_epoch
        )
        if response is None or response.error_code != ErrorCode.NONE:
            # Fenced or stale partition epoch: retry later with a fresh proposal. An answer
            # that carries a newer state of our own leadership is the truth all the same --
            # a duplicate of this very request may have been applied (Kafka's idempotent
            # AlterPartition), and the controller may have changed the ISR since -- so it
            # is adopted like a LeaderAndIsr rather than guessed at.
            isr.retry_alter_at_ms = now_ms + st.config.alter_partition_backoff_ms
            if not newer:
                return None
        elif not newer:
            return None
        assert response is not None
        old, new = set(st.isr), set(response.isr)
        if new - old:
            st.metrics["isr_expands"] += 1
            isr.isr_expands += 1
        if old - new:
            st.metrics["isr_shrinks"] += 1
            isr.isr_shrinks += 1
        st.isr = list(response.isr)
        st.partition_epoch = response.partition_epoch
        accepted = response.error_code == ErrorCode.NONE
        if accepted:
            isr.admit(request)
        changed = isr.adopt_isr(response.isr)
        isr.unconfirmed = []  # the controller's whole ISR as of now: nothing left to guess
        isr.partition_epoch = response.partition_epoch
        return changed, accepted

    def next_deadlines(self) -> list[int]:
        """Only what :meth:`propose` can act on: while an AlterPartition is in flight
        nothing can be proposed, and during a backoff nothing before it ends (a past
        deadline here makes the driver's timer spin)."""
        isr = self.isr
        if isr.alter_request is not None:
            return []
        deadlines = []
        lag = isr.next_lag_deadline(self.state.config.replica_lag_time_max_ms)
        if lag is not None:
            deadlines.append(max(lag, isr.retry_alter_at_ms))
        if isr.retry_alter_at_ms:
            deadlines.append(isr.retry_alter_at_ms)
        return deadlines
