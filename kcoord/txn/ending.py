"""The first phase: deciding how a transaction ends (EndTxn, and the aborts the coordinator
decides itself), and the PREPARE_* record that makes the decision durable.

**EndTxn** (Kafka 4.0's rules):

* The producer id must be the id's (INVALID_PRODUCER_ID_MAPPING) and the epoch its current one
  (PRODUCER_FENCED, or INVALID_PRODUCER_EPOCH for old clients), unless the request is a retry
  of the EndTxn that produced the current PREPARE_* / COMPLETE_* state: then the same result
  answers NONE once complete (CONCURRENT_TRANSACTIONS while the markers are written) and the
  other result INVALID_TXN_STATE.
* ONGOING -> PREPARE_COMMIT / PREPARE_ABORT, answered once appended; the markers follow.
  EMPTY or COMPLETE_* at the current epoch has no transaction: a commit is INVALID_TXN_STATE,
  an abort with ``bump_epoch`` is an empty abort (transaction version 2: the producer cannot
  know whether its first partition was added), which bumps the epoch like any other end.
* ``bump_epoch`` (KIP-890 part 2): the transaction ends at the next epoch, which the answer
  returns. A retry is recognised by the epoch one below the current and ``last_producer_epoch``
  equal to it: only this producer's own EndTxn leaves that pair, so a delayed EndTxn of
  transaction N, arriving when N+1 is ongoing at the next epoch, is fenced and cannot end N+1
  (KAFKA-17754); nor can a producer's commit pass for a retry of an abort the coordinator
  decided (those clear ``last_producer_epoch``; KAFKA-20785). At the last usable epoch the
  transaction ends at the maximum epoch and completes under a new producer id at epoch 0.
* Without ``bump_epoch`` (wire clients up to EndTxn v4) one epoch serves every transaction of
  an instance: a retry is the same request at the current epoch, and a delayed EndTxn of
  transaction N *can* end N+1 -- Kafka's window, documented in docs/kafka-wire.md.

**Aborts the coordinator decides** (:meth:`Ending.abort`): an InitProducerId of a newer
instance finding the older one's transaction ONGOING, and a transaction that outlived its
timeout. Both append PREPARE_ABORT at the next epoch with ``last_producer_epoch`` -1, so the
old instance is fenced from every later request (and, through the markers' epoch, at every
partition). Kafka names this transition PREPARE_EPOCH_FENCE while it is in flight.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..protocol.codec import Message
from ..protocol.errors import ErrorCode, error_name
from ..protocol.txn import EndTxnRequest, EndTxnResponse, TxnInitProducerIdResponse, fenced_error
from .context import TxnContext
from .markers import Markers
from .metadata import TransactionMetadata
from .persistence import Persistence, PrepareWrite, txn_error_for_append
from .producer_ids import ProducerIdPool
from .records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TxnValue
from .state import (
    COMPLETE_COMMIT,
    MAX_PRODUCER_EPOCH,
    ONGOING,
    PREPARE_ABORT,
    PREPARE_COMMIT,
    PREPARE_EPOCH_FENCE,
    TransactionState,
    check_transition,
    is_epoch_exhausted,
)
from .timers import TimerKind

E = ErrorCode


def is_end_txn_retry(v: TxnValue, producer_id: int, producer_epoch: int) -> bool:
    """Whether an EndTxn from (``producer_id``, ``producer_epoch``) is a retry of the one that
    put the id in its current PREPARE_* or COMPLETE_* state."""
    if not (v.state.is_prepare or v.state.is_complete):
        return False
    if not v.bump_epoch:
        return producer_id == v.producer_id and producer_epoch == v.producer_epoch
    if v.last_producer_epoch != producer_epoch or producer_epoch < 0:
        return False
    if producer_id == v.producer_id and v.producer_epoch == min(producer_epoch + 1, MAX_PRODUCER_EPOCH):
        return True
    # completed under the next producer id after the epochs ran out
    return v.state.is_complete and producer_id == v.prev_producer_id != v.producer_id and v.producer_epoch == 0


class Ending:
    def __init__(self, ctx: TxnContext, persistence: Persistence, producer_ids: ProducerIdPool, markers: Markers) -> None:
        self.ctx = ctx
        self.persistence = persistence
        self.producer_ids = producer_ids
        self.markers = markers

    # -- EndTxn --------------------------------------------------------------------------

    def end_txn(self, req: EndTxnRequest, token: Any, now_ms: int) -> None:
        def fail(code: int, message: str | None = None) -> None:
            self.ctx.reply(token, EndTxnResponse(error_code=code, error_message=message))

        what = "commit" if req.commit else "abort"
        meta = self.ctx.transactions.get(req.transactional_id)
        if meta is None or meta.value is None:
            fail(E.INVALID_PRODUCER_ID_MAPPING, f"no producer id for transactional id {req.transactional_id!r} (InitProducerId first)")
            return
        if meta.pending is not None:
            fail(E.CONCURRENT_TRANSACTIONS, f"a {meta.pending.value} transition is in progress")
            return
        v = meta.value
        pid, epoch = req.producer_id, req.producer_epoch
        if is_end_txn_retry(v, pid, epoch):
            ended_commit = v.state in (PREPARE_COMMIT, COMPLETE_COMMIT)
            if req.commit != ended_commit:
                fail(E.INVALID_TXN_STATE, f"the transaction already ended the other way ({v.state.value}); cannot {what}")
            elif v.state.is_prepare:
                fail(E.CONCURRENT_TRANSACTIONS, f"the {what} is being completed ({v.state.value})")
            else:
                self.ctx.reply(token, EndTxnResponse(producer_id=v.producer_id, producer_epoch=v.producer_epoch))
            return
        if v.state.is_prepare and (
            (v.next_producer_id != NO_PRODUCER_ID and pid == v.next_producer_id and epoch == 0)
            or (v.bump_epoch and pid == v.producer_id and epoch == v.producer_epoch)
        ):
            # the producer already holds the identity this transaction ends with and moved on
            fail(E.CONCURRENT_TRANSACTIONS, f"the previous transaction is being completed ({v.state.value})")
            return
        if pid != v.producer_id:
            fail(E.INVALID_PRODUCER_ID_MAPPING, f"producer id {pid} is not {req.transactional_id!r}'s ({v.producer_id})")
            return
        if epoch != v.producer_epoch:
            fail(fenced_error(req), f"producer epoch {epoch} is not the current {v.producer_epoch}")
            return
        if v.state == ONGOING:
            self._prepare(meta, req, token, PREPARE_COMMIT if req.commit else PREPARE_ABORT, now_ms)
        elif v.state.is_prepare:
            fail(E.CONCURRENT_TRANSACTIONS, f"the previous transaction is being completed ({v.state.value})")
        elif not req.commit and req.bump_epoch:
            self._prepare(meta, req, token, PREPARE_ABORT, now_ms)  # an empty abort
        else:
            fail(E.INVALID_TXN_STATE, f"no transaction to {what} ({v.state.value})")

    def _prepare(self, meta: TransactionMetadata, req: EndTxnRequest, token: Any, target: TransactionState, now_ms: int) -> None:
        v = meta.value
        assert v is not None
        check_transition(v.state, target)
        epoch, last, next_pid = v.producer_epoch, v.last_producer_epoch, NO_PRODUCER_ID
        if req.bump_epoch:
            if is_epoch_exhausted(epoch):
                taken = self.producer_ids.take(now_ms)
                if taken is None:
                    self.ctx.reply(token, EndTxnResponse(error_code=E.COORDINATOR_LOAD_IN_PROGRESS, error_message="waiting for producer ids"))
                    return
                next_pid = taken
            epoch, last = min(epoch + 1, MAX_PRODUCER_EPOCH), epoch
        value = replace(
            v,
            state=target,
            producer_epoch=epoch,
            last_producer_epoch=last,
            prev_producer_id=v.producer_id,
            next_producer_id=next_pid,
            last_update_ms=now_ms,
            bump_epoch=req.bump_epoch,
        )
        if v.state != ONGOING:  # an empty abort
            value = replace(value, partitions=(), start_ms=now_ms, start_epoch=v.producer_epoch)
        meta.pending = target
        self.persistence.persist(PrepareWrite(meta.transactional_id, value, "end_txn", token, req), f"{target.value} of {meta.transactional_id}")

    # -- aborts the coordinator decides --------------------------------------------------

    def abort(self, meta: TransactionMetadata, cause: str, token: Any, request: Message | None, now_ms: int) -> None:
        """Abort ``meta``'s ONGOING transaction at the next epoch, fencing its producer.
        ``cause``: ``"fence"`` (InitProducerId ``request`` waits with ``token``) or
        ``"timeout"``."""
        v = meta.value
        assert v is not None and v.state == ONGOING and meta.pending is None
        check_transition(v.state, PREPARE_EPOCH_FENCE)
        check_transition(PREPARE_EPOCH_FENCE, PREPARE_ABORT)
        epoch = v.producer_epoch + 1 if v.producer_epoch < MAX_PRODUCER_EPOCH else v.producer_epoch
        value = replace(
            v,
            state=PREPARE_ABORT,
            producer_epoch=epoch,
            last_producer_epoch=NO_PRODUCER_EPOCH,
            prev_producer_id=v.producer_id,
            next_producer_id=NO_PRODUCER_ID,
            last_update_ms=now_ms,
        )
        meta.pending = PREPARE_EPOCH_FENCE
        self.persistence.persist(PrepareWrite(meta.transactional_id, value, cause, token, request), f"abort of {meta.transactional_id} ({cause})")

    # -- the PREPARE_* record's outcome (already applied to memory when it succeeded) -----

    def prepared(self, pending: PrepareWrite, code: int, now_ms: int) -> None:
        meta = self.ctx.transactions.get(pending.transactional_id)
        if code != E.NONE:
            mapped = txn_error_for_append(code)
            if pending.cause == "end_txn":
                self.ctx.reply(pending.token, EndTxnResponse(error_code=mapped, error_message=f"the decision was not persisted ({error_name(code)})"))
            elif pending.cause == "fence":
                self.ctx.reply(pending.token, TxnInitProducerIdResponse(error_code=mapped, error_message="aborting the previous instance's transaction was not persisted"))
            else:  # a timeout: try again later
                self.ctx.timers.set((TimerKind.TIMEOUT, pending.transactional_id), now_ms + self.ctx.config.append_retry_backoff_ms)
            return
        assert meta is not None and meta.value is not None
        v = meta.value
        if pending.cause == "end_txn":
            if v.next_producer_id != NO_PRODUCER_ID:
                self.ctx.reply(pending.token, EndTxnResponse(producer_id=v.next_producer_id, producer_epoch=0))
            else:
                self.ctx.reply(pending.token, EndTxnResponse(producer_id=v.producer_id, producer_epoch=v.producer_epoch))
        elif pending.cause == "fence":
            self.ctx.stats.fenced_transactions += 1
            self.ctx.reply(
                pending.token,
                TxnInitProducerIdResponse(
                    error_code=E.CONCURRENT_TRANSACTIONS,
                    error_message="the previous instance's transaction is being aborted; retry",
                ),
            )
        else:
            self.ctx.stats.timed_out_transactions += 1
        self.markers.start(meta, now_ms)

