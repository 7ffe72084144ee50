"""Offset ranges for batch reads: turn ``starting_offsets``/``ending_offsets`` specs into one
concrete ``[start, end)`` range per partition, on the driver, before any task runs.

Resolving on the driver (as Spark's Kafka source does) is what makes a batch read a fixed,
repeatable snapshot: every task, and every retry of a task, reads exactly the offsets the
plan names, no matter what is written meanwhile.

Accepted specs (the names and numbers of Spark's Kafka source options):

* ``"earliest"`` — the log start offset; ``"latest"`` — the high watermark (HW).
* a dict or a JSON string ``{"topic": {"0": 23, "1": -2}}`` — per partition, where -2 means
  earliest and -1 latest (-2 is not allowed as an ending offset). Partitions left out take
  the default (earliest when starting, latest when ending). A plain ``{0: 23, 1: -2}``
  dict (int keys) is accepted as a shorthand.
* ``"group:<group_id>"`` (starting only) — the group's committed offsets; partitions the
  group never committed start at earliest.

``isolation_level`` (Spark's ``kafka.isolation.level``, kafka-python's name):
``"read_uncommitted"`` (default) or ``"read_committed"``, where ``"latest"`` means the last
stable offset (LSO) instead of the HW, as a read_committed consumer's ListOffsets answers,
and no offset past the LSO may be named: records of transactions still open are not read.

Engine-neutral: used by :mod:`kcoord.spark` and :mod:`kcoord.ray_data`; no Spark import.
"""

from __future__ import annotations

import heapq
import json
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..client.cluster import ClusterClient
from ..client.coordinator.coordinators import GroupCoordinators
from ..client.types import OffsetRange, TopicPartition
from ..protocol.errors import ErrorCode, KafkaError
from ..protocol.replication import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, READ_COMMITTED, READ_UNCOMMITTED

EARLIEST = -2
LATEST = -1
GROUP_PREFIX = "group:"
# kafka-python's (and Spark's kafka.isolation.level) names -> Kafka's Fetch/ListOffsets ids
ISOLATION_LEVELS = {"read_uncommitted": READ_UNCOMMITTED, "read_committed": READ_COMMITTED}


def isolation_level_id(isolation_level: Any, options: Mapping[str, Any] | None = None) -> int:
    """Kafka's id of ``isolation_level`` (``"read_uncommitted"``/``"read_committed"``),
    also accepted as Spark's option ``{"kafka.isolation.level": ...}`` in ``options``;
    anything else is a ValueError naming what is accepted."""
    spark_name = "kafka.isolation.level"
    if options:
        unknown = sorted(k for k in options if k != spark_name)
        if unknown:
            raise ValueError(f"unknown option(s) {unknown}: the only Spark Kafka source option taken here is {spark_name!r}")
        if spark_name in options:
            given = options[spark_name]
            if isolation_level not in (None, "read_uncommitted", given):
                raise ValueError(f"isolation_level={isolation_level!r} and {spark_name}={given!r} disagree: give one of them")
            isolation_level = given
    if isolation_level is None:
        isolation_level = "read_uncommitted"
    level = ISOLATION_LEVELS.get(isolation_level) if isinstance(isolation_level, str) else None
    if level is None:
        raise ValueError(f"isolation_level must be one of {tuple(ISOLATION_LEVELS)} (Spark's {spark_name}), got {isolation_level!r}")
    return level


def partition_number(key: Any) -> int | None:
    """A partition number given as an int or a string of one (a JSON object's key); None
    for anything else (a bool, ``"1.0"``, ``"x"``)."""
    try:
        p = int(key)
    except (TypeError, ValueError):
        return None
    if isinstance(key, bool) or (isinstance(key, str) and str(p) != key.strip()):
        return None
    return p


class OffsetSpecError(ValueError):
    """A ``starting_offsets``/``ending_offsets`` value that cannot be understood."""


