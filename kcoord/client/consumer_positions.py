"""Where a consumer reads each partition from: positions, seeks, resets, pause/resume, and
the leaders' log start and end offsets.

A mixin of :class:`~kcoord.client.consumer.Consumer` (it works on the consumer's assigned
partitions); split out so that each file holds one part of the consumer. Moving a position
bumps the partition's generation: buffered records and the fetch in flight are dropped.
A partition without a position gets one from ``auto_offset_reset`` (or a pending
seek_to_beginning/end) when first needed, by ListOffsets against the leaders.
"""

from __future__ import annotations

import time
from typing import Any, Iterable

from ray.exceptions import GetTimeoutError, RayActorError

from ..protocol.errors import ErrorCode, KafkaError, raise_for_error
from ..protocol.replication import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, ListOffsetsRequest, ListOffsetsResponse
from .consumer_partition import AssignedPartition
from .liveness import ActorGoneError, get_probing
from .types import TopicPartition

_SPEC = {"earliest": EARLIEST_TIMESTAMP, "latest": LATEST_TIMESTAMP}


class NoOffsetForPartitionError(KafkaError):
    """A partition has no position and ``auto_offset_reset="none"`` forbids guessing one."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.OFFSET_OUT_OF_RANGE, message)

    def __reduce__(self):
        return (self.__class__, (self.message,))


class Positions:
    """Positions, seeks, resets, pause/resume and ListOffsets (mixed into Consumer)."""

    def _state(self, tp: TopicPartition) -> AssignedPartition:
        st = self._assigned.get(TopicPartition(*tp))
        if st is None:
            raise ValueError(f"{tp} is not assigned to this consumer (assignment: {sorted(self._assigned)})")
        return st

    def _reposition(self, st: AssignedPartition, offset: int | None, reset: str | None = None) -> None:
        st.position = offset
        st.reset = reset
        st.generation += 1
        st.fetch_offset = offset if offset is not None else -1
        st.decode_from = offset if offset is not None else -1
        st.error = None
        st.clear_buffer()
        self._drop_in_flight(st)

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

    def _resolve_positions(self, states: list[AssignedPartition]) -> None:
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
        refs: dict[TopicPartition, tuple[Any, Any, str]] = {}
        for tp in tps:
            try:
                md = self.cluster.partition_metadata(tp.topic, tp.partition)
                if md.leader < 0:
                    continue
                req = ListOffsetsRequest(tp.topic, tp.partition, timestamp=timestamp, current_leader_epoch=md.leader_epoch)
                name = self.cluster.replica_name(tp.topic, tp.partition, md.leader)
                handle = self.cluster.handle(name)
                refs[tp] = (handle.list_offsets.remote(req.encode()), handle, name)
            except KafkaError:
                continue
        out: dict[TopicPartition, int] = {}
        deadline = time.monotonic() + self.request_timeout_ms / 1000
        for tp in tps:
            sent = refs.get(tp)
            if sent is not None:
                ref, handle, name = sent
                try:
                    wait = min(self.cluster.attempt_timeout_s, max(0.0, deadline - time.monotonic()))
                    resp = ListOffsetsResponse.decode(get_probing(ref, handle, wait))
                    if resp.error_code == 0:
                        out[tp] = resp.offset
                        continue
                except (RayActorError, ActorGoneError, GetTimeoutError):
                    self.cluster.forget(name)  # dead, restarting or silent: look it up again
                except KafkaError:
                    pass
            resp = self.cluster.call_leader(
                tp.topic,
                tp.partition,
                "list_offsets",
                lambda epoch, tp=tp: ListOffsetsRequest(tp.topic, tp.partition, timestamp=timestamp, current_leader_epoch=epoch),
                ListOffsetsResponse,
                timeout_ms=max(int(self.cluster.attempt_timeout_s * 1000), int((deadline - time.monotonic()) * 1000)),
            )
            raise_for_error(resp.error_code, resp.error_message or "")
            out[tp] = resp.offset
        return out
