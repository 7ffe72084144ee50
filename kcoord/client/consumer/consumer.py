"""Consumer: read records from partition leaders (kafka-python's KafkaConsumer, on Ray).

Fetches run on the process's calls thread (:mod:`kcoord.calls`: over a leader's direct-call
channel on this node, a Ray actor call otherwise), so answers arrive while the user is busy
elsewhere. The consumer keeps one long-poll Fetch in flight
per assigned partition, issued again as soon as the previous answer is taken in, so the
next chunk is usually already here when ``poll()`` needs it. Answers are decoded lazily,
one chunk at a time, into :class:`ConsumerRecord` tuples built without Python bytecode per
record. Like kafka-python's consumer, an instance is not thread-safe.

Without ``group_id`` the topics given to the constructor mean "assign every partition of
these topics". With ``group_id`` they are a subscription: the consumer joins the group and
reads what the group assigns it. The group logic lives in
:class:`kcoord.client.coordinator.GroupMember`; this class only hosts it (``group_assign``/
``group_positions``) and gives it a turn at every poll, where rebalances happen.

A Consumer owns its parts and hands each what it needs: a
:class:`~kcoord.client.consumer.subscription_state.SubscriptionState` (the assigned
partitions, positions, seeks, pause/resume), a :class:`~kcoord.client.consumer.fetcher.Fetcher`
over it (the fetch pipeline), a :class:`~kcoord.client.consumer.collector.RecordCollector`
(taking buffered records out, decoding and deserializing them) and with a group a
:class:`~kcoord.client.coordinator.GroupMember`. This module holds the public API and
``poll()``.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any, Iterable, Iterator

from ...protocol.errors import ErrorCode, KafkaError
from ...protocol.replication import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, READ_COMMITTED, READ_UNCOMMITTED
from ..cluster import ClusterClient, connect
from ..coordinator import GroupMember
from ..metrics import RequestStats
from ..types import ConsumerGroupMetadata, ConsumerRecord, OffsetAndMetadata, OffsetAndTimestamp, TopicPartition
from .collector import RecordCollector
from .fetcher import Fetcher
from .segments import RecordColumns
from .subscription_state import RESET_POLICIES, SubscriptionState

logger = logging.getLogger("kcoord.consumer")

# kafka-python's isolation_level names -> Kafka's Fetch/ListOffsets ids
ISOLATION_LEVELS = {"read_uncommitted": READ_UNCOMMITTED, "read_committed": READ_COMMITTED}

_monotonic = time.monotonic


class Consumer:
    """Read records from kcoord topics; names follow kafka-python, and so do the defaults
    except ``max_partition_fetch_bytes`` (4 MiB, kafka-python: 1 MiB: a fetch is one Ray
    call per partition, so larger answers mean fewer round trips) and
    ``session_timeout_ms`` (10 s, kafka-python 3: 45 s; kafka-python 2 and Kafka before
    3.0 used 10 s: a dead member's partitions move sooner).

    ``Consumer("events", cluster=cluster, auto_offset_reset="earliest")`` assigns every
    partition of ``events`` (no group yet: kafka-python would subscribe). ``assign()``
    replaces the assignment. A partition's starting position is decided by
    ``auto_offset_reset`` when first needed (first ``poll()`` or ``position()``):
    "earliest" = log start, "latest" = the high watermark at that moment, "none" = raise
    :class:`~kcoord.client.errors.NoOffsetForPartitionError` until you ``seek()``. The same policy applies when a
    position falls outside the log; with "none" the OFFSET_OUT_OF_RANGE KafkaError surfaces
    from ``poll()``.

    Consumers only see records below the high watermark (the leader enforces it), so
    everything returned was acknowledged by the ISR. ``isolation_level="read_committed"``
    (kafka-python's name) reads only below the last stable offset and drops the records of
    aborted transactions; "read_uncommitted" (the default) returns transactional records
    whatever their outcome. Transaction markers are never returned, and a position moves
    past them. ``end_offsets()`` answers the last stable offset under read_committed. ``ConsumerRecord.headers`` is a sequence
    of ``(str, bytes)`` pairs, empty when a record has none. :meth:`poll_columns` returns the
    same records as columns (no per-record objects) for bulk readers.

    ``key_deserializer`` / ``value_deserializer``: callables applied once to each record's
    non-None key/value bytes before ``poll()``, iteration or ``poll_columns()`` return it
    (None stays None). One that raises makes the call raise
    :class:`~kcoord.client.errors.SerializationError` naming the record's topic, partition
    and offset; that record is then returned again by the next call, as in kafka-python.

    ``subscribe(pattern=...)`` subscribes to every topic whose name matches the regular
    expression (``re.match``, as kafka-python; internal topics such as
    ``__consumer_offsets`` never match), evaluated again every ``metadata_max_age_ms``
    (kafka-python's 5 minutes by default) so that new topics join the subscription.
    ``metrics()`` returns the consumer's counters, fetch latency (avg, max, p50, p99 over the
    last 1024 fetches) and failed fetches and records by error, as a new dict.

    Timeouts: ``request_timeout_ms`` bounds every call to a leader or the controller. A
    fetch, which the leader holds up to ``fetch_max_wait_ms``, is given up
    ``fetch_max_wait_ms + min(request_timeout_ms, 5 s)`` after it was sent -- sooner when
    Ray's GCS reports the leader dead or restarting, or the metadata names another leader --
    and the leader is then looked up again (see :mod:`kcoord.client.consumer.fetcher`).
    """

    def __init__(
        self,
        *topics: str,
        cluster: ClusterClient | None = None,
        group_id: str | None = None,
        auto_offset_reset: str = "latest",
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5000,
        fetch_max_wait_ms: int = 500,
        fetch_min_bytes: int = 1,
        max_partition_fetch_bytes: int = 4 << 20,
        max_poll_records: int = 500,
        consumer_timeout_ms: float = float("inf"),
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        check_crcs: bool = True,
        client_id: str = "kcoord-consumer",
        group_instance_id: str | None = None,
        session_timeout_ms: int = 10_000,
        heartbeat_interval_ms: int = 3_000,
        max_poll_interval_ms: int = 300_000,
        partition_assignment_strategy: Any = ("range", "roundrobin"),
        key_deserializer: Any = None,
        value_deserializer: Any = None,
        metadata_max_age_ms: int = 300_000,
        isolation_level: str = "read_uncommitted",
    ) -> None:
        if isolation_level not in ISOLATION_LEVELS:
            raise ValueError(f"isolation_level must be one of {tuple(ISOLATION_LEVELS)}, got {isolation_level!r}")
        if auto_offset_reset not in RESET_POLICIES:
            raise ValueError(f"auto_offset_reset must be one of {RESET_POLICIES}, got {auto_offset_reset!r}")
        for name, value, minimum in (
            ("fetch_max_wait_ms", fetch_max_wait_ms, 0),
            ("fetch_min_bytes", fetch_min_bytes, 1),
            ("max_partition_fetch_bytes", max_partition_fetch_bytes, 1),
            ("max_poll_records", max_poll_records, 1),
            ("request_timeout_ms", request_timeout_ms, 1),
            ("retry_backoff_ms", retry_backoff_ms, 0),
        ):
            if type(value) is not int or value < minimum:
                raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
        for name, f in (("key_deserializer", key_deserializer), ("value_deserializer", value_deserializer)):
            if f is not None and not callable(f):
                raise TypeError(f"{name} must be callable, got {f!r}")
        if group_id is not None and (not isinstance(group_id, str) or not group_id):
            raise KafkaError(ErrorCode.INVALID_GROUP_ID, f"group_id must be a non-empty str, got {group_id!r}")
        self.cluster = cluster if cluster is not None else connect()
        self.group_id = group_id
        self.auto_offset_reset = auto_offset_reset
        self.enable_auto_commit = enable_auto_commit
        self.auto_commit_interval_ms = auto_commit_interval_ms
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_min_bytes = fetch_min_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.max_poll_records = max_poll_records
        self.consumer_timeout_ms = consumer_timeout_ms
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.check_crcs = check_crcs
        self.client_id = client_id
        self.key_deserializer = key_deserializer
        self.value_deserializer = value_deserializer
        self.metadata_max_age_ms = metadata_max_age_ms
        self.isolation_level = isolation_level
        level = ISOLATION_LEVELS[isolation_level]
        self._pattern: re.Pattern | None = None
        self._pattern_callbacks: tuple[Any, Any, Any] = (None, None, None)
        self._pattern_checked = 0.0
        self._metrics = {"records_consumed": 0, "polls": 0, "pattern_refreshes": 0}
        self._stats = RequestStats("fetch_latency", "fetch_error")
        self._backoff_s = retry_backoff_ms / 1000
        self._subscriptions = SubscriptionState(
            auto_offset_reset,
            lambda tps, timestamp: self.cluster.list_offsets(tps, timestamp, timeout_ms=self.request_timeout_ms, isolation_level=level),
        )
        self._fetcher = Fetcher(
            self.cluster,
            self._subscriptions,
            fetch_max_wait_ms=fetch_max_wait_ms,
            fetch_min_bytes=fetch_min_bytes,
            max_partition_fetch_bytes=max_partition_fetch_bytes,
            request_timeout_ms=request_timeout_ms,
            retry_backoff_ms=retry_backoff_ms,
            stats=self._stats,
            isolation_level=level,
        )
        self._records = RecordCollector(
            self._subscriptions,
            self._stats,
            self._metrics,
            key_deserializer=key_deserializer,
            value_deserializer=value_deserializer,
            check_crcs=check_crcs,
        )
        self._closed = False
        self._topics = tuple(topics)
        for t in topics:
            if not isinstance(t, str) or not t:
                raise TypeError(f"topics must be non-empty str, got {t!r}")
        self._group: GroupMember | None = None
        if group_id is not None:
            self._group = GroupMember(
                self.cluster,
                group_id,
                self,
                client_id=client_id,
                group_instance_id=group_instance_id,
                session_timeout_ms=session_timeout_ms,
                heartbeat_interval_ms=heartbeat_interval_ms,
                max_poll_interval_ms=max_poll_interval_ms,
                partition_assignment_strategy=partition_assignment_strategy,
                enable_auto_commit=enable_auto_commit,
                auto_commit_interval_ms=auto_commit_interval_ms,
                retry_backoff_ms=retry_backoff_ms,
                request_timeout_ms=request_timeout_ms,
            )
        if topics and self._group is not None:
            self.subscribe(topics)
        elif topics:
            tps = [TopicPartition(t, p) for t in topics for p in self.cluster.partitions_for(t)]
            self.assign(tps)

    def __repr__(self) -> str:
        return f"Consumer(cluster={self.cluster.name!r}, group_id={self.group_id!r}, assignment={sorted(self._subscriptions.assigned)})"

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------------------------
    # assignment
    # ------------------------------------------------------------------------------------
    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly these partitions from now on (replaces the assignment; partitions
        that stay assigned keep their positions)."""
        self._check_open()
        if self._group is not None and self._group.subscribed:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "assign() and subscribe() are mutually exclusive: unsubscribe() first")
        tps = []
        for tp in partitions:
            if not isinstance(tp, tuple) or len(tp) != 2 or not isinstance(tp[0], str) or type(tp[1]) is not int:
                raise TypeError(f"assign() takes TopicPartition(topic, partition) values, got {tp!r}")
            tp = TopicPartition(*tp)
            self.cluster.partition_metadata(tp.topic, tp.partition)  # KafkaError if unknown
            tps.append(tp)
        self._set_assignment(tps)

    def assignment(self) -> set[TopicPartition]:
        return set(self._subscriptions.assigned)

    def subscription(self) -> set[str]:
        """The subscribed topics (with a group; with a pattern, the topics it matched at its
        latest evaluation), else the topics given to the constructor."""
        if self._group is not None and self._group.subscribed:
            return set(self._group.subscription())
        if self._pattern is not None:
            return set()
        return set(self._topics)

    def subscribe(
        self,
        topics: Iterable[str] | str = (),
        pattern: "str | re.Pattern | None" = None,
        on_assign: Any = None,
        on_revoke: Any = None,
        on_lost: Any = None,
    ) -> None:
        """Join the group and consume what it assigns from ``topics``, or from every topic
        matching the regular expression ``pattern`` (``re.match``; internal topics
        excluded; evaluated again every ``metadata_max_age_ms``, and while nothing matches
        the consumer is not in the group). The join happens in the next poll.
        ``on_revoke(partitions)`` runs before a rebalance takes partitions away (commit
        there when committing manually), ``on_assign(partitions)`` after the new ones
        arrive; ``on_lost(partitions)`` instead of ``on_revoke`` when the consumer was fenced
        (its session expired: the partitions may already belong to another member and
        committing is no longer possible; default: ``on_revoke``); all in the polling
        thread."""
        self._check_open()
        self._require_group("subscribe()")
        if pattern is not None:
            if topics:
                raise ValueError("subscribe() takes topics or pattern=, not both")
            self._pattern = re.compile(pattern) if isinstance(pattern, str) else pattern
            self._pattern_callbacks = (on_assign, on_revoke, on_lost)
            self._refresh_pattern()
            return
        if not topics:
            raise ValueError("subscribe() needs topics or pattern= (use unsubscribe() to stop)")
        self._pattern = None
        self._group.subscribe([topics] if isinstance(topics, str) else topics, on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)

    def _refresh_pattern(self) -> None:
        """Subscribe the group to the topics the pattern matches now."""
        from ..admin import Admin

        assert self._pattern is not None and self._group is not None
        self._pattern_checked = _monotonic()
        self._metrics["pattern_refreshes"] += 1
        matched = sorted(t for t in Admin(self.cluster).list_topics(internal=False) if self._pattern.match(t))
        if matched == sorted(self._group.subscription()):
            return
        if matched:
            on_assign, on_revoke, on_lost = self._pattern_callbacks
            self._group.subscribe(matched, on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
        elif self._group.subscribed:
            self._group.unsubscribe()
            self._set_assignment([])

    def unsubscribe(self) -> None:
        """Revoke all partitions and leave the group."""
        self._check_open()
        self._pattern = None
        if self._group is not None:
            self._group.unsubscribe()
        self._set_assignment([])

    def _set_assignment(self, partitions: Iterable[TopicPartition], positions: dict[TopicPartition, int] | None = None) -> None:
        self._subscriptions.assign(partitions, positions)

    # The MemberHost protocol of kcoord.client.coordinator.member (how the group member drives us).
    def group_assign(self, partitions: list[TopicPartition], committed: dict[TopicPartition, int | None]) -> None:
        self._set_assignment(partitions, {tp: off for tp, off in committed.items() if off is not None})

    def group_positions(self) -> dict[TopicPartition, int]:
        return {tp: pos for tp, pos in self._subscriptions.positions().items() if pos is not None}

    # ------------------------------------------------------------------------------------
    # positions
    # ------------------------------------------------------------------------------------
    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Read ``partition`` from ``offset`` on the next poll()."""
        self._subscriptions.seek(partition, offset)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Move to the log start of ``partitions`` (all assigned ones if none given);
        resolved on the next poll()/position()."""
        self._subscriptions.seek_to("earliest", partitions)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Move to the high watermark of ``partitions`` (all assigned if none given)."""
        self._subscriptions.seek_to("latest", partitions)

    def position(self, partition: TopicPartition) -> int:
        """The offset of the next record poll() returns for ``partition`` (resolving
        ``auto_offset_reset`` now if needed)."""
        return self._subscriptions.position(partition)

    def highwater(self, partition: TopicPartition) -> int | None:
        """The high watermark the last fetch of ``partition`` reported (None before one)."""
        hw = self._subscriptions.state(partition).high_watermark
        return hw if hw >= 0 else None

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop returning (and fetching) records of ``partitions``; positions stay."""
        self._subscriptions.pause(partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        self._subscriptions.resume(partitions)

    def paused(self) -> set[TopicPartition]:
        return self._subscriptions.paused()

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The log start offset of each partition."""
        return self.cluster.list_offsets([TopicPartition(*tp) for tp in partitions], EARLIEST_TIMESTAMP, timeout_ms=self.request_timeout_ms)

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The high watermark of each partition: the offset the next acknowledged record gets
        (under read_committed, the last stable offset)."""
        return self.cluster.list_offsets(
            [TopicPartition(*tp) for tp in partitions], LATEST_TIMESTAMP, timeout_ms=self.request_timeout_ms, isolation_level=ISOLATION_LEVELS[self.isolation_level]
        )

    def offsets_for_times(self, timestamps: "dict[TopicPartition, int]") -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """For each partition, the earliest offset whose record timestamp is >= the given
        timestamp (ms since the epoch) and that record's timestamp, or None when no record
        is that recent (kafka-python's ``offsets_for_times``; the leaders' ListOffsets)."""
        wanted: dict[TopicPartition, int] = {}
        for tp, ts in timestamps.items():
            if type(ts) is not int or ts < 0:
                raise ValueError(f"timestamp for {tp} must be an int >= 0 (ms since the epoch), got {ts!r}")
            wanted[TopicPartition(*tp)] = ts
        out: dict[TopicPartition, OffsetAndTimestamp | None] = {}
        for ts in sorted(set(wanted.values())):
            tps = [tp for tp, t in wanted.items() if t == ts]
            found = self.cluster.list_offsets_and_timestamps(tps, ts, timeout_ms=self.request_timeout_ms)
            for tp in tps:
                offset, record_ts = found[tp]
                out[tp] = OffsetAndTimestamp(offset, record_ts) if offset >= 0 else None
        return out

    def metrics(self) -> dict[str, Any]:
        """The consumer's figures as a new dict (kafka-python's ``metrics()``, flat, with
        its names in snake case):

        - counters: records_consumed (kafka-python's records-consumed-total: returned by
          poll(), poll_columns() and iteration), polls, pattern_refreshes,
          assigned_partitions, paused_partitions;
        - fetch_latency_avg / _max / _p50 / _p99: ms from sending a fetch to taking its
          answer in, over the last 1024 fetches (None before the first). A fetch is a long
          poll: the leader holds it up to fetch_max_wait_ms when there is nothing new, and
          the answer is taken in by poll(), so time between polls counts too;
        - fetch_error_total and fetch_errors ``{error: n}``: fetches that failed or were
          given up (an error answer, a leader gone, moved or silent); they are retried;
        - record_error_total and record_errors ``{error: n}``: records a call raised for
          (a deserializer failed, a corrupt batch).

        Errors are named by Kafka error code, other exceptions by class name."""
        out = {**self._metrics, **self._stats.snapshot()}
        out["assigned_partitions"] = len(self._subscriptions.assigned)
        out["paused_partitions"] = len(self._subscriptions.paused())
        return out

    def partitions_for_topic(self, topic: str) -> set[int]:
        return set(self.cluster.partitions_for(topic))

    def topics(self) -> set[str]:
        from ..admin import Admin

        return set(Admin(self.cluster).list_topics())

    # ------------------------------------------------------------------------------------
    # poll
    # ------------------------------------------------------------------------------------
    def poll(self, timeout_ms: float = 0, max_records: int | None = None) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records from the assigned, unpaused partitions: ``{TopicPartition: [records]}``
        with at most ``max_records`` (default ``max_poll_records``) in all. Waits up to
        ``timeout_ms`` for something to arrive; returns ``{}`` if nothing did."""
        self._check_open()
        if max_records is None:
            max_records = self.max_poll_records
        elif type(max_records) is not int or max_records < 1:
            raise ValueError(f"max_records must be an int >= 1, got {max_records!r}")
        self._records.abandon_iteration()
        self._metrics["polls"] += 1
        return self._poll(timeout_ms, max_records, advance=True)

    def poll_columns(self, timeout_ms: float = 0, max_records: int | None = None) -> dict[TopicPartition, RecordColumns]:
        """Like :meth:`poll`, but each partition's records come as one :class:`RecordColumns`
        (lists of keys, values, timestamps...) instead of ConsumerRecord tuples: no Python
        object per record beyond the values themselves. For bulk readers (Spark, Arrow,
        Ray Data). ``max_records`` defaults to 64 x max_poll_records."""
        self._check_open()
        if max_records is None:
            max_records = 64 * self.max_poll_records
        elif type(max_records) is not int or max_records < 1:
            raise ValueError(f"max_records must be an int >= 1, got {max_records!r}")
        self._records.abandon_iteration()
        self._metrics["polls"] += 1
        return self._poll(timeout_ms, max_records, advance=True, columns=True)

    def _poll(self, timeout_ms: float, max_records: int, advance: bool, columns: bool = False) -> dict[TopicPartition, Any]:
        deadline = _monotonic() + max(0.0, timeout_ms) / 1000
        while True:
            if self._pattern is not None and _monotonic() - self._pattern_checked >= self.metadata_max_age_ms / 1000:
                self._refresh_pattern()
            if self._group is not None:
                self._group.poll()  # liveness for max_poll_interval_ms, rebalances, auto-commit
            self._subscriptions.resolve_positions([st for st in self._subscriptions.assigned.values() if st.position is None])
            self._records.raise_errors()
            # Take in every answer that has landed, even with records still buffered: an
            # answer left in Ray would hold back its partition (and the next fetch of it)
            # until all the others run dry, and would look unanswered to the overdue checks.
            self._fetcher.take_ready(0.0)
            out = self._records.collect(max_records, advance, columns)
            self._fetcher.send_fetches()
            if out:
                return out
            self._records.raise_errors()
            remaining = deadline - _monotonic()
            if remaining <= 0:
                return {}
            if self._group is not None:
                # Wake often enough to act on a rebalance the heartbeat thread flagged,
                # instead of sleeping through a whole long-poll.
                remaining = min(remaining, self._group.poll_wake_s)
            # ... and to check fetches that are overdue or partitions whose backoff ends.
            remaining = min(remaining, max(0.001, self._fetcher.next_wake(_monotonic())))
            if self._fetcher.in_flight():
                self._fetcher.take_ready(remaining)
            else:
                self._fetcher.idle_wait(min(remaining, self._backoff_s))

    # ------------------------------------------------------------------------------------
    # iterator form
    # ------------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[ConsumerRecord]:
        return self

    def __next__(self) -> ConsumerRecord:
        """The next record; positions advance record by record. Raises StopIteration when
        nothing arrived for ``consumer_timeout_ms``."""
        self._check_open()
        deadline = _monotonic() + self.consumer_timeout_ms / 1000
        while True:
            rec = self._records.next_iterated()
            if rec is not None:
                return rec
            remaining = deadline - _monotonic()
            if remaining <= 0:
                raise StopIteration
            self._poll(min(remaining * 1000, 1000.0), self.max_poll_records, advance=False)

    # ------------------------------------------------------------------------------------
    # groups
    # ------------------------------------------------------------------------------------
    def _require_group(self, what: str) -> None:
        if self._group is None:
            raise KafkaError(ErrorCode.INVALID_GROUP_ID, f"{what} needs a group_id: create the Consumer with group_id=...")

    def commit(self, offsets: dict[TopicPartition, OffsetAndMetadata] | None = None) -> None:
        """Commit ``offsets`` (default: the positions of every assigned partition) and wait.
        Raises CommitFailedError if the group rebalanced meanwhile."""
        self._check_open()
        self._require_group("commit()")
        self._group.commit(offsets)

    def commit_async(self, offsets: dict[TopicPartition, OffsetAndMetadata] | None = None, callback: Any = None) -> Any:
        """Commit in the background; ``callback(offsets, exception_or_None)``. Returns a Future."""
        self._check_open()
        self._require_group("commit_async()")
        return self._group.commit_async(offsets, callback)

    def group_metadata(self) -> ConsumerGroupMetadata:
        """A snapshot of this consumer's group membership, for
        ``Producer.send_offsets_to_transaction`` (KIP-447: the group coordinator fences a
        stale instance by it). Without ``group_id``: ``group_id=None``, unjoined."""
        if self._group is None:
            return ConsumerGroupMetadata(group_id=None)
        generation, member_id, instance = self._group.group_metadata()
        return ConsumerGroupMetadata(self.group_id, generation, member_id, instance)

    def committed(self, partition: TopicPartition) -> int | None:
        """The group's committed offset of ``partition``, or None."""
        self._require_group("committed()")
        return self._group.committed(partition)

    # ------------------------------------------------------------------------------------
    def close(self, *, leave_group: bool | None = None) -> None:
        """Commit (with auto-commit), leave the group, forget fetches in flight and the
        assignment. Idempotent. ``leave_group`` (Kafka's ``CloseOptions``, KIP-1092): None,
        the default, leaves as a dynamic member and keeps a static member's seat until its
        session times out (KIP-345: a restart resumes without a rebalance); True leaves as
        either (a static member being removed for good, LeaveGroup with its
        ``group_instance_id``); False does not leave."""
        if self._closed:
            return
        if self._group is not None:
            try:
                self._group.close(leave_group=leave_group)
            except Exception:
                logger.exception("leaving group %r while closing failed", self.group_id)
        for st in self._subscriptions.assigned.values():
            st.drop_in_flight()
            st.clear_buffer()
        self._records.iterating.clear()
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this consumer is closed")
