"""Where a consumer reads each partition from: the assigned partitions, their positions,
seeks, resets and pause/resume.

Each assigned partition's state is one :class:`AssignedPartition` (position, fetch in
flight, buffered records), so that a seek or a reset can invalidate everything at once:
moving a position bumps the partition's generation, drops its buffered records and forgets
its fetch in flight (answers to older fetches are ignored). A partition without a position
gets one from ``auto_offset_reset`` (or a pending seek_to_beginning/end) when first needed,
by ListOffsets against the leaders.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from ...protocol.errors import KafkaError
from ...protocol.replication import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from ..errors import NoOffsetForPartitionError
from ..types import TopicPartition

RESET_POLICIES = ("earliest", "latest", "none")
_SPEC = {"earliest": EARLIEST_TIMESTAMP, "latest": LATEST_TIMESTAMP}


@dataclass(eq=False)
class AssignedPartition:
    """One assigned partition: position, fetch in flight and buffered records."""

    tp: TopicPartition
    position: int | None = None  # offset of the next record poll() returns
    reset: str | None = None  # a pending seek_to_beginning/end ("earliest"/"latest")
    paused: bool = False
    generation: int = 0  # bumped by seek/reset: answers to older fetches are dropped
    fetch_offset: int = -1  # where the next fetch starts (ahead of position: prefetch)
    decode_from: int = -1  # buffered records below this are skipped (after a seek)
    in_flight: Any = None  # the fetch in flight: the concurrent Future of its answer (kcoord.calls)
    in_flight_generation: int = -1
    in_flight_since: float = 0.0
    in_flight_actor: str = ""
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

    def drop_in_flight(self) -> None:
        """Forget the fetch in flight: its answer, when it comes, is ignored."""
        self.in_flight = None


ListOffsets = Callable[[list[TopicPartition], int], dict[TopicPartition, int]]


class SubscriptionState:
    """The assigned partitions of one consumer and where each is read from.

    ``list_offsets(partitions, timestamp)`` looks up log start (EARLIEST_TIMESTAMP) or high
    watermark (LATEST_TIMESTAMP) offsets for partitions without a position."""

    def __init__(self, auto_offset_reset: str, list_offsets: ListOffsets) -> None:
        if auto_offset_reset not in RESET_POLICIES:
            raise ValueError(f"auto_offset_reset must be one of {RESET_POLICIES}, got {auto_offset_reset!r}")
        self.auto_offset_reset = auto_offset_reset
        self._list_offsets = list_offsets
        self.assigned: dict[TopicPartition, AssignedPartition] = {}

    def state(self, tp: TopicPartition) -> AssignedPartition:
        st = self.assigned.get(TopicPartition(*tp))
        if st is None:
            raise ValueError(f"{tp} is not assigned to this consumer (assignment: {sorted(self.assigned)})")
        return st

    def assign(self, partitions: Iterable[TopicPartition], positions: dict[TopicPartition, int] | None = None) -> None:
        """Replace the assignment and optionally seed positions (e.g. committed offsets);
        partitions that stay assigned keep their state, the others start per
        ``auto_offset_reset``."""
        new: dict[TopicPartition, AssignedPartition] = {}
        for tp in partitions:
            tp = TopicPartition(*tp)
            new[tp] = self.assigned.get(tp) or AssignedPartition(tp)
        for tp, st in self.assigned.items():
            if tp not in new:
                st.drop_in_flight()
        self.assigned = new
        for tp, offset in (positions or {}).items():
            if tp in new and offset is not None and offset >= 0:
                self.reposition(new[tp], offset)

    def positions(self) -> dict[TopicPartition, int | None]:
        """Every assigned partition's position (None if not yet known), resolving nothing."""
        return {tp: st.position for tp, st in self.assigned.items()}

    def reposition(self, st: AssignedPartition, offset: int | None, reset: str | None = None) -> None:
        st.position = offset
        st.reset = reset
        st.generation += 1
        st.fetch_offset = offset if offset is not None else -1
        st.decode_from = offset if offset is not None else -1
        st.error = None
        st.clear_buffer()
        st.drop_in_flight()

    def reset_on_out_of_range(self, st: AssignedPartition) -> None:
        """The fetch position fell outside the log: start again per ``auto_offset_reset``."""
        self.reposition(st, None, self.auto_offset_reset)

    # ------------------------------------------------------------------------------------
    # seeks
    # ------------------------------------------------------------------------------------
    def seek(self, partition: TopicPartition, offset: int) -> None:
        if type(offset) is not int or offset < 0:
            raise ValueError(f"offset must be an int >= 0, got {offset!r}")
        self.reposition(self.state(partition), offset)

    def seek_to(self, reset: str, partitions: Iterable[TopicPartition]) -> None:
        """Move to the log start ("earliest") or high watermark ("latest") of
        ``partitions`` (all assigned ones if none given), resolved when next needed."""
        for tp in list(partitions) or list(self.assigned):
            self.reposition(self.state(tp), None, reset)

    def position(self, partition: TopicPartition) -> int:
        st = self.state(partition)
        if st.position is None:
            self.resolve_positions([st])
        assert st.position is not None
        return st.position

    def resolve_positions(self, states: list[AssignedPartition]) -> None:
        missing = [st for st in states if st.position is None]
        if not missing:
            return
        by_spec: dict[str, list[AssignedPartition]] = {}
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
                self.reposition(st, offsets[st.tp])

    # ------------------------------------------------------------------------------------
    # pause / resume
    # ------------------------------------------------------------------------------------
    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self.state(tp).paused = True

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self.state(tp).paused = False

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, st in self.assigned.items() if st.paused}
