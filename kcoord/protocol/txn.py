"""Transaction messages (issue 34, docs/transactions.md): what transactional producers, partition
leaders, group coordinators and admin clients exchange with a transaction coordinator, and what
the transaction coordinator sends to partition leaders and group coordinators.

Served by transaction coordinator ``coordinator_for(transactional_id, N)``
(:mod:`kcoord.txn.placement`):

* :class:`TxnInitProducerIdRequest` -- InitProducerId *with* a transactional id. Kafka has one
  API (22) for both kinds; kcoord keeps key 22 for the controller's allocator
  (:class:`kcoord.protocol.controller.InitProducerIdRequest`: fresh ids for idempotent
  producers, kept ids for coordinators) and gives the transactional one private key 1022, so
  the two never share a registry slot and a message can never reach the wrong actor unnoticed.
* :class:`AddPartitionsToTxnRequest` (24; ``verify_only`` for a leader's KIP-890 check,
  ``implicit`` for a leader's add on behalf of kcoord's producer, KIP-890 part 2),
  :class:`AddOffsetsToTxnRequest` (25), :class:`EndTxnRequest` (26),
  :class:`DescribeTransactionsRequest` (65), :class:`ListTransactionsRequest` (66).

Sent by the transaction coordinator:

* :class:`WriteTxnMarkerRequest` (27) to the leader of one partition of a transaction: append
  a COMMIT or ABORT control batch (Kafka batches markers per broker; kcoord has one actor per
  partition replica, so one marker per request).
* :class:`TxnOffsetMarkerRequest` (private key 1027, a variant of WriteTxnMarkers) to the group
  coordinator that owns a ``__consumer_offsets`` partition of the transaction: commit or drop
  that producer's pending transactional offsets. kcoord's group coordinators are the only
  writers of their partitions, so the marker is a request to them, not a control batch.

Sent by a transactional producer to a group coordinator: :class:`TxnOffsetCommitRequest` (28).

Conventions are the other protocol modules': API keys are Kafka's where Kafka has the API; every
response starts with ``error_code`` and ``error_message`` and has defaults for every field, so
:func:`error_response` answers any of these requests; nested types are unregistered messages
with private keys ``1000 + 10 x parent key + n``; the registered private keys are
``1000 + the key of the Kafka API they belong to``.

**Fenced vs invalid epoch.** Kafka added PRODUCER_FENCED (90) in 2.7 (KIP-588); older clients
only know INVALID_PRODUCER_EPOCH (47) and Kafka answers them that instead. Client requests
therefore carry ``wire_version``: the Kafka request version a listener translated them from,
or -1 (:data:`LATEST`) for kcoord's own clients. :func:`fenced_error` applies Kafka's
thresholds (InitProducerId v0-3, AddPartitionsToTxn/AddOffsetsToTxn/EndTxn v0-1,
TxnOffsetCommit v0-2 hear INVALID_PRODUCER_EPOCH).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, ClassVar

from .codec import Message, register
from .errors import ErrorCode
from .group import OffsetCommitPartition

#: no producer id / epoch (Kafka's RecordBatch.NO_PRODUCER_ID / NO_PRODUCER_EPOCH)
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
#: the largest producer epoch (Java's Short.MAX_VALUE, what a batch header holds)
MAX_PRODUCER_EPOCH = 32767
#: ``wire_version`` of kcoord's own clients: the newest semantics
LATEST = -1
#: the ``transaction_timeout_ms`` kafka-python and Kafka's producer default to
DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000


# -- InitProducerId with a transactional id (private 1022; Kafka's 22) -----------------------


@register
class TxnInitProducerIdRequest(Message):
    """Get the producer id and a new epoch for ``transactional_id`` (fencing every older
    instance). ``producer_id``/``producer_epoch``: what the caller holds, for KIP-360
    recovery (both -1 for a new instance). ``enable_two_phase`` (KIP-939 enable2Pc): the
    transactions of this instance have no timeout; ``keep_prepared`` (KIP-939
    keepPreparedTxn, needs ``enable_two_phase``): an ongoing two-phase transaction is kept
    for this instance to complete instead of being aborted."""

    API_KEY: ClassVar[int] = 1022
    VERSION: ClassVar[int] = 1
    transactional_id: str
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    enable_two_phase: bool = False
    keep_prepared: bool = False
    wire_version: int = LATEST


@register
class TxnInitProducerIdResponse(Message):
    """``ongoing_txn_producer_id``/``_epoch``: with ``keep_prepared``, the identity the kept
    transaction was written with (-1 when none was kept), which the new instance compares with
    the state it prepared (KIP-939's OngoingTxnProducerId/Epoch)."""

    API_KEY: ClassVar[int] = 1022
    VERSION: ClassVar[int] = 1
    IS_RESPONSE: ClassVar[bool] = True
    error_code: int = 0
    error_message: str | None = None
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    ongoing_txn_producer_id: int = NO_PRODUCER_ID
    ongoing_txn_producer_epoch: int = NO_PRODUCER_EPOCH


# -- AddPartitionsToTxn (24) -----------------------------------------------------------------


@register
class AddPartitionsToTxnRequest(Message):
    """Add partitions to the producer's ongoing transaction (starting one). ``verify_only``
    (KIP-890 part 1, from a partition leader before a transaction's first write lands): only
    answer whether each partition is in the producer's ongoing transaction at that epoch;
    nothing is written. ``implicit`` (KIP-890 part 2, from a partition leader on behalf of a
    producer that sends no AddPartitionsToTxn for its produce partitions): add them as the
    producer's own request would; the leader appends once answered NONE."""

    API_KEY: ClassVar[int] = 24
    VERSION: ClassVar[int] = 1
    transactional_id: str
    producer_id: int
    producer_epoch: int
    topics: dict[str, list[int]] = field(default_factory=dict)
    verify_only: bool = False
    wire_version: int = LATEST
    implicit: bool = False


@register
class AddPartitionsToTxnResponse(Message):
    """``results``: topic -> partition -> error code. A request-level failure sets the
    top-level code and every partition's; partitions refused for another partition's fault
    (an unknown topic) are OPERATION_NOT_ATTEMPTED, as in Kafka. A ``verify_only`` answer says
    NONE for a partition in the transaction and TRANSACTION_ABORTABLE for one that is not."""

    API_KEY: ClassVar[int] = 24
    VERSION: ClassVar[int] = 1
    IS_RESPONSE: ClassVar[bool] = True
    error_code: int = 0
    error_message: str | None = None
    results: dict[str, dict[int, int]] = field(default_factory=dict)


# -- AddOffsetsToTxn (25) --------------------------------------------------------------------


@register
class AddOffsetsToTxnRequest(Message):
    """Add the ``__consumer_offsets`` partition of ``group_id`` to the transaction, before a
    TxnOffsetCommit to that group."""

    API_KEY: ClassVar[int] = 25
    VERSION: ClassVar[int] = 1
    transactional_id: str
    producer_id: int
    producer_epoch: int
    group_id: str
    wire_version: int = LATEST


@register
class AddOffsetsToTxnResponse(Message):
    API_KEY: ClassVar[int] = 25
    VERSION: ClassVar[int] = 1
    IS_RESPONSE: ClassVar[bool] = True
    error_code: int = 0
    error_message: str | None = None


# -- EndTxn (26) -----------------------------------------------------------------------------


@register
class EndTxnRequest(Message):
    """Commit or abort the ongoing transaction. ``bump_epoch`` (KIP-890 part 2, Kafka's EndTxn
    v5+ and transaction version 2; kcoord's own client): the transaction ends at the next
    epoch, which the answer returns and the producer uses from then on, so a delayed EndTxn of
    this transaction can never end a later one (KAFKA-17754)."""

    API_KEY: ClassVar[int] = 26
    VERSION: ClassVar[int] = 1
    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    bump_epoch: bool = False
    wire_version: int = LATEST


@register
class EndTxnResponse(Message):
    """``producer_id``/``producer_epoch``: the identity the producer continues with (with
    ``bump_epoch`` the next epoch, or a new producer id at epoch 0 when the epochs ran out);
    -1 on error."""

    API_KEY: ClassVar[int] = 26
    VERSION: ClassVar[int] = 1
    IS_RESPONSE: ClassVar[bool] = True
    error_code: int = 0
    error_message: str | None = None
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


# -- WriteTxnMarker (27): transaction coordinator -> one partition leader --------------------


@register
class WriteTxnMarkerRequest(Message):
    """Append the COMMIT (``commit``) or ABORT control batch of ``producer_id``'s transaction
    to ``topic``-``partition`` at ``producer_epoch``, stamped with ``coordinator_epoch``; the
    leader answers once the marker is below the high watermark (acks=all). A leader that saw a
    newer ``coordinator_epoch`` for this producer refuses it (TRANSACTION_COORDINATOR_FENCED).
    Internal: Kafka clients never send it (the listener sends one only for an operator's
    abort of a hanging transaction, KIP-664)."""

    API_KEY: ClassVar[int] = 27
    VERSION: ClassVar[int] = 1
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    topic: str
    partition: int
    transactional_id: str = ""  # for logs and metrics only
    current_leader_epoch: int = -1
    timeout_ms: int = 30_000


@register
class WriteTxnMarkerResponse(Message):
    API_KEY: ClassVar[int] = 27
    VERSION: ClassVar[int] = 1
    IS_RESPONSE: ClassVar[bool] = True
    error_code: int = 0
    error_message: str | None = None
    offset: int = -1  # where the control batch landed
    leader_epoch: int = -1


# -- TxnOffsetMarker (private 1027): transaction coordinator -> group coordinator -----------


@register
class TxnOffsetMarkerRequest(Message):
    """The end of ``producer_id``'s transaction for ``__consumer_offsets`` partition
    ``partition`` (= the index of the group coordinator it is sent to): on ``commit`` its
    pending transactional offsets become the groups' committed offsets, otherwise they are
    dropped; answered once that is persisted. A retried marker (nothing pending) succeeds."""

    API_KEY: ClassVar[int] = 1027
    VERSION: ClassVar[int] = 1
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    partition: int
    transactional_id: str = ""  # for logs and metrics only


@register
class TxnOffsetMarkerResponse(Message):
    API_KEY: ClassVar[int] = 1027
    VERSION: ClassVar[int] = 1
    IS_RESPONSE: ClassVar[bool] = True
    error_code: int = 0
    error_message: str | None = None


# -- TxnOffsetCommit (28): transactional producer -> group coordinator ----------------------


@register
class TxnOffsetCommitRequest(Message):
    """Commit ``topics`` for ``group_id`` as part of the producer's transaction (KIP-447):
    checked like an OffsetCommit (``generation_id`` -1 with ``member_id`` "" skips the member
    checks, as in Kafka) and kept pending until the transaction's TxnOffsetMarker."""

    API_KEY: ClassVar[int] = 28
    VERSION: ClassVar[int] = 1
    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None
    topics: dict[str, dict[int, OffsetCommitPartition]] = field(default_factory=dict)
    wire_version: int = LATEST


@register
class TxnOffsetCommitResponse(Message):
    """``topics``: topic -> partition -> error code."""

    API_KEY: ClassVar[int] = 28
    VERSION: ClassVar[int] = 1
    IS_RESPONSE: ClassVar[bool] = True
    error_code: int = 0
    error_message: str | None = None
    topics: dict[str, dict[int, int]] = field(default_factory=dict)


# -- DescribeTransactions (65) ---------------------------------------------------------------


@dataclass
class DescribedTransaction(Message):
    """``state`` is Kafka's name (``Ongoing``, ``PrepareCommit``...); ``start_time_ms`` -1
    when no transaction began since the last InitProducerId."""

    API_KEY: ClassVar[int] = 1650
    transactional_id: str
    error_code: int = 0
    state: str = ""
    timeout_ms: int = 0
    start_time_ms: int = -1
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    topics: dict[str, list[int]] = field(default_factory=dict)


@register
class DescribeTransactionsRequest(Message):
    API_KEY: ClassVar[int] = 65
    VERSION: ClassVar[int] = 1
    transactional_ids: list[str]


@register
class DescribeTransactionsResponse(Message):
    """One entry per requested id, in request order; an id this coordinator does not own is
    NOT_COORDINATOR, one it does not know TRANSACTIONAL_ID_NOT_FOUND."""

    API_KEY: ClassVar[int] = 65
    VERSION: ClassVar[int] = 1
    IS_RESPONSE: ClassVar[bool] = True
    error_code: int = 0
    error_message: str | None = None
    transactions: list[DescribedTransaction] = field(default_factory=list)


# -- ListTransactions (66) -------------------------------------------------------------------


@dataclass
class ListedTransaction(Message):
    API_KEY: ClassVar[int] = 1660
    transactional_id: str
    producer_id: int = NO_PRODUCER_ID
    state: str = ""


@register
class ListTransactionsRequest(Message):
    """Every transactional id of this coordinator, filtered: ``states_filter`` by state name
    (Kafka's names, exact), ``producer_ids_filter`` by producer id, ``duration_filter_ms`` to
    transactions running longer than that (-1: no filter; KIP-994). None or empty lists do not
    filter. An admin client asks every coordinator and merges the answers."""

    API_KEY: ClassVar[int] = 66
    VERSION: ClassVar[int] = 1
    states_filter: list[str] | None = None
    producer_ids_filter: list[int] | None = None
    duration_filter_ms: int = -1


@register
class ListTransactionsResponse(Message):
    """``unknown_state_filters``: names in ``states_filter`` that are no state (Kafka's)."""

    API_KEY: ClassVar[int] = 66
    VERSION: ClassVar[int] = 1
    IS_RESPONSE: ClassVar[bool] = True
    error_code: int = 0
    error_message: str | None = None
    unknown_state_filters: list[str] = field(default_factory=list)
    transactions: list[ListedTransaction] = field(default_factory=list)


# -- error answers and the fenced-error rule -------------------------------------------------

#: requests a transaction coordinator serves
TXN_COORDINATOR_REQUESTS: tuple[type[Message], ...] = (
    TxnInitProducerIdRequest,
    AddPartitionsToTxnRequest,
    AddOffsetsToTxnRequest,
    EndTxnRequest,
    DescribeTransactionsRequest,
    ListTransactionsRequest,
)

RESPONSE_FOR: dict[type[Message], type[Message]] = {
    TxnInitProducerIdRequest: TxnInitProducerIdResponse,
    AddPartitionsToTxnRequest: AddPartitionsToTxnResponse,
    AddOffsetsToTxnRequest: AddOffsetsToTxnResponse,
    EndTxnRequest: EndTxnResponse,
    WriteTxnMarkerRequest: WriteTxnMarkerResponse,
    TxnOffsetMarkerRequest: TxnOffsetMarkerResponse,
    TxnOffsetCommitRequest: TxnOffsetCommitResponse,
    DescribeTransactionsRequest: DescribeTransactionsResponse,
    ListTransactionsRequest: ListTransactionsResponse,
}

# Below these Kafka request versions a client knows INVALID_PRODUCER_EPOCH, not
# PRODUCER_FENCED (Kafka's KafkaApis keeps the same table).
_FENCED_SINCE: dict[type[Message], int] = {
    TxnInitProducerIdRequest: 4,
    AddPartitionsToTxnRequest: 2,
    AddOffsetsToTxnRequest: 2,
    EndTxnRequest: 2,
    TxnOffsetCommitRequest: 3,
}


def fenced_error(request: Message) -> int:
    """The code that tells the sender of ``request`` it is fenced: PRODUCER_FENCED, or
    INVALID_PRODUCER_EPOCH for a Kafka client too old to know it."""
    since = _FENCED_SINCE.get(type(request))
    version = getattr(request, "wire_version", LATEST)
    if since is not None and 0 <= version < since:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return ErrorCode.PRODUCER_FENCED


def _item_errors(request: Message, code: int) -> dict[str, object]:
    """Per-item fields of a failure answer, so a client that only reads items sees it too."""
    if isinstance(request, AddPartitionsToTxnRequest):
        return {"results": {t: {p: code for p in parts} for t, parts in request.topics.items()}}
    if isinstance(request, TxnOffsetCommitRequest):
        return {"topics": {t: {p: code for p in parts} for t, parts in request.topics.items()}}
    if isinstance(request, DescribeTransactionsRequest):
        return {"transactions": [DescribedTransaction(t, error_code=code) for t in request.transactional_ids]}
    return {}


def error_response(request: Message, code: int, message: str | None = None) -> Message:
    """The failure answer to ``request``: what a shell replies when it cannot hand the request
    to its core (loading, not the coordinator, shutting down)."""
    try:
        response_cls: Callable[..., Message] = RESPONSE_FOR[type(request)]
    except KeyError:
        raise TypeError(f"not a transaction request: {type(request).__name__}") from None
    return response_cls(error_code=int(code), error_message=message, **_item_errors(request, int(code)))


def is_txn_coordinator_request(message: Message) -> bool:
    return type(message) in TXN_COORDINATOR_REQUESTS
