"""A transactional producer's state machine (kafka-python's and Kafka's TransactionManager),
pure: no Ray, no threads of its own, no clock. The producer asks it what to send and tells it
what was answered; it decides the state, which calls are allowed now, and what an error means.

States (kafka-python's names)::

    UNINITIALIZED --init--> INITIALIZING --ok--> READY --begin--> IN_TRANSACTION
    IN_TRANSACTION --commit--> COMMITTING_TRANSACTION --ok--> READY
    IN_TRANSACTION | ABORTABLE_ERROR | PREPARED_TRANSACTION --abort--> ABORTING_TRANSACTION --ok--> READY
    IN_TRANSACTION --prepare (two-phase)--> PREPARED_TRANSACTION --commit--> COMMITTING_TRANSACTION
    INITIALIZING --ok, a prepared transaction kept (KIP-939)--> PREPARED_TRANSACTION
    any --fatal error--> FATAL_ERROR (every call raises that error from then on)

Errors are sorted as Kafka's client sorts them (:func:`classify`): *retriable* answers are
retried with a backoff until the call's deadline (CONCURRENT_TRANSACTIONS, the coordinator
loading, moving or unavailable, a timeout); *fatal* ones (fenced, not authorized, a state
the coordinator refuses) end the producer; the rest are *abortable*: the transaction can
only be aborted (ABORTABLE_ERROR allows nothing but ``abort_transaction()``). A batch that
fails inside a transaction makes it abortable, or fatal if the producer was fenced.

Every transaction ends with EndTxn ``bump_epoch=True`` (KIP-890 part 2): the coordinator
answers the identity to continue with (the next epoch, or a new producer id once the epochs
ran out), so a delayed EndTxn of one transaction can never end the next (KAFKA-17754). With
``implicit_adds`` (``kcoord.Producer``'s, KIP-890 part 2) no AddPartitionsToTxn is sent for
produce partitions: each batch's leader adds its partition (a late batch's epoch is fenced).

KIP-360 recovery, as Kafka 4.0's client with transaction version 2: the client never bumps
its own epoch. After an abortable error that lost sequence state (a batch that failed with
OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID or a timeout) the abort's EndTxn bumps it
at the coordinator, and every partition restarts at sequence 0 under the new identity.
INVALID_PRODUCER_ID_MAPPING (the coordinator does not know this producer id for the
transactional id, e.g. the id expired) is abortable too, but the coordinator would refuse an
EndTxn: the abort sends InitProducerId with the current producer id and epoch instead
(:meth:`TransactionManager.recovery_request`), and continues with the identity it answers.
"""

from __future__ import annotations

import enum
import threading
from typing import NamedTuple

from ...protocol.errors import ErrorCode, KafkaError, error_name
from ...protocol.txn import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    TxnInitProducerIdRequest,
)
from ..errors import IllegalStateError
from ..types import TopicPartition


class TransactionState(enum.Enum):
    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    PREPARED_TRANSACTION = "PREPARED_TRANSACTION"
    COMMITTING_TRANSACTION = "COMMITTING_TRANSACTION"
    ABORTING_TRANSACTION = "ABORTING_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


S = TransactionState

# Kafka's valid transitions (TransactionManager.State.isTransitionValid), plus KIP-939's
# prepared state. FATAL_ERROR is reachable from anywhere and left by nothing.
_VALID_FROM: dict[TransactionState, frozenset[TransactionState]] = {
    S.INITIALIZING: frozenset({S.UNINITIALIZED}),
    S.READY: frozenset({S.INITIALIZING, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION}),
    S.IN_TRANSACTION: frozenset({S.READY}),
    S.PREPARED_TRANSACTION: frozenset({S.IN_TRANSACTION, S.INITIALIZING}),
    S.COMMITTING_TRANSACTION: frozenset({S.IN_TRANSACTION, S.PREPARED_TRANSACTION}),
    S.ABORTING_TRANSACTION: frozenset({S.IN_TRANSACTION, S.PREPARED_TRANSACTION, S.ABORTABLE_ERROR}),
    S.ABORTABLE_ERROR: frozenset({S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.ABORTABLE_ERROR}),
}


