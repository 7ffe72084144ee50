"""The second phase: writing a decided transaction's markers, then completing it.

Once a PREPARE_COMMIT or PREPARE_ABORT record is acknowledged (or found by a load), every
partition of the transaction gets a marker: a :class:`~kcoord.txn.actions.SendWriteTxnMarker`
to the partition's leader, or, for a ``__consumer_offsets`` partition, a
:class:`~kcoord.txn.actions.SendTxnOffsetMarker` to the group coordinator that owns it. Each is
re-sent with a growing backoff until it is written: a transaction whose decision is durable
must reach every partition, or a read_committed reader would wait on it forever. Then the
COMPLETE_* record is appended and the partitions are cleared.

Two outcomes end the sending early, as in Kafka:

* a partition that no longer exists (the driver found it missing, and the topics read after
  that confirm it) needs no marker: its data went with it;
* a leader that refuses the marker as from an older coordinator (TRANSACTION_COORDINATOR_FENCED,
  or INVALID_PRODUCER_EPOCH: it saw a newer epoch of this producer) means a newer incarnation of
  this coordinator owns the transaction now: this one stops sending for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

from ..protocol import names
from ..protocol.errors import ErrorCode
from ..protocol.txn import TxnOffsetMarkerRequest, WriteTxnMarkerRequest
from .actions import SendTxnOffsetMarker, SendWriteTxnMarker
from .context import TxnContext
from .metadata import TransactionMetadata
from .persistence import AddWrite, CompleteWrite, Persistence
from .records import NO_PRODUCER_ID, TopicPartition, TxnValue
from .state import COMPLETE_ABORT, COMPLETE_COMMIT, PREPARE_COMMIT, check_transition
from .timers import TimerKind

E = ErrorCode

# A leader that says this coordinator is not the newest one for the producer.
_FENCED = frozenset({E.TRANSACTION_COORDINATOR_FENCED, E.INVALID_PRODUCER_EPOCH, E.PRODUCER_FENCED})


@dataclass
class MarkerJob:
    """The markers of one decided transaction still to be written."""

    transactional_id: str
    commit: bool
    producer_id: int
    producer_epoch: int
    remaining: set[TopicPartition]
    in_flight: dict[TopicPartition, int] = field(default_factory=dict)  # partition -> marker id
    attempts: dict[TopicPartition, int] = field(default_factory=dict)
    # partitions whose driver found them missing: dropped if the topics confirm it
    suspect_gone: set[TopicPartition] = field(default_factory=set)


class Markers:
    def __init__(self, ctx: TxnContext, persistence: Persistence, next_add: Callable[[str, TxnValue, int], AddWrite | None] | None = None) -> None:
        """``next_add(transactional_id, complete_value, now_ms)``: the held add to append with a COMPLETE_*
        record, as if served once it settled (TxnPartitions.next_add), or None."""
        self.ctx = ctx
        self.persistence = persistence
        self.next_add = next_add
        self._jobs: dict[str, MarkerJob] = {}
        self._sent: dict[int, tuple[str, TopicPartition]] = {}  # marker id -> (id, partition)
        self._next_marker_id = 1

    # -- introspection -------------------------------------------------------------------

    def pending(self, transactional_id: str) -> set[TopicPartition]:
        job = self._jobs.get(transactional_id)
        return set(job.remaining) if job else set()

    # -- starting ------------------------------------------------------------------------

    def start(self, meta: TransactionMetadata, now_ms: int) -> None:
        """Write the markers of ``meta``'s PREPARE_* transaction (complete it at once when it
        has no partitions)."""
        v = meta.value
        assert v is not None and v.state.is_prepare
        self.cancel(meta.transactional_id)
        job = MarkerJob(meta.transactional_id, v.state == PREPARE_COMMIT, v.producer_id, v.producer_epoch, set(v.partitions))
        self._jobs[meta.transactional_id] = job
        for tp in sorted(job.remaining):
            self._send(job, tp)
        self._maybe_complete(meta, now_ms)

    def cancel(self, transactional_id: str) -> None:
        job = self._jobs.pop(transactional_id, None)
        if job is None:
            return
        for tp, marker_id in job.in_flight.items():
            self._sent.pop(marker_id, None)
        for tp in job.remaining:
            self.ctx.timers.cancel((TimerKind.MARKER, transactional_id, tp[0], tp[1]))

    def abandon(self) -> None:
        """Forget every job (the partition is given up)."""
        for transactional_id in list(self._jobs):
            self.cancel(transactional_id)
        self._sent.clear()

    def _send(self, job: MarkerJob, tp: TopicPartition) -> None:
        marker_id = self._next_marker_id
        self._next_marker_id += 1
        job.in_flight[tp] = marker_id
        self._sent[marker_id] = (job.transactional_id, tp)
        topic, partition = tp
        epoch = self.ctx.coordinator_epoch
        if topic == names.OFFSETS_TOPIC:
            request = TxnOffsetMarkerRequest(job.producer_id, job.producer_epoch, epoch, job.commit, partition, job.transactional_id)
            self.ctx.emit(SendTxnOffsetMarker(marker_id, request))
        else:
            marker = WriteTxnMarkerRequest(job.producer_id, job.producer_epoch, epoch, job.commit, topic, partition, job.transactional_id)
            self.ctx.emit(SendWriteTxnMarker(marker_id, marker))
        self.ctx.stats.markers_sent += 1

    # -- outcomes ------------------------------------------------------------------------

    def on_written(self, marker_id: int, error_code: int, now_ms: int) -> None:
        sent = self._sent.pop(marker_id, None)
        if sent is None:
            return
        transactional_id, tp = sent
        job = self._jobs.get(transactional_id)
        if job is None or job.in_flight.get(tp) != marker_id:
            return
        del job.in_flight[tp]
        meta = self.ctx.transactions[transactional_id]
        if error_code == E.NONE:
            job.remaining.discard(tp)
            job.suspect_gone.discard(tp)
            self._maybe_complete(meta, now_ms)
        elif error_code in _FENCED:
            self.ctx.stats.markers_fenced += 1
            self.cancel(transactional_id)
        else:
            if error_code == E.UNKNOWN_TOPIC_OR_PARTITION:
                job.suspect_gone.add(tp)
                self.ctx.refresh_metadata(now_ms)
            attempt = job.attempts[tp] = job.attempts.get(tp, 0) + 1
            cfg = self.ctx.config
            backoff = min(cfg.marker_max_backoff_ms, cfg.marker_retry_backoff_ms * 2 ** min(attempt - 1, 20))
            self.ctx.timers.set((TimerKind.MARKER, transactional_id, tp[0], tp[1]), now_ms + backoff)

    def on_retry(self, transactional_id: str, tp: TopicPartition, now_ms: int) -> None:
        job = self._jobs.get(transactional_id)
        if job is None or tp not in job.remaining or tp in job.in_flight:
            return
        self.ctx.stats.marker_retries += 1
        self._send(job, tp)

    def on_topics(self, now_ms: int) -> None:
        """The cluster's topics were read again: drop the markers of partitions confirmed
        gone (Kafka drops the markers of deleted partitions)."""
        for job in list(self._jobs.values()):
            for tp in sorted(job.suspect_gone):
                if self.ctx.partition_exists(*tp) is False and tp not in job.in_flight:
                    job.remaining.discard(tp)
                    self.ctx.timers.cancel((TimerKind.MARKER, job.transactional_id, tp[0], tp[1]))
                    self.ctx.stats.markers_dropped += 1
                job.suspect_gone.discard(tp)
            self._maybe_complete(self.ctx.transactions[job.transactional_id], now_ms)

    # -- completion ----------------------------------------------------------------------

    def _maybe_complete(self, meta: TransactionMetadata, now_ms: int) -> None:
        job = self._jobs.get(meta.transactional_id)
        if job is None or job.remaining:
            return
        self.cancel(meta.transactional_id)
        self.complete(meta, now_ms)

    def complete(self, meta: TransactionMetadata, now_ms: int) -> None:
        """Append COMPLETE_* for ``meta``'s PREPARE_* transaction, every marker written. A
        transaction whose epoch ran out moves to its next producer id at epoch 0 now (the
        markers went out under the old one)."""
        v = meta.value
        if v is None or not v.state.is_prepare or meta.pending is not None:
            return
        target = COMPLETE_COMMIT if v.state == PREPARE_COMMIT else COMPLETE_ABORT
        check_transition(v.state, target)
        if v.next_producer_id != NO_PRODUCER_ID:
            value = replace(v, producer_id=v.next_producer_id, producer_epoch=0, prev_producer_id=v.producer_id)
        else:
            value = replace(v, prev_producer_id=v.producer_id)
        value = replace(value, state=target, partitions=(), next_producer_id=NO_PRODUCER_ID, last_update_ms=now_ms)
        # The next transaction's first add, held until now, goes in the same append: one
        # write to __transaction_state instead of two in sequence before its batches may go.
        then = None if self.next_add is None else self.next_add(meta.transactional_id, value, now_ms)
        meta.pending = target
        self.persistence.persist(CompleteWrite(meta.transactional_id, value, then), f"{target.value} of {meta.transactional_id}" + (" with the next add" if then else ""))

    def complete_written(self, pending: CompleteWrite, code: int, now_ms: int) -> None:
        if code == E.NONE:
            if pending.value.state == COMPLETE_COMMIT:
                self.ctx.stats.transactions_committed += 1
            else:
                self.ctx.stats.transactions_aborted += 1
            return
        self.ctx.timers.set((TimerKind.COMPLETE, pending.transactional_id), now_ms + self.ctx.config.append_retry_backoff_ms)

    def on_complete_retry(self, transactional_id: str, now_ms: int) -> None:
        meta = self.ctx.transactions.get(transactional_id)
        if meta is None or transactional_id in self._jobs:
            return
        self.complete(meta, now_ms)