@dataclass(frozen=True)
class OffsetPlan:
    """The resolved offsets of a batch read (see the module doc).

    ``start``/``end`` hold every partition of the topic, ``ranges`` only the non-empty
    ones, split for ``min_partitions``. ``starting``/``ending`` give the offsets in
    Spark's JSON form, so a pipeline can read exactly this plan again or commit ``end``.
    """

    topic: str
    start: dict[int, int]
    end: dict[int, int]
    log_start: dict[int, int]
    high_watermark: dict[int, int]
    ranges: list[OffsetRange] = field(default_factory=list)
    #: READ_COMMITTED: ``high_watermark`` holds the last stable offsets and tasks read
    #: committed records only (aborted transactions dropped).
    isolation_level: int = READ_UNCOMMITTED

    @property
    def rows(self) -> int:
        return sum(self.end[p] - self.start[p] for p in self.start)

    @property
    def starting(self) -> dict[str, dict[str, int]]:
        return {self.topic: {str(p): o for p, o in sorted(self.start.items())}}

    @property
    def ending(self) -> dict[str, dict[str, int]]:
        return {self.topic: {str(p): o for p, o in sorted(self.end.items())}}


# ------------------------------------------------------------------------------------------
# parsing
# ------------------------------------------------------------------------------------------
def _describe_accepted(which: str) -> str:
    group = ', "group:<group_id>"' if which == "starting_offsets" else ""
    return f'"earliest", "latest"{group}, or per partition {{"<topic>": {{"<partition>": offset}}}} (-2 = earliest, -1 = latest) as a dict or JSON string'


def parse_spec(spec: Any, which: str, topic: str, partitions: list[int]) -> str | dict[int, int]:
    """``"earliest"``, ``"latest"``, ``"group:<id>"`` or ``{partition: offset}`` (with -2/-1
    standing for earliest/latest) from a user spec; raises :class:`OffsetSpecError`."""
    ending = which == "ending_offsets"
    if isinstance(spec, str):
        text = spec.strip()
        low = text.lower()
        if low in ("earliest", "latest"):
            if ending and low == "earliest":
                raise OffsetSpecError(f'{which}="earliest" would read nothing; use "latest" or explicit offsets')
            return low
        if low.startswith(GROUP_PREFIX):
            if ending:
                raise OffsetSpecError(f'{which} does not take "group:<id>" (only starting_offsets does); accepted: {_describe_accepted(which)}')
            group = text[len(GROUP_PREFIX) :].strip()
            if not group:
                raise OffsetSpecError(f'{which}={spec!r} names no group: write "group:<group_id>"')
            return GROUP_PREFIX + group
        if text.startswith("{"):
            try:
                spec = json.loads(text)
            except json.JSONDecodeError as exc:
                raise OffsetSpecError(f"{which} is not valid JSON ({exc.msg} at position {exc.pos}): {spec!r}") from None
        else:
            raise OffsetSpecError(f"{which}={spec!r} is not understood; accepted: {_describe_accepted(which)}")
    if not isinstance(spec, Mapping):
        raise OffsetSpecError(f"{which} must be a string or a dict, got {type(spec).__name__}; accepted: {_describe_accepted(which)}")
    if spec and all(isinstance(k, int) and not isinstance(k, bool) for k in spec):
        per_partition: Mapping[Any, Any] = spec  # the {partition: offset} shorthand
    else:
        others = [t for t in spec if t != topic]
        if others:
            raise OffsetSpecError(f"{which} names topic(s) {sorted(map(str, others))}, but this read is of topic {topic!r}")
        per_partition = spec.get(topic, {})
        if not isinstance(per_partition, Mapping):
            raise OffsetSpecError(f"{which}[{topic!r}] must map partitions to offsets, got {type(per_partition).__name__}")
    out: dict[int, int] = {}
    for key, offset in per_partition.items():
        p = partition_number(key)
        if p is None:
            raise OffsetSpecError(f"{which}: partition {key!r} of topic {topic!r} is not an integer")
        if p not in partitions:
            raise OffsetSpecError(f"{which}: topic {topic!r} has no partition {p} (it has {len(partitions)}: 0..{len(partitions) - 1})")
        if not isinstance(offset, int) or isinstance(offset, bool):
            raise OffsetSpecError(f"{which}: offset for {topic}-{p} must be an integer, got {offset!r}")
        if offset < EARLIEST:
            raise OffsetSpecError(f"{which}: offset {offset} for {topic}-{p} is negative (only -2 = earliest and -1 = latest are special)")
        if ending and offset == EARLIEST:
            raise OffsetSpecError(f"{which}: -2 (earliest) is not allowed as an ending offset ({topic}-{p})")
        out[p] = offset
    return out