class PreparedTxnState(NamedTuple):
    """A prepared transaction's identity (KIP-939's PreparedTxnState): the producer id and
    epoch its records carry. ``prepare_transaction()`` returns it; whoever holds the decision
    passes it to ``complete_transaction()`` of the instance that kept the transaction."""

    producer_id: int
    epoch: int

    def __str__(self) -> str:  # Kafka's serialised form
        return f"{self.producer_id}:{self.epoch}"


class Verdict(enum.Enum):
    DONE = "done"
    RETRY = "retry"


# Answers that make the transaction abortable and its abort re-initialise by InitProducerId
# with the current identity, skipping EndTxn (Kafka's abortableErrorIfPossible +
# beginCompletingTransaction's InvalidPidMappingException branch).
REINIT = frozenset({ErrorCode.INVALID_PRODUCER_ID_MAPPING})


# -- what an error code means to a transactional producer ------------------------------------
RETRIABLE = frozenset(
    {
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,  # AddPartitionsToTxn: metadata not yet seen there
    }
)
# Kafka's transactional requests end the producer on these (INVALID_PRODUCER_EPOCH is what
# a fenced producer hears from an older protocol version: Kafka raises ProducerFenced).
FATAL = frozenset(
    {
        ErrorCode.PRODUCER_FENCED,
        ErrorCode.INVALID_PRODUCER_EPOCH,
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        ErrorCode.INVALID_TXN_STATE,
        ErrorCode.INVALID_TRANSACTION_TIMEOUT,
        ErrorCode.UNSUPPORTED_VERSION,
        ErrorCode.INVALID_REQUEST,
    }
)
ABORTABLE = frozenset(
    {
        ErrorCode.TRANSACTION_ABORTABLE,
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        ErrorCode.GROUP_AUTHORIZATION_FAILED,
        ErrorCode.INVALID_TOPIC_EXCEPTION,
        ErrorCode.INVALID_GROUP_ID,
        # TxnOffsetCommit from a consumer whose generation is over (KIP-447 fencing)
        ErrorCode.UNKNOWN_MEMBER_ID,
        ErrorCode.ILLEGAL_GENERATION,
        ErrorCode.FENCED_INSTANCE_ID,
        ErrorCode.OPERATION_NOT_ATTEMPTED,
        # KIP-360: the producer id is unknown there; the abort re-initialises (REINIT)
        ErrorCode.INVALID_PRODUCER_ID_MAPPING,
        ErrorCode.UNKNOWN_PRODUCER_ID,
    }
)
# A produce batch that fails ends the producer only for these (Kafka 4.0's handleFailedBatch);
# anything else aborts the transaction, whose EndTxn then tells a fenced producer so.
BATCH_FATAL = frozenset(
    {
        ErrorCode.PRODUCER_FENCED,
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        ErrorCode.UNSUPPORTED_VERSION,
    }
)

RETRIABLE_KIND, ABORTABLE_KIND, FATAL_KIND = "retriable", "abortable", "fatal"


def classify(code: int) -> str:
    """``retriable``, ``abortable`` or ``fatal`` for an answer of a transactional request;
    an unexpected code is fatal, as in Kafka."""
    if code in RETRIABLE:
        return RETRIABLE_KIND
    if code in ABORTABLE:
        return ABORTABLE_KIND
    return FATAL_KIND


def _error(code: int, message: str | None, what: str) -> KafkaError:
    if code == ErrorCode.INVALID_PRODUCER_EPOCH:  # Kafka: an old-version fence is a fence
        code = ErrorCode.PRODUCER_FENCED
    return KafkaError(int(code), f"{what}: {message or error_name(code)}")


