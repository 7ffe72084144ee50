"""Offset commits and fetches: a group member's (:class:`OffsetCommitter`) and a batch
writer's or an operator's outside any generation (:func:`commit_inactive_group`).

A member's commit carries its generation so that the coordinator can refuse offsets from a
member whose partitions may already belong to someone else (CommitFailedError); a consumer
with manually assigned partitions makes "simple" commits without a generation.
Asynchronous commits run on one worker thread so that they complete in call order.

A commit outside any generation (Kafka's standalone commit: ``Admin.reset_offsets``,
``kcoord.spark.commit``) is accepted only while the group has no members; refusing it up
front says so clearly instead of letting a live consumer and the caller overwrite each
other's offsets.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Iterable, Mapping, Protocol

from ...protocol.errors import ErrorCode, KafkaError, error_name, raise_for_error
from ...protocol.group import (
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from ..errors import CommitFailedError
from ..types import OffsetAndMetadata, TopicPartition
from .coordinators import COORDINATOR_RETRIABLE, GroupCoordinators

logger = logging.getLogger("kcoord.consumer.group")

E = ErrorCode

# Errors that end this member's generation: the commit is rejected and the member rejoins.
REBALANCE_ERRORS = frozenset({E.ILLEGAL_GENERATION, E.UNKNOWN_MEMBER_ID, E.REBALANCE_IN_PROGRESS, E.FENCED_INSTANCE_ID})

CommitCallback = Callable[[dict[TopicPartition, OffsetAndMetadata], Exception | None], Any]


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


class Membership(Protocol):
    """What an :class:`OffsetCommitter` needs from the group member it commits for."""

    def commit_generation(self) -> tuple[int, str, str | None]:
        """(generation id, member id, group instance id) to commit with; (-1, "", None) for
        a simple commit of manually assigned partitions. Raises CommitFailedError when the
        member is subscribed but not in an active generation."""

    def on_commit_rejected(self, generation_id: int, code: int) -> None:
        """A commit made with ``generation_id`` was refused with a rebalance error."""

    def log_tag(self) -> str:
        """The member's prefix for log lines."""


