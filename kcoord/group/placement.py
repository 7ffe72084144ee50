"""Which coordinator owns a group: ``abs(java_hash(group_id)) % N``, as Kafka places groups
on ``__consumer_offsets`` partitions.

Python's ``hash(str)`` is salted per process, so every client, actor and restart would
disagree; Java's ``String.hashCode`` is stable and keeps placement identical to Kafka's.
"""

from __future__ import annotations


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode``: ``31*h + c`` over UTF-16 code units, as a signed int32."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def coordinator_for(group_id: str, num_coordinators: int) -> int:
    """Index of the GroupCoordinatorActor (= ``__consumer_offsets`` partition) for a group."""
    if num_coordinators < 1:
        raise ValueError("num_coordinators must be >= 1")
    h = java_string_hash(group_id)
    # Kafka's Utils.abs: Integer.MIN_VALUE maps to 0 instead of staying negative.
    h = 0 if h == -(1 << 31) else abs(h)
    return h % num_coordinators
