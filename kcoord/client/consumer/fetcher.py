"""Fetching records from partition leaders.

:class:`LeaderFetches` is what every reader of a partition shares: it sends a Fetch to the
partition's leader (asking for file hints when the leader may be on this Ray node) and
turns an answer into record-batch bytes, read from the leader's segment files when it
answered with hints (see :mod:`kcoord.log.hints`). The consumer's :class:`Fetcher` and the
range reads of Spark and Ray Data tasks (:class:`kcoord.spark.tasks.RangeReader`) use it.

:class:`Fetcher` is the consumer's fetch pipeline: one long-poll Fetch in flight per
assigned partition. Fetches go through kcoord's one call stack (:mod:`kcoord.calls`, on the
process's calls thread): to a leader on this node over its direct-call channel, otherwise
as a Ray actor call; either way the answer arrives while the user is busy elsewhere, and
the next fetch of a partition goes out as soon as the previous answer is taken in, so the
next chunk is usually already here when ``poll()`` needs it. Errors back off, refresh
metadata, reset the position (OFFSET_OUT_OF_RANGE) or surface from the next poll().

A fetch that is not answered in time is given up, whatever the reason. The leader holds a
fetch at most ``fetch_max_wait_ms``: after that the call is late, and asks Ray's GCS
whether its actor is dead or restarting as the retry policy says (:mod:`kcoord.calls.retry`),
failing at once if it is; a fetch still unanswered :func:`fetch_timeout_s` after it was
sent times out (a leader that is alive per Ray but does not answer). A fetch unanswered
``OVERDUE_S`` past ``fetch_max_wait_ms`` is *overdue*: the consumer asks the controller (at
most every ``METADATA_CHECK_S`` per topic) who leads the partition now, and a new
leader/epoch abandons the fetch at once. A failed or abandoned fetch drops the cached actor
handle, so the next fetch looks the leader up again with fresh metadata; a late answer to
an abandoned fetch is ignored.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from typing import NamedTuple

import ray

from ... import records as _records
from ...calls import ERROR, TIMEOUT, CallFailed
from ...calls.retry import probing_after
from ...log.hints import read_hinted
from ...protocol.controller import PartitionMetadata
from ...protocol.errors import ErrorCode, KafkaError
from ...protocol.replication import FetchRequest, FetchResponse
from ..cluster import ClusterClient
from ..metrics import RequestStats
from .subscription_state import AssignedPartition, SubscriptionState

logger = logging.getLogger("kcoord.consumer")

_monotonic = time.monotonic

# A fetch unanswered this long after fetch_max_wait_ms is overdue: is its leader still the
# leader? ...
OVERDUE_S = 0.5
# ... asked of the controller at most this often per topic, and this often per fetch.
METADATA_CHECK_S = 1.0
CHECK_EVERY_S = 0.25
# A fetch is given up fetch_max_wait_ms + min(request_timeout_ms, FETCH_GRACE_MS) after it
# was sent, even if its leader is alive per Ray (request_timeout_ms-style, but sized for a
# long poll: a healthy leader answers a fetch well within a second of fetch_max_wait_ms,
# even on a loaded machine).
FETCH_GRACE_MS = 5000
# Forced metadata refreshes (a gone or moved leader) closer together than this are one.
MIN_FORCED_S = 0.005


def fetch_timeout_s(max_wait_ms: int, request_timeout_ms: int) -> float:
    """How long after it was sent a fetch held up to ``max_wait_ms`` is given up."""
    return (max_wait_ms + min(request_timeout_ms, FETCH_GRACE_MS)) / 1000


def local_node_id() -> str:
    """This process's Ray node id ("" if unknown): leaders on it answer with file hints."""
    try:
        return ray.get_runtime_context().get_node_id() or ""
    except Exception:
        return ""


def fetched_records(response: FetchResponse, fetch_offset: int) -> tuple[bytes | None, bool]:
    """The record-batch bytes of a successful fetch answer, and whether their CRCs were
    checked already: read from the leader's segment files when it answered with file
    hints (checked), else the bytes it sent. None when the hinted files did not check out
    (they changed under us: truncation, retention); fetch again without hints then."""
    if response.file_hint:
        return read_hinted(response.file_hint, fetch_offset), True
    return response.records, False


class SentFetch(NamedTuple):
    """A Fetch on its way to a partition leader."""

    answer: concurrent.futures.Future  # of the answer's bytes; fails with kcoord.calls.CallFailed
    actor: str
    leader: int
    leader_epoch: int
    offset: int
    sent: float  # time.monotonic() when it went out


