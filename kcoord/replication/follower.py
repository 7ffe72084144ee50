"""The follower role: reconcile with the leader by leader epoch, then fetch in a loop.

A new follower first finds where its log diverges from the leader's (OffsetsForLeaderEpoch,
KIP-101, iterating as KIP-279), truncates there, then fetches in a loop, appending the
leader's bytes unchanged and learning the HW from each answer. Errors back off; a leader
change makes the replica build a new Follower, which restarts the cycle. One request is in
flight at a time, and answers are matched to it by identity: an answer to an older request
(or from an earlier role) is never taken for the current one.
"""

from __future__ import annotations

import enum
from typing import Any

from ..protocol.errors import ErrorCode, KafkaError
from ..protocol.replication import FetchRequest, FetchResponse, OffsetsForLeaderEpochRequest, OffsetsForLeaderEpochResponse
from .actions import SendFetch, SendOffsetsForLeaderEpoch
from .context import ReplicaContext


class Phase(str, enum.Enum):
    TRUNCATING = "truncating"
    FETCHING = "fetching"


TRUNCATING = Phase.TRUNCATING
FETCHING = Phase.FETCHING


class Follower:
    def __init__(self, state: ReplicaContext, leader: int, epoch: int) -> None:
        self.state = state
        self.leader = leader
        self.epoch = epoch
        self.phase = TRUNCATING
        # The request whose answer we wait for (None: nothing in flight).
        self.in_flight: Any = None
        self.backoff_until_ms = 0
        # The epoch of our own log we last asked the leader about (TRUNCATING).
        self.asked_epoch = state.log.epoch_cache.latest_epoch
        self.consecutive_errors = 0
        self.fetches = 0
        self.last_fetch_ms = -1
        self.leader_log_end_offset = -1

    # -- timing ---------------------------------------------------------------------------
    def ready(self, now_ms: int) -> bool:
        return self.in_flight is None and now_ms >= self.backoff_until_ms

    def back_off(self, now_ms: int) -> None:
        self.in_flight = None
        self.consecutive_errors += 1
        # Grow gently (x1, x2, x4, ... up to x8) so a dead leader is not hammered.
        factor = min(8, 1 << min(3, self.consecutive_errors - 1))
        self.backoff_until_ms = now_ms + self.state.config.replica_fetch_backoff_ms * factor

    def next_deadline(self) -> int | None:
        return self.backoff_until_ms if self.in_flight is None else None

    # -- the loop -------------------------------------------------------------------------
    def step(self, now_ms: int) -> None:
        """Send the next request if nothing is in flight and no backoff runs."""
        if not self.ready(now_ms):
            return
        st = self.state
        if self.phase == TRUNCATING:
            if self.asked_epoch < 0:
                self.phase = FETCHING  # empty log (or no epochs): nothing can diverge
            else:
                request = OffsetsForLeaderEpochRequest(
                    topic=st.topic,
                    partition=st.partition,
                    leader_epoch=self.asked_epoch,
                    current_leader_epoch=self.epoch,
                    replica_id=st.broker,
                )
                self.in_flight = request
                st.emit(SendOffsetsForLeaderEpoch(self.leader, request))
                return
        self.fetches += 1
        self.last_fetch_ms = now_ms
        cfg = st.config
        request = FetchRequest(
            topic=st.topic,
            partition=st.partition,
            fetch_offset=st.log.log_end_offset,
            max_bytes=cfg.replica_fetch_max_bytes,
            min_bytes=cfg.replica_fetch_min_bytes,
            max_wait_ms=cfg.replica_fetch_wait_max_ms,
            replica_id=st.broker,
            current_leader_epoch=self.epoch,
            node_id=st.node_id,
            replica_incarnation=st.incarnation,
            replica_storage=st.storage,
            replica_partition_epoch=st.partition_epoch,
            replica_directory_id=st.log.directory_id,
            replica_log_start_offset=st.log.log_start_offset,
        )
        self.in_flight = request
        st.emit(SendFetch(self.leader, request))

    def on_offsets_for_leader_epoch_response(
        self, request: OffsetsForLeaderEpochRequest, response: OffsetsForLeaderEpochResponse | None, now_ms: int
    ) -> None:
        """Find the divergence point and truncate (KIP-101, iterating as KIP-279)."""
        if self.in_flight is not request:
            return
        self.in_flight = None
        if response is None or response.error_code != ErrorCode.NONE:
            self.back_off(now_ms)
            return
        self.consecutive_errors = 0
        log = self.state.log
        leader_epoch, leader_end = response.leader_epoch, response.end_offset
        if leader_epoch < 0 or leader_end < 0:
            # The leader knows no epoch at all: keep only what was committed.
            self.truncate(min(self.state.hw, log.log_end_offset))
        else:
            our_epoch, our_end = log.epoch_cache.end_offset_for(leader_epoch, log.log_end_offset)
            if our_epoch == leader_epoch:
                self.truncate(min(leader_end, our_end))
            elif our_epoch < 0:
                # All our epochs are newer than the leader's answer: from the start of our
                # oldest epoch on, our log was written by leaders whose epochs the current
                # leader never had, so it diverges there (not merely past the leader's end).
                entries = log.epoch_cache.entries
                first = entries[0].start_offset if entries else log.log_end_offset
                self.truncate(min(leader_end, first))
            else:
                self.asked_epoch = our_epoch  # ask again about the older epoch we do have
                self.step(now_ms)
                return
        self.phase = FETCHING
        self.step(now_ms)

    def truncate(self, offset: int) -> None:
        """Drop everything from ``offset`` on, and every epoch starting there or later
        (``Log.truncate_to``)."""
        st = self.state
        log = st.log
        before = log.log_end_offset
        if log.truncate_to(offset):
            st.metrics["truncations"] += 1
            st.metrics["truncated_records"] += before - log.log_end_offset
        st.hw = min(st.hw, log.log_end_offset)

    def on_fetch_response(self, request: FetchRequest, response: FetchResponse | None, now_ms: int) -> bool:
        """Take in an answer (None: the leader could not be reached). Returns whether the
        HW may have moved (the replica then checkpoints it when due)."""
        if self.in_flight is not request:
            return False
        self.in_flight = None
        st = self.state
        log = st.log
        if response is None:
            self.back_off(now_ms)
            return False
        if response.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            if 0 <= request.fetch_offset < response.log_start_offset or response.start_over:
                # We fell behind the leader's retention (or a tombstone it removed): start
                # over at its log start.
                log.truncate_fully_and_start_at(response.log_start_offset, producers=response.producer_state)
                st.hw = log.log_end_offset
                self.phase = FETCHING
            else:
                if 0 <= response.log_end_offset < request.fetch_offset == log.log_end_offset:
                    # Nothing of ours past the leader's log end can match its log. Drop it
                    # now: when reconciliation finds no common epoch it keeps our log up
                    # to our HW, and if the leader's log is shorter than that (an unclean
                    # election, or lost unflushed data) we would fetch past its end forever.
                    self.truncate(response.log_end_offset)
                self.phase = TRUNCATING  # our log is longer than the leader's: reconcile again
                self.asked_epoch = log.epoch_cache.latest_epoch
            self.consecutive_errors = 0
            self.step(now_ms)
            return False
        if response.error_code != ErrorCode.NONE:
            self.back_off(now_ms)
            return False
        self.consecutive_errors = 0
        self.leader_log_end_offset = response.log_end_offset
        if response.records:
            if request.fetch_offset != log.log_end_offset:
                self.step(now_ms)  # our log changed under the fetch: ask again from where it ends
                return False
            try:
                # the leader's HW bounds what its cleaner removed (see Log.compacted_below)
                log.append_as_follower(response.records, now_ms=now_ms, leader_high_watermark=response.high_watermark)
            except KafkaError as exc:
                if exc.code == ErrorCode.KAFKA_STORAGE_ERROR:
                    raise
                # Bytes that do not fit our log: reconcile from scratch rather than guess.
                self.phase = TRUNCATING
                self.asked_epoch = log.epoch_cache.latest_epoch
                self.back_off(now_ms)
                return False
        new_hw = min(response.high_watermark, log.log_end_offset)
        if new_hw > st.hw:
            st.hw = new_hw
        if response.log_start_offset > log.log_start_offset and st.hw > log.log_start_offset:
            # The leader's retention or a DeleteRecords moved its log start: follow it (up
            # to our HW; what we hold beyond that we may still need).
            log.advance_log_start_offset(min(response.log_start_offset, st.hw))
        if st.may_have_lost_data and log.log_end_offset >= response.high_watermark >= 0:
            st.may_have_lost_data = False  # it holds everything committed again
        self.step(now_ms)
        return True

    @property
    def lag(self) -> int:
        """How far behind the leader's log end this replica was at its last fetch."""
        if self.leader_log_end_offset < 0:
            return 0
        return max(0, self.leader_log_end_offset - self.state.log.log_end_offset)
