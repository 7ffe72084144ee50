"""Offset commits and fetches of a consumer-group member (mixed into GroupMember).

A commit carries the member's generation so that the coordinator can refuse offsets from a
member whose partitions may already belong to someone else (CommitFailedError); a consumer
with manually assigned partitions makes "simple" commits without a generation.
Asynchronous commits run on one worker thread so that they complete in call order.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Iterable, Mapping

from ..protocol.errors import ErrorCode, KafkaError, error_name
from ..protocol.group import (
    NO_GENERATION,
    NO_MEMBER_ID,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from .group_calls import COORDINATOR_RETRIABLE
from .member_state import STABLE, UNJOINED
from .types import OffsetAndMetadata, TopicPartition

logger = logging.getLogger("kcoord.consumer.group")

E = ErrorCode

# Errors that end this member's generation: the commit is rejected and the member rejoins.
REBALANCE_ERRORS = frozenset({E.ILLEGAL_GENERATION, E.UNKNOWN_MEMBER_ID, E.REBALANCE_IN_PROGRESS, E.FENCED_INSTANCE_ID})

CommitCallback = Callable[[dict[TopicPartition, OffsetAndMetadata], Exception | None], Any]


class CommitFailedError(KafkaError):
    """The commit was rejected because this member's generation is over (the group
    rebalanced, or the member was removed). Its partitions may belong to another member
    now; poll() to rejoin, and commit only what you processed after the new assignment."""


def normalize_offsets(offsets: Mapping[Any, Any]) -> dict[TopicPartition, OffsetAndMetadata]:
    """``{tp: offset | (offset, metadata) | OffsetAndMetadata}`` as OffsetAndMetadata values;
    a clear error for anything else or a negative offset."""
    out: dict[TopicPartition, OffsetAndMetadata] = {}
    for tp, value in offsets.items():
        tp = TopicPartition(*tp)
        if isinstance(value, OffsetAndMetadata):
            out[tp] = value
        elif isinstance(value, int) and not isinstance(value, bool):
            out[tp] = OffsetAndMetadata(value)
        elif isinstance(value, tuple):
            out[tp] = OffsetAndMetadata(*value)
        else:
            raise TypeError(f"offset for {tp} must be an int or OffsetAndMetadata, got {value!r}")
        if out[tp].offset < 0:
            raise ValueError(f"cannot commit a negative offset for {tp}: {out[tp].offset}")
    return out


class GroupCommits:
    """OffsetCommit / OffsetFetch for :class:`~kcoord.client.group_member.GroupMember`, which
    provides the membership state used here (generation, member id, locks, host)."""

    def _maybe_auto_commit(self) -> None:
        if not self.enable_auto_commit or time.monotonic() < self._next_auto_commit:
            return
        self._next_auto_commit = time.monotonic() + self.auto_commit_interval_ms / 1000
        if self._state != STABLE or self.host is None:
            return
        positions = self.host.group_positions()
        if positions:

            def done(offsets: Any, exc: Exception | None) -> None:
                if exc is not None:
                    logger.warning("%s auto-commit failed: %s", self._tag(), exc)

            self.commit_async(positions, callback=done)

    def _commit_request(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> OffsetCommitRequest:
        topics: dict[str, dict[int, OffsetCommitPartition]] = {}
        for tp, om in offsets.items():
            topics.setdefault(tp.topic, {})[tp.partition] = OffsetCommitPartition(om.offset, om.metadata, om.leader_epoch)
        with self._lock:
            if not self.subscribed:
                # Manual assignment: a "simple" commit, accepted while the group has no members.
                return OffsetCommitRequest(self.group_id, NO_GENERATION, NO_MEMBER_ID, None, topics=topics)
            if self._generation < 0 or not self._member_id:
                raise CommitFailedError(
                    E.UNKNOWN_MEMBER_ID,
                    f"cannot commit for group {self.group_id!r}: this consumer is not in an active generation "
                    f"(it is {self._state}); poll() to rejoin first",
                )
            return OffsetCommitRequest(self.group_id, self._generation, self._member_id, self.group_instance_id, topics=topics)

    def commit(self, offsets: Mapping[Any, Any] | None = None, timeout_ms: int | None = None) -> dict[TopicPartition, OffsetAndMetadata]:
        """Commit ``offsets`` ({tp: offset or OffsetAndMetadata}; default: the host's current
        positions) synchronously with this member's generation. Raises
        :class:`CommitFailedError` if the generation is over, KafkaError otherwise."""
        if offsets is None:
            offsets = self.host.group_positions() if self.host is not None else {}
        normalized = normalize_offsets(offsets)
        if not normalized:
            return {}
        request = self._commit_request(normalized)
        deadline = time.monotonic() + (timeout_ms or self.request_timeout_ms) / 1000
        while True:
            response = self.coordinators.call_group(
                self.group_id, "offset_commit", request, OffsetCommitResponse, timeout_s=max(0.1, deadline - time.monotonic())
            )
            codes = [c for parts in response.topics.values() for c in parts.values()]
            if response.error_code:
                codes.append(response.error_code)
            bad = [c for c in codes if c != E.NONE]
            if not bad:
                return normalized
            rebalance = next((c for c in bad if c in REBALANCE_ERRORS), None)
            if rebalance is not None:
                with self._lock:
                    # Only a member that thinks it is stable needs telling; one that is
                    # rebalancing right now (a commit from another thread) is rejoining.
                    if request.generation_id == self._generation and self._state == STABLE:
                        if rebalance == E.UNKNOWN_MEMBER_ID:
                            self._member_id = NO_MEMBER_ID
                            self._generation = NO_GENERATION
                            self._state = UNJOINED
                        self._rejoin_needed = True
                raise CommitFailedError(
                    rebalance,
                    f"commit of group {self.group_id!r} at generation {request.generation_id} was rejected "
                    f"({error_name(rebalance)}): the group rebalanced and these partitions may belong to "
                    f"another member now. poll() to rejoin; commit only offsets processed after the new assignment.",
                )
            retriable = all(c in COORDINATOR_RETRIABLE for c in bad)
            if not retriable or time.monotonic() >= deadline:
                code = bad[0]
                raise KafkaError(code, f"commit of group {self.group_id!r} failed: {response.error_message or error_name(code)}")
            time.sleep(self.retry_backoff_ms / 1000)

    def commit_async(self, offsets: Mapping[Any, Any] | None = None, callback: CommitCallback | None = None) -> Future:
        """Commit in the background, in call order. Returns a Future of the committed
        offsets; ``callback(offsets, exception_or_None)`` runs when it completes."""
        if offsets is None:
            offsets = self.host.group_positions() if self.host is not None else {}
        normalized = normalize_offsets(offsets)
        with self._lock:
            if self._commit_executor is None:
                self._commit_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"kcoord-commit-{self.group_id}")
            executor = self._commit_executor

        def run() -> dict[TopicPartition, OffsetAndMetadata]:
            error: Exception | None = None
            try:
                return self.commit(normalized)
            except Exception as exc:
                error = exc
                raise
            finally:
                if callback is not None:
                    try:
                        callback(normalized, error)
                    except Exception:
                        logger.exception("%s commit callback raised", self._tag())

        return executor.submit(run)

    def fetch_committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets of ``partitions`` (None where nothing is committed)."""
        partitions = [TopicPartition(*tp) for tp in partitions]
        if not partitions:
            return {}
        wanted: dict[str, list[int]] = {}
        for tp in partitions:
            wanted.setdefault(tp.topic, []).append(tp.partition)
        deadline = time.monotonic() + self.request_timeout_ms / 1000
        while True:
            response = self.coordinators.call_group(
                self.group_id, "offset_fetch", OffsetFetchRequest(self.group_id, wanted), OffsetFetchResponse,
                timeout_s=max(0.1, deadline - time.monotonic()),
            )
            code = response.error_code or next(
                (p.error_code for parts in response.offsets.values() for p in parts.values() if p.error_code), 0
            )
            if code == E.NONE:
                break
            if code not in COORDINATOR_RETRIABLE or time.monotonic() >= deadline:
                raise KafkaError(code, f"fetching committed offsets of group {self.group_id!r} failed: {response.error_message or ''}")
            time.sleep(self.retry_backoff_ms / 1000)
        out: dict[TopicPartition, OffsetAndMetadata | None] = {}
        for tp in partitions:
            p = response.offsets.get(tp.topic, {}).get(tp.partition)
            out[tp] = None if p is None or p.offset < 0 else OffsetAndMetadata(p.offset, p.metadata or "", p.leader_epoch)
        return out

    def committed(self, tp: TopicPartition, metadata: bool = False) -> int | OffsetAndMetadata | None:
        """The group's committed offset of ``tp`` (kafka-python: the offset, or None)."""
        found = self.fetch_committed([tp]).get(TopicPartition(*tp))
        if found is None:
            return None
        return found if metadata else found.offset