class LeaderFetches:
    """Sends Fetch requests to partition leaders for one process (see the module doc)."""

    def __init__(
        self, cluster: ClusterClient, *, max_bytes: int, min_bytes: int, max_wait_ms: int, request_timeout_ms: int, isolation_level: int = 0
    ) -> None:
        self.cluster = cluster
        self.isolation_level = isolation_level  # READ_COMMITTED: up to the last stable offset
        self.max_bytes = max_bytes
        self.min_bytes = min_bytes
        self.max_wait_ms = max_wait_ms
        self.timeout_s = fetch_timeout_s(max_wait_ms, request_timeout_ms)
        self.probing = probing_after(max_wait_ms / 1000)
        self.node_id = local_node_id()

    def send(self, topic: str, partition: int, pm: PartitionMetadata, offset: int, *, hinted: bool = True) -> SentFetch:
        """Fetch from ``offset`` at the leader ``pm`` names. ``hinted=False`` asks for the
        bytes even from a leader on this node."""
        name = self.cluster.replica_name(topic, partition, pm.leader)
        request = FetchRequest(
            topic,
            partition,
            offset,
            max_bytes=self.max_bytes,
            min_bytes=self.min_bytes,
            max_wait_ms=self.max_wait_ms,
            current_leader_epoch=pm.leader_epoch,
            node_id=self.node_id if hinted else "",
            isolation_level=self.isolation_level,
        )
        answer = self.cluster.submit(name, "fetch", request.encode(), timeout=self.timeout_s, probing=self.probing)
        return SentFetch(answer, name, pm.leader, pm.leader_epoch, offset, _monotonic())


