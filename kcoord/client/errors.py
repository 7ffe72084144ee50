"""The exceptions of the client API.

Every error with a Kafka error code is a :class:`~kcoord.protocol.errors.KafkaError` with
``.code`` and ``.retriable``, raised as the code's own subclass named as in kafka-python
(``UnknownTopicOrPartitionError``, ``NotLeaderForPartitionError``, ``RequestTimedOutError``,
``TopicAlreadyExistsError``...: :data:`~kcoord.protocol.errors.ERROR_CLASSES`, all exported
from ``kcoord``). Beyond those, the client raises the ones below, as kafka-python does.
"""

from __future__ import annotations

from ..protocol.errors import ERROR_CLASS_NAMES, ERROR_CLASSES, ErrorCode, KafkaError, for_code  # noqa: F401
from ..protocol import errors as _errors

# The per-code classes, importable from here too (kcoord.client.errors.OffsetOutOfRangeError).
globals().update({name: getattr(_errors, name) for name in ERROR_CLASS_NAMES})


class ClusterNotFoundError(LookupError):
    """There is no kcoord cluster of that name on the Ray cluster."""


class NoOffsetForPartitionError(KafkaError):
    """A partition has no position and ``auto_offset_reset="none"`` forbids guessing one
    (code OFFSET_OUT_OF_RANGE)."""

    errno = int(ErrorCode.OFFSET_OUT_OF_RANGE)


class CommitFailedError(KafkaError):
    """The commit was rejected because this member's generation is over (the group
    rebalanced, or the member was removed). Its partitions may belong to another member
    now; poll() to rejoin, and commit only what you processed after the new assignment.
    ``code`` is the coordinator's answer (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
    REBALANCE_IN_PROGRESS or FENCED_INSTANCE_ID)."""

    errno = int(ErrorCode.ILLEGAL_GENERATION)


class SerializationError(ValueError):
    """A producer's ``key_serializer``/``value_serializer`` or a consumer's
    ``key_deserializer``/``value_deserializer`` raised; the message names the record's
    topic and partition (and offset, when consuming), the cause is chained."""


class IllegalStateError(KafkaError):
    """A call the object's state does not allow (kafka-python's IllegalStateError): a
    transactional method on a producer without ``transactional_id``, ``send()`` outside a
    transaction on a transactional producer, ``commit_transaction()`` without
    ``begin_transaction()``, ``begin_transaction()`` twice... Raised at once, before
    anything is sent. Code INVALID_TXN_STATE, the code Kafka gives a transactional operation
    in an invalid state; it is not an :class:`InvalidTxnStateError` (the coordinator's
    answer)."""

    errno = int(ErrorCode.INVALID_TXN_STATE)


class TransactionAbortedError(KafkaError):
    """A record's future fails with this when its transaction was aborted before the record
    was sent (kafka-python's and Kafka's TransactionAbortedException). Not fatal: the
    producer goes on with the next transaction. Code OPERATION_NOT_ATTEMPTED: the record was
    never sent."""

    errno = int(ErrorCode.OPERATION_NOT_ATTEMPTED)

