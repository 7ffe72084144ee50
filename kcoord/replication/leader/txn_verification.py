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


@dataclass
class PendingVerification:
    request: ProduceRequest
    header: record.BatchHeader
    token: Any
    guard: VerificationGuard


def verification_request(st: ReplicaContext, req: ProduceRequest, h: record.BatchHeader) -> AddPartitionsToTxnRequest:
    return AddPartitionsToTxnRequest(
        transactional_id=req.transactional_id or "",
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        topics={st.topic: [st.partition]},
        verify_only=True,
    )


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
    if mapped == E.INVALID_TXN_STATE:
        return mapped, f"{who}: {st.name} is not in its ongoing transaction ({name}; AddPartitionsToTxn comes first)"
    return mapped, f"{who}: unable to verify {st.name} is in its transaction ({name})"


def start(st: ReplicaContext, req: ProduceRequest, h: record.BatchHeader, token: Any, pending: dict[int, PendingVerification]) -> None:
    """Take the producer's guard and ask its coordinator (the answer comes to the leader's
    ``on_txn_verified``)."""
    guard = st.log.producer_state.start_verification(h.producer_id, h.producer_epoch)
    st.last_verify_id += 1
    pending[st.last_verify_id] = PendingVerification(req, h, token, guard)
    st.metrics["txn_verifications"] = st.metrics.get("txn_verifications", 0) + 1
    st.emit(VerifyTxn(st.last_verify_id, verification_request(st, req, h)))