# ------------------------------------------------------------------------------------------
# resolving
# ------------------------------------------------------------------------------------------
def list_offsets(cluster: ClusterClient, topic: str, partitions: list[int], timestamp: int, isolation_level: int = READ_UNCOMMITTED) -> dict[int, int]:
    """ListOffsets (earliest: log start, latest: HW, or the LSO with READ_COMMITTED) of
    ``partitions`` of ``topic``, from every partition's leader at once
    (:meth:`ClusterClient.list_offsets`)."""
    found = cluster.list_offsets([TopicPartition(topic, p) for p in partitions], timestamp, isolation_level=isolation_level)
    return {tp.partition: offset for tp, offset in found.items()}


def group_offsets(cluster: ClusterClient, group_id: str, topic: str | None = None) -> dict[str, dict[int, tuple[int, str]]]:
    """The committed offsets of ``group_id``: ``{topic: {partition: (offset, metadata)}}``
    (only partitions with a commit; all topics when ``topic`` is None)."""
    if not isinstance(group_id, str) or not group_id:
        raise KafkaError(ErrorCode.INVALID_GROUP_ID, f"group id must be a non-empty string, got {group_id!r}")
    topics = None if topic is None else {topic: cluster.partitions_for(topic)}
    offsets = GroupCoordinators(cluster).committed_offsets(group_id, topics, cluster.request_timeout_ms / 1000)
    out: dict[str, dict[int, tuple[int, str]]] = {}
    for t, parts in offsets.items():
        for p, o in parts.items():
            if o.offset >= 0:
                out.setdefault(t, {})[int(p)] = (o.offset, o.metadata or "")
    return out


