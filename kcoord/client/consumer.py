"""Consumer: read records from partition leaders (kafka-python's KafkaConsumer, on Ray).

No background thread: a fetch is a Ray actor call, and Ray moves its answer into this
process while the user is busy elsewhere. The consumer keeps one long-poll Fetch in flight
per assigned partition, issued again as soon as the previous answer is taken in, so the
next chunk is usually already here when ``poll()`` needs it. Answers are decoded lazily,
one chunk at a time, into :class:`ConsumerRecord` tuples built without Python bytecode per
record. Like kafka-python's consumer, an instance is not thread-safe.

Without ``group_id`` the topics given to the constructor mean "assign every partition of
these topics". With ``group_id`` they are a subscription: the consumer joins the group and
reads what the group assigns it. The group logic lives in
:class:`kcoord.client.group_member.GroupMember`; this class only hosts it (``group_assign``/
``group_positions``) and gives it a turn at every poll, where rebalances happen.
"""

from __future__ import annotations

import gc
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from functools import partial
from itertools import chain as _chain
from itertools import repeat
from typing import Any, Iterable, Iterator, NamedTuple

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from .. import records as _records
from ..log.hints import read_hinted
from ..protocol.errors import ErrorCode, KafkaError, raise_for_error
from ..protocol.replication import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
)
from .cluster import ClusterClient, connect
from .group_member import GroupMember
from .types import ConsumerRecord, OffsetAndMetadata, TopicPartition

logger = logging.getLogger("kcoord.consumer")

_RESET = ("earliest", "latest", "none")
_SPEC = {"earliest": EARLIEST_TIMESTAMP, "latest": LATEST_TIMESTAMP}
_new_record = partial(tuple.__new__, ConsumerRecord)
_NO_HEADERS: tuple = ()
_monotonic = time.monotonic


