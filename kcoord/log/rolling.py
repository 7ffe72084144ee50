"""When the active segment is rolled, and when retention deletes the oldest: one rule each
for the file log and the memory log.

The memory log mirrors the file log's segment boundaries (its retention deletes whole
segments, and a roll makes earlier data durable), so both must decide identically where
a new segment starts and which old one goes; the decisions live here once.
"""

from __future__ import annotations

from typing import Sequence

from ..record import BatchHeader
from .config import INT32_MAX, LogConfig


def must_roll(config: LogConfig, size: int, base_offset: int, created_ms: int, nbytes: int, last_offset: int, now_ms: int) -> bool:
    """Whether ``nbytes`` ending at ``last_offset`` need a new segment first.

    An empty segment takes anything (even a batch bigger than segment.bytes). Otherwise roll
    when the bytes would not fit, when the segment is older than segment.ms, or when a
    relative offset would not fit the index's int32.
    """
    return size > 0 and (
        size + nbytes > config.segment_bytes
        or now_ms - created_ms >= config.segment_ms
        or last_offset - base_offset > INT32_MAX
    )


def plan_runs(
    config: LogConfig,
    size: int,
    base_offset: int,
    created_ms: int,
    headers: Sequence[BatchHeader],
    now_ms: int,
) -> list[tuple[int, int, bool]]:
    """Split consecutive batches into runs that each go into one segment.

    Returns ``(first, end, roll_first)`` per run: batches ``headers[first:end]`` are
    written together, after rolling a new segment when ``roll_first``. Given the active
    segment's size, base offset and creation time.
    """
    runs: list[tuple[int, int, bool]] = []
    n = len(headers)
    i = 0
    while i < n:
        h = headers[i]
        roll = must_roll(config, size, base_offset, created_ms, h.size, h.last_offset, now_ms)
        if roll:
            size, base_offset, created_ms = 0, h.base_offset, now_ms
        used = size + h.size
        j = i + 1
        while j < n:
            nxt = headers[j]
            if used + nxt.size > config.segment_bytes or nxt.last_offset - base_offset > INT32_MAX:
                break
            used += nxt.size
            j += 1
        runs.append((i, j, roll))
        size = used
        i = j
    return runs


def past_retention(config: LogConfig, now_ms: int, max_timestamp: int, size: int, log_size: int) -> bool:
    """Whether the oldest segment (``size`` bytes, newest record at ``max_timestamp``, of a
    log of ``log_size`` bytes) is past retention.ms, or the log without it still holds
    retention.bytes."""
    too_old = config.retention_ms >= 0 and now_ms - max_timestamp > config.retention_ms
    too_big = config.retention_bytes >= 0 and log_size - size >= config.retention_bytes
    return too_old or too_big
