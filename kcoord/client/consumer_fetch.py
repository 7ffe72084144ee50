"""The consumer's fetch pipeline: one long-poll Fetch in flight per assigned partition.

A mixin of :class:`~kcoord.client.consumer.Consumer` (it works on the consumer's assigned
partitions); split out so that each file holds one part of the consumer. A fetch is a Ray
actor call; Ray moves its answer into this process while the user is busy elsewhere, and
the next fetch of a partition goes out as soon as the previous answer is taken in, so the
next chunk is usually already here when ``poll()`` needs it. Leaders on this process's Ray
node answer with file hints, read here instead of copying bytes through Ray. Errors back
off, refresh metadata, reset the position (OFFSET_OUT_OF_RANGE) or surface from the next
poll().

A fetch that is not answered in time is given up, whatever the reason: the leader holds a
fetch at most ``fetch_max_wait_ms``, so one still unanswered ``OVERDUE_S`` after that is
*overdue*. From then on, every ``PROBE_EVERY_S``, the consumer asks Ray's GCS whether the
leader actor is dead or restarting and (at most every ``METADATA_CHECK_S`` per topic) the
controller who leads the partition now; a gone actor or a new leader/epoch abandons the
fetch at once. A fetch still unanswered ``fetch_max_wait_ms + min(request_timeout_ms,
FETCH_GRACE_MS)`` after it was sent is abandoned too (a leader that is alive per Ray but
does not answer). Abandoning drops the cached actor handle, so the next fetch looks the
leader up again (``ray.get_actor``) with fresh metadata; a late answer to an abandoned
fetch is ignored.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import ray
from ray.exceptions import RayActorError

from .. import records as _records
from ..log.hints import read_hinted
from ..protocol.errors import ErrorCode, KafkaError
from ..protocol.replication import FetchRequest, FetchResponse
from .consumer_partition import AssignedPartition
from .liveness import GONE, actor_state

logger = logging.getLogger("kcoord.consumer")

_monotonic = time.monotonic

# A fetch unanswered this long after fetch_max_wait_ms is overdue: probe its leader.
OVERDUE_S = 0.5
# How often an overdue fetch's leader is probed (GCS) ...
PROBE_EVERY_S = 0.25
# ... and how often, at most, the metadata of a topic with overdue fetches is refreshed.
METADATA_CHECK_S = 1.0
# A fetch is given up fetch_max_wait_ms + min(request_timeout_ms, FETCH_GRACE_MS) after it
# was sent, even if its leader is alive per Ray (request_timeout_ms-style, but sized for a
# long poll: a healthy leader answers a fetch well within a second of fetch_max_wait_ms,
# even on a loaded machine).
FETCH_GRACE_MS = 5000
# Forced metadata refreshes (a gone or moved leader) closer together than this are one.
MIN_FORCED_S = 0.005


class FetchPipeline:
    """Sending fetches and taking in their answers (mixed into Consumer)."""

    def _drop_in_flight(self, st: AssignedPartition) -> None:
        if st.in_flight is not None:
            self._owner.pop(st.in_flight, None)
            st.in_flight = None
            st.in_flight_handle = None

    def _abandon(self, st: AssignedPartition, now: float, backoff: bool = True) -> None:
        """Give up the fetch in flight: forget the leader's cached handle (the next fetch
        looks the actor up again) and refresh the topic's metadata."""
        actor = st.in_flight_actor
        self._drop_in_flight(st)
        if actor:
            self.cluster.forget(actor)
        self._refresh(st.tp.topic, force=True)
        if backoff:
            st.backoff_until = now + self._backoff_s

    def _check_overdue(self, now: float) -> None:
        """Give up fetches whose leader is gone, moved, or silent past the fetch timeout."""
        overdue = [st for st in self._assigned.values() if st.in_flight is not None and now >= st.next_check]
        if not overdue:
            return
        self._take_ready(0.0)  # an answer that arrived but was not taken in yet is not overdue
        topics: set[str] = set()
        for st in overdue:
            if st.in_flight is None:
                continue
            waited = now - st.in_flight_since
            if waited >= self._fetch_timeout_s:
                logger.warning(
                    "fetch of %s from %s unanswered for %.1f s (fetch timeout %.1f s); looking the leader up again",
                    st.tp, st.in_flight_actor, waited, self._fetch_timeout_s,
                )
                self._abandon(st, now)
                continue
            state = actor_state(st.in_flight_handle)
            if state in GONE:
                logger.info("leader %s of %s is %s (GCS) after %.1f s; refreshing metadata", st.in_flight_actor, st.tp, state, waited)
                self._abandon(st, now)
                continue
            st.next_check = now + PROBE_EVERY_S
            topics.add(st.tp.topic)
        for topic in topics:
            self._refresh(topic, min_interval=METADATA_CHECK_S)
            md = self.cluster.cached_topic(topic)
            if md is None:
                continue
            for st in overdue:
                if st.in_flight is None or st.tp.topic != topic or st.tp.partition >= len(md.partitions):
                    continue
                pm = md.partitions[st.tp.partition]
                if (pm.leader, pm.leader_epoch) != (st.in_flight_leader, st.in_flight_epoch):
                    logger.info(
                        "%s moved from leader %d (epoch %d) to %d (epoch %d) while a fetch waited %.1f s; fetching from the new leader",
                        st.tp, st.in_flight_leader, st.in_flight_epoch, pm.leader, pm.leader_epoch, now - st.in_flight_since,
                    )
                    self._abandon(st, now, backoff=False)

    def _next_wake(self, now: float) -> float:
        """Seconds until the fetch pipeline has something to do besides taking in answers:
        an overdue check, or a partition's backoff ending."""
        wake = float("inf")
        for st in self._assigned.values():
            if st.in_flight is not None:
                wake = min(wake, st.next_check)
            elif st.backoff_until > now:
                wake = min(wake, st.backoff_until)
        return max(0.0, wake - now)

    def _send_fetches(self) -> None:
        now = _monotonic()
        self._check_overdue(now)
        for st in self._assigned.values():
            if st.in_flight is not None:
                continue
            if st.paused or st.position is None or st.error is not None or now < st.backoff_until or st.pending:
                continue
            topic, partition = st.tp
            md = self.cluster.cached_topic(topic)
            if md is None or partition >= len(md.partitions):
                self._refresh(topic)
                md = self.cluster.cached_topic(topic)
                if md is None or partition >= len(md.partitions):
                    st.backoff_until = now + self._backoff_s
                    continue
            pm = md.partitions[partition]
            if pm.leader < 0:
                self._refresh(topic)
                st.backoff_until = now + self._backoff_s
                continue
            name = self.cluster.replica_name(topic, partition, pm.leader)
            try:
                handle = self.cluster.handle(name)
            except KafkaError:
                self._refresh(topic)
                st.backoff_until = now + self._backoff_s
                continue
            req = FetchRequest(
                topic,
                partition,
                st.fetch_offset,
                max_bytes=self.max_partition_fetch_bytes,
                min_bytes=self.fetch_min_bytes,
                max_wait_ms=self.fetch_max_wait_ms,
                current_leader_epoch=pm.leader_epoch,
                node_id="" if st.no_hint else self._node_id,
            )
            st.no_hint = False
            ref = handle.fetch.remote(req.encode())
            st.in_flight = ref
            st.in_flight_generation = st.generation
            st.in_flight_since = now
            st.in_flight_actor = name
            st.in_flight_handle = handle
            st.in_flight_leader = pm.leader
            st.in_flight_epoch = pm.leader_epoch
            st.next_check = now + self._overdue_s
            self._owner[ref] = st

    def _take_ready(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for fetch answers and take in all that are ready."""
        refs = list(self._owner)
        if not refs:
            return False
        if timeout > 0:
            ready, _ = ray.wait(refs, num_returns=1, timeout=timeout)
            if not ready:
                return False
        if len(refs) > 1 or timeout <= 0:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            if not ready:
                return False
        for ref in ready:
            st = self._owner.pop(ref, None)
            if st is not None and st.in_flight is ref:
                st.in_flight = None
                self._on_fetch(st, ref)
        return True

    def _idle_wait(self, seconds: float) -> None:
        """Nothing in flight (all paused, backing off, or no assignment): wait a little."""
        if seconds > 0:
            time.sleep(seconds)

    def _on_fetch(self, st: AssignedPartition, ref: Any) -> None:
        now = _monotonic()
        st.in_flight_handle = None
        try:
            raw = ray.get(ref)
        except RayActorError as exc:
            self.cluster.forget(st.in_flight_actor)
            logger.info("leader %s of %s unavailable (%s); refreshing metadata", st.in_flight_actor, st.tp, type(exc).__name__)
            self._refresh(st.tp.topic, force=True)
            st.backoff_until = now + self._backoff_s
            return
        except Exception as exc:
            logger.warning("fetch of %s failed: %r", st.tp, exc)
            st.backoff_until = now + self._backoff_s
            return
        if st.in_flight_generation != st.generation:
            return  # the position moved (seek/reset) since this fetch was sent
        try:
            resp = FetchResponse.decode(raw)
        except KafkaError as exc:
            st.error = exc
            return
        code = resp.error_code
        if code == 0:
            if resp.high_watermark >= 0:
                st.high_watermark = resp.high_watermark
            data = resp.records
            if resp.file_hint:
                # Same node as the leader: read its segment files instead of a Ray copy.
                data = read_hinted(resp.file_hint, st.fetch_offset)
                if data is None:
                    st.no_hint = True  # the files moved under us: the next fetch asks for bytes
                    return
            if data:
                last = None
                for _, h in _records.iter_headers(data):
                    last = h
                if last is not None and last.next_offset > st.fetch_offset:
                    st.fetch_offset = last.next_offset
                    st.pending.append(data)
            return
        err = KafkaError(code, resp.error_message or "")
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            if self.auto_offset_reset == "none":
                st.error = KafkaError(
                    code,
                    f"{st.tp.topic}-{st.tp.partition}: fetch offset {st.fetch_offset} is out of range "
                    f"(log start {resp.log_start_offset}, log end {resp.log_end_offset}) and auto_offset_reset='none'"
                    + (f": {resp.error_message}" if resp.error_message else ""),
                )
            else:
                logger.info("%s: offset %d out of range; resetting to %s", st.tp, st.fetch_offset, self.auto_offset_reset)
                self._reposition(st, None, self.auto_offset_reset)
            return
        if err.needs_metadata_refresh:
            self._refresh(st.tp.topic, force=code != ErrorCode.UNKNOWN_LEADER_EPOCH)
            st.backoff_until = now + self._backoff_s
            return
        if err.retriable:
            st.backoff_until = now + self._backoff_s
            return
        st.error = err

    def _refresh(self, topic: str, force: bool = False, min_interval: float | None = None) -> None:
        """Refresh ``topic``'s metadata, at most every ``min_interval`` (default
        retry_backoff_ms) unless ``force``; several forced refreshes within one
        ``MIN_FORCED_S`` are one. Bounded by ``_refresh_timeout_ms``: a controller that is
        down must not hold up the poll loop (the next refresh tries again)."""
        now = _monotonic()
        since = now - self._last_refresh.get(topic, float("-inf"))
        if since < (MIN_FORCED_S if force else self._backoff_s if min_interval is None else min_interval):
            return
        self._last_refresh[topic] = now
        try:
            self.cluster.refresh_metadata([topic], timeout_ms=self._refresh_timeout_ms)
        except KafkaError as exc:
            logger.debug("metadata refresh of %s failed: %s", topic, exc)