class NoOffsetForPartitionError(KafkaError):
    """A partition has no position and ``auto_offset_reset="none"`` forbids guessing one."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.OFFSET_OUT_OF_RANGE, message)

    def __reduce__(self):
        return (self.__class__, (self.message,))


@dataclass(eq=False)
class _Assigned:
    """One assigned partition: position, fetch pipeline and buffered records."""

    tp: TopicPartition
    position: int | None = None  # offset of the next record poll() returns
    reset: str | None = None  # a pending seek_to_beginning/end ("earliest"/"latest")
    paused: bool = False
    generation: int = 0  # bumped by seek/reset: answers to older fetches are dropped
    fetch_offset: int = -1  # where the next fetch starts (ahead of position: prefetch)
    decode_from: int = -1  # buffered records below this are skipped (after a seek)
    in_flight: Any = None  # ObjectRef of the fetch in flight
    in_flight_generation: int = -1
    in_flight_since: float = 0.0
    in_flight_actor: str = ""
    pending: deque = field(default_factory=deque)  # fetched, not yet decoded record bytes
    segments: deque = field(default_factory=deque)  # decoded batches, not yet returned
    backoff_until: float = 0.0
    high_watermark: int = -1
    error: KafkaError | None = None  # raised from the next poll()
    no_hint: bool = False  # the last file hint did not check out: fetch bytes once

    def clear_buffer(self) -> None:
        self.pending.clear()
        self.segments.clear()

    def buffered(self) -> bool:
        return bool(self.segments) or bool(self.pending)


@dataclass(eq=False, slots=True)
class _Segment:
    """One decoded batch as columns; rows ``[start, len(values))`` are still to return.
    Records stay columns until a poll() takes them (then only that slice becomes
    ConsumerRecord tuples), so poll_columns() never builds per-record objects."""

    base: int  # offset of row 0
    start: int
    values: list
    keys: list | None
    timestamps: list | None  # None: every row has ``timestamp``
    timestamp: int
    timestamp_type: int
    headers: list | None
    leader_epoch: int


class RecordColumns(NamedTuple):
    """Records of one partition as columns (:meth:`Consumer.poll_columns`): row ``i`` is the
    record at offset ``offsets[i]``. ``headers`` is None when no record has any."""

    topic: str
    partition: int
    offsets: range
    timestamps: list
    timestamp_types: list
    keys: list
    values: list
    headers: list | None

    def __len__(self) -> int:  # type: ignore[override]
        return len(self.values)


class Consumer:
    """Read records from kcoord topics; names and defaults follow kafka-python.

    ``Consumer("events", cluster=cluster, auto_offset_reset="earliest")`` assigns every
    partition of ``events`` (no group yet: kafka-python would subscribe). ``assign()``
    replaces the assignment. A partition's starting position is decided by
    ``auto_offset_reset`` when first needed (first ``poll()`` or ``position()``):
    "earliest" = log start, "latest" = the high watermark at that moment, "none" = raise
    :class:`NoOffsetForPartitionError` until you ``seek()``. The same policy applies when a
    position falls outside the log; with "none" the OFFSET_OUT_OF_RANGE KafkaError surfaces
    from ``poll()``.

    Consumers only see records below the high watermark (the leader enforces it), so
    everything returned was acknowledged by the ISR. ``ConsumerRecord.headers`` is a sequence
    of ``(str, bytes)`` pairs, empty when a record has none. :meth:`poll_columns` returns the
    same records as columns (no per-record objects) for bulk readers.
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
    ) -> None:
        if auto_offset_reset not in _RESET:
            raise ValueError(f"auto_offset_reset must be one of {_RESET}, got {auto_offset_reset!r}")
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
        if group_id is not None and (not isinstance(group_id, str) or not group_id):
            raise KafkaError(ErrorCode.INVALID_GROUP_ID, f"group_id must be a non-empty str, got {group_id!r}")
        self.cluster = cluster if cluster is not None else connect()
        # This process's Ray node: leaders on it answer fetches with file hints.
        try:
            self._node_id = ray.get_runtime_context().get_node_id() or ""
        except Exception:
            self._node_id = ""
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
        self._backoff_s = retry_backoff_ms / 1000
        self._stuck_s = (fetch_max_wait_ms + request_timeout_ms) / 1000
        self._assigned: dict[TopicPartition, _Assigned] = {}
        self._owner: dict[Any, _Assigned] = {}  # in-flight ObjectRef -> its partition
        self._rotation = 0
        self._last_refresh: dict[str, float] = {}
        self._iter: deque = deque()  # [state, generation, records, index] for __next__
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
        return f"Consumer(cluster={self.cluster.name!r}, group_id={self.group_id!r}, assignment={sorted(self._assigned)})"

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
        return set(self._assigned)

    def subscription(self) -> set[str]:
        """The subscribed topics (with a group), else the topics given to the constructor."""
        if self._group is not None and self._group.subscribed:
            return set(self._group.subscription())
        return set(self._topics)

    def subscribe(self, topics: Iterable[str] | str, on_assign: Any = None, on_revoke: Any = None) -> None:
        """Join the group and consume what it assigns from ``topics``; the join happens in
        the next poll. ``on_revoke(partitions)`` runs before a rebalance takes partitions
        away (commit there when committing manually), ``on_assign(partitions)`` after the
        new ones arrive; both in the polling thread."""
        self._check_open()
        self._require_group("subscribe()")
        self._group.subscribe([topics] if isinstance(topics, str) else topics, on_assign=on_assign, on_revoke=on_revoke)

    def unsubscribe(self) -> None:
        """Revoke all partitions and leave the group."""
        self._check_open()
        if self._group is not None:
            self._group.unsubscribe()
        self._set_assignment([])

    def _set_assignment(self, partitions: Iterable[TopicPartition], positions: dict[TopicPartition, int] | None = None) -> None:
        """Hook for the groups layer: replace the assignment without metadata checks and
        optionally seed positions (e.g. committed offsets); partitions without a seeded or
        kept position start per ``auto_offset_reset``."""
        new: dict[TopicPartition, _Assigned] = {}
        for tp in partitions:
            tp = TopicPartition(*tp)
            st = self._assigned.get(tp) or _Assigned(tp)
            new[tp] = st
        for tp, st in self._assigned.items():
            if tp not in new:
                self._drop_in_flight(st)
        self._assigned = new
        for tp, offset in (positions or {}).items():
            if tp in new and offset is not None and offset >= 0:
                self._reposition(new[tp], offset)

    def _positions(self) -> dict[TopicPartition, int | None]:
        """Hook for the groups layer: every assigned partition's position (None if not
        yet known), without resolving anything."""
        return {tp: st.position for tp, st in self._assigned.items()}

    # The MemberHost protocol of kcoord.client.group_member (how the groups layer drives us).
    def group_assign(self, partitions: list[TopicPartition], committed: dict[TopicPartition, int | None]) -> None:
        self._set_assignment(partitions, {tp: off for tp, off in committed.items() if off is not None})

    def group_positions(self) -> dict[TopicPartition, int]:
        return {tp: pos for tp, pos in self._positions().items() if pos is not None}

    def partitions_for_topic(self, topic: str) -> set[int]:
        return set(self.cluster.partitions_for(topic))

    def topics(self) -> set[str]:
        from .admin import Admin

        return set(Admin(self.cluster).list_topics())

    # ------------------------------------------------------------------------------------
    # positions
    # ------------------------------------------------------------------------------------
    def _state(self, tp: TopicPartition) -> _Assigned:
        st = self._assigned.get(TopicPartition(*tp))
        if st is None:
            raise ValueError(f"{tp} is not assigned to this consumer (assignment: {sorted(self._assigned)})")
        return st

    def _reposition(self, st: _Assigned, offset: int | None, reset: str | None = None) -> None:
        st.position = offset
        st.reset = reset
        st.generation += 1
        st.fetch_offset = offset if offset is not None else -1
        st.decode_from = offset if offset is not None else -1
        st.error = None
        st.clear_buffer()
        self._drop_in_flight(st)

    def _drop_in_flight(self, st: _Assigned) -> None:
        if st.in_flight is not None:
            self._owner.pop(st.in_flight, None)
            st.in_flight = None

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Read ``partition`` from ``offset`` on the next poll()."""
        if type(offset) is not int or offset < 0:
            raise ValueError(f"offset must be an int >= 0, got {offset!r}")
        self._reposition(self._state(partition), offset)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Move to the log start of ``partitions`` (all assigned ones if none given);
        resolved on the next poll()/position()."""
        for tp in partitions or list(self._assigned):
            self._reposition(self._state(tp), None, "earliest")

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Move to the high watermark of ``partitions`` (all assigned if none given)."""
        for tp in partitions or list(self._assigned):
            self._reposition(self._state(tp), None, "latest")

    def position(self, partition: TopicPartition) -> int:
        """The offset of the next record poll() returns for ``partition`` (resolving
        ``auto_offset_reset`` now if needed)."""
        st = self._state(partition)
        if st.position is None:
            self._resolve_positions([st])
        assert st.position is not None
        return st.position

    def highwater(self, partition: TopicPartition) -> int | None:
        """The high watermark the last fetch of ``partition`` reported (None before one)."""
        hw = self._state(partition).high_watermark
        return hw if hw >= 0 else None

    def _resolve_positions(self, states: list[_Assigned]) -> None:
        missing = [st for st in states if st.position is None]
        if not missing:
            return
        by_spec: dict[str, list[_Assigned]] = {}
        for st in missing:
            spec = st.reset or self.auto_offset_reset
            if spec == "none":
                raise NoOffsetForPartitionError(
                    f"{st.tp.topic}-{st.tp.partition} has no position and auto_offset_reset='none'; call seek() first"
                )
            by_spec.setdefault(spec, []).append(st)
        for spec, group in by_spec.items():
            offsets = self._list_offsets([st.tp for st in group], _SPEC[spec])
            for st in group:
                self._reposition(st, offsets[st.tp])

    # ------------------------------------------------------------------------------------
    # pause / resume
    # ------------------------------------------------------------------------------------
    def pause(self, *partitions: TopicPartition) -> None:
        """Stop returning (and fetching) records of ``partitions``; positions stay."""
        for tp in partitions:
            self._state(tp).paused = True

    def resume(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._state(tp).paused = False

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, st in self._assigned.items() if st.paused}

    # ------------------------------------------------------------------------------------
    # offsets from the leaders
    # ------------------------------------------------------------------------------------
    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The log start offset of each partition."""
        return self._list_offsets([TopicPartition(*tp) for tp in partitions], EARLIEST_TIMESTAMP)

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The high watermark of each partition: the offset the next acknowledged record gets."""
        return self._list_offsets([TopicPartition(*tp) for tp in partitions], LATEST_TIMESTAMP)

    def _list_offsets(self, tps: list[TopicPartition], timestamp: int) -> dict[TopicPartition, int]:
        """ListOffsets against every leader at once; partitions whose first answer is not
        clean go through the cluster client's retrying path."""
        refs: dict[TopicPartition, Any] = {}
        for tp in tps:
            try:
                md = self.cluster.partition_metadata(tp.topic, tp.partition)
                if md.leader < 0:
                    continue
                req = ListOffsetsRequest(tp.topic, tp.partition, timestamp=timestamp, current_leader_epoch=md.leader_epoch)
                refs[tp] = self.cluster.replica(tp.topic, tp.partition, md.leader).list_offsets.remote(req.encode())
            except KafkaError:
                continue
        out: dict[TopicPartition, int] = {}
        for tp in tps:
            ref = refs.get(tp)
            if ref is not None:
                try:
                    resp = ListOffsetsResponse.decode(ray.get(ref, timeout=self.request_timeout_ms / 1000))
                    if resp.error_code == 0:
                        out[tp] = resp.offset
                        continue
                except (RayActorError, GetTimeoutError, KafkaError):
                    pass
            resp = self.cluster.call_leader(
                tp.topic,
                tp.partition,
                "list_offsets",
                lambda epoch, tp=tp: ListOffsetsRequest(tp.topic, tp.partition, timestamp=timestamp, current_leader_epoch=epoch),
                ListOffsetsResponse,
                timeout_ms=self.request_timeout_ms,
            )
            raise_for_error(resp.error_code, resp.error_message or "")
            out[tp] = resp.offset
        return out

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
        self._abandon_iter()
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
        self._abandon_iter()
        return self._poll(timeout_ms, max_records, advance=True, columns=True)

    def _abandon_iter(self) -> None:
        """poll() after iterating: records the iterator took but did not yield yet are
        fetched again from the position (nothing is skipped)."""
        while self._iter:
            st, generation, recs, i = self._iter.popleft()
            if i < len(recs) and st.generation == generation and self._assigned.get(st.tp) is st:
                self._reposition(st, st.position)

    def _poll(self, timeout_ms: float, max_records: int, advance: bool, columns: bool = False) -> dict[TopicPartition, Any]:
        deadline = _monotonic() + max(0.0, timeout_ms) / 1000
        while True:
            if self._group is not None:
                self._group.poll()  # liveness for max_poll_interval_ms, rebalances, auto-commit
            self._resolve_positions([st for st in self._assigned.values() if st.position is None])
            self._raise_errors()
            out = self._collect(max_records, advance, columns)
            got = sum(map(len, out.values()))
            if got < max_records:
                # Take in whatever fetches have landed, then top up.
                if self._take_ready(0.0):
                    more = self._collect(max_records - got, advance, columns)
                    for tp, recs in more.items():
                        out[tp] = _concat(out[tp], recs) if tp in out else recs
            self._send_fetches()
            if out:
                return out
            self._raise_errors()
            remaining = deadline - _monotonic()
            if remaining <= 0:
                return {}
            if self._group is not None:
                # Wake often enough to act on a rebalance the heartbeat thread flagged,
                # instead of sleeping through a whole long-poll.
                remaining = min(remaining, self._group.poll_wake_s)
            if not self._take_ready(remaining):
                self._idle_wait(min(remaining, self._backoff_s))

    def _raise_errors(self) -> None:
        for st in self._assigned.values():
            if st.error is not None:
                err, st.error = st.error, None
                raise err

    def _collect(self, max_records: int, advance: bool, columns: bool = False) -> dict[TopicPartition, Any]:
        """Take up to ``max_records`` buffered records, partitions in rotation: as
        ConsumerRecord lists, or as RecordColumns with ``columns``."""
        out: dict[TopicPartition, Any] = {}
        states = list(self._assigned.values())
        n = len(states)
        want = max_records
        for j in range(n):
            st = states[(self._rotation + j) % n]
            if st.paused or st.position is None:
                continue
            pieces = []
            while want > 0:
                if not st.segments:
                    if not st.pending:
                        break
                    self._decode_next(st)
                    continue
                seg = st.segments[0]
                lo = seg.start
                hi = min(len(seg.values), lo + want)
                pieces.append((seg, lo, hi))
                want -= hi - lo
                seg.start = hi
                if hi >= len(seg.values):
                    st.segments.popleft()
            if not pieces:
                continue
            last_seg, _, last_hi = pieces[-1]
            if columns:
                out[st.tp] = _columns_of(st.tp, pieces)
            else:
                take = self._records_of(st.tp, pieces)
                if not advance:
                    self._iter.append([st, st.generation, take, 0])
                out[st.tp] = take
            if advance:
                st.position = last_seg.base + last_hi
            if want <= 0:
                self._rotation = (self._rotation + j + 1) % n
                break
        else:
            if n:
                self._rotation = (self._rotation + 1) % n
        return out

    def _records_of(self, tp: TopicPartition, pieces: list) -> list[ConsumerRecord]:
        # The cyclic GC never untracks instances of a tuple *subclass* (ConsumerRecord), so
        # collections while tens of thousands of them are created walk them again and again
        # (~4x the cost of building them); pause it while building one poll's worth.
        paused = gc.isenabled()
        if paused:
            gc.disable()
        try:
            topic, partition = tp
            out: list[ConsumerRecord] = []
            for seg, lo, hi in pieces:
                whole = lo == 0 and hi == len(seg.values)
                values = seg.values if whole else seg.values[lo:hi]
                if seg.timestamps is None:
                    stamps: Any = repeat(seg.timestamp)
                else:
                    stamps = seg.timestamps if whole else seg.timestamps[lo:hi]
                if seg.keys is None:
                    keys: Any = repeat(None)
                else:
                    keys = seg.keys if whole else seg.keys[lo:hi]
                if seg.headers is None:
                    hdrs: Any = repeat(_NO_HEADERS)
                else:
                    hdrs = seg.headers if whole else seg.headers[lo:hi]
                base = seg.base
                out.extend(
                    map(
                        _new_record,
                        zip(
                            repeat(topic),
                            repeat(partition),
                            range(base + lo, base + hi),
                            stamps,
                            repeat(seg.timestamp_type),
                            keys,
                            values,
                            hdrs,
                            repeat(seg.leader_epoch),
                        ),
                    )
                )
            return out
        finally:
            if paused:
                gc.enable()

    def _decode_next(self, st: _Assigned) -> None:
        try:
            self._decode_chunk(st)
        except KafkaError:
            # A corrupt batch: fetch again from the first record not yet returned, so that
            # every poll() raises until the user seeks past it (as Kafka's consumer does).
            self._reposition(st, st.decode_from if st.decode_from >= 0 else st.position)
            raise

    def _decode_chunk(self, st: _Assigned) -> None:
        """Decode one fetched chunk into column segments, skipping rows below decode_from."""
        data = st.pending.popleft()
        start = st.decode_from
        segments = []
        for pos, h in _records.iter_headers(data):
            if h.next_offset <= start:
                continue
            batch = _records.decode_batch(data, pos, check_crc=self.check_crcs)
            base = h.base_offset
            log_append = h.timestamp_type == _records.LOG_APPEND_TIME
            segments.append(
                _Segment(
                    base,
                    start - base if start > base else 0,
                    batch.values,
                    batch.keys,
                    None if log_append else batch.timestamps,
                    h.max_timestamp if log_append else h.first_timestamp,
                    h.timestamp_type,
                    batch.headers,
                    h.leader_epoch,
                )
            )
            start = h.next_offset
        st.decode_from = start
        st.segments.extend(segments)

    # -- fetching --------------------------------------------------------------------------
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

    def _on_fetch(self, st: _Assigned, ref: Any) -> None:
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
            while self._iter:
                entry = self._iter[0]
                st, generation, recs, i = entry
                if i >= len(recs) or st.generation != generation or st.paused or self._assigned.get(st.tp) is not st:
                    self._iter.popleft()
                    continue
                entry[3] = i + 1
                rec = recs[i]
                st.position = rec.offset + 1
                return rec
            remaining = deadline - _monotonic()
            if remaining <= 0:
                raise StopIteration
            self._poll(min(remaining * 1000, 1000.0), self.max_poll_records, advance=False)

    # ------------------------------------------------------------------------------------
    # groups (issue 6)
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

    def committed(self, partition: TopicPartition) -> int | None:
        """The group's committed offset of ``partition``, or None."""
        self._require_group("committed()")
        return self._group.committed(partition)

    # ------------------------------------------------------------------------------------
    def close(self) -> None:
        """Commit (with auto-commit), leave the group (dynamic members), forget fetches in
        flight and the assignment. Idempotent."""
        if self._closed:
            return
        if self._group is not None:
            try:
                self._group.close()
            except Exception:
                logger.exception("leaving group %r while closing failed", self.group_id)
        for st in self._assigned.values():
            self._drop_in_flight(st)
            st.clear_buffer()
        self._owner.clear()
        self._iter.clear()
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this consumer is closed")


