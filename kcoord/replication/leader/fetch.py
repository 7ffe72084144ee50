"""Fetch serving on the leader: followers' and consumers' fetches, answered at once or
parked (long poll) until there are enough bytes, the HW moves, or their wait ends; and what
followers' fetches tell of them (:meth:`FetchServing.heard`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ...protocol.errors import ErrorCode
from ...protocol.replication import READ_COMMITTED, FetchRequest, FetchResponse
from ..context import ReplicaContext
from ..isr import IsrState
from .checks import isolation_error, partition_error
from .watermark import HighWatermark


@dataclass
class FetchWaiter:
    token: Any
    request: FetchRequest
    deadline_ms: int
    from_follower: bool


class FetchServing:
    """The fetches parked at this leader, by token. ``follower_fetched(now_ms)`` is called
    after a follower's fetch is recorded in the ISR bookkeeping and before it is served."""

    def __init__(self, state: ReplicaContext, isr: IsrState, watermark: HighWatermark, follower_fetched: Callable[[int], None]) -> None:
        self.state = state
        self.isr = isr
        self.watermark = watermark
        self.follower_fetched = follower_fetched
        self.waiters: dict[Any, FetchWaiter] = {}

    def fetch(self, req: FetchRequest, token: Any, now_ms: int) -> None:
        st = self.state
        st.metrics["fetch_requests"] += 1
        err = partition_error(st, req)
        from_follower = req.replica_id >= 0
        if err is None and from_follower and (req.replica_id not in st.replicas or req.replica_id == st.broker):
            err = (ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {req.replica_id} is not a follower of {st.name} (replicas {st.replicas})")
        if err is None and req.max_bytes <= 0:
            err = (ErrorCode.INVALID_FETCH_SIZE, f"max_bytes must be positive, got {req.max_bytes}")
        if err is None:
            err = isolation_error(req.isolation_level)
        if err is not None:
            st.reply(token, FetchResponse(err[0], err[1], leader_epoch=st.leader_epoch))
            return
        log = st.log
        leo = log.log_end_offset
        out_of_range = self._out_of_range(req)
        if out_of_range is not None:
            st.reply(token, out_of_range)
            return
        if from_follower:
            progress = self.isr.followers.get(req.replica_id)
            if progress is not None:
                progress.on_fetch(
                    req.fetch_offset,
                    leo,
                    now_ms,
                    req.replica_incarnation,
                    req.replica_storage,
                    req.replica_partition_epoch,
                    req.replica_directory_id,
                    req.replica_log_start_offset,
                    st.config.replica_lag_time_max_ms,
                )
                self.isr.heard(req.replica_id)
            self.follower_fetched(now_ms)
        waiter = FetchWaiter(token, req, now_ms + max(0, req.max_wait_ms), from_follower)
        response = self._read_for(waiter, force=req.max_wait_ms <= 0)
        if response is not None:
            st.reply(token, response)
        else:
            self.waiters[token] = waiter

    def _out_of_range(self, req: FetchRequest) -> FetchResponse | None:
        """OFFSET_OUT_OF_RANGE for an offset outside the log. Asked again when a parked fetch
        is answered: DeleteRecords or retention may have moved the log start past it."""
        st = self.state
        log = st.log
        leo = log.log_end_offset
        holds_below = req.replica_id >= 0 and 0 <= req.replica_log_start_offset < req.fetch_offset
        why = None
        if holds_below and req.fetch_offset < log.tombstone_horizon:
            # It may hold a value a tombstone deleted that the cleaner has removed since.
            why = f"offset {req.fetch_offset} is below the last tombstone the cleaner removed ({log.tombstone_horizon - 1}) of {st.name}: start over"
        elif holds_below and req.fetch_offset == log.log_start_offset < leo and log.batch_base_offset(req.fetch_offset) < req.fetch_offset:
            # Its log ends inside the batch holding our log start (a DeleteRecords cut there),
            # where no log of ours ever ended: what it holds below diverges from ours (an epoch
            # of ours clipped at the log start told it to cut there), and the batch cannot be
            # appended on top of it.
            why = f"offset {req.fetch_offset} is inside the batch holding the log start of {st.name}: the log below it diverges; start over"
        start_over = why is not None
        if log.log_start_offset <= req.fetch_offset <= leo and not start_over:
            return None
        # A follower below the log start starts over there: with the producers whose batches
        # retention or DeleteRecords took, or a retried batch of theirs is appended twice.
        below = start_over or (0 <= req.fetch_offset < log.log_start_offset and req.replica_id >= 0)
        if why is None:
            why = f"offset {req.fetch_offset} is outside the log [{log.log_start_offset}, {leo}] of {st.name}"
        return FetchResponse(
            ErrorCode.OFFSET_OUT_OF_RANGE,
            why,
            high_watermark=st.hw,
            log_start_offset=log.log_start_offset,
            log_end_offset=leo,
            leader_epoch=st.leader_epoch,
            producer_state=log.producer_state.snapshot_below(log.log_start_offset) if below else None,
            start_over=start_over,
        )

    def _read_for(self, waiter: FetchWaiter, force: bool) -> FetchResponse | None:
        """The response for a fetch if it can be answered now (enough bytes or forced)."""
        st = self.state
        req = waiter.request
        if req.fetch_offset < st.log.log_start_offset:
            return self._out_of_range(req)
        if not waiter.from_follower and self.watermark.stale():
            if not force:
                return None  # parked until the HW catches up (or the wait ends)
            return FetchResponse(
                ErrorCode.OFFSET_NOT_AVAILABLE,
                f"{st.name}: leader {st.broker} became leader at epoch {st.leader_epoch} "
                f"and its high watermark has not caught up yet; retry",
                leader_epoch=st.leader_epoch,
            )
        log = st.log
        if waiter.from_follower:
            max_offset = None
            lso = -1
        else:
            lso = log.last_stable_offset(st.hw)
            max_offset = lso if req.isolation_level == READ_COMMITTED else st.hw
        data = b""
        spans = None
        size = 0
        if req.fetch_offset < (log.log_end_offset if max_offset is None else max_offset):
            if st.node_id and req.node_id == st.node_id:
                spans = log.locate(req.fetch_offset, req.max_bytes, max_offset)
            if spans is None:
                data = log.read(req.fetch_offset, req.max_bytes, max_offset)
                size = len(data)
            else:
                size = sum(span[2] for span in spans)
        if not force and size < max(1, req.min_bytes):
            return None
        st.metrics["fetch_bytes"] += size
        aborted = None
        if req.isolation_level == READ_COMMITTED and not waiter.from_follower and size:
            aborted = [(e.producer_id, e.first_offset) for e in log.txn_index.collect(req.fetch_offset, lso)]
        return FetchResponse(
            high_watermark=st.hw,
            log_start_offset=log.log_start_offset,
            log_end_offset=log.log_end_offset,
            leader_epoch=st.leader_epoch,
            records=data,
            file_hint=spans or None,
            last_stable_offset=lso,
            aborted_transactions=aborted,
        )

    def wake(self, *, followers: bool, force: bool = False) -> None:
        """Answer the parked fetches of followers (or of consumers) that can be answered
        now; ``force``: all of them, with whatever there is."""
        if not self.waiters:
            return
        for token, w in list(self.waiters.items()):
            if w.from_follower != followers:
                continue
            response = self._read_for(w, force=force)
            if response is not None:
                del self.waiters[token]
                self.state.reply(token, response)

    def expire(self, now_ms: int) -> None:
        """Answer the fetches whose wait ended, with whatever there is."""
        if not self.waiters:
            return
        # When one follower's fetch is due, the others' due within a quarter of their
        # wait are answered with it (early and empty, as a fetch may always be): an idle
        # leader's followers then fetch in step, and it wakes once per round for all of
        # them instead of once per follower (an idle partition's cost is its wake-ups).
        followers_due = any(w.from_follower and w.deadline_ms <= now_ms for w in self.waiters.values())
        for token, w in list(self.waiters.items()):
            if w.deadline_ms <= now_ms or (followers_due and w.from_follower and w.deadline_ms - now_ms <= w.request.max_wait_ms // 4):
                del self.waiters[token]
                response = self._read_for(w, force=True)
                assert response is not None
                self.state.reply(token, response)

    def next_deadline(self) -> int | None:
        return min(w.deadline_ms for w in self.waiters.values()) if self.waiters else None

    def fail_all(self, code: int, message: str) -> None:
        st = self.state
        for w in self.waiters.values():
            st.reply(w.token, FetchResponse(code, message, leader_epoch=st.leader_epoch))
        self.waiters.clear()

    def heard(self, now_ms: int) -> dict[int, tuple[int, int, str, str, int, str]]:
        """What this leader can vouch for each follower that fetched in its leadership
        (HeartbeatResponse.followers_heard): how long ago its latest fetch arrived -- 0
        while a fetch of that process is parked here, since a follower in a long poll
        is as alive as one answering a heartbeat -- and what that fetch said of it."""
        parked = {(w.request.replica_id, w.request.replica_incarnation) for w in self.waiters.values() if w.from_follower}
        out: dict[int, tuple[int, int, str, str, int, str]] = {}
        for b, p in self.isr.followers.items():
            if p.last_fetch_ms < 0:
                continue
            ago = 0 if (b, p.incarnation) in parked else max(0, now_ms - p.last_fetch_ms)
            out[b] = (ago, p.log_end_offset, p.incarnation, p.storage, p.partition_epoch, p.directory_id)
        return out

    def parked(self) -> dict[str, int]:
        """Long-poll fetches waiting for data, by kind (for operators and tests)."""
        followers = sum(1 for w in self.waiters.values() if w.from_follower)
        return {"followers": followers, "consumers": len(self.waiters) - followers}
