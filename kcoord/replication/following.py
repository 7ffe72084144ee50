"""The follower side of a replica: reconcile with the leader by leader epoch, then fetch.

A mixin of :class:`kcoord.replication.replica.Replica`. A new follower first finds where
its log diverges from the leader's (OffsetsForLeaderEpoch, KIP-101, iterating as KIP-279),
truncates there, then fetches in a loop, appending the leader's bytes unchanged and
learning the HW from each answer. Errors back off; a leader change restarts the cycle.
"""

from __future__ import annotations

from ..protocol.errors import ErrorCode, KafkaError
from ..protocol.replication import FetchRequest, FetchResponse, OffsetsForLeaderEpochRequest, OffsetsForLeaderEpochResponse
from .actions import SendFetch, SendOffsetsForLeaderEpoch
from .entry import entry_point
from .follower import FETCHING, TRUNCATING
from .roles import FOLLOWER


class FollowerLoop:
    """Follower-side replication (mixed into Replica). Methods emit actions into the
    replica's ``_out``; the entry points return them."""

    # ------------------------------------------------------------------------------------
    # follower loop
    # ------------------------------------------------------------------------------------
    def _follower_step(self, now_ms: int) -> None:
        fs = self.follower_state
        if fs is None or not fs.ready(now_ms):
            return
        if fs.phase == TRUNCATING:
            if fs.asked_epoch < 0:
                fs.phase = FETCHING  # empty log (or no epochs): nothing can diverge
            else:
                request = OffsetsForLeaderEpochRequest(
                    topic=self.topic,
                    partition=self.partition,
                    leader_epoch=fs.asked_epoch,
                    current_leader_epoch=fs.epoch,
                    replica_id=self.broker,
                )
                fs.in_flight = request
                self._out.append(SendOffsetsForLeaderEpoch(fs.leader, request))
                return
        fs.fetches += 1
        fs.last_fetch_ms = now_ms
        cfg = self.config
        request = FetchRequest(
            topic=self.topic,
            partition=self.partition,
            fetch_offset=self.log.log_end_offset,
            max_bytes=cfg.replica_fetch_max_bytes,
            min_bytes=cfg.replica_fetch_min_bytes,
            max_wait_ms=cfg.replica_fetch_wait_max_ms,
            replica_id=self.broker,
            current_leader_epoch=fs.epoch,
            node_id=self.node_id,
        )
        fs.in_flight = request
        self._out.append(SendFetch(fs.leader, request))

    def _awaited(self, request: object) -> bool:
        """Whether ``request`` is the one we wait for (answers to older requests, or to a
        previous role or epoch, are ignored)."""
        fs = self.follower_state
        return fs is not None and self.role == FOLLOWER and fs.in_flight is request

    @entry_point
    def on_offsets_for_leader_epoch_response(
        self, request: OffsetsForLeaderEpochRequest, response: OffsetsForLeaderEpochResponse | None, now_ms: int
    ) -> None:
        """Find the divergence point and truncate (KIP-101, iterating as KIP-279)."""
        if not self._awaited(request):
            return
        fs = self.follower_state
        assert fs is not None
        fs.in_flight = None
        if response is None or response.error_code != ErrorCode.NONE:
            fs.back_off(now_ms, self.config.replica_fetch_backoff_ms)
            return
        fs.consecutive_errors = 0
        log = self.log
        leader_epoch, leader_end = response.leader_epoch, response.end_offset
        if leader_epoch < 0 or leader_end < 0:
            # The leader knows no epoch this old: keep only what was committed.
            self._truncate(min(self.hw, log.log_end_offset))
        else:
            our_epoch, our_end = log.epoch_cache.end_offset_for(leader_epoch, log.log_end_offset)
            if our_epoch == leader_epoch:
                self._truncate(min(leader_end, our_end))
            elif our_epoch < 0:
                # All our epochs are newer than the leader's answer: from the start of our
                # oldest epoch on, our log was written by leaders whose epochs the current
                # leader never had, so it diverges there (not merely past the leader's end).
                entries = log.epoch_cache.entries
                first = entries[0].start_offset if entries else log.log_end_offset
                self._truncate(min(leader_end, first))
            else:
                fs.asked_epoch = our_epoch  # ask again about the older epoch we do have
                self._follower_step(now_ms)
                return
        fs.phase = FETCHING
        self._follower_step(now_ms)

    def _truncate(self, offset: int) -> None:
        """Drop everything from ``offset`` on, and every epoch starting there or later.

        The epoch cache is truncated even when no record goes: an epoch this replica opened
        as leader at its log end, without writing in it, must not survive reconciliation
        with a leader that never had it (as Kafka's truncateFromEnd, always)."""
        log = self.log
        offset = max(offset, log.log_start_offset)
        if offset < log.log_end_offset:
            self.metrics["truncations"] += 1
            self.metrics["truncated_records"] += log.log_end_offset - offset
            log.truncate_to(offset)
        else:
            log.epoch_cache.truncate_from_end(offset)
        self.hw = min(self.hw, log.log_end_offset)

    @entry_point
    def on_fetch_response(self, request: FetchRequest, response: FetchResponse | None, now_ms: int) -> None:
        """``response`` None means the leader could not be reached (dead actor, timeout)."""
        if not self._awaited(request):
            return
        fs = self.follower_state
        assert fs is not None
        fs.in_flight = None
        log = self.log
        if response is None:
            fs.back_off(now_ms, self.config.replica_fetch_backoff_ms)
            return
        if response.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            if 0 <= request.fetch_offset < response.log_start_offset:
                # We fell behind the leader's retention: start over at its log start.
                log.truncate_fully_and_start_at(response.log_start_offset)
                self.hw = log.log_end_offset
                fs.phase = FETCHING
            else:
                if 0 <= response.log_end_offset < request.fetch_offset == log.log_end_offset:
                    # Nothing of ours past the leader's log end can match its log. Drop it
                    # now: when reconciliation finds no common epoch it keeps our log up
                    # to our HW, and if the leader's log is shorter than that (an unclean
                    # election, or lost unflushed data) we would fetch past its end forever.
                    self._truncate(response.log_end_offset)
                fs.phase = TRUNCATING  # our log is longer than the leader's: reconcile again
                fs.asked_epoch = log.epoch_cache.latest_epoch
            fs.consecutive_errors = 0
            self._follower_step(now_ms)
            return
        if response.error_code != ErrorCode.NONE:
            fs.back_off(now_ms, self.config.replica_fetch_backoff_ms)
            return
        fs.consecutive_errors = 0
        fs.leader_log_end_offset = response.log_end_offset
        if response.records:
            if request.fetch_offset != log.log_end_offset:
                self._follower_step(now_ms)  # stale answer (we truncated meanwhile)
                return
            try:
                log.append(response.records, now_ms=now_ms)
            except KafkaError as exc:
                if exc.code == ErrorCode.KAFKA_STORAGE_ERROR:
                    raise
                # Bytes that do not fit our log: reconcile from scratch rather than guess.
                fs.phase = TRUNCATING
                fs.asked_epoch = log.epoch_cache.latest_epoch
                fs.back_off(now_ms, self.config.replica_fetch_backoff_ms)
                return
        new_hw = min(response.high_watermark, log.log_end_offset)
        if new_hw > self.hw:
            self.hw = new_hw
        if self._may_have_lost_data and log.log_end_offset >= response.high_watermark >= 0:
            self._may_have_lost_data = False  # it holds everything committed again
        self._maybe_checkpoint_hw(now_ms)
        self._follower_step(now_ms)