def _columns_of(tp: TopicPartition, pieces: list) -> RecordColumns:
    """RecordColumns of consecutive segment slices of one partition."""
    first_seg, first_lo, _ = pieces[0]
    last_seg, _, last_hi = pieces[-1]
    if len(pieces) == 1:
        seg, lo, hi = pieces[0]
        n = hi - lo
        whole = lo == 0 and hi == len(seg.values)
        values = seg.values if whole else seg.values[lo:hi]
        return RecordColumns(
            tp.topic,
            tp.partition,
            range(seg.base + lo, seg.base + hi),
            [seg.timestamp] * n if seg.timestamps is None else (seg.timestamps if whole else seg.timestamps[lo:hi]),
            [seg.timestamp_type] * n,
            [None] * n if seg.keys is None else (seg.keys if whole else seg.keys[lo:hi]),
            values,
            None if seg.headers is None else (seg.headers if whole else seg.headers[lo:hi]),
        )
    parts = [_columns_of(tp, [p]) for p in pieces]
    any_headers = any(c.headers is not None for c in parts)
    joined = _chain.from_iterable
    return RecordColumns(
        tp.topic,
        tp.partition,
        range(first_seg.base + first_lo, last_seg.base + last_hi),
        list(joined(c.timestamps for c in parts)),
        list(joined(c.timestamp_types for c in parts)),
        list(joined(c.keys for c in parts)),
        list(joined(c.values for c in parts)),
        list(joined(c.headers if c.headers is not None else [_NO_HEADERS] * len(c) for c in parts)) if any_headers else None,
    )


def _concat(a: Any, b: Any) -> Any:
    """Join two takes of one partition (record lists or RecordColumns)."""
    if isinstance(a, RecordColumns):
        headers = None
        if a.headers is not None or b.headers is not None:
            headers = (a.headers if a.headers is not None else [_NO_HEADERS] * len(a)) + (b.headers if b.headers is not None else [_NO_HEADERS] * len(b))
        return RecordColumns(
            a.topic, a.partition, range(a.offsets.start, b.offsets.stop), a.timestamps + b.timestamps,
            a.timestamp_types + b.timestamp_types, a.keys + b.keys, a.values + b.values, headers,
        )
    return a + b
