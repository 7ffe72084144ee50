"""DeleteRecords on the leader, and the low watermark its answers wait for."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...protocol import names
from ...protocol.errors import ErrorCode
from ...protocol.replication import DeleteRecordsRequest, DeleteRecordsResponse
from ..context import ReplicaContext
from ..isr import IsrState
from .checks import partition_error
from .watermark import HighWatermark


@dataclass
class DeleteWaiter:
    token: Any
    offset: int  # answered once the partition's low watermark reaches it
    deadline_ms: int


class RecordDeletion:
    """DeleteRecords requests waiting for the partition's low watermark."""

    def __init__(self, state: ReplicaContext, isr: IsrState, watermark: HighWatermark, now_ms: int) -> None:
        self.state = state
        self.isr = isr
        self.watermark = watermark
        self.waiters: list[DeleteWaiter] = []
        self._checked_ms = now_ms  # when the low watermark was last compared with them

    def delete_records(self, req: DeleteRecordsRequest, token: Any, now_ms: int) -> None:
        """Kafka's DeleteRecords: move the log start offset up to ``req.offset`` (-1: the HW),
        never above the HW -- what consumers cannot see yet may still be cut by a failover.
        Followers follow from the log start offset in their fetch answers (as for
        retention). Answered (with the low watermark) once the partition's low watermark
        has reached the offset -- before, a failover could make the records readable again
        (Kafka's DelayedDeleteRecords) -- or REQUEST_TIMED_OUT after ``req.timeout_ms``."""
        refused = self._delete(req)
        if refused is not None:
            self.state.reply(token, refused)
            return
        offset = self.state.hw if req.offset == -1 else req.offset
        self.waiters.append(DeleteWaiter(token, offset, now_ms + max(0, req.timeout_ms)))
        self.complete(now_ms)

    def _delete(self, req: DeleteRecordsRequest) -> DeleteRecordsResponse | None:
        """Validate, and move the leader's log start; a refusal, or None."""
        st = self.state
        err = partition_error(st, req)
        if err is None and names.is_internal_topic(st.topic):
            err = (ErrorCode.POLICY_VIOLATION, f"records of internal topic {st.topic!r} are its coordinators' state and cannot be deleted")
        if err is None:
            err = self.watermark.stale_error()
        offset = st.hw if req.offset == -1 else req.offset
        if err is None and not 0 <= offset <= st.hw:
            err = (ErrorCode.OFFSET_OUT_OF_RANGE, f"cannot delete records of {st.name} before offset {req.offset}: it must be in [0, {st.hw}] (the high watermark), or -1 for the high watermark")
        if err is not None:
            return DeleteRecordsResponse(err[0], err[1], leader_epoch=st.leader_epoch)
        st.log.advance_log_start_offset(offset)
        return None

    def low_watermark(self, now_ms: int) -> int:
        st = self.state
        cfg = st.config
        return self.isr.low_watermark(st.log.log_start_offset, now_ms, cfg.replica_lag_time_max_ms, cfg.min_insync_replicas)

    def complete(self, now_ms: int) -> None:
        """Answer the requests whose offset the low watermark has reached."""
        if not self.waiters:
            return
        self._checked_ms = now_ms
        low = self.low_watermark(now_ms)
        st = self.state
        waiting = []
        for w in self.waiters:
            if low >= w.offset:
                st.reply(w.token, DeleteRecordsResponse(low_watermark=low, leader_epoch=st.leader_epoch))
            else:
                waiting.append(w)
        self.waiters = waiting

    def expire(self, now_ms: int) -> None:
        """:meth:`complete` (a follower that stopped fetching counts no more), then answer
        REQUEST_TIMED_OUT to the requests whose deadline passed."""
        if not self.waiters:
            return
        self.complete(now_ms)
        st = self.state
        for w in [w for w in self.waiters if w.deadline_ms <= now_ms]:
            self.waiters.remove(w)
            st.reply(
                w.token,
                DeleteRecordsResponse(
                    ErrorCode.REQUEST_TIMED_OUT,
                    f"{st.name}: records before {w.offset} are deleted on the leader, but the low watermark "
                    f"(the smallest log start over the replicas that could be elected) did not reach it in time",
                    leader_epoch=st.leader_epoch,
                ),
            )

    def next_deadlines(self) -> list[int]:
        if not self.waiters:
            return []
        deadlines = [min(w.deadline_ms for w in self.waiters)]
        # a follower counted for fetching lately that stops fetching counts no more
        change = self.isr.next_liveness_change(self._checked_ms, self.state.config.replica_lag_time_max_ms)
        if change is not None:
            deadlines.append(change)
        return deadlines

    def fail_all(self, code: int, message: str) -> None:
        st = self.state
        for d in self.waiters:
            st.reply(d.token, DeleteRecordsResponse(code, message, leader_epoch=st.leader_epoch))
        self.waiters.clear()
