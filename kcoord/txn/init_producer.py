"""InitProducerId for a transactional id: the producer id, and an epoch that fences every older
instance (Kafka 4.0's rules, with KIP-360 recovery and KIP-939 two-phase transactions).

* A new id gets a fresh producer id (from the controller's allocator) at epoch 0.
* An id in EMPTY or COMPLETE_* gets its epoch bumped (``last_producer_epoch`` -1: whoever held
  the old one is fenced). Once the epoch is exhausted (``MAX - 1``) it gets a new producer id
  at epoch 0 instead.
* An ONGOING transaction of the older instance is aborted first at a bumped epoch and the
  caller gets CONCURRENT_TRANSACTIONS; it retries once the abort completed and then gets the
  epoch after that. A PREPARE_* transaction is completing: CONCURRENT_TRANSACTIONS.
* KIP-360: a producer that presents the id and epoch it holds (after an error that made its
  sequence state unusable) continues with the next epoch if nobody else was initialised since
  (its epoch is the current one), gets the same answer again if it retries a bump it missed the
  answer of (its epoch is ``last_producer_epoch``), and is PRODUCER_FENCED otherwise; a
  producer id other than the current or -- after a rotation -- the previous one is fenced too.
* KIP-939: ``enable_two_phase`` makes the instance's transactions two-phase: no timeout (they
  wait for whoever holds the decision). ``keep_prepared`` keeps an ONGOING two-phase
  transaction instead of aborting it: the epoch is bumped (the old instance is fenced), the
  partitions stay, the answer names the kept transaction's producer id and epoch, and the new
  instance commits or aborts it with EndTxn at its new epoch.
* ``transaction_timeout_ms`` must be in 1..``transaction_max_timeout_ms``
  (INVALID_TRANSACTION_TIMEOUT) unless the instance is two-phase.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..protocol.errors import ErrorCode
from ..protocol.txn import TxnInitProducerIdRequest, TxnInitProducerIdResponse, fenced_error
from .context import TxnContext
from .ending import Ending
from .metadata import TransactionMetadata
from .persistence import InitWrite, Persistence, txn_error_for_append
from .producer_ids import ProducerIdPool
from .records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TxnValue
from .state import EMPTY, MAX_PRODUCER_EPOCH, ONGOING, check_transition, is_epoch_exhausted

E = ErrorCode

#: the timeout a two-phase transaction is stored with (Kafka's Integer.MAX_VALUE: none)
TWO_PHASE_TIMEOUT_MS = 2**31 - 1


class InitProducer:
    def __init__(self, ctx: TxnContext, persistence: Persistence, producer_ids: ProducerIdPool, ending: Ending) -> None:
        self.ctx = ctx
        self.persistence = persistence
        self.producer_ids = producer_ids
        self.ending = ending

    def init_producer_id(self, req: TxnInitProducerIdRequest, token: Any, now_ms: int) -> None:
        def fail(code: int, message: str | None = None) -> None:
            self.ctx.reply(token, TxnInitProducerIdResponse(error_code=code, error_message=message))

        cfg = self.ctx.config
        if (req.producer_id < 0) != (req.producer_epoch < 0):
            fail(E.INVALID_REQUEST, "producer_id and producer_epoch are both set (KIP-360 recovery) or both -1")
            return
        if req.producer_epoch > MAX_PRODUCER_EPOCH:
            fail(E.INVALID_REQUEST, f"producer epoch {req.producer_epoch} is beyond {MAX_PRODUCER_EPOCH}")
            return
        if req.keep_prepared and not req.enable_two_phase:
            fail(E.INVALID_REQUEST, "keep_prepared needs enable_two_phase (KIP-939)")
            return
        if req.enable_two_phase and not cfg.transaction_two_phase_commit_enable:
            fail(E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "two-phase transactions are disabled (transaction.two.phase.commit.enable)")
            return
        if not req.enable_two_phase and not 0 < req.transaction_timeout_ms <= cfg.transaction_max_timeout_ms:
            fail(
                E.INVALID_TRANSACTION_TIMEOUT,
                f"transaction_timeout_ms {req.transaction_timeout_ms} is not in 1..{cfg.transaction_max_timeout_ms} (transaction.max.timeout.ms)",
            )
            return
        timeout_ms = TWO_PHASE_TIMEOUT_MS if req.enable_two_phase else req.transaction_timeout_ms
        expected = (req.producer_id, req.producer_epoch) if req.producer_id >= 0 else None
        tid = req.transactional_id
        meta = self.ctx.transactions.get(tid)
        if meta is not None and meta.pending is not None:
            fail(E.CONCURRENT_TRANSACTIONS, f"a {meta.pending.value} transition is in progress")
            return
        if meta is None:
            pid = self.producer_ids.take(now_ms)
            if pid is None:
                fail(E.COORDINATOR_LOAD_IN_PROGRESS, "waiting for a block of producer ids from the controller")
                return
            check_transition(None, EMPTY)
            value = TxnValue(pid, 0, EMPTY, timeout_ms, now_ms, two_phase=req.enable_two_phase)
            meta = self.ctx.transactions[tid] = TransactionMetadata(tid)
            self._write(meta, value, token, req)
            return
        v = meta.value
        assert v is not None
        if expected is not None and not (
            expected[0] == v.producer_id or (expected[0] == v.prev_producer_id and is_epoch_exhausted(expected[1]))
        ):
            fail(fenced_error(req), f"producer id {expected[0]} is not {tid!r}'s ({v.producer_id})")
            return
        if v.state.is_prepare:
            fail(E.CONCURRENT_TRANSACTIONS, f"the previous transaction is being completed ({v.state.value})")
            return
        if v.state == ONGOING:
            if req.keep_prepared and v.two_phase:
                self._keep(meta, req, token, timeout_ms, now_ms)
            else:
                self.ending.abort(meta, "fence", token, req, now_ms)
            return
        # EMPTY / COMPLETE_*: the next epoch, or the next producer id once epochs run out
        pid, last = v.producer_id, NO_PRODUCER_EPOCH
        if is_epoch_exhausted(v.producer_epoch) and (expected is None or expected[1] == v.producer_epoch):
            taken = self.producer_ids.take(now_ms)
            if taken is None:
                fail(E.COORDINATOR_LOAD_IN_PROGRESS, "waiting for a block of producer ids from the controller")
                return
            pid, epoch = taken, 0
            last = v.producer_epoch if expected is not None else NO_PRODUCER_EPOCH
        elif expected is None:
            epoch = v.producer_epoch + 1
        elif expected[1] == v.producer_epoch:
            epoch, last = v.producer_epoch + 1, v.producer_epoch
        elif expected[1] == v.last_producer_epoch:
            epoch, last = v.producer_epoch, v.last_producer_epoch  # a retry of a bump it missed the answer of
        else:
            fail(fenced_error(req), f"producer epoch {expected[1]} is neither the current {v.producer_epoch} nor the previous {v.last_producer_epoch}")
            return
        check_transition(v.state, EMPTY)
        value = replace(
            v,
            state=EMPTY,
            producer_id=pid,
            prev_producer_id=v.producer_id,
            next_producer_id=NO_PRODUCER_ID,
            producer_epoch=epoch,
            last_producer_epoch=last,
            timeout_ms=timeout_ms,
            partitions=(),
            start_ms=-1,
            start_epoch=NO_PRODUCER_EPOCH,
            last_update_ms=now_ms,
            two_phase=req.enable_two_phase,
        )
        self._write(meta, value, token, req)

    def _keep(self, meta: TransactionMetadata, req: TxnInitProducerIdRequest, token: Any, timeout_ms: int, now_ms: int) -> None:
        """KIP-939: the ongoing two-phase transaction stays for the new instance to end."""
        v = meta.value
        assert v is not None
        check_transition(v.state, ONGOING)
        value = replace(
            v,
            producer_epoch=min(v.producer_epoch + 1, MAX_PRODUCER_EPOCH),
            last_producer_epoch=NO_PRODUCER_EPOCH,
            prev_producer_id=v.producer_id,
            timeout_ms=timeout_ms,
            last_update_ms=now_ms,
            two_phase=True,
        )
        # The identity the transaction's writes carry, whichever instance kept it before: a
        # retried keep must name the same one, or the new instance would abort what it
        # should commit.
        self._write(meta, value, token, req, ongoing=(v.producer_id, v.start_epoch))

    def _write(self, meta: TransactionMetadata, value: TxnValue, token: Any, req: TxnInitProducerIdRequest, ongoing: tuple[int, int] | None = None) -> None:
        meta.pending = value.state
        self.persistence.persist(InitWrite(meta.transactional_id, value, token, req, ongoing), f"InitProducerId of {meta.transactional_id}")

    def initialized(self, pending: InitWrite, code: int, now_ms: int) -> None:
        """The InitWrite's outcome (already applied to memory when it succeeded)."""
        if code != E.NONE:
            self.ctx.reply(pending.token, TxnInitProducerIdResponse(error_code=txn_error_for_append(code), error_message="the new epoch was not persisted"))
            return
        v = pending.value
        ongoing_pid, ongoing_epoch = pending.ongoing or (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        self.ctx.reply(
            pending.token,
            TxnInitProducerIdResponse(
                producer_id=v.producer_id,
                producer_epoch=v.producer_epoch,
                ongoing_txn_producer_id=ongoing_pid,
                ongoing_txn_producer_epoch=ongoing_epoch,
            ),
        )
