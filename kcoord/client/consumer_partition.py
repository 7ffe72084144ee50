"""One assigned partition of a :class:`~kcoord.client.consumer.Consumer`: its position,
its fetch pipeline and its buffered records.

The consumer's parts (positions, fetching, decoding, poll) all work on these; the state of
one partition lives in one object so that a seek or a reset can invalidate everything at
once (``generation``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ..protocol.errors import KafkaError
from .types import TopicPartition


@dataclass(eq=False)
class AssignedPartition:
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
    in_flight_handle: Any = None  # the leader actor's handle it went to (for GCS probes)
    in_flight_leader: int = -1  # the leader and leader epoch it was sent under
    in_flight_epoch: int = -1
    next_check: float = 0.0  # when it is next checked for being overdue (monotonic s)
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