class TransactionManager:
    """The state of one transactional producer (see the module doc). Thread-safe: ``send()``
    runs in the callers' threads, AddPartitionsToTxn in the sender's, the rest in the
    caller of the transactional method; one lock (``cond``, over an RLock) guards everything
    but :attr:`appends_open`, which ``send()`` reads without it (see ``__init__``)."""

    def __init__(self, transactional_id: str, transaction_timeout_ms: int, *, two_phase: bool = False, implicit_adds: bool = False) -> None:
        if not isinstance(transactional_id, str) or not transactional_id:
            raise ValueError(f"transactional_id must be a non-empty str, got {transactional_id!r}")
        if type(transaction_timeout_ms) is not int or transaction_timeout_ms < 1:
            raise ValueError(f"transaction_timeout_ms must be an int >= 1, got {transaction_timeout_ms!r}")
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.two_phase = bool(two_phase)
        self.implicit_adds = bool(implicit_adds)
        self._lock = threading.RLock()  # reentrant: on_end() completes under it
        self.cond = threading.Condition(self._lock)
        self.state = S.UNINITIALIZED
        self.last_error: KafkaError | None = None
        self.producer_id = NO_PRODUCER_ID
        self.epoch = NO_PRODUCER_EPOCH
        # Partitions of the current transaction: registered by send() (new), in an
        # AddPartitionsToTxn in flight (pending), acknowledged by the coordinator (added).
        self.new_partitions: set[TopicPartition] = set()
        self.pending_partitions: set[TopicPartition] = set()
        self.partitions: set[TopicPartition] = set()
        # All three, keyed by plain (topic, partition) tuples (a TopicPartition hashes and
        # compares as its tuple): send()'s per-record check is one set lookup.
        self.registered: set[tuple[str, int]] = set()
        # The coordinator holds something of this transaction (a partition or a group's
        # offsets added): its end needs an EndTxn. ``maybe_started``: a request that would
        # have started it has an unknown outcome (an abort then sends EndTxn all the same).
        self.started = False
        self.maybe_started = False
        self.prepared: PreparedTxnState | None = None  # KIP-939: the transaction kept or prepared
        # KIP-360: the coordinator does not know this identity: the abort sends InitProducerId
        # with it instead of EndTxn (Kafka's lastError instanceof InvalidPidMappingException).
        self.reinit_required = False
        # Records may join the transaction (state IN_TRANSACTION): a plain attribute that
        # send() and the accumulator read without this lock. The accumulator checks it under
        # its own lock, in the same critical section as the append, so a commit that leaves
        # IN_TRANSACTION and then takes the accumulator's lock once has every accepted
        # record queued (Transactions._flush_for).
        self.appends_open = False

    # -- helpers ---------------------------------------------------------------------------
    def __repr__(self) -> str:
        return f"TransactionManager({self.transactional_id!r}, {self.state.name}, producer_id={self.producer_id}, epoch={self.epoch})"

    def _tag(self) -> str:
        return f"transactional_id {self.transactional_id!r}"

    def _transition(self, target: TransactionState, error: KafkaError | None = None) -> None:
        if target is not S.FATAL_ERROR and self.state not in _VALID_FROM[target]:
            raise IllegalStateError(f"{self._tag()}: invalid transition from {self.state.name} to {target.name}")
        self.state = target
        self.appends_open = target is S.IN_TRANSACTION
        self.last_error = error if target in (S.ABORTABLE_ERROR, S.FATAL_ERROR) else None

    def _raise_if_failed(self, what: str, allow_abortable: bool = False) -> None:
        """A fatal error fails every call with its own class; an abortable one every call
        but abort (Kafka's maybeFailWithError)."""
        err = self.last_error
        if err is None or (allow_abortable and self.state is S.ABORTABLE_ERROR):
            return
        hint = "the producer cannot be used again; close it" if self.state is S.FATAL_ERROR else "call abort_transaction()"
        raise KafkaError(int(err.code), f"cannot {what}: {self._tag()} failed earlier ({err}); {hint}") from err

    def _require(self, what: str, *states: TransactionState) -> None:
        if self.state not in states:
            names = " or ".join(s.name for s in states)
            raise IllegalStateError(f"cannot {what} in state {self.state.name} (needs {names}) for {self._tag()}")

    @property
    def identity(self) -> tuple[int, int]:
        return self.producer_id, self.epoch

    # -- init_transactions -----------------------------------------------------------------
    def init_request(self, keep_prepared: bool = False) -> TxnInitProducerIdRequest | None:
        """The InitProducerId to send for ``init_transactions()``; None once initialised
        (calling it again does nothing, as in kafka-python). A call after a timeout asks again."""
        with self.cond:
            self._raise_if_failed("init_transactions()")
            if keep_prepared and not self.two_phase:
                raise ValueError("init_transactions(keep_prepared_txn=True) needs a producer with enable_two_phase_commit=True")
            if self.state is S.UNINITIALIZED:
                self._transition(S.INITIALIZING)
            elif self.state is not S.INITIALIZING:
                return None
            return TxnInitProducerIdRequest(
                self.transactional_id,
                self.transaction_timeout_ms,
                enable_two_phase=self.two_phase,
                keep_prepared=keep_prepared,
            )

    def on_init(self, response) -> Verdict:
        """Take InitProducerId's answer: the producer's identity, and with KIP-939 the
        transaction kept for it. Raises (and ends the producer) on a fatal error."""
        with self.cond:
            code = response.error_code
            if code:
                if classify(code) == RETRIABLE_KIND:
                    return Verdict.RETRY
                return self._fatal(_error(code, response.error_message, "init_transactions() failed"))
            self.producer_id, self.epoch = response.producer_id, response.producer_epoch
            kept = getattr(response, "ongoing_txn_producer_id", NO_PRODUCER_ID)
            if kept != NO_PRODUCER_ID:
                self.prepared = PreparedTxnState(kept, response.ongoing_txn_producer_epoch)
                self.started = True
                self._transition(S.PREPARED_TRANSACTION)
            else:
                self._transition(S.READY)
            return Verdict.DONE

    # -- begin / send ----------------------------------------------------------------------
    def begin_transaction(self) -> None:
        with self.cond:
            self._raise_if_failed("begin_transaction()")
            if self.state in (S.UNINITIALIZED, S.INITIALIZING):
                raise IllegalStateError(f"call init_transactions() before begin_transaction() ({self._tag()})")
            self._require("begin_transaction()", S.READY)
            self._transition(S.IN_TRANSACTION)

    def check_append(self) -> None:
        """Raise unless records may join the transaction now (``send()``'s check; the
        accumulator makes it again under its lock, reading :attr:`appends_open`)."""
        if not self.appends_open:
            self.refuse_append()

    def refuse_append(self) -> None:
        """Raise why a record cannot join the transaction now: the failure's error, or
        IllegalStateError outside a transaction."""
        with self._lock:
            if self.appends_open:
                return
            self._raise_if_failed("send()")
            if self.state in (S.UNINITIALIZED, S.INITIALIZING):
                raise IllegalStateError(f"call init_transactions() and begin_transaction() before send() ({self._tag()})")
            raise IllegalStateError(f"send() outside a transaction (state {self.state.name}): call begin_transaction() first ({self._tag()})")

    def register(self, *tps: tuple[str, int]) -> bool:
        """Records of the transaction go to ``tps``, ``(topic, partition)`` tuples (the
        accumulator calls this when it opens a batch, not per record). True when one is new
        to the transaction: the caller starts its AddPartitionsToTxn
        (:meth:`~.transactions.Transactions.add_soon`, batched as Kafka does)."""
        new = False
        with self._lock:
            for tp in tps:
                if tp not in self.registered:
                    self._register(tp)
                    new = True
        return new

    def _register(self, tp: tuple[str, int]) -> None:
        tp = tp if type(tp) is TopicPartition else TopicPartition(*tp)
        self.registered.add(tp)
        self.new_partitions.add(tp)

    def implicit_add(self, tp: tuple[str, int]) -> bool:
        """Implicit adds: a batch to ``tp`` goes now and its leader adds ``tp``, so the end
        needs an EndTxn (``maybe_started``). False when the transaction takes no records now."""
        with self._lock:
            if self.state not in (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION):
                return False
            self.partitions.add(tp if type(tp) is TopicPartition else TopicPartition(*tp))
            self.maybe_started = True
            return True

    # -- AddPartitionsToTxn (the sender's) -------------------------------------------------
    def is_added(self, tp: TopicPartition) -> bool:
        with self.cond:
            return tp in self.partitions

    def add_partitions_request(self, tp: TopicPartition | None = None) -> AddPartitionsToTxnRequest | None:
        """Every partition registered since the last request, and ``tp`` (the partition of a
        batch about to be sent: its ``send()`` may not have registered it yet), moved to
        pending; None when there is none or the transaction cannot take partitions now."""
        with self.cond:
            if self.implicit_adds or self.state not in (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION):
                return None
            if tp is not None and tp not in self.partitions and tp not in self.pending_partitions:
                self._register(tp)
            if not self.new_partitions:
                return None
            self.pending_partitions |= self.new_partitions
            self.new_partitions.clear()
            topics: dict[str, list[int]] = {}
            for tp in sorted(self.pending_partitions):
                topics.setdefault(tp.topic, []).append(tp.partition)
            self.maybe_started = True
            return AddPartitionsToTxnRequest(self.transactional_id, self.producer_id, self.epoch, topics)

    def on_add_partitions(self, response) -> Verdict:
        """Take AddPartitionsToTxn's answer. Partitions answered NONE are in the transaction;
        a retriable answer leaves the pending ones for the retry. Raises the error (the
        transaction is now abortable, or the producer failed) otherwise."""
        with self.cond:
            worst = int(response.error_code)
            for topic, parts in (response.results or {}).items():
                for p, code in parts.items():
                    tp = TopicPartition(topic, int(p))
                    if code == ErrorCode.NONE and not response.error_code:
                        self.partitions.add(tp)
                        self.pending_partitions.discard(tp)
                        self.started = True
                    elif code and code != ErrorCode.OPERATION_NOT_ATTEMPTED and not worst:
                        worst = int(code)
            if not worst:
                if not self.pending_partitions:
                    return Verdict.DONE
                worst = int(ErrorCode.OPERATION_NOT_ATTEMPTED)  # partitions the answer left out
            if classify(worst) == RETRIABLE_KIND:
                return Verdict.RETRY
            return self._failed(worst, response.error_message, "AddPartitionsToTxn failed")

    def on_unknown_outcome(self, error: KafkaError) -> KafkaError:
        """A request of the transaction (AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit)
        ran out of time or failed without an answer: what landed is unknown, so the
        transaction can only be aborted (and the abort sends EndTxn all the same)."""
        with self.cond:
            return self._abortable(error)

    # -- batches ---------------------------------------------------------------------------
    def on_batch_failed(self, error: BaseException) -> None:
        """A produce batch of the transaction failed for good (Kafka's handleFailedBatch)."""
        code = int(getattr(error, "code", ErrorCode.UNKNOWN_SERVER_ERROR))
        err = error if isinstance(error, KafkaError) else KafkaError(code, str(error))
        with self.cond:
            if code in BATCH_FATAL:
                self._fatal(err, raise_it=False)
            else:
                self._abortable(err)

    # -- send_offsets_to_transaction -------------------------------------------------------
    def add_offsets_request(self, group_id: str) -> AddOffsetsToTxnRequest:
        with self.cond:
            self._raise_if_failed("send_offsets_to_transaction()")
            self._require("send_offsets_to_transaction()", S.IN_TRANSACTION)
            self.maybe_started = True
            return AddOffsetsToTxnRequest(self.transactional_id, self.producer_id, self.epoch, group_id)

    def on_add_offsets(self, response) -> Verdict:
        with self.cond:
            code = response.error_code
            if not code:
                self.started = True
                return Verdict.DONE
            if classify(code) == RETRIABLE_KIND:
                return Verdict.RETRY
            return self._failed(code, response.error_message, "AddOffsetsToTxn failed")

    def on_txn_offset_commit(self, response) -> Verdict:
        """TxnOffsetCommit's answer (top level and per partition) from the group coordinator."""
        with self.cond:
            codes = [int(response.error_code)] + [int(c) for parts in (response.topics or {}).values() for c in parts.values()]
            failed = [c for c in codes if c]
            if not failed:
                return Verdict.DONE
            kinds = {c: classify(c) for c in failed}
            final = [c for c in failed if kinds[c] != RETRIABLE_KIND]
            if not final:
                return Verdict.RETRY
            fatal = [c for c in final if kinds[c] == FATAL_KIND]
            return self._failed((fatal or final)[0], response.error_message, "TxnOffsetCommit failed")

    # -- prepare / commit / abort ----------------------------------------------------------
    def begin_prepare(self) -> None:
        with self.cond:
            if not self.two_phase:
                raise IllegalStateError(f"prepare_transaction() needs enable_two_phase_commit=True ({self._tag()})")
            self._raise_if_failed("prepare_transaction()")
            self._require("prepare_transaction()", S.IN_TRANSACTION)

    def prepare(self) -> PreparedTxnState:
        """After the flush: the transaction is prepared, its identity returned."""
        with self.cond:
            self._raise_if_failed("prepare_transaction()")
            self._require("prepare_transaction()", S.IN_TRANSACTION)
            self._transition(S.PREPARED_TRANSACTION)
            self.prepared = PreparedTxnState(self.producer_id, self.epoch)
            return self.prepared

    def begin_commit(self) -> None:
        """Enter COMMITTING_TRANSACTION (a retry after a timeout stays there)."""
        with self.cond:
            self._raise_if_failed("commit_transaction()")
            if self.state is not S.COMMITTING_TRANSACTION:
                self._require("commit_transaction()", S.IN_TRANSACTION, S.PREPARED_TRANSACTION)
                self._transition(S.COMMITTING_TRANSACTION)

    def begin_abort(self) -> None:
        """Enter ABORTING_TRANSACTION; partitions registered but not yet added are dropped
        (their batches fail with TransactionAbortedError)."""
        with self.cond:
            self._raise_if_failed("abort_transaction()", allow_abortable=True)
            if self.state is not S.ABORTING_TRANSACTION:
                self._require("abort_transaction()", S.IN_TRANSACTION, S.PREPARED_TRANSACTION, S.ABORTABLE_ERROR)
                self._transition(S.ABORTING_TRANSACTION)
            self.registered -= self.new_partitions
            self.new_partitions.clear()

    def end_request(self, commit: bool) -> EndTxnRequest | TxnInitProducerIdRequest | None:
        """The EndTxn that ends the transaction (after the flush), bumping the epoch; for an
        abort that needs KIP-360 recovery the InitProducerId instead (:meth:`recovery_request`);
        None when the coordinator holds nothing of it (nothing to end: it completes here). A
        commit with a failed batch raises that error instead (the transaction is abortable)."""
        with self.cond:
            self._raise_if_failed("commit_transaction()" if commit else "abort_transaction()", allow_abortable=not commit)
            if not commit and self.reinit_required:
                return self._recovery_request()
            # implicit adds: a commit follows every batch's ack, i.e. its leader's add
            if not (self.started or (self.maybe_started and (not commit or self.implicit_adds))):
                return None
            return EndTxnRequest(self.transactional_id, self.producer_id, self.epoch, commit=commit, bump_epoch=True)

    def on_end(self, response) -> Verdict:
        """EndTxn's answer: the identity to continue with, and READY. Raises on a fatal error."""
        with self.cond:
            code = response.error_code
            if code:
                if classify(code) == RETRIABLE_KIND:
                    return Verdict.RETRY
                if code in REINIT:
                    if self.state is S.ABORTING_TRANSACTION:
                        self.reinit_required = True  # the abort goes on with InitProducerId
                        return Verdict.DONE
                    return self._failed(code, response.error_message, "EndTxn failed")
                return self._fatal(_error(code, response.error_message, "EndTxn failed"))
            if response.producer_id >= 0:
                self.producer_id, self.epoch = response.producer_id, response.producer_epoch
            self.complete()
            return Verdict.DONE

    def complete(self) -> None:
        """The transaction is over (EndTxn answered, or nothing to end): READY."""
        with self.cond:
            self._transition(S.READY)
            self.new_partitions.clear()
            self.pending_partitions.clear()
            self.partitions.clear()
            self.registered.clear()
            self.started = self.maybe_started = False
            self.prepared = None
            self.reinit_required = False

    # -- KIP-360 recovery ------------------------------------------------------------------
    def _recovery_request(self) -> TxnInitProducerIdRequest:
        return TxnInitProducerIdRequest(
            self.transactional_id,
            self.transaction_timeout_ms,
            producer_id=self.producer_id,
            producer_epoch=self.epoch,
            enable_two_phase=self.two_phase,
        )

    def recovery_request(self) -> TxnInitProducerIdRequest | None:
        """The InitProducerId an abort still needs after its EndTxn found the producer id
        unknown at the coordinator (None: the abort is done or needs none)."""
        with self.cond:
            if self.state is S.ABORTING_TRANSACTION and self.reinit_required:
                return self._recovery_request()
            return None

    def on_recovered(self, response) -> Verdict:
        """The recovery InitProducerId's answer: the identity to continue with (the next
        epoch, or a new producer id when the coordinator forgot the transactional id), and
        READY. PRODUCER_FENCED (another instance holds the id) and the like end the producer."""
        with self.cond:
            code = response.error_code
            if code:
                if classify(code) == RETRIABLE_KIND:
                    return Verdict.RETRY
                return self._fatal(_error(code, response.error_message, "abort_transaction() re-initialising the producer (KIP-360) failed"))
            self.producer_id, self.epoch = response.producer_id, response.producer_epoch
            self.complete()
            return Verdict.DONE

    def complete_decision(self, prepared: PreparedTxnState) -> bool:
        """``complete_transaction(prepared)``: True to commit (it names the kept transaction),
        False to abort."""
        if not isinstance(prepared, PreparedTxnState):
            if isinstance(prepared, tuple) and len(prepared) == 2:
                prepared = PreparedTxnState(*prepared)
            else:
                raise TypeError(f"complete_transaction() takes the PreparedTxnState prepare_transaction() returned, got {prepared!r}")
        with self.cond:
            self._raise_if_failed("complete_transaction()")
            if self.state is not S.PREPARED_TRANSACTION:
                raise IllegalStateError(
                    f"complete_transaction(): no prepared transaction (state {self.state.name}) for {self._tag()}; "
                    "init_transactions(keep_prepared_txn=True) keeps one if the coordinator holds it"
                )
            return prepared == self.prepared

    # -- errors ----------------------------------------------------------------------------
    def _failed(self, code: int, message: str | None, what: str) -> Verdict:
        err = _error(code, message, what)
        if classify(code) == FATAL_KIND or code == ErrorCode.INVALID_PRODUCER_EPOCH:
            return self._fatal(err)
        if code in REINIT and self.state in (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.ABORTABLE_ERROR):
            self.reinit_required = True  # the transaction coordinator's answer: it does not know us
        raise self._abortable(err)

    def _abortable(self, err: KafkaError) -> KafkaError:
        if self.state in (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.ABORTABLE_ERROR):
            self._transition(S.ABORTABLE_ERROR, err)
        return err

    def _fatal(self, err: KafkaError, raise_it: bool = True):
        if self.state is not S.FATAL_ERROR:
            self._transition(S.FATAL_ERROR, err)
        if raise_it:
            raise err
        return err

    def fail_fatal(self, err: KafkaError) -> None:
        with self.cond:
            self._fatal(err, raise_it=False)

    @property
    def has_error(self) -> bool:
        return self.state in (S.ABORTABLE_ERROR, S.FATAL_ERROR)
