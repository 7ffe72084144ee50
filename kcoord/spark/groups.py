"""Consumer-group offsets for batch pipelines: read them as a DataFrame, commit the ranges a
batch consumed.

A batch pipeline is not a group member: it reads ``group:<g>`` (the committed offsets),
processes, writes its output, then commits where it stopped -- Kafka's "standalone"
commit (no generation, no member id). The coordinator accepts such a commit only while
the group has no active members; :func:`commit` says so clearly instead of letting a live
consumer and the pipeline overwrite each other's offsets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from ..client.cluster import ClusterClient
from ..client.coordinator.commits import commit_offsets_outside_group
from ..protocol.errors import ErrorCode, KafkaError
from ..protocol.replication import LATEST_TIMESTAMP
from .offsets import OffsetPlan, group_offsets, list_offsets, partition_number

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

COMMITTED_DDL = "group string, topic string, partition int, offset long, metadata string, log_end_offset long, lag long"


def committed_offsets_rows(cluster: ClusterClient, group_id: str) -> list[tuple]:
    """``(group, topic, partition, offset, metadata, log_end_offset, lag)`` per committed
    partition; log end = the HW, lag = log end - offset (None if the topic is gone)."""
    committed = group_offsets(cluster, group_id)
    rows = []
    for topic in sorted(committed):
        parts = committed[topic]
        try:
            ends = list_offsets(cluster, topic, sorted(parts), LATEST_TIMESTAMP)
        except KafkaError:
            ends = {}  # topic deleted or offline: no log end
        for p in sorted(parts):
            offset, metadata = parts[p]
            end = ends.get(p)
            rows.append((group_id, topic, p, offset, metadata, end, max(0, end - offset) if end is not None else None))
    return rows


def committed_offsets(spark: "SparkSession", cluster: ClusterClient, group_id: str) -> "DataFrame":
    """The committed offsets of ``group_id`` as a DataFrame ``group, topic, partition,
    offset, metadata, log_end_offset, lag`` (one row per committed partition; empty for a
    group that never committed)."""
    return spark.createDataFrame(committed_offsets_rows(cluster, group_id), COMMITTED_DDL)


def _normalize(offsets: Any) -> dict[str, dict[int, tuple[int, str]]]:
    if isinstance(offsets, OffsetPlan):
        return {offsets.topic: {p: (o, "") for p, o in offsets.end.items()}}
    if not isinstance(offsets, Mapping) or not offsets:
        raise ValueError(
            "offsets must be a non-empty {topic: {partition: offset}} (offset may be (offset, metadata)), "
            "{(topic, partition): offset}, {TopicPartition: offset} or an OffsetPlan"
        )
    out: dict[str, dict[int, tuple[int, str]]] = {}

    def put(topic: Any, partition: Any, value: Any) -> None:
        if not isinstance(topic, str) or not topic:
            raise ValueError(f"topic must be a non-empty string, got {topic!r}")
        p = partition_number(partition)
        if p is None:
            raise ValueError(f"partition {partition!r} of topic {topic!r} is not an integer")
        metadata = ""
        if isinstance(value, tuple):
            value, metadata = value
        elif hasattr(value, "offset"):  # OffsetAndMetadata
            value, metadata = value.offset, getattr(value, "metadata", "") or ""
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"offset for {topic}-{p} must be a non-negative integer, got {value!r}")
        out.setdefault(topic, {})[p] = (value, metadata or "")

    for key, value in offsets.items():
        if isinstance(key, tuple) and len(key) == 2:  # (topic, partition) or TopicPartition
            put(key[0], key[1], value)
        elif isinstance(value, Mapping):
            for p, v in value.items():
                put(key, p, v)
        else:
            raise ValueError(f"cannot read offsets entry {key!r}: {value!r}")
    return out


def commit(cluster: ClusterClient, group_id: str, offsets: Any) -> dict[str, dict[int, int]]:
    """Commit offsets for ``group_id`` outside any generation (Kafka's standalone commit).

    ``offsets``: ``{topic: {partition: offset}}`` (an offset may be ``(offset,
    metadata)``), ``{(topic, partition): offset}``, ``{TopicPartition: offset}``, the
    ``ending`` of an :class:`OffsetPlan` or the plan itself (commits its end offsets). The
    offset committed is the next one to read, as in Kafka. Each must lie within
    ``[0, high watermark]``.

    Refused with NON_EMPTY_GROUP (or REBALANCE_IN_PROGRESS) while the group has active
    members: their next commit would overwrite this one. Returns what was committed. The
    same commit as ``Admin.alter_consumer_group_offsets``
    (:func:`~kcoord.client.coordinator.commits.commit_offsets_outside_group`).
    """
    if not isinstance(group_id, str) or not group_id:
        raise KafkaError(ErrorCode.INVALID_GROUP_ID, f"group id must be a non-empty string, got {group_id!r}")
    return commit_offsets_outside_group(cluster, group_id, _normalize(offsets))
