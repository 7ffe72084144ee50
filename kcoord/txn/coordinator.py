"""The transaction coordinator as a sans-I/O state machine (Kafka's TransactionCoordinator).

One :class:`TransactionCoordinatorState` owns every transactional id that hashes to its
partition of ``__transaction_state``. It never sleeps, sends or reads a clock: the driver feeds
it inputs with the current time and performs the :mod:`actions <kcoord.txn.actions>` it
returns, in order, feeding each outcome back.

Entry points (each returns ``list[Action]``; each first fires the timers due at ``now_ms``)::

    core = TransactionCoordinatorState(config, partition=i, num_partitions=n,
                                       offsets_partitions=g, coordinator_epoch=e)
    core.load(records, now_ms)               # replay partition i before serving; resumes markers
    core.on_metadata({topic: count}, now_ms) # the cluster's topics (RefreshMetadata's answer)
    core.handle(request, token, now_ms)      # any transaction request; the Reply may come later
    core.on_persisted(persist_id, error_code, now_ms)       # AppendRecords' outcome
    core.on_marker_written(marker_id, error_code, now_ms)   # SendWriteTxnMarker / SendTxnOffsetMarker
    core.on_producer_ids(first_id, count, error_code, now_ms)  # AllocateProducerIds' answer
    core.tick(now_ms)                        # timers: timeouts, expiry, marker retries
    core.next_deadline(now_ms)               # when tick() next has work (None: nothing timed)
    core.close(now_ms, error_code)           # give up the partition: answer everything pending

``now_ms`` is wall-clock epoch milliseconds: start and update times are stored in the log and
compared with the clock of whichever incarnation reads them later.

**Durability** (docs/architecture.md's rule for coordinators): every transition is appended
(acks=all) before anyone hears of it, and applied to memory only once acknowledged, in the
order the appends were emitted; a record holds the id's whole state, so memory is what a
replay of the partition rebuilds. At most one transition per id is in flight; others are
answered CONCURRENT_TRANSACTIONS meanwhile (AddPartitionsToTxn and AddOffsetsToTxn are
held until the id settles, up to ``concurrent_transactions_hold_ms``: :mod:`.partitions`). A failed append changes nothing and answers its
client a retriable coordinator error (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR), as Kafka
does; the coordinator's own writes (completions, timed-out aborts, expiries) are tried again.

The rules are Kafka 4.0's; each part's module says which it holds:
:mod:`.init_producer` (InitProducerId), :mod:`.partitions` (AddPartitionsToTxn, AddOffsetsToTxn,
KIP-890 verification), :mod:`.ending` (EndTxn and the aborts the coordinator decides),
:mod:`.markers` (markers, completion), :mod:`.expiry` (timeouts, id expiration), :mod:`.admin`
(List/DescribeTransactions), with :mod:`.persistence`, :mod:`.producer_ids` and the shared
:class:`~kcoord.txn.context.TxnContext` below them. Each depends only on parts built before
it: persistence, producer ids <- markers <- ending <- init_producer, expiry; partitions and
admin use persistence and the context.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from ..coordination.routing import route
from ..protocol.codec import Message
from ..protocol.errors import ErrorCode
from ..protocol.txn import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    DescribeTransactionsRequest,
    EndTxnRequest,
    ListTransactionsRequest,
    TxnInitProducerIdRequest,
    error_response,
)
from ..protocol.services import TRANSACTION_COORDINATOR
from ..runtime.actions import Action, Handlers
from .admin import TxnAdmin
from .config import TxnConfig
from .context import TxnContext, TxnCoordinatorStats
from .ending import Ending
from .expiry import Expiry
from .init_producer import InitProducer
from .markers import Markers
from .metadata import TransactionMetadata
from .partitions import TxnPartitions
from .persistence import AddWrite, CompleteWrite, ExpireWrite, InitWrite, PendingWrite, Persistence, PrepareWrite
from .producer_ids import ProducerIdPool
from .records import TopicPartition, TxnValue, replay
from .timers import TimerKind, Timers

E = ErrorCode


class TransactionCoordinatorState:
    """Every transactional id of one ``__transaction_state`` partition. See the module
    docstring."""

    def __init__(
        self,
        config: TxnConfig | None = None,
        partition: int = 0,
        num_partitions: int = 1,
        *,
        offsets_partitions: int = 1,
        coordinator_epoch: int = 0,
    ) -> None:
        """``offsets_partitions``: the number of ``__consumer_offsets`` partitions (group
        coordinators), which places a group's offsets for AddOffsetsToTxn;
        ``coordinator_epoch``: stamped on markers (this incarnation's producer epoch)."""
        if not 0 <= partition < num_partitions:
            raise ValueError(f"partition {partition} is not in [0, {num_partitions})")
        if offsets_partitions < 1:
            raise ValueError("offsets_partitions must be >= 1")
        ctx = self._ctx = TxnContext(config or TxnConfig(), partition, num_partitions, offsets_partitions, coordinator_epoch)
        self._persistence = Persistence(ctx)
        self._producer_ids = ProducerIdPool(ctx)
        self._partitions = TxnPartitions(ctx, self._persistence)
        self._markers = Markers(ctx, self._persistence, next_add=self._partitions.next_add)
        self._ending = Ending(ctx, self._persistence, self._producer_ids, self._markers)
        self._init = InitProducer(ctx, self._persistence, self._producer_ids, self._ending)
        self._expiry = Expiry(ctx, self._persistence, self._ending)
        self._admin = TxnAdmin(ctx)
        self._closed = False
        self._handlers = Handlers(
            TRANSACTION_COORDINATOR.name,
            {
                TxnInitProducerIdRequest: self._init.init_producer_id,
                AddPartitionsToTxnRequest: self._partitions.add_partitions,
                AddOffsetsToTxnRequest: self._partitions.add_offsets,
                EndTxnRequest: self._ending.end_txn,
                ListTransactionsRequest: self._admin.list_transactions,
                DescribeTransactionsRequest: self._admin.describe_transactions,
            },
        )

    # -- what the driver reads (and, for config and the epoch, replaces) -----------------

    @property
    def config(self) -> TxnConfig:
        return self._ctx.config

    @config.setter
    def config(self, config: TxnConfig) -> None:
        """The operator reconfigured; parts read the config at use (deadlines already armed
        keep their time)."""
        self._ctx.config = config

    @property
    def coordinator_epoch(self) -> int:
        return self._ctx.coordinator_epoch

    @coordinator_epoch.setter
    def coordinator_epoch(self, epoch: int) -> None:
        """This incarnation moved to a newer producer epoch: markers sent from now on carry it."""
        if epoch < self._ctx.coordinator_epoch:
            raise ValueError(f"coordinator epoch {epoch} is older than {self._ctx.coordinator_epoch}")
        self._ctx.coordinator_epoch = epoch

    partition = property(lambda self: self._ctx.partition)
    num_partitions = property(lambda self: self._ctx.num_partitions)
    offsets_partitions = property(lambda self: self._ctx.offsets_partitions)
    stats = property(lambda self: self._ctx.stats, doc="counters a shell may export as metrics")
    closed = property(lambda self: self._closed)

    # ======================================================================================
    # entry points
    # ======================================================================================

    def handle(self, request: Message, token: Any, now_ms: int) -> list[Action]:
        """Process a transaction request. Its Reply (carrying ``token``) is among the returned
        actions, or comes from a later call once the request's record is appended."""
        return route(
            self._ctx, self._handlers, request, token, now_ms,
            closed=self._closed, advance=self._advance, key="transactional_id", empty=(E.INVALID_REQUEST, "transactional id is empty"), error_response=error_response,
        )

    def tick(self, now_ms: int) -> list[Action]:
        """Fire every timer due at ``now_ms``."""
        if not self._closed:
            self._advance(now_ms)
        return self._ctx.take()

    def next_deadline(self, now_ms: int) -> int | None:
        """Earliest time at which :meth:`tick` has work, or None."""
        return None if self._closed else self._ctx.timers.next_deadline()

    def on_persisted(self, persist_id: int, error_code: int, now_ms: int) -> list[Action]:
        """AppendRecords ``persist_id`` finished (0: acknowledged by the in-sync replicas).
        Outcomes are applied in emission order, so a report may be held until the earlier
        ones arrive. Unknown ids are ignored."""
        if self._closed or persist_id not in self._persistence:
            return self._ctx.take()
        self._advance(now_ms)
        for _, pending, outcome in self._persistence.settle(persist_id, error_code):
            self._complete_write(pending, outcome, now_ms)
        self._advance(now_ms)
        return self._ctx.take()

    def on_marker_written(self, marker_id: int, error_code: int, now_ms: int) -> list[Action]:
        """The outcome of SendWriteTxnMarker / SendTxnOffsetMarker ``marker_id`` (0: written;
        see :mod:`kcoord.txn.actions` for what else a driver reports). Unknown ids are
        ignored."""
        if not self._closed:
            self._advance(now_ms)
            self._markers.on_written(marker_id, error_code, now_ms)
            self._advance(now_ms)
        return self._ctx.take()

    def on_producer_ids(self, first_id: int, count: int, error_code: int, now_ms: int) -> list[Action]:
        """The controller's answer to AllocateProducerIds: ``count`` ids from ``first_id``."""
        if not self._closed:
            self._producer_ids.on_block(first_id, count, error_code, now_ms)
            self._advance(now_ms)
        return self._ctx.take()

    def on_metadata(self, partitions: Mapping[str, int], now_ms: int) -> list[Action]:
        """The cluster's topics as just read: ``{topic: partition count}``."""
        if not self._closed:
            self._ctx.set_topics(partitions)
            self._advance(now_ms)
            self._markers.on_topics(now_ms)
            self._advance(now_ms)
        return self._ctx.take()

    def load(self, records: Iterable[tuple[bytes, bytes | None]], now_ms: int) -> list[Action]:
        """Rebuild every transactional id from a replay of this coordinator's partition, in
        log order, before serving. Transactions found PREPARE_* resume writing their markers
        (the returned actions); ONGOING ones get their timeouts, idle ids their expiry; a
        block of producer ids is asked for.
        Raises DecodeError on a malformed record (filter them first to skip them)."""
        ctx = self._ctx
        if self._closed:
            raise RuntimeError("load() on a closed coordinator")
        if self._persistence.pending_ids() or ctx.transactions:
            raise RuntimeError("load() must run before the coordinator serves requests")
        values = replay(records)
        for tid in sorted(values):
            meta = ctx.transactions[tid] = TransactionMetadata(tid, values[tid])
            self._expiry.reschedule(meta)
        for tid in sorted(values):
            if values[tid].state.is_prepare:
                self._markers.start(ctx.transactions[tid], now_ms)
        self._producer_ids.prefetch(now_ms)
        self._advance(now_ms)
        return ctx.take()

    def close(self, now_ms: int, error_code: int = E.NOT_COORDINATOR) -> list[Action]:
        """Stop serving (the partition moved or the actor stops): every request still waiting
        on an append or held while its id is busy is answered with ``error_code``, so the
        driver holds no dangling tokens."""
        ctx = self._ctx
        if self._closed:
            return ctx.take()
        self._closed = True
        for p in self._persistence.abandon():
            token = getattr(p, "token", None)
            request = getattr(p, "request", None)
            if request is not None:
                ctx.reply(token, error_response(request, error_code, "coordinator closed"))
        self._markers.abandon()
        self._partitions.abandon(error_code)
        ctx.transactions.clear()
        ctx.timers = Timers()
        return ctx.take()

    # -- read-only introspection (tests, metrics, the driver's admin helpers) ------------

    def owns(self, transactional_id: str) -> bool:
        return self._ctx.owns(transactional_id)

    def transaction(self, transactional_id: str) -> TransactionMetadata | None:
        """The live metadata of an id. Read it; never mutate it."""
        return self._ctx.transactions.get(transactional_id)

    def partition_exists(self, topic: str, partition: int) -> bool | None:
        """Whether ``topic``-``partition`` exists in the topics as last read (None: none read
        yet); a driver may read the topics again before handing over a request naming one
        that does not."""
        return self._ctx.partition_exists(topic, partition)

    def transactional_ids(self) -> list[str]:
        return sorted(tid for tid, m in self._ctx.transactions.items() if m.value is not None)

    def snapshot(self) -> dict[str, TxnValue]:
        """Every id's acknowledged state: what a replay of the appended records rebuilds."""
        return {tid: m.value for tid, m in self._ctx.transactions.items() if m.value is not None}

    def metrics_snapshot(self) -> dict[str, int]:
        """What a shell exports as metrics: transactions open now (Ongoing or deciding),
        transactional ids held, and the running counters of :attr:`stats`."""
        return self._admin.metrics_snapshot()

    def pending_persists(self) -> list[int]:
        return self._persistence.pending_ids()

    def held_requests(self, transactional_id: str) -> list[tuple[Message, int]]:
        """The (request, deadline) of ``transactional_id``'s requests held while it is busy."""
        return [(h.request, h.deadline_ms) for h in self._partitions.held(transactional_id)]

    def held_ids(self) -> list[str]:
        """The transactional ids with requests held now."""
        return self._partitions.held_ids()

    def pending_markers(self, transactional_id: str) -> set[TopicPartition]:
        """The partitions of ``transactional_id``'s decided transaction still without marker."""
        return self._markers.pending(transactional_id)

    # ======================================================================================
    # routing: timers and write outcomes go to the part that waits on them
    # ======================================================================================

    def _advance(self, now_ms: int) -> None:
        timers = self._ctx.timers
        while (key := timers.pop_due(now_ms)) is not None:
            kind, tid = key[0], key[1]
            if kind == TimerKind.TIMEOUT:
                self._expiry.on_timeout(tid, now_ms)
            elif kind == TimerKind.EXPIRE:
                self._expiry.on_expire(tid, now_ms)
            elif kind == TimerKind.MARKER:
                self._markers.on_retry(tid, (key[2], key[3]), now_ms)
            elif kind == TimerKind.COMPLETE:
                self._markers.on_complete_retry(tid, now_ms)
            elif kind == TimerKind.HOLD:
                self._partitions.on_hold_expired(tid, now_ms)

    def _complete_write(self, pending: PendingWrite, code: int, now_ms: int) -> None:
        """Apply the outcome of one append (in emission order), then let the part that made
        it answer or carry on."""
        ctx = self._ctx
        tid = pending.transactional_id
        meta = ctx.transactions.get(tid)
        assert meta is not None, f"an append for {tid!r} settled with no metadata"
        meta.pending = None
        if code == E.NONE:
            if isinstance(pending, ExpireWrite):
                del ctx.transactions[tid]
                self._expiry.forget(tid)
            else:
                # a completion with the next transaction's first add: the state is the add's
                meta.value = pending.then.value if isinstance(pending, CompleteWrite) and pending.then is not None else pending.value
                self._expiry.reschedule(meta)
        else:
            ctx.stats.persist_failures += 1
            if meta.value is None:  # the id's first InitProducerId: it does not exist
                del ctx.transactions[tid]
        if isinstance(pending, InitWrite):
            self._init.initialized(pending, code, now_ms)
        elif isinstance(pending, AddWrite):
            self._partitions.added(pending, code, now_ms)
        elif isinstance(pending, PrepareWrite):
            self._ending.prepared(pending, code, now_ms)
        elif isinstance(pending, CompleteWrite):
            self._markers.complete_written(pending, code, now_ms)
            if pending.then is not None:
                self._partitions.added(pending.then, code, now_ms)
        elif isinstance(pending, ExpireWrite):
            self._expiry.expired(pending, code, now_ms)
        self._partitions.release(tid, now_ms)


__all__ = ["TransactionCoordinatorState", "TxnCoordinatorStats"]
