"""A transactional producer's requests: the driver of its
:class:`~.transaction_manager.TransactionManager`.

* With implicit adds (KIP-890 part 2, what ``kcoord.Producer`` runs) there is no
  AddPartitionsToTxn for produce partitions: :meth:`Transactions.before_send` only records
  the partition (:meth:`~.transaction_manager.TransactionManager.implicit_add`) and the batch
  leaves at once, marked ``implicit_add``; its leader adds the partition. What follows about
  AddPartitionsToTxn is for a manager without implicit adds.
* :class:`Transactions` runs InitProducerId, AddOffsetsToTxn + TxnOffsetCommit and EndTxn
  for the producer's transactional methods (the caller's thread, through kcoord's calls
  loop), and AddPartitionsToTxn on the sender's loop: as soon as ``send()`` meets a
  partition new to the transaction (:meth:`Transactions.add_soon`; after ADD_COALESCE_S,
  5 ms, for the sends right after it to meet the others), and again before a
  batch goes to a partition not yet added, every partition registered since the last
  request is added in one AddPartitionsToTxn (Kafka batches them the same way), one
  request in flight at a time.
* :class:`TransactionalIdentity` is the producer identity the sender stamps on batches:
  the coordinator's producer id and epoch, the transactional bit, and a failed batch making
  the transaction abortable (instead of the idempotent producer's epoch bump: the abort's
  EndTxn has the coordinator bump it, KIP-360 as Kafka 4.0 with transaction version 2; an
  abort after INVALID_PRODUCER_ID_MAPPING sends InitProducerId with the current identity).

Every call retries what :func:`~.transaction_manager.classify` calls retriable, backing off
``retry_backoff_ms`` (20 ms for CONCURRENT_TRANSACTIONS, Kafka's shortcut while a previous
transaction's markers are written) until its deadline: ``max_block_ms`` for the methods
(kafka-python's bound), the batch's delivery deadline for AddPartitionsToTxn. A method that
runs out of time raises RequestTimedOutError and may be called again: the same request goes
again (the coordinator recognises a retried EndTxn).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from typing import Any, Callable, Mapping

from ...protocol.errors import ErrorCode, KafkaError
from ...protocol.group import OffsetCommitPartition
from ...protocol.txn import EndTxnRequest, TxnOffsetCommitRequest, TxnOffsetCommitResponse
from ..cluster import ClusterClient
from ..coordinator.coordinators import GroupCoordinators
from ..coordinator.txn_coordinators import TransactionCoordinators
from ..errors import IllegalStateError, TransactionAbortedError
from ..types import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition
from .batch import ProducerBatch, sequence_after
from .transaction_manager import PreparedTxnState, TransactionManager, TransactionState, Verdict

logger = logging.getLogger("kcoord.producer")
_monotonic = time.monotonic

CONCURRENT_BACKOFF_S = 0.02
# The AddPartitionsToTxn that send() starts waits this long for send() to meet the
# transaction's other partitions, so one request adds them: a request out alone with the
# first partition is held by the coordinator while the previous transaction's markers are
# written, and the others then cost a second request and write after it. 5 ms: the sticky
# partitioner moves on after a full batch (~1 ms of sends at 100 bytes), and Kafka 4.0's
# default linger.ms; a batch cannot leave before the add's own round trip and write anyway.
ADD_COALESCE_S = 0.005

S = TransactionState


class TransactionalIdentity:
    """The identity of a transactional producer's batches (the interface of
    :class:`~.idempotence.ProducerIdentity`), read from its :class:`TransactionManager`."""

    idempotent = True
    explicit = False
    transactional = True

    def __init__(self, manager: TransactionManager) -> None:
        self.manager = manager

    @property
    def producer_id(self) -> int:
        return self.manager.producer_id

    @property
    def epoch(self) -> int:
        return self.manager.epoch

    def assign_sequence(self, ps: Any, batch: ProducerBatch) -> None:
        """As the idempotent producer's: a partition restarts at sequence 0 under every new
        identity (every transaction has one: the epoch is bumped at its end)."""
        if batch.base_sequence >= 0:
            return
        ident = self.manager.identity
        if ps.identity != ident:
            ps.identity, ps.next_sequence, ps.written_through = ident, 0, -1
        batch.producer_id, batch.producer_epoch = ident
        batch.base_sequence = ps.next_sequence
        batch.transactional = True
        ps.next_sequence = sequence_after(ps.next_sequence, len(batch))

    def on_failed(self, batch: ProducerBatch, error: BaseException | None = None) -> None:
        if isinstance(error, TransactionAbortedError):
            return
        self.manager.on_batch_failed(error if error is not None else KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "batch failed"))


def _offsets_by_topic(offsets: Mapping[Any, Any]) -> dict[str, dict[int, OffsetCommitPartition]]:
    if not isinstance(offsets, Mapping):
        raise TypeError(f"offsets must be a dict {{TopicPartition: OffsetAndMetadata}}, got {type(offsets).__name__}")
    out: dict[str, dict[int, OffsetCommitPartition]] = {}
    for tp, om in offsets.items():
        if not isinstance(tp, tuple) or len(tp) != 2 or not isinstance(tp[0], str) or type(tp[1]) is not int:
            raise TypeError(f"offsets keys must be TopicPartition(topic, partition), got {tp!r}")
        if isinstance(om, OffsetAndMetadata):
            offset, metadata, leader_epoch = om.offset, om.metadata, om.leader_epoch
        elif type(om) is int:
            offset, metadata, leader_epoch = om, "", -1
        else:
            raise TypeError(f"offsets values must be OffsetAndMetadata(offset, metadata), got {om!r} for {tp}")
        if type(offset) is not int or offset < 0:
            raise ValueError(f"the offset of {TopicPartition(*tp)} must be an int >= 0, got {offset!r}")
        out.setdefault(tp[0], {})[tp[1]] = OffsetCommitPartition(offset, metadata, leader_epoch)
    return out


def _group_metadata(group_metadata: Any) -> ConsumerGroupMetadata:
    if isinstance(group_metadata, str):
        group_metadata = ConsumerGroupMetadata(group_metadata)
    elif not isinstance(group_metadata, ConsumerGroupMetadata):
        raise TypeError(
            "send_offsets_to_transaction expects group_metadata to be a ConsumerGroupMetadata "
            f"(Consumer.group_metadata()) or a group id str, got {type(group_metadata).__name__}"
        )
    if not isinstance(group_metadata.group_id, str) or not group_metadata.group_id:
        raise KafkaError(ErrorCode.INVALID_GROUP_ID, f"send_offsets_to_transaction needs a consumer group id, got {group_metadata.group_id!r}")
    if group_metadata.generation_id > 0 and not group_metadata.member_id:
        raise ValueError(f"invalid ConsumerGroupMetadata: generation_id={group_metadata.generation_id} implies a joined group but member_id is empty")
    return group_metadata


class Transactions:
    """A transactional producer's calls to its transaction coordinator and, for offsets,
    to a group coordinator (see the module doc). ``flush(timeout_s)`` sends everything
    queued and waits for it (the producer's); ``abort_queued()`` makes the sender go through
    every queued batch at once (an abort fails them)."""

    def __init__(
        self,
        cluster: ClusterClient,
        manager: TransactionManager,
        *,
        flush: Callable[[float | None], None],
        retry_backoff_ms: int,
        max_block_ms: int,
        request_timeout_ms: int,
    ) -> None:
        self.cluster = cluster
        self.manager = manager
        self._flush = flush
        self._backoff_s = max(0.001, retry_backoff_ms / 1000)
        self.max_block_ms = max_block_ms
        self.request_timeout_ms = request_timeout_ms
        self.coordinators = TransactionCoordinators(cluster)
        self.groups = GroupCoordinators(cluster)
        # The AddPartitionsToTxn in flight (a task on the sender's loop), if any.
        self._adding: asyncio.Task | None = None
        self._adding_loop: asyncio.AbstractEventLoop | None = None
        # the sender's loop, where AddPartitionsToTxn runs (set by the producer)
        self.sender_loop: asyncio.AbstractEventLoop | None = None

    @property
    def transactional_id(self) -> str:
        return self.manager.transactional_id

    def _deadline(self) -> float:
        return _monotonic() + self.max_block_ms / 1000

    # -- the request loop --------------------------------------------------------------------
    async def _retrying(self, what: str, send: Callable[[float], Any], on_answer: Callable[[Any], Verdict], deadline: float) -> None:
        """``send(remaining_s)`` until ``on_answer`` is done with the answer or ``deadline``
        passes (RequestTimedOutError; the state stays, so the method may be called again)."""
        last = "no answer"
        while True:
            remaining = deadline - _monotonic()
            if remaining <= 0:
                raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"{what} for transactional_id {self.transactional_id!r} did not complete in time ({last})")
            try:
                answer = await send(max(0.05, remaining))
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                last = str(exc)
                await asyncio.sleep(max(0.0, min(self._backoff_s, deadline - _monotonic())))
                continue
            if on_answer(answer) is Verdict.DONE:
                return
            code = int(answer.error_code) or next(
                (int(c) for parts in (getattr(answer, "results", None) or getattr(answer, "topics", None) or {}).values() for c in parts.values() if c), 0
            )
            last = f"last answer {ErrorCode(code).name if code in ErrorCode._value2member_map_ else code}"
            wait = CONCURRENT_BACKOFF_S if code == ErrorCode.CONCURRENT_TRANSACTIONS else self._backoff_s
            await asyncio.sleep(max(0.0, min(wait, deadline - _monotonic())))

    async def _txn_call(self, request: Any, remaining_s: float) -> Any:
        return await self.coordinators.acall_txn(self.transactional_id, request, remaining_s)

    def _run(self, coro: Any) -> Any:
        return self.cluster.calls.run(coro)

    # -- init_transactions -------------------------------------------------------------------
    def init_transactions(self, keep_prepared_txn: bool = False) -> None:
        m = self.manager
        request = m.init_request(keep_prepared_txn)
        if request is None:
            return
        self.coordinators.count()  # the placement, cached before the sender needs it
        self._run(self._retrying("init_transactions()", lambda s: self._txn_call(request, s), m.on_init, self._deadline()))
        logger.info("transactional_id %r: producer id %d epoch %d (%s)", self.transactional_id, m.producer_id, m.epoch, m.state.name)

    # -- AddPartitionsToTxn: the sender's, before a batch of the transaction is sent --------
    async def before_send(self, tp: TopicPartition, deadline: float) -> BaseException | None:
        """None when a batch to ``tp`` may be sent now (``tp`` is in the transaction, added
        first if needed); else the error to fail the batch with."""
        m = self.manager
        while True:
            state = m.state
            if state is S.ABORTING_TRANSACTION:
                return TransactionAbortedError(f"the transaction of transactional_id {self.transactional_id!r} was aborted before the record was sent")
            if state in (S.ABORTABLE_ERROR, S.FATAL_ERROR):
                return m.last_error
            if m.implicit_adds:  # KIP-890 part 2: the leader adds tp
                if m.implicit_add(tp):
                    return None
                if m.state in (S.ABORTING_TRANSACTION, S.ABORTABLE_ERROR, S.FATAL_ERROR):
                    continue  # it moved meanwhile: the checks above say why
                return IllegalStateError(f"a batch to {tp} outside a transaction of transactional_id {self.transactional_id!r} (state {state.name})")
            if m.is_added(tp):
                return None
            task = self._adding
            if task is None:
                request = m.add_partitions_request(tp)
                if request is None:
                    if m.is_added(tp) or m.state is not state:
                        continue
                    return IllegalStateError(f"a batch to {tp} outside a transaction of transactional_id {self.transactional_id!r} (state {state.name})")
                task = self._adding = asyncio.get_running_loop().create_task(self._add_partitions(request, deadline))
            try:
                await asyncio.wait_for(asyncio.shield(task), max(0.0, deadline - _monotonic()))
            except asyncio.TimeoutError:
                return KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"adding {tp} to the transaction of {self.transactional_id!r} did not complete in time")
            except KafkaError as exc:
                return exc

    def batch_opened(self, topic: str, partition: int) -> None:
        """The accumulator opened a batch of the transaction at ``topic``-``partition``
        (under its lock): a partition new to the transaction starts its AddPartitionsToTxn."""
        if self.manager.register((topic, partition)) and self.sender_loop is not None:
            self.add_soon(self.sender_loop)

    def add_soon(self, loop: asyncio.AbstractEventLoop) -> None:
        """``send()`` met a partition new to the transaction: start its AddPartitionsToTxn
        on the sender's ``loop`` now (Kafka's client adds a partition as ``send()`` first
        meets it), not when its first batch drains after the linger. Bounded by
        ``max_block_ms``; a batch waiting for it still waits at most its delivery deadline."""
        try:
            loop.call_soon_threadsafe(self._start_adding)
        except RuntimeError:  # the sender's loop is closed: the producer is closing
            pass

    def _start_adding(self, coalesce: bool = True) -> None:
        """``coalesce``: wait ADD_COALESCE_S for more partitions first (send() met the first
        one); not for partitions that already waited for the request before."""
        if self._adding is not None or not self.manager.new_partitions:
            return  # the request in flight takes them along on a retry, or the next one does
        request = None if coalesce else self.manager.add_partitions_request()
        if not coalesce and request is None:
            return
        task = self._adding = asyncio.get_running_loop().create_task(self._add_partitions(request, self._deadline()))
        # its failure is the transaction's (abortable) state; nobody need await it
        task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _add_partitions(self, request: Any, deadline: float) -> None:
        """``request`` None: build it after ADD_COALESCE_S (send() started it)."""
        m = self.manager
        if request is None:
            try:
                await asyncio.sleep(ADD_COALESCE_S)
                request = m.add_partitions_request()
            finally:
                if request is None:
                    self._adding = None
            if request is None:
                return
        current = [request]

        def send(remaining_s: float) -> Any:
            # a retry takes along the partitions registered meanwhile (the pending ones and
            # the new): while the coordinator answers CONCURRENT_TRANSACTIONS (the previous
            # transaction's markers), the application goes on sending to other partitions
            if m.new_partitions:
                fresher = m.add_partitions_request()
                if fresher is not None:
                    current[0] = fresher
            return self._txn_call(current[0], remaining_s)

        try:
            await self._retrying("AddPartitionsToTxn", send, m.on_add_partitions, deadline)
        except KafkaError as exc:
            if m.state not in (S.ABORTABLE_ERROR, S.FATAL_ERROR):
                m.on_unknown_outcome(exc)
            raise
        finally:
            self._adding = None
        if m.new_partitions:  # registered after the request was sent: the next one goes now
            self._start_adding(coalesce=False)

    async def _adds_done(self) -> None:
        task = self._adding
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)

    def wait_adds(self, sender_loop: asyncio.AbstractEventLoop, timeout_s: float) -> None:
        """Wait for the AddPartitionsToTxn in flight on the sender's loop, if any."""
        if self._adding is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._adds_done(), sender_loop).result(max(0.0, timeout_s))
        except concurrent.futures.TimeoutError:
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"AddPartitionsToTxn of transactional_id {self.transactional_id!r} still in flight after max_block_ms") from None

    # -- send_offsets_to_transaction -----------------------------------------------------------
    def send_offsets_to_transaction(self, offsets: Mapping[Any, Any], group_metadata: Any) -> None:
        """AddOffsetsToTxn to the transaction coordinator, then TxnOffsetCommit to the
        group's coordinator (KIP-447: with the consumer's generation, member id and group
        instance id when ``group_metadata`` is a ConsumerGroupMetadata)."""
        topics = _offsets_by_topic(offsets)
        gm = _group_metadata(group_metadata)
        m = self.manager
        add = m.add_offsets_request(gm.group_id)
        deadline = self._deadline()

        async def run() -> None:
            await self._retrying("AddOffsetsToTxn", lambda s: self._txn_call(add, s), m.on_add_offsets, deadline)
            commit = TxnOffsetCommitRequest(
                self.transactional_id, gm.group_id, m.producer_id, m.epoch,
                generation_id=gm.generation_id, member_id=gm.member_id or "", group_instance_id=gm.group_instance_id, topics=topics,
            )
            index = self.groups.index_for(gm.group_id)

            async def send(remaining_s: float) -> Any:
                return await self.groups.acall(index, "txn_offset_commit", commit, TxnOffsetCommitResponse, remaining_s)

            await self._retrying("TxnOffsetCommit", send, m.on_txn_offset_commit, deadline)

        self.groups.count()
        try:
            self._run(run())
        except KafkaError as exc:
            if m.state is S.IN_TRANSACTION:
                m.on_unknown_outcome(exc)  # out of time or the call failed: what landed is unknown
            raise

    # -- ending ------------------------------------------------------------------------------
    def _flush_for(self, what: str, deadline: float) -> None:
        # The state left IN_TRANSACTION before this: the flush takes the accumulator's lock,
        # so every record its gate let in (checked in the append's critical section) is
        # among the batches it waits for, and no later one joins.
        self._flush(max(0.0, deadline - _monotonic()))

    def prepare_transaction(self, sender_loop: asyncio.AbstractEventLoop) -> PreparedTxnState:
        m = self.manager
        m.begin_prepare()
        deadline = self._deadline()
        self._flush(max(0.0, deadline - _monotonic()))
        self.wait_adds(sender_loop, deadline - _monotonic())
        return m.prepare()

    def end_transaction(self, commit: bool, sender_loop: asyncio.AbstractEventLoop) -> None:
        """``commit_transaction()`` / ``abort_transaction()``: flush (an abort fails what
        was not sent yet), then EndTxn with ``bump_epoch`` and the identity it answers."""
        m = self.manager
        what = "commit_transaction()" if commit else "abort_transaction()"
        if commit:
            m.begin_commit()
        else:
            m.begin_abort()
        deadline = self._deadline()
        self._flush_for(what, deadline)
        self.wait_adds(sender_loop, deadline - _monotonic())
        request = m.end_request(commit)
        if request is None:
            m.complete()
            return
        if isinstance(request, EndTxnRequest):
            self._run(self._retrying(what, lambda s: self._txn_call(request, s), m.on_end, deadline))
            request = m.recovery_request()  # the EndTxn found our producer id unknown there
        if request is not None:
            # KIP-360: InitProducerId with the current identity instead of EndTxn
            self._run(self._retrying(f"{what} (InitProducerId, KIP-360)", lambda s: self._txn_call(request, s), m.on_recovered, deadline))
            logger.info("transactional_id %r: re-initialised after INVALID_PRODUCER_ID_MAPPING", self.transactional_id)
        logger.debug("transactional_id %r: %s; now producer id %d epoch %d", self.transactional_id, what, m.producer_id, m.epoch)

    def complete_transaction(self, prepared: PreparedTxnState, sender_loop: asyncio.AbstractEventLoop) -> bool:
        """KIP-939: commit the kept transaction if ``prepared`` names it, else abort it.
        Returns whether it committed."""
        commit = self.manager.complete_decision(prepared)
        self.end_transaction(commit, sender_loop)
        return commit