def plan_offsets(
    cluster: ClusterClient,
    topic: str,
    starting_offsets: Any = "earliest",
    ending_offsets: Any = "latest",
    min_partitions: int | None = None,
    isolation_level: str = "read_uncommitted",
) -> OffsetPlan:
    """Resolve the specs against the live log (ListOffsets on the leaders, OffsetFetch for a
    group) into an :class:`OffsetPlan`.

    Raises KafkaError UNKNOWN_TOPIC_OR_PARTITION for a missing topic, KafkaError
    OFFSET_OUT_OF_RANGE for an offset outside ``[log start, HW]`` (``[log start, LSO]``
    read_committed; the message gives the valid range), :class:`OffsetSpecError` for a spec
    that makes no sense and ValueError for an unknown ``isolation_level``.
    """
    level = isolation_level_id(isolation_level)
    if not isinstance(topic, str) or not topic:
        raise OffsetSpecError(f"topic must be a non-empty string, got {topic!r}")
    if min_partitions is not None and (not isinstance(min_partitions, int) or isinstance(min_partitions, bool) or min_partitions < 1):
        raise OffsetSpecError(f"min_partitions must be a positive integer, got {min_partitions!r}")
    md = topic_metadata(cluster, topic)
    partitions = [p.partition for p in md.partitions]
    start_spec = parse_spec(starting_offsets, "starting_offsets", topic, partitions)
    end_spec = parse_spec(ending_offsets, "ending_offsets", topic, partitions)
    log_start = list_offsets(cluster, topic, partitions, EARLIEST_TIMESTAMP)
    hw = list_offsets(cluster, topic, partitions, LATEST_TIMESTAMP, level)
    upper = "last stable offset: records of open transactions are not read committed" if level == READ_COMMITTED else "high watermark"

    def valid(p: int) -> str:
        return f"the valid range is [{log_start[p]}, {hw[p]}] (log start offset, {upper})"

    start: dict[int, int] = {}
    group = start_spec[len(GROUP_PREFIX) :] if isinstance(start_spec, str) and start_spec.startswith(GROUP_PREFIX) else None
    committed = group_offsets(cluster, group, topic).get(topic, {}) if group is not None else {}
    for p in partitions:
        if group is not None:
            if p in committed:
                off = committed[p][0]
                if not log_start[p] <= off <= hw[p]:
                    raise KafkaError(
                        ErrorCode.OFFSET_OUT_OF_RANGE,
                        f"group {group!r} committed offset {off} for {topic}-{p}, which is outside the log: {valid(p)}. "
                        f"Reset the group's offsets (Admin.reset_offsets) or read from 'earliest'",
                    )
                start[p] = off
            else:
                start[p] = log_start[p]
            continue
        raw = start_spec if isinstance(start_spec, str) else start_spec.get(p, EARLIEST)
        off = _resolve(raw, log_start[p], hw[p])
        if not log_start[p] <= off <= hw[p]:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE, f"starting offset {off} for {topic}-{p} is outside the log: {valid(p)}")
        start[p] = off
    end: dict[int, int] = {}
    for p in partitions:
        raw = end_spec if isinstance(end_spec, str) else end_spec.get(p, LATEST)
        off = _resolve(raw, log_start[p], hw[p])
        if not log_start[p] <= off <= hw[p]:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE, f"ending offset {off} for {topic}-{p} is outside the log: {valid(p)}")
        if off < start[p]:
            raise OffsetSpecError(f"ending offset {off} for {topic}-{p} is before its starting offset {start[p]}")
        end[p] = off
    ranges = [OffsetRange(topic, p, start[p], end[p]) for p in partitions if end[p] > start[p]]
    return OffsetPlan(topic, start, end, log_start, hw, split_ranges(ranges, min_partitions), level)


def topic_metadata(cluster: ClusterClient, topic: str) -> Any:
    """Fresh metadata of ``topic``; a missing topic raises UNKNOWN_TOPIC_OR_PARTITION naming
    a few topics that do exist (typos are the usual cause)."""
    try:
        return cluster.topic(topic, refresh=True)
    except KafkaError as exc:
        if exc.code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise
        try:
            from ..client.admin import Admin

            known = Admin(cluster).list_topics()
        except KafkaError:
            known = []
        hint = f"; existing topics: {', '.join(known[:10])}{' ...' if len(known) > 10 else ''}" if known else ""
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic!r} does not exist in cluster {cluster.name!r}{hint}") from None


def _resolve(raw: str | int, log_start: int, hw: int) -> int:
    if raw in ("earliest", EARLIEST):
        return log_start
    if raw in ("latest", LATEST):
        return hw
    assert isinstance(raw, int)
    return raw


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Split the largest ranges until there are ``min_partitions`` (never into empty pieces);
    pieces of a range differ in size by at most one record."""
    ranges = [r for r in ranges if r.size > 0]
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    pieces = [1] * len(ranges)
    heap = [(-r.size, i) for i, r in enumerate(ranges) if r.size > 1]
    heapq.heapify(heap)
    for _ in range(min_partitions - len(ranges)):
        if not heap:
            break
        _, i = heapq.heappop(heap)
        pieces[i] += 1
        if pieces[i] < ranges[i].size:
            heapq.heappush(heap, (-ranges[i].size / pieces[i], i))
    out: list[OffsetRange] = []
    for r, k in zip(ranges, pieces):
        base, extra = divmod(r.size, k)
        s = r.start
        for j in range(k):
            e = s + base + (1 if j < extra else 0)
            out.append(OffsetRange(r.topic, r.partition, s, e))
            s = e
    return out
