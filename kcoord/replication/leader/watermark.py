"""The leader's high watermark: when it moves, when it is shown, and the acks=all writes
(produces and transaction markers) waiting for it. The ISR's candidate itself is
:mod:`kcoord.replication.isr`'s."""

from __future__ import annotations

import dataclasses
from collections import deque
from dataclasses import dataclass
from typing import Any

from ...protocol.errors import ErrorCode
from ...protocol.replication import ProduceResponse
from ..context import ReplicaContext
from ..isr import IsrState
from .checks import Refusal


@dataclass
class ProduceWaiter:
    token: Any
    required_offset: int  # acked when HW >= this
    deadline_ms: int
    response: ProduceResponse


class HighWatermark:
    """The HW of this leadership (``state.hw``) and who waits for it, oldest first."""

    def __init__(self, state: ReplicaContext, isr: IsrState) -> None:
        self.state = state
        self.isr = isr
        self.waiters: deque[ProduceWaiter] = deque()

    def stale(self) -> bool:
        """A new leader's HW is the one it learned as a follower, which may lag what the
        previous leader showed consumers. Until it reaches the start of this leader's epoch
        (which every HW shown before is at most: the leader came from the ISR) it is not
        shown to consumers, so the HW they see never goes backwards across a failover."""
        return self.state.hw < self.isr.epoch_start_offset

    def stale_error(self) -> Refusal | None:
        """What a request that needs the HW is told while it is :meth:`stale`."""
        if self.stale():
            st = self.state
            return ErrorCode.OFFSET_NOT_AVAILABLE, f"leader {st.broker} of {st.name} has not caught its high watermark up yet; retry"
        return None

    def advance(self) -> bool:
        """Move the HW to what the ISR holds and answer the writes that it commits; whether
        it moved."""
        st = self.state
        if st.log.config.flush_messages != 1 and len(self.isr.isr) < st.config.min_insync_replicas:
            # KIP-966: below min.insync.replicas the HW stands still on topics that do not
            # fsync every append. Their election falls back to the ELR (who left the ISR
            # while it was too small), which holds everything below the HW only if the HW
            # did not move without them; a consumer must not read what a failover undoes.
            # The committed ISR counts, not the maximal one: a member whose addition the
            # controller has not confirmed is in neither its ISR nor its ELR, so an
            # election there could not pick it.
            return False
        candidate = self.isr.high_watermark_candidate(st.log.log_end_offset)
        if candidate <= st.hw:
            return False
        st.hw = candidate
        while self.waiters and self.waiters[0].required_offset <= candidate:
            w = self.waiters.popleft()
            st.reply(w.token, self.acked(w.response))
        return True

    def answer_when_committed(self, token: Any, required_offset: int, deadline_ms: int, response: Any) -> None:
        """Answer ``response`` once the HW reaches ``required_offset`` (an append of ours
        that must be committed before anyone hears of it, as acks=all)."""
        if self.state.hw >= required_offset:
            self.state.reply(token, self.acked(response))
        else:
            self.waiters.append(ProduceWaiter(token, required_offset, deadline_ms, response))

    def acked(self, response: ProduceResponse) -> ProduceResponse:
        """``response`` as sent once committed: written, but flagged when the ISR shrank below
        min.insync.replicas meanwhile."""
        st = self.state
        if len(st.isr) < st.config.min_insync_replicas:
            return dataclasses.replace(
                response,
                error_code=ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                error_message=(
                    f"written, but the ISR {st.isr} shrank below min.insync.replicas="
                    f"{st.config.min_insync_replicas} before it was replicated"
                ),
            )
        return response

    def expire(self, now_ms: int) -> None:
        """Writes whose deadline passed are answered REQUEST_TIMED_OUT."""
        if not self.waiters:
            return
        st = self.state
        kept: deque[ProduceWaiter] = deque()
        for w in self.waiters:
            if w.deadline_ms <= now_ms:
                st.reply(
                    w.token,
                    type(w.response)(
                        ErrorCode.REQUEST_TIMED_OUT,
                        f"offset {w.required_offset - 1} not replicated to the ISR {st.isr} in time (HW {st.hw})",
                        leader_epoch=st.leader_epoch,
                    ),
                )
            else:
                kept.append(w)
        self.waiters = kept

    def next_deadline(self) -> int | None:
        return min(w.deadline_ms for w in self.waiters) if self.waiters else None

    def fail_all(self, code: int, message: str) -> None:
        st = self.state
        while self.waiters:
            w = self.waiters.popleft()
            st.reply(w.token, type(w.response)(code, message, leader_epoch=st.leader_epoch))