class OffsetCommitter:
    """OffsetCommit / OffsetFetch for one group member (thread-safe)."""

    def __init__(
        self,
        coordinators: GroupCoordinators,
        group_id: str,
        membership: Membership,
        *,
        request_timeout_ms: int,
        retry_backoff_ms: int,
    ) -> None:
        self.coordinators = coordinators
        self.group_id = group_id
        self.membership = membership
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None

    def _commit_request(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> OffsetCommitRequest:
        topics: dict[str, dict[int, OffsetCommitPartition]] = {}
        for tp, om in offsets.items():
            topics.setdefault(tp.topic, {})[tp.partition] = OffsetCommitPartition(om.offset, om.metadata, om.leader_epoch)
        generation, member_id, instance_id = self.membership.commit_generation()
        return OffsetCommitRequest(self.group_id, generation, member_id, instance_id, topics=topics)

    def commit(self, offsets: Mapping[Any, Any], timeout_ms: int | None = None) -> dict[TopicPartition, OffsetAndMetadata]:
        """Commit ``offsets`` ({tp: offset or OffsetAndMetadata}) synchronously with the
        member's generation. Raises :class:`CommitFailedError` if the generation is over,
        KafkaError otherwise."""
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
                self.membership.on_commit_rejected(request.generation_id, rebalance)
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

    def commit_async(self, offsets: Mapping[Any, Any], callback: CommitCallback | None = None) -> Future:
        """Commit in the background, in call order. Returns a Future of the committed
        offsets; ``callback(offsets, exception_or_None)`` runs when it completes."""
        normalized = normalize_offsets(offsets)
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"kcoord-commit-{self.group_id}")
            executor = self._executor

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
                        logger.exception("%s commit callback raised", self.membership.log_tag())

        return executor.submit(run)

    def fetch_committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets of ``partitions`` (None where nothing is committed).
        Stable ones (KIP-447, as Kafka's consumer asks): while a transaction's offsets for a
        partition await their marker the fetch is retried, up to the request timeout -- a
        new owner starting from the offset they are about to replace would process the
        transaction's input again."""
        partitions = [TopicPartition(*tp) for tp in partitions]
        if not partitions:
            return {}
        wanted: dict[str, list[int]] = {}
        for tp in partitions:
            wanted.setdefault(tp.topic, []).append(tp.partition)
        deadline = time.monotonic() + self.request_timeout_ms / 1000
        while True:
            response = self.coordinators.call_group(
                self.group_id, "offset_fetch", OffsetFetchRequest(self.group_id, wanted, require_stable=True), OffsetFetchResponse,
                timeout_s=max(0.1, deadline - time.monotonic()),
            )
            code = response.error_code or next(
                (p.error_code for parts in response.offsets.values() for p in parts.values() if p.error_code), 0
            )
            if code == E.NONE:
                break
            if (code not in COORDINATOR_RETRIABLE and code != E.UNSTABLE_OFFSET_COMMIT) or time.monotonic() >= deadline:
                raise KafkaError(code, f"fetching committed offsets of group {self.group_id!r} failed: {response.error_message or ''}")
            time.sleep(self.retry_backoff_ms / 1000)
        out: dict[TopicPartition, OffsetAndMetadata | None] = {}
        for tp in partitions:
            p = response.offsets.get(tp.topic, {}).get(tp.partition)
            out[tp] = None if p is None or p.offset < 0 else OffsetAndMetadata(p.offset, p.metadata or "", p.leader_epoch)
        return out

    def close(self) -> None:
        """Wait for the asynchronous commits in flight."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)


def require_inactive_group(coordinators: GroupCoordinators, group_id: str, timeout_s: float) -> None:
    """Raise NON_EMPTY_GROUP (REBALANCE_IN_PROGRESS mid-rebalance) while ``group_id`` has
    members: a commit outside any generation would be overwritten by their next commit."""
    g = coordinators.describe_group(group_id, timeout_s)
    if g.error_code not in (E.NONE, E.GROUP_ID_NOT_FOUND):
        raise_for_error(g.error_code, f"describing group {group_id!r} failed")
    if g.error_code == E.NONE and g.members:
        code = E.REBALANCE_IN_PROGRESS if g.state in ("PreparingRebalance", "CompletingRebalance") else E.NON_EMPTY_GROUP
        raise KafkaError(
            code,
            f"cannot commit offsets for group {group_id!r} outside a generation: it has {len(g.members)} active member(s) "
            f"(state {g.state}); the group must be inactive -- stop its consumers first, or commit from a group member",
        )


def commit_inactive_group(
    coordinators: GroupCoordinators, group_id: str, offsets: Mapping[str, Mapping[int, tuple[int, str]]], timeout_s: float
) -> None:
    """Commit ``offsets`` (``{topic: {partition: (offset, metadata)}}``) for ``group_id``
    outside any generation (Kafka's standalone commit); check
    :func:`require_inactive_group` first. The coordinator refuses it if members joined
    meanwhile (NON_EMPTY_GROUP)."""
    request = OffsetCommitRequest(
        group_id,
        topics={t: {p: OffsetCommitPartition(o, m) for p, (o, m) in sorted(parts.items())} for t, parts in offsets.items()},
    )
    response = coordinators.call_group(group_id, "offset_commit", request, OffsetCommitResponse, timeout_s)
    codes = {c for parts in response.topics.values() for c in parts.values()} | {response.error_code}
    codes.discard(E.NONE)
    if E.UNKNOWN_MEMBER_ID in codes or E.ILLEGAL_GENERATION in codes:
        raise KafkaError(E.NON_EMPTY_GROUP, f"cannot commit offsets for group {group_id!r}: members joined meanwhile; the group must be inactive")
    if codes:
        code = sorted(codes)[0]
        raise KafkaError(code, f"committing offsets for group {group_id!r} failed: {response.error_message or ''}")


def commit_offsets_outside_group(
    cluster: Any,
    group_id: str,
    offsets: Mapping[str, Mapping[int, tuple[int, str]]],
    *,
    from_log_start: bool = False,
    coordinators: GroupCoordinators | None = None,
) -> dict[str, dict[int, int]]:
    """The one standalone commit (``Admin.alter_consumer_group_offsets``,
    ``Admin.reset_offsets``, ``kcoord.spark.commit``): check every topic and partition
    exists (UNKNOWN_TOPIC_OR_PARTITION) and every offset lies within ``[0, high
    watermark]`` -- ``[log start, high watermark]`` with ``from_log_start`` --
    (OFFSET_OUT_OF_RANGE), that the group has no members (:func:`require_inactive_group`),
    then commit ``offsets`` (``{topic: {partition: (offset, metadata)}}``) in one request.
    Returns ``{topic: {partition: offset}}``."""
    from ...protocol.replication import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP

    if not isinstance(group_id, str) or not group_id:
        raise KafkaError(E.INVALID_GROUP_ID, f"group id must be a non-empty string, got {group_id!r}")
    if not offsets or not any(offsets.values()):
        raise ValueError("no offsets to commit")
    coordinators = coordinators if coordinators is not None else GroupCoordinators(cluster)
    timeout_s = cluster.request_timeout_ms / 1000
    require_inactive_group(coordinators, group_id, timeout_s)
    for topic, parts in offsets.items():
        known = cluster.partitions_for(topic)  # UNKNOWN_TOPIC_OR_PARTITION if missing
        missing = sorted(set(parts) - set(known))
        if missing:
            raise KafkaError(E.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic!r} has no partition(s) {missing} (it has {len(known)})")
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        hw = cluster.list_offsets(tps, LATEST_TIMESTAMP)
        low = cluster.list_offsets(tps, EARLIEST_TIMESTAMP) if from_log_start else dict.fromkeys(tps, 0)
        for tp in tps:
            off = parts[tp.partition][0]
            if not isinstance(off, int) or isinstance(off, bool):
                raise ValueError(f"offset for {topic}-{tp.partition} must be an integer, got {off!r}")
            if not low[tp] <= off <= hw[tp]:
                what = "log start" if from_log_start else "0"
                raise KafkaError(
                    E.OFFSET_OUT_OF_RANGE,
                    f"offset {off} for {topic}-{tp.partition} is outside [{low[tp]}, {hw[tp]}] ({what}, high watermark)",
                )
    commit_inactive_group(coordinators, group_id, offsets, timeout_s)
    return {t: {p: o for p, (o, _) in sorted(parts.items())} for t, parts in offsets.items()}
