"""Taking buffered records out for ``poll()``, ``poll_columns()`` and iteration: up to
``max_records`` over the assigned partitions in rotation, decoded one fetched chunk at a
time (:mod:`.segments`), deserialized, positions advanced. A record that cannot be
deserialized, or a corrupt batch, is raised by this call and again by the next, until the
user seeks past it, as in Kafka's consumer."""

from __future__ import annotations

from collections import deque
from typing import Any, Callable

from ...protocol.errors import KafkaError
from ..errors import SerializationError
from ..metrics import RequestStats
from ..types import ConsumerRecord, TopicPartition
from .segments import columns_of, decode_chunk, records_of
from .subscription_state import AssignedPartition, SubscriptionState


class RecordCollector:
    """The consumer's buffered records (see the module doc). ``metrics`` is the consumer's
    counter dict (``records_consumed``); ``stats`` counts failed records."""

    def __init__(
        self,
        subscriptions: SubscriptionState,
        stats: RequestStats,
        metrics: dict[str, int],
        *,
        key_deserializer: Callable[[bytes], Any] | None,
        value_deserializer: Callable[[bytes], Any] | None,
        check_crcs: bool,
    ) -> None:
        self.subscriptions = subscriptions
        self.stats = stats
        self.metrics = metrics
        self.key_deserializer = key_deserializer
        self.value_deserializer = value_deserializer
        self.check_crcs = check_crcs
        self._rotation = 0
        # Records taken for iteration (``__next__``), not yet returned:
        # [state, generation, records, index] per partition.
        self.iterating: deque = deque()

    def raise_errors(self) -> None:
        """Raise the first error a partition holds (a fetch answered with one)."""
        for st in self.subscriptions.assigned.values():
            if st.error is not None:
                err, st.error = st.error, None
                raise err

    def abandon_iteration(self) -> None:
        """poll() after iterating: records the iterator took but did not yield yet are
        fetched again from the position (nothing is skipped)."""
        while self.iterating:
            st, generation, recs, i = self.iterating.popleft()
            if i < len(recs) and st.generation == generation and self.subscriptions.assigned.get(st.tp) is st:
                self.subscriptions.reposition(st, st.position)

    def next_iterated(self) -> ConsumerRecord | None:
        """The next record taken for iteration (its position advanced), or None."""
        while self.iterating:
            entry = self.iterating[0]
            st, generation, recs, i = entry
            if i >= len(recs) or st.generation != generation or st.paused or self.subscriptions.assigned.get(st.tp) is not st:
                self.iterating.popleft()
                continue
            entry[3] = i + 1
            rec = recs[i]
            st.position = rec.offset + 1
            self.metrics["records_consumed"] += 1
            return rec
        return None

    def collect(self, max_records: int, advance: bool, columns: bool = False) -> dict[TopicPartition, Any]:
        """Take up to ``max_records`` buffered records, partitions in rotation: as
        ConsumerRecord lists, or as RecordColumns with ``columns``."""
        out: dict[TopicPartition, Any] = {}
        touched: list[tuple[AssignedPartition, int | None]] = []  # (partition, position before this call)
        states = list(self.subscriptions.assigned.values())
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
                if advance:
                    _skip_unreturned(st)
                continue
            last_seg, _, last_hi = pieces[-1]
            deserialize = self.key_deserializer is not None or self.value_deserializer is not None
            try:
                if columns:
                    cols = columns_of(st.tp, pieces)
                    if deserialize:
                        cols = self._deserialize_columns(st, pieces, cols)
                elif deserialize:
                    take = self._deserialize_records(st, pieces, records_of(st.tp, pieces))
            except SerializationError as exc:
                self.stats.record_errors.add(exc)
                # Nothing of this call is returned: every partition read here starts again
                # where it stood before it (fetched anew), so the next call raises at the
                # same record until the user seeks past it; nothing is skipped.
                touched.append((st, st.position))
                for s, before in touched:
                    self.subscriptions.reposition(s, before)
                raise
            touched.append((st, st.position))
            if columns:
                out[st.tp] = cols
                n_taken = len(cols)
            else:
                if not deserialize:
                    take = records_of(st.tp, pieces)
                if not advance:
                    self.iterating.append([st, st.generation, take, 0])
                out[st.tp] = take
                n_taken = len(take)
            if advance:
                st.position = last_seg.base + last_hi
                self.metrics["records_consumed"] += n_taken
                _skip_unreturned(st)
            if want <= 0:
                self._rotation = (self._rotation + j + 1) % n
                break
        else:
            if n:
                self._rotation = (self._rotation + 1) % n
        return out

    def _deserialize(self, f: Any, what: str, data: Any, st: AssignedPartition, offset: int) -> Any:
        try:
            return f(data)
        except Exception as exc:
            raise SerializationError(
                f"{what} failed for the record at offset {offset} of topic {st.tp.topic!r} partition {st.tp.partition}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc

    def _deserialize_records(self, st: AssignedPartition, pieces: list, take: list[ConsumerRecord]) -> list[ConsumerRecord]:
        kd, vd = self.key_deserializer, self.value_deserializer
        out = []
        for rec in take:
            key = rec.key if kd is None or rec.key is None else self._deserialize(kd, "key_deserializer", rec.key, st, rec.offset)
            value = rec.value if vd is None or rec.value is None else self._deserialize(vd, "value_deserializer", rec.value, st, rec.offset)
            out.append(rec._replace(key=key, value=value))
        return out

    def _deserialize_columns(self, st: AssignedPartition, pieces: list, cols: Any) -> Any:
        kd, vd = self.key_deserializer, self.value_deserializer
        keys = cols.keys if kd is None else [
            k if k is None else self._deserialize(kd, "key_deserializer", k, st, o) for k, o in zip(cols.keys, cols.offsets)
        ]
        values = cols.values if vd is None else [
            v if v is None else self._deserialize(vd, "value_deserializer", v, st, o) for v, o in zip(cols.values, cols.offsets)
        ]
        return cols._replace(keys=keys, values=values)

    def _decode_next(self, st: AssignedPartition) -> None:
        try:
            decode_chunk(st, self.check_crcs)
        except KafkaError as exc:
            self.stats.record_errors.add(exc)
            # A corrupt batch: fetch again from the first record not yet returned, so that
            # every poll() raises until the user seeks past it (as Kafka's consumer does).
            self.subscriptions.reposition(st, st.decode_from if st.decode_from >= 0 else st.position)
            raise


def _skip_unreturned(st: AssignedPartition) -> None:
    """Past the last decoded batch when nothing of it is left to return: a position then
    moves over transaction markers, aborted batches and emptied batches at the end of what
    was fetched, so a consumer's lag reaches 0 (Kafka's consumer does the same)."""
    if not st.segments and not st.pending and st.position is not None and st.decode_from > st.position:
        st.position = st.decode_from
