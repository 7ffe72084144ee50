"""KIP-890 part 1 on the partition leader: a transactional batch that would *start* a
transaction here is appended only once the transaction coordinator confirmed that this
partition is in its producer's ongoing transaction at that epoch, and only if no marker (nor
another epoch) of that producer landed since the leader began asking (docs/transactions.md
section 1, "Verification").

The leader takes the producer's verification guard from the producer state
(:meth:`~kcoord.log.producer_state.ProducerStateManager.start_verification`) *before* it asks,
emits :class:`~kcoord.replication.actions.VerifyTxn` (the driver calls the coordinator's
``add_partitions_to_txn`` with ``verify_only``), and appends with that guard when the answer
is yes; the log checks the guard in the same step as the append. A marker in between drops
the guard, so the append is refused INVALID_TXN_STATE: a late write of an ended transaction
can never open a transaction that no marker will end (a hanging LSO).

KIP-890 part 2: a produce from kcoord's producer with ``implicit_add`` (it sends no
AddPartitionsToTxn for produce partitions) asks the coordinator to *add* the partition
(``implicit``) instead of verifying it. The guard rule is unchanged, and it refuses the
common case: the previous transaction's marker lands here after the guard was taken (the
coordinator holds the add until that transaction completes, so every marker of it is written
before the answer). Such a batch is asked about again with a fresh guard, now a plain
``verify_only`` (the partition is added), up to MAX_ASKS times; then the produce hears
NOT_ENOUGH_REPLICAS and the client retries. Safe because kcoord's producer bumps its epoch at
every EndTxn: an add or a verification at the epoch of an ended transaction is fenced.

The coordinator's answers become Produce's errors as Kafka's ReplicaManager maps them:
not in the transaction INVALID_TXN_STATE, a busy, loading or moving coordinator (or none
reached) NOT_ENOUGH_REPLICAS (retriable for every Produce version, and no metadata refresh),
a fenced producer INVALID_PRODUCER_EPOCH.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ... import record
from ...log.producer_state import VerificationGuard
from ...protocol.errors import ErrorCode
from ...protocol.replication import ProduceRequest
from ...protocol.txn import AddPartitionsToTxnRequest, AddPartitionsToTxnResponse
from ..actions import VerifyTxn
from ..context import ReplicaContext

E = ErrorCode

#: the coordinator's answer -> Produce's error (Kafka's ReplicaManager and
#: AddPartitionsToTxnManager); codes not listed pass through
PRODUCE_ERROR_FOR_VERIFY: dict[int, int] = {
    E.TRANSACTION_ABORTABLE: E.INVALID_TXN_STATE,
    E.INVALID_TXN_STATE: E.INVALID_TXN_STATE,
    E.CONCURRENT_TRANSACTIONS: E.NOT_ENOUGH_REPLICAS,
    E.COORDINATOR_LOAD_IN_PROGRESS: E.NOT_ENOUGH_REPLICAS,
    E.COORDINATOR_NOT_AVAILABLE: E.NOT_ENOUGH_REPLICAS,
    E.NOT_COORDINATOR: E.NOT_ENOUGH_REPLICAS,
    E.REQUEST_TIMED_OUT: E.NOT_ENOUGH_REPLICAS,
    E.PRODUCER_FENCED: E.INVALID_PRODUCER_EPOCH,
}


#: asks per implicit-add batch (the add, then verifications after a marker dropped the guard)
MAX_ASKS = 3


@dataclass
class PendingVerification:
    request: ProduceRequest
    header: record.BatchHeader
    token: Any
    guard: VerificationGuard
    attempt: int = 1


def verification_request(st: ReplicaContext, req: ProduceRequest, h: record.BatchHeader, attempt: int = 1) -> AddPartitionsToTxnRequest:
    """The leader's call: an add for an ``implicit_add`` produce's first attempt (KIP-890 part
    2), else a verification."""
    implicit = bool(req.implicit_add) and attempt == 1
    return AddPartitionsToTxnRequest(
        transactional_id=req.transactional_id or "",
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        topics={st.topic: [st.partition]},
        verify_only=not implicit,
        implicit=implicit,
    )


def guard_dropped(st: ReplicaContext, pending: PendingVerification) -> bool:
    """The coordinator said yes to an ``implicit_add`` batch, but its guard is no longer the
    producer's current one (a marker, most often the previous transaction's, landed
    meanwhile): the batch is asked about again with a fresh guard (below MAX_ASKS), or
    answered NOT_ENOUGH_REPLICAS. Other batches append and the log refuses them."""
    if not pending.request.implicit_add:
        return False
    return st.log.producer_state.verification_guard(pending.header.producer_id) is not pending.guard


def verification_error(st: ReplicaContext, pending: PendingVerification, response: AddPartitionsToTxnResponse | None) -> tuple[int, str] | None:
    """Produce's ``(error, message)`` for the coordinator's ``response`` (None: it could not
    be reached), or None when it confirmed the partition is in the transaction."""
    h = pending.header
    who = f"transactional id {pending.request.transactional_id!r} (producer {h.producer_id}, epoch {h.producer_epoch})"
    if response is None:
        return E.NOT_ENOUGH_REPLICAS, f"{who}: could not verify {st.name} with its transaction coordinator (no answer); retry"
    code = response.error_code or response.results.get(st.topic, {}).get(st.partition, E.UNKNOWN_SERVER_ERROR)
    if code == E.NONE:
        return None
    mapped = PRODUCE_ERROR_FOR_VERIFY.get(code, code)
    try:
        name = E(code).name
    except ValueError:
        name = str(code)
    verb = "add" if pending.request.implicit_add and pending.attempt == 1 else "verify"
    if mapped == E.INVALID_TXN_STATE:
        return mapped, f"{who}: {st.name} is not in its ongoing transaction ({name}; AddPartitionsToTxn comes first)"
    return mapped, f"{who}: unable to {verb} {st.name} in its transaction ({name})"


def start(st: ReplicaContext, req: ProduceRequest, h: record.BatchHeader, token: Any, pending: dict[int, PendingVerification], attempt: int = 1) -> None:
    """Take the producer's guard and ask its coordinator (the answer comes to the leader's
    ``on_txn_verified``)."""
    guard = st.log.producer_state.start_verification(h.producer_id, h.producer_epoch)
    st.last_verify_id += 1
    pending[st.last_verify_id] = PendingVerification(req, h, token, guard, attempt)
    key = "txn_implicit_adds" if req.implicit_add and attempt == 1 else "txn_verifications"
    st.metrics[key] = st.metrics.get(key, 0) + 1
    st.emit(VerifyTxn(st.last_verify_id, verification_request(st, req, h, attempt)))
