"""The consumer's fetch pipeline: one long-poll Fetch in flight per assigned partition.

A mixin of :class:`~kcoord.client.consumer.Consumer` (it works on the consumer's assigned
partitions); split out so that each file holds one part of the consumer. A fetch is a Ray
actor call; Ray moves its answer into this process while the user is busy elsewhere, and
the next fetch of a partition goes out as soon as the previous answer is taken in, so the
next chunk is usually already here when ``poll()`` needs it. Leaders on this process's Ray
node answer with file hints, read here instead of copying bytes through Ray. Errors back
off, refresh metadata, reset the position (OFFSET_OUT_OF_RANGE) or surface from the next
poll().
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

logger = logging.getLogger("kcoord.consumer")

_monotonic = time.monotonic


class FetchPipeline:
    """Sending fetches and taking in their answers (mixed into Consumer)."""

    def _drop_in_flight(self, st: AssignedPartition) -> None:
        if st.in_flight is not None:
            self._owner.pop(st.in_flight, None)
            st.in_flight = None

    def _send_fetches(self) -> None:
        now = _monotonic()
        for st in self._assigned.values():
            if st.in_flight is not None:
                if now - st.in_flight_since < self._stuck_s:
                    continue
                logger.warning("fetch of %s from %s unanswered for %.0f s; retrying", st.tp, st.in_flight_actor, now - st.in_flight_since)
                self._drop_in_flight(st)
                self._refresh(st.tp.topic)
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
            self._owner[ref] = st

    def _take_ready(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for fetch answers and take in all that are ready."""
        refs = list(self._owner)
        if not refs:
            return False
        ready, _ = ray.wait(refs, num_returns=1, timeout=timeout)
        if not ready:
            return False
        if len(refs) > 1:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
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

    def _refresh(self, topic: str, force: bool = False) -> None:
        now = _monotonic()
        if not force and now - self._last_refresh.get(topic, 0.0) < self._backoff_s:
            return
        self._last_refresh[topic] = now
        try:
            self.cluster.refresh_metadata([topic])
        except KafkaError as exc:
            logger.debug("metadata refresh of %s failed: %s", topic, exc)
