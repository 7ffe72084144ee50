"""The states of a transactional id and Kafka 4.0's rules for moving between them.

A transactional id is in exactly one state; every change is appended to ``__transaction_state``
before anyone hears of it. The rules are Kafka's (``TransactionState`` in Kafka 4.0):

* EMPTY -- no transaction since the last InitProducerId (or the last one completed long ago).
  -> ONGOING (AddPartitionsToTxn / AddOffsetsToTxn), -> EMPTY (InitProducerId again),
  -> PREPARE_ABORT (an abort with nothing added, transaction version 2).
* ONGOING -- partitions were added. -> PREPARE_COMMIT / PREPARE_ABORT (EndTxn, or an abort
  the coordinator decides: a newer instance fencing this one, a timeout), -> ONGOING (more
  partitions; a newer two-phase instance keeping it, KIP-939).
* PREPARE_COMMIT / PREPARE_ABORT -- the decision is durable; markers are being written.
  -> COMPLETE_COMMIT / COMPLETE_ABORT once every partition has its marker.
* COMPLETE_COMMIT / COMPLETE_ABORT -- done. -> ONGOING (next transaction), EMPTY
  (InitProducerId), PREPARE_ABORT (an empty abort, transaction version 2).
* PREPARE_EPOCH_FENCE -- never persisted: the name of the transition in flight while an
  InitProducerId or a timeout aborts the ongoing transaction at a bumped epoch.
* DEAD -- never persisted: the id expired and its tombstone is in flight.

The value of each member is the name Kafka shows (DescribeTransactions, ListTransactions);
``kafka_id`` is Kafka's numbering, which kcoord's records store.
"""

from __future__ import annotations

from enum import Enum

#: the largest producer epoch (Java's Short.MAX_VALUE)
MAX_PRODUCER_EPOCH = 32767


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka's rule: a client never gets the last epoch, so the coordinator can always fence
    the current holder by bumping once more; at ``MAX - 1`` the producer id must change."""
    return epoch >= MAX_PRODUCER_EPOCH - 1


class TransactionState(str, Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"

    @property
    def kafka_id(self) -> int:
        return _KAFKA_IDS[self]

    @classmethod
    def from_kafka_id(cls, kafka_id: int) -> "TransactionState":
        for state, i in _KAFKA_IDS.items():
            if i == kafka_id:
                return state
        raise ValueError(f"no transaction state has id {kafka_id}")

    @property
    def is_prepare(self) -> bool:
        return self in (PREPARE_COMMIT, PREPARE_ABORT)

    @property
    def is_complete(self) -> bool:
        return self in (COMPLETE_COMMIT, COMPLETE_ABORT)

    @property
    def expiration_allowed(self) -> bool:
        """Whether an id idle in this state for ``transactional.id.expiration.ms`` is
        removed (no transaction can be lost by it)."""
        return self in (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT)


EMPTY = TransactionState.EMPTY
ONGOING = TransactionState.ONGOING
PREPARE_COMMIT = TransactionState.PREPARE_COMMIT
PREPARE_ABORT = TransactionState.PREPARE_ABORT
COMPLETE_COMMIT = TransactionState.COMPLETE_COMMIT
COMPLETE_ABORT = TransactionState.COMPLETE_ABORT
DEAD = TransactionState.DEAD
PREPARE_EPOCH_FENCE = TransactionState.PREPARE_EPOCH_FENCE

_KAFKA_IDS = {
    EMPTY: 0,
    ONGOING: 1,
    PREPARE_COMMIT: 2,
    PREPARE_ABORT: 3,
    COMPLETE_COMMIT: 4,
    COMPLETE_ABORT: 5,
    DEAD: 6,
    PREPARE_EPOCH_FENCE: 7,
}

#: the states a record may hold (the others are transitions in flight, never written)
PERSISTED_STATES = frozenset({EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT})

# Which states each state may be entered from (Kafka 4.0's validPreviousStates).
VALID_PREVIOUS: dict[TransactionState, frozenset[TransactionState]] = {
    EMPTY: frozenset({EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT}),
    ONGOING: frozenset({ONGOING, EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT}),
    PREPARE_COMMIT: frozenset({ONGOING}),
    # EMPTY and COMPLETE_*: an abort with nothing added (transaction version 2: the client
    # cannot know whether its first partition was added, so it aborts to be sure).
    PREPARE_ABORT: frozenset({ONGOING, PREPARE_EPOCH_FENCE, EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT}),
    COMPLETE_COMMIT: frozenset({PREPARE_COMMIT}),
    COMPLETE_ABORT: frozenset({PREPARE_ABORT}),
    DEAD: frozenset({EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT}),
    PREPARE_EPOCH_FENCE: frozenset({ONGOING}),
}


class IllegalStateTransition(AssertionError):
    """A bug in the coordinator: it tried a transition Kafka's protocol does not have."""


def check_transition(current: TransactionState | None, target: TransactionState) -> None:
    """Raise :class:`IllegalStateTransition` unless ``target`` may follow ``current`` (None:
    the id is new, which only InitProducerId creates, in EMPTY)."""
    if current is None:
        if target != EMPTY:
            raise IllegalStateTransition(f"a new transactional id starts Empty, not {target.value}")
        return
    if current not in VALID_PREVIOUS[target]:
        raise IllegalStateTransition(f"{current.value} -> {target.value} is not a transaction state transition")
