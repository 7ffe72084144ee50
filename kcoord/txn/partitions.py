"""AddPartitionsToTxn and AddOffsetsToTxn: what a transaction spans; and the partition leaders'
KIP-890 verification of it.

Checks, in Kafka 4.0's order: a transition in flight or a transaction being completed answers
CONCURRENT_TRANSACTIONS first (the producer may already hold the identity the completing
transaction moves it to, KAFKA-18660); then an unknown id or another producer id is
INVALID_PRODUCER_ID_MAPPING, another epoch PRODUCER_FENCED (INVALID_PRODUCER_EPOCH for old
clients). Partitions must exist (UNKNOWN_TOPIC_OR_PARTITION, the others of the request
OPERATION_NOT_ATTEMPTED); internal topics are refused (INVALID_TOPIC_EXCEPTION: offsets go
through AddOffsetsToTxn). Partitions all already in the ONGOING transaction are answered at
once; otherwise ONGOING with the union is appended first (starting the transaction, and its
timeout, when it was EMPTY or COMPLETE_*).

``verify_only`` (a leader, before a transaction's first write to its partition lands) writes
nothing: NONE for each partition in the producer's ongoing transaction at that epoch,
TRANSACTION_ABORTABLE for one that is not, CONCURRENT_TRANSACTIONS while the transaction is
being completed. It reads the acknowledged state only: a partition is in it once its
AddPartitionsToTxn was answered.

``implicit`` (KIP-890 part 2: a leader adding its partition on behalf of kcoord's producer,
which sends no AddPartitionsToTxn for produce partitions) is a producer's add in every rule:
the same checks, the same hold while the id is busy, the same write; its NONE lets the
leader append. It cannot let a late write in: kcoord's producer bumps its epoch at every
EndTxn, so a batch of an ended transaction carries an epoch that is no longer current
(PRODUCER_FENCED), and the leader's verification guard still covers a marker landing
between the answer and the append.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..protocol import names
from ..protocol.codec import Message
from ..protocol.errors import ErrorCode, error_name
from ..protocol.txn import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    fenced_error,
)
from .context import TxnContext
from .metadata import TransactionMetadata
from .persistence import AddWrite, Persistence, txn_error_for_append
from .records import TopicPartition, TxnValue
from .state import ONGOING, check_transition
from .timers import TimerKind

E = ErrorCode

#: requests of one transactional id held at once (a client has one or two in flight); more
#: are answered CONCURRENT_TRANSACTIONS at once
MAX_HELD_PER_ID = 8


@dataclass
class Held:
    """A request waiting for its id to settle, answered by ``deadline_ms`` at the latest."""

    request: AddPartitionsToTxnRequest | AddOffsetsToTxnRequest
    token: Any
    deadline_ms: int


def _ongoing(v: TxnValue, tps: list[TopicPartition], now_ms: int) -> TxnValue:
    """``v`` ONGOING with ``tps`` added (a new transaction when it was not ONGOING)."""
    check_transition(v.state, ONGOING)
    value = replace(v, state=ONGOING, partitions=tuple(sorted(set(v.partitions) | set(tps))), last_update_ms=now_ms, prev_producer_id=v.producer_id)
    if v.state != ONGOING:  # a new transaction begins
        value = replace(value, start_ms=now_ms, start_epoch=v.producer_epoch)
    return value


class TxnPartitions:
    def __init__(self, ctx: TxnContext, persistence: Persistence) -> None:
        self.ctx = ctx
        self.persistence = persistence
        self._held: dict[str, list[Held]] = {}  # transactional id -> its held requests, oldest first

    # -- AddPartitionsToTxn --------------------------------------------------------------

    def add_partitions(self, req: AddPartitionsToTxnRequest, token: Any, now_ms: int, deadline_ms: int | None = None) -> None:
        """``deadline_ms``: a held request served again keeps its first deadline."""
        wanted = sorted({(t, p) for t, parts in req.topics.items() for p in parts})

        def answer(code: int, message: str | None = None, per: dict[TopicPartition, int] | None = None) -> None:
            results: dict[str, dict[int, int]] = {}
            for t, p in wanted:
                results.setdefault(t, {})[p] = code if per is None else per[(t, p)]
            self.ctx.reply(token, AddPartitionsToTxnResponse(error_code=code, error_message=message, results=results))

        if not wanted:
            answer(E.INVALID_REQUEST, "no partitions to add")
            return
        if req.implicit and req.verify_only:
            answer(E.INVALID_REQUEST, "implicit (a leader's add) and verify_only exclude each other")
            return
        if req.implicit and deadline_ms is None:
            self.ctx.stats.implicit_adds += 1
        if req.verify_only:
            self._verify(req, wanted, answer)
            return
        meta, code, message = self._check(req)
        if code == E.CONCURRENT_TRANSACTIONS and self._hold(req, token, now_ms, deadline_ms):
            return
        if code != E.NONE:
            answer(code, message)
            return
        assert meta is not None and meta.value is not None
        per: dict[TopicPartition, int] = {}
        for t, p in wanted:
            exists = self.ctx.partition_exists(t, p)
            if names.is_internal_topic(t):
                per[(t, p)] = E.INVALID_TOPIC_EXCEPTION
            elif exists is None:
                self.ctx.refresh_metadata(now_ms)
                answer(E.COORDINATOR_LOAD_IN_PROGRESS, "the cluster's topics are not known yet")
                return
            elif not exists:
                per[(t, p)] = E.UNKNOWN_TOPIC_OR_PARTITION
        if per:
            self.ctx.refresh_metadata(now_ms)  # a topic created a moment ago: the client retries
            first = min(per.values())
            for tp in wanted:
                per.setdefault(tp, E.OPERATION_NOT_ATTEMPTED)
            bad = ", ".join(f"{t}-{p} ({error_name(c)})" for (t, p), c in sorted(per.items()) if c != E.OPERATION_NOT_ATTEMPTED)
            answer(first, f"nothing added: {bad}", per)
            return
        self._add(meta, wanted, token, req, now_ms, lambda: answer(E.NONE))

    def _verify(self, req: AddPartitionsToTxnRequest, wanted: list[TopicPartition], answer: Any) -> None:
        meta = self.ctx.transactions.get(req.transactional_id)
        v = None if meta is None else meta.value
        if v is None or v.producer_id != req.producer_id:
            answer(E.INVALID_PRODUCER_ID_MAPPING, "the producer id is not the transactional id's")
        elif v.producer_epoch != req.producer_epoch:
            answer(fenced_error(req), f"producer epoch {req.producer_epoch} is not the current {v.producer_epoch}")
        elif v.state.is_prepare:
            answer(E.CONCURRENT_TRANSACTIONS, f"the transaction is being completed ({v.state.value})")
        else:
            inside = set(v.partitions) if v.state == ONGOING else set()
            per = {tp: (E.NONE if tp in inside else E.TRANSACTION_ABORTABLE) for tp in wanted}
            answer(max(per.values()), None if max(per.values()) == E.NONE else "not in the producer's ongoing transaction", per)

    # -- AddOffsetsToTxn -----------------------------------------------------------------

    def add_offsets(self, req: AddOffsetsToTxnRequest, token: Any, now_ms: int, deadline_ms: int | None = None) -> None:
        def answer(code: int, message: str | None = None) -> None:
            self.ctx.reply(token, AddOffsetsToTxnResponse(error_code=code, error_message=message))

        if not req.group_id:
            answer(E.INVALID_GROUP_ID, "group id is empty")
            return
        meta, code, message = self._check(req)
        if code == E.CONCURRENT_TRANSACTIONS and self._hold(req, token, now_ms, deadline_ms):
            return
        if code != E.NONE:
            answer(code, message)
            return
        assert meta is not None
        self._add(meta, [self.ctx.offsets_partition(req.group_id)], token, req, now_ms, lambda: answer(E.NONE))

    # -- holding while the id is busy ----------------------------------------------------

    def _hold(self, req: AddPartitionsToTxnRequest | AddOffsetsToTxnRequest, token: Any, now_ms: int, deadline_ms: int | None) -> bool:
        """Hold ``req`` until its id settles (see the module doc); False: answer it now."""
        hold_ms = self.ctx.config.concurrent_transactions_hold_ms
        if deadline_ms is None:
            deadline_ms = now_ms + hold_ms
        held = self._held.setdefault(req.transactional_id, [])
        if hold_ms <= 0 or deadline_ms <= now_ms or len(held) >= MAX_HELD_PER_ID:
            if not held:
                del self._held[req.transactional_id]
            return False
        held.append(Held(req, token, deadline_ms))
        self.ctx.stats.requests_held += 1
        self._arm(req.transactional_id)
        return True

    def _arm(self, transactional_id: str) -> None:
        held = self._held.get(transactional_id)
        key = (TimerKind.HOLD, transactional_id)
        if held:
            self.ctx.timers.set(key, min(h.deadline_ms for h in held))
        else:
            self._held.pop(transactional_id, None)
            self.ctx.timers.cancel(key)

    def held(self, transactional_id: str) -> list[Held]:
        """The requests of ``transactional_id`` held now (read them; never mutate them)."""
        return list(self._held.get(transactional_id, ()))

    def held_ids(self) -> list[str]:
        return sorted(self._held)

    def release(self, transactional_id: str, now_ms: int) -> None:
        """The id's write settled: if it is no longer busy, serve its held requests again
        in arrival order (one that finds it busy again, e.g. behind the first one's append,
        is held again with its first deadline)."""
        if transactional_id not in self._held:
            return
        meta = self.ctx.transactions.get(transactional_id)
        if meta is not None and (meta.pending is not None or (meta.value is not None and meta.value.state.is_prepare)):
            return
        held = self._held.pop(transactional_id)
        self.ctx.timers.cancel((TimerKind.HOLD, transactional_id))
        for h in held:
            if isinstance(h.request, AddOffsetsToTxnRequest):
                self.add_offsets(h.request, h.token, now_ms, h.deadline_ms)
            else:
                self.add_partitions(h.request, h.token, now_ms, h.deadline_ms)

    def on_hold_expired(self, transactional_id: str, now_ms: int) -> None:
        """Answer CONCURRENT_TRANSACTIONS to the held requests whose hold ran out."""
        held = self._held.get(transactional_id, [])
        due = [h for h in held if h.deadline_ms <= now_ms]
        self._held[transactional_id] = [h for h in held if h.deadline_ms > now_ms]
        self._arm(transactional_id)
        for h in due:
            self.ctx.stats.holds_expired += 1
            self._answer_busy(h, E.CONCURRENT_TRANSACTIONS, "the transactional id stayed busy (a transaction being completed) for the whole hold")

    def abandon(self, error_code: int) -> None:
        """The coordinator closes: answer every held request ``error_code``."""
        held, self._held = self._held, {}
        for tid, hs in held.items():
            self.ctx.timers.cancel((TimerKind.HOLD, tid))
            for h in hs:
                self._answer_busy(h, error_code, "coordinator closed")

    def _answer_busy(self, h: Held, code: int, message: str) -> None:
        req = h.request
        if isinstance(req, AddOffsetsToTxnRequest):
            self.ctx.reply(h.token, AddOffsetsToTxnResponse(error_code=code, error_message=message))
        else:
            results = {t: {p: code for p in parts} for t, parts in req.topics.items()}
            self.ctx.reply(h.token, AddPartitionsToTxnResponse(error_code=code, error_message=message, results=results))

    # -- shared --------------------------------------------------------------------------

    def _check(self, req: Any) -> tuple[TransactionMetadata | None, int, str | None]:
        meta = self.ctx.transactions.get(req.transactional_id)
        if meta is not None and meta.pending is not None:
            return meta, E.CONCURRENT_TRANSACTIONS, f"a {meta.pending.value} transition is in progress"
        v = None if meta is None else meta.value
        if v is not None and v.state.is_prepare:
            return meta, E.CONCURRENT_TRANSACTIONS, f"the previous transaction is being completed ({v.state.value})"
        if v is None:
            return meta, E.INVALID_PRODUCER_ID_MAPPING, f"no producer id for transactional id {req.transactional_id!r} (InitProducerId first)"
        if v.producer_id != req.producer_id:
            return meta, E.INVALID_PRODUCER_ID_MAPPING, f"producer id {req.producer_id} is not the transactional id's ({v.producer_id})"
        if v.producer_epoch != req.producer_epoch:
            return meta, fenced_error(req), f"producer epoch {req.producer_epoch} is not the current {v.producer_epoch}"
        return meta, E.NONE, None

    def _add(self, meta: TransactionMetadata, tps: list[TopicPartition], token: Any, req: Message, now_ms: int, answered: Any) -> None:
        v = meta.value
        assert v is not None
        if v.state == ONGOING and set(tps) <= set(v.partitions):
            answered()  # already in: nothing to write (Kafka's shortcut)
            return
        meta.pending = ONGOING
        self.persistence.persist(AddWrite(meta.transactional_id, _ongoing(v, tps, now_ms), token, req), f"AddPartitionsToTxn of {meta.transactional_id}")

    def next_add(self, transactional_id: str, complete: TxnValue, now_ms: int) -> AddWrite | None:
        """The id's oldest held add, taken off the hold, as the write that serves it once
        ``complete`` (the COMPLETE_* record about to be appended) is the id's state, to go
        in the same append; None when there is none or it would not be answered NONE then
        (another identity, a partition unknown or internal: served the usual way after)."""
        held = self._held.get(transactional_id)
        if not held:
            return None
        h = held[0]
        req = h.request
        if (req.producer_id, req.producer_epoch) != (complete.producer_id, complete.producer_epoch):
            return None
        if isinstance(req, AddOffsetsToTxnRequest):
            tps = [self.ctx.offsets_partition(req.group_id)]
        else:
            tps = sorted({(t, p) for t, parts in req.topics.items() for p in parts})
            if not tps or any(names.is_internal_topic(t) or self.ctx.partition_exists(t, p) is not True for t, p in tps):
                return None
        held.pop(0)
        self._arm(transactional_id)
        self.ctx.stats.adds_with_completion += 1
        return AddWrite(transactional_id, _ongoing(complete, tps, now_ms), h.token, req)

    def added(self, pending: AddWrite, code: int, now_ms: int) -> None:
        """The AddWrite's outcome (already applied to memory when it succeeded)."""
        mapped = E.NONE if code == E.NONE else txn_error_for_append(code)
        message = None if code == E.NONE else f"the partitions were not persisted ({error_name(code)})"
        req = pending.request
        if isinstance(req, AddOffsetsToTxnRequest):
            self.ctx.reply(pending.token, AddOffsetsToTxnResponse(error_code=mapped, error_message=message))
        else:
            assert isinstance(req, AddPartitionsToTxnRequest)
            results = {t: {p: mapped for p in parts} for t, parts in req.topics.items()}
            self.ctx.reply(pending.token, AddPartitionsToTxnResponse(error_code=mapped, error_message=message, results=results))