class Fetcher:
    """The consumer's fetch pipeline over the partitions of a :class:`SubscriptionState`:
    sending fetches, taking in their answers, giving up overdue ones."""

    def __init__(
        self,
        cluster: ClusterClient,
        subscriptions: SubscriptionState,
        *,
        fetch_max_wait_ms: int,
        fetch_min_bytes: int,
        max_partition_fetch_bytes: int,
        request_timeout_ms: int,
        retry_backoff_ms: int,
        stats: RequestStats,
        isolation_level: int = 0,
    ) -> None:
        self.cluster = cluster
        self.subscriptions = subscriptions
        self.stats = stats  # fetch latency and failed fetches (the consumer's metrics())
        self._leaders = LeaderFetches(
            cluster,
            max_bytes=max_partition_fetch_bytes,
            min_bytes=fetch_min_bytes,
            max_wait_ms=fetch_max_wait_ms,
            request_timeout_ms=request_timeout_ms,
            isolation_level=isolation_level,
        )
        self._backoff_s = retry_backoff_ms / 1000
        # A fetch in flight is checked (who leads now) once overdue.
        self._overdue_s = fetch_max_wait_ms / 1000 + OVERDUE_S
        self._refresh_timeout_ms = min(request_timeout_ms, FETCH_GRACE_MS)
        self._last_refresh: dict[str, float] = {}

    def _in_flight(self) -> dict[concurrent.futures.Future, AssignedPartition]:
        """The answer of every fetch in flight -> its partition."""
        return {st.in_flight: st for st in self.subscriptions.assigned.values() if st.in_flight is not None}

    def in_flight(self) -> bool:
        return any(st.in_flight is not None for st in self.subscriptions.assigned.values())

    def _abandon(self, st: AssignedPartition, now: float, why: str, backoff: bool = True) -> None:
        """Give up the fetch in flight (a failed fetch, counted under ``why``): forget the
        leader's cached handle (the next fetch looks the actor up again) and refresh the
        topic's metadata."""
        self.stats.request_errors.add(why)
        actor = st.in_flight_actor
        st.in_flight.cancel()
        st.drop_in_flight()
        if actor:
            self.cluster.forget(actor)
        self._refresh(st.tp.topic, force=True)
        if backoff:
            st.backoff_until = now + self._backoff_s

    def _check_overdue(self, now: float) -> None:
        """Give up fetches whose partition has moved to another leader (the call itself
        fails when its leader is gone or silent past the fetch timeout)."""
        overdue = [st for st in self.subscriptions.assigned.values() if st.in_flight is not None and now >= st.next_check]
        if not overdue:
            return
        self.take_ready(0.0)  # an answer that arrived but was not taken in yet is not overdue
        topics: set[str] = set()
        for st in overdue:
            if st.in_flight is None:
                continue
            st.next_check = now + CHECK_EVERY_S
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
                    self._abandon(st, now, ErrorCode.NOT_LEADER_OR_FOLLOWER.name, backoff=False)

    def next_wake(self, now: float) -> float:
        """Seconds until the fetch pipeline has something to do besides taking in answers:
        an overdue check, or a partition's backoff ending."""
        wake = float("inf")
        for st in self.subscriptions.assigned.values():
            if st.in_flight is not None:
                wake = min(wake, st.next_check)
            elif st.backoff_until > now:
                wake = min(wake, st.backoff_until)
        return max(0.0, wake - now)

    def send_fetches(self) -> None:
        now = _monotonic()
        self._check_overdue(now)
        for st in self.subscriptions.assigned.values():
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
            sent = self._leaders.send(topic, partition, pm, st.fetch_offset, hinted=not st.no_hint)
            st.no_hint = False
            st.in_flight = sent.answer
            st.in_flight_generation = st.generation
            st.in_flight_since = now
            st.in_flight_actor = sent.actor
            st.in_flight_leader = sent.leader
            st.in_flight_epoch = sent.leader_epoch
            st.next_check = now + self._overdue_s

    def take_ready(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for fetch answers and take in all that are ready."""
        owner = self._in_flight()
        if not owner:
            return False
        if timeout > 0:
            done, _ = concurrent.futures.wait(owner, timeout=timeout, return_when=concurrent.futures.FIRST_COMPLETED)
            if not done:
                return False
        ready = [f for f in owner if f.done()]
        if not ready:
            return False
        for answer in ready:
            st = owner[answer]
            if st.in_flight is answer:
                st.in_flight = None
                self._on_fetch(st, answer)
        return True

    def idle_wait(self, seconds: float) -> None:
        """Nothing in flight (all paused, backing off, or no assignment): wait a little."""
        if seconds > 0:
            time.sleep(seconds)

    def _on_fetch(self, st: AssignedPartition, answer: concurrent.futures.Future) -> None:
        now = _monotonic()
        stats = self.stats
        try:
            raw = answer.result()
        except CallFailed as exc:
            # Gone or silent: ask who leads now; a fetch that raised is tried again after a
            # backoff, as Kafka's consumer does with UNKNOWN_SERVER_ERROR.
            stats.request_errors.add(exc)
            st.backoff_until = now + self._backoff_s
            if exc.kind == ERROR:
                logger.warning("fetch of %s from %s failed: %s", st.tp, st.in_flight_actor, exc.detail)
                return
            if exc.kind == TIMEOUT:
                # alive per Ray but silent past the fetch timeout: not what a healthy leader does
                logger.warning(
                    "fetch of %s from %s unanswered for %.1f s (%s); looking the leader up again",
                    st.tp, st.in_flight_actor, now - st.in_flight_since, exc.detail,
                )
            else:
                logger.info("leader %s of %s unavailable (%s); refreshing metadata", st.in_flight_actor, st.tp, exc)
            self._refresh(st.tp.topic, force=True)
            return
        # Measured when the answer is taken in (in poll()), so it includes time the
        # application spent between polls after the leader had answered.
        stats.latency.record((now - st.in_flight_since) * 1000)
        if st.in_flight_generation != st.generation:
            return  # the position moved (seek/reset) since this fetch was sent
        try:
            resp = FetchResponse.decode(raw)
        except KafkaError as exc:
            stats.request_errors.add(exc)
            st.error = exc
            return
        code = resp.error_code
        if code == 0:
            if resp.high_watermark >= 0:
                st.high_watermark = resp.high_watermark
            data, _ = fetched_records(resp, st.fetch_offset)
            if data is None:
                st.no_hint = True  # the files moved under us: the next fetch asks for bytes
                return
            if data:
                last = None
                for _, h in _records.iter_headers(data):
                    last = h
                if last is not None and last.next_offset > st.fetch_offset:
                    st.fetch_offset = last.next_offset
                    # read_committed: the aborted transactions travel with their chunk
                    st.pending.append((data, resp.aborted_transactions) if resp.aborted_transactions else data)
            return
        err = KafkaError(code, resp.error_message or "")
        stats.request_errors.add(err)
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            reset = self.subscriptions.auto_offset_reset
            if reset == "none":
                st.error = KafkaError(
                    code,
                    f"{st.tp.topic}-{st.tp.partition}: fetch offset {st.fetch_offset} is out of range "
                    f"(log start {resp.log_start_offset}, log end {resp.log_end_offset}) and auto_offset_reset='none'"
                    + (f": {resp.error_message}" if resp.error_message else ""),
                )
            else:
                logger.info("%s: offset %d out of range; resetting to %s", st.tp, st.fetch_offset, reset)
                self.subscriptions.reset_on_out_of_range(st)
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
