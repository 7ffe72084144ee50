"""The offsets an OffsetCommit or a TxnOffsetCommit carries, checked per partition."""

from __future__ import annotations

from typing import Any, Mapping

from ..protocol.errors import ErrorCode as E
from .metadata import CommittedOffset


def accept_offsets(
    topics: Mapping[str, Mapping[int, Any]], metadata_limit: int, now_ms: int, expire_ms: int | None
) -> tuple[dict[str, dict[int, int]], dict[tuple[str, int], CommittedOffset]]:
    """Each partition's code and the offsets to write: metadata over ``metadata_limit`` bytes
    is OFFSET_METADATA_TOO_LARGE for that partition only (Kafka's rule for both commits)."""
    codes: dict[str, dict[int, int]] = {}
    accepted: dict[tuple[str, int], CommittedOffset] = {}
    for topic, partitions in topics.items():
        codes[topic] = {}
        for partition, p in partitions.items():
            metadata = p.metadata or ""
            if len(metadata.encode()) > metadata_limit:
                codes[topic][partition] = E.OFFSET_METADATA_TOO_LARGE
                continue
            codes[topic][partition] = E.NONE
            accepted[(topic, partition)] = CommittedOffset(p.offset, metadata, p.leader_epoch, now_ms, expire_ms)
    return codes, accepted
