"""Kafka-numbered error codes and the exception that carries them.

kcoord speaks Kafka's error vocabulary so that a Kafka user reading a log line or an
exception knows at once what happened (NOT_LEADER_OR_FOLLOWER is 6 everywhere).
"""

from __future__ import annotations

from enum import IntEnum


class ErrorCode(IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    INVALID_UPDATE_VERSION = 95
    TRANSACTIONAL_ID_NOT_FOUND = 105
    INELIGIBLE_REPLICA = 107
    TRANSACTION_ABORTABLE = 120


# Errors a client may retry after refreshing metadata or backing off (Kafka's
# RetriableException family). Everything else is final for the request.
RETRIABLE = frozenset(
    {
        ErrorCode.CORRUPT_MESSAGE,  # in transit; the producer re-sends the batch
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.BROKER_NOT_AVAILABLE,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.NOT_CONTROLLER,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.OFFSET_NOT_AVAILABLE,
        ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
        ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
        # A transaction is completing (or an id is being fenced): retry after a backoff.
        ErrorCode.CONCURRENT_TRANSACTIONS,
        # A transactional offset commit of the partition is not yet decided (KIP-447).
        ErrorCode.UNSTABLE_OFFSET_COMMIT,
    }
)

# Errors that mean "your view of who leads is stale": refresh metadata, then retry.
METADATA_REFRESH = frozenset(
    {
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.BROKER_NOT_AVAILABLE,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        # The replica's log went offline (KIP-112): the controller moves leadership away,
        # so ask it again rather than retry the same replica (Kafka's KafkaStorageException
        # is an InvalidMetadataException too).
        ErrorCode.KAFKA_STORAGE_ERROR,
    }
)


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"UNKNOWN_ERROR_CODE_{code}"


class KafkaError(Exception):
    """An error with a Kafka error code.

    ``code`` is the :class:`ErrorCode`; ``retriable`` tells a client whether trying again
    (usually after a metadata refresh) can succeed. The message names the problem.

    Every code has its own subclass named as in kafka-python (:data:`ERROR_CLASSES`, the one
    table from code to class): ``KafkaError(3, "...")`` *is* an
    :class:`UnknownTopicOrPartitionError`, so ``except UnknownTopicOrPartitionError``
    catches it wherever it was raised. A subclass is built with just a message
    (``UnknownTopicOrPartitionError("no topic x")``) or, like KafkaError, ``(code, message)``.
    """

    #: the code a subclass stands for (None for KafkaError itself)
    errno: int | None = None

    def __new__(cls, *args: object, **kwargs: object) -> "KafkaError":
        if cls is KafkaError and args:
            try:
                cls = ERROR_CLASSES.get(int(args[0]), KafkaError)  # type: ignore[arg-type]
            except (TypeError, ValueError):
                pass
        return super().__new__(cls)

    def __init__(self, *args: object) -> None:
        if args and isinstance(args[0], int) and not isinstance(args[0], bool):
            code, message = int(args[0]), (str(args[1]) if len(args) > 1 else "")
        elif self.errno is not None:
            code, message = int(self.errno), (str(args[0]) if args else "")
        else:
            raise TypeError(f"{type(self).__name__} needs (code, message), got {args!r}")
        try:
            self.code: ErrorCode | int = ErrorCode(code)
        except ValueError:
            self.code = code
        self.message = message
        text = error_name(code) + f" ({int(code)})"
        if message:
            text += f": {message}"
        super().__init__(text)

    @property
    def name(self) -> str:
        return error_name(int(self.code))

    @property
    def retriable(self) -> bool:
        return self.code in RETRIABLE

    @property
    def needs_metadata_refresh(self) -> bool:
        return self.code in METADATA_REFRESH

    def __reduce__(self):  # survive pickling across Ray
        return (self.__class__, (int(self.code), self.message))


# One class per code, named as kafka-python names them (kafka.errors), so that code written
# for kafka-python catches the same names. The one table from code to class.
_CLASS_NAMES = {
    ErrorCode.NONE: "NoError",  # what kafka-python's describe_acls returns on success
    ErrorCode.UNKNOWN_SERVER_ERROR: "UnknownError",
    ErrorCode.OFFSET_OUT_OF_RANGE: "OffsetOutOfRangeError",
    ErrorCode.CORRUPT_MESSAGE: "CorruptRecordError",
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "UnknownTopicOrPartitionError",
    ErrorCode.INVALID_FETCH_SIZE: "InvalidFetchRequestError",
    ErrorCode.LEADER_NOT_AVAILABLE: "LeaderNotAvailableError",
    ErrorCode.NOT_LEADER_OR_FOLLOWER: "NotLeaderForPartitionError",
    ErrorCode.REQUEST_TIMED_OUT: "RequestTimedOutError",
    ErrorCode.BROKER_NOT_AVAILABLE: "BrokerNotAvailableError",
    ErrorCode.REPLICA_NOT_AVAILABLE: "ReplicaNotAvailableError",
    ErrorCode.MESSAGE_TOO_LARGE: "MessageSizeTooLargeError",
    ErrorCode.STALE_CONTROLLER_EPOCH: "StaleControllerEpochError",
    ErrorCode.OFFSET_METADATA_TOO_LARGE: "OffsetMetadataTooLargeError",
    ErrorCode.NETWORK_EXCEPTION: "NetworkExceptionError",
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: "CoordinatorLoadInProgressError",
    ErrorCode.COORDINATOR_NOT_AVAILABLE: "CoordinatorNotAvailableError",
    ErrorCode.NOT_COORDINATOR: "NotCoordinatorError",
    ErrorCode.INVALID_TOPIC_EXCEPTION: "InvalidTopicError",
    ErrorCode.RECORD_LIST_TOO_LARGE: "RecordListTooLargeError",
    ErrorCode.NOT_ENOUGH_REPLICAS: "NotEnoughReplicasError",
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: "NotEnoughReplicasAfterAppendError",
    ErrorCode.INVALID_REQUIRED_ACKS: "InvalidRequiredAcksError",
    ErrorCode.ILLEGAL_GENERATION: "IllegalGenerationError",
    ErrorCode.INCONSISTENT_GROUP_PROTOCOL: "InconsistentGroupProtocolError",
    ErrorCode.INVALID_GROUP_ID: "InvalidGroupIdError",
    ErrorCode.UNKNOWN_MEMBER_ID: "UnknownMemberIdError",
    ErrorCode.INVALID_SESSION_TIMEOUT: "InvalidSessionTimeoutError",
    ErrorCode.REBALANCE_IN_PROGRESS: "RebalanceInProgressError",
    ErrorCode.INVALID_COMMIT_OFFSET_SIZE: "InvalidCommitOffsetSizeError",
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: "TopicAuthorizationFailedError",
    ErrorCode.GROUP_AUTHORIZATION_FAILED: "GroupAuthorizationFailedError",
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "ClusterAuthorizationFailedError",
    ErrorCode.INVALID_TIMESTAMP: "InvalidTimestampError",
    ErrorCode.UNSUPPORTED_SASL_MECHANISM: "UnsupportedSaslMechanismError",
    ErrorCode.ILLEGAL_SASL_STATE: "IllegalSaslStateError",
    ErrorCode.UNSUPPORTED_VERSION: "UnsupportedVersionError",
    ErrorCode.TOPIC_ALREADY_EXISTS: "TopicAlreadyExistsError",
    ErrorCode.INVALID_PARTITIONS: "InvalidPartitionsError",
    ErrorCode.INVALID_REPLICATION_FACTOR: "InvalidReplicationFactorError",
    ErrorCode.INVALID_REPLICA_ASSIGNMENT: "InvalidReplicationAssignmentError",
    ErrorCode.INVALID_CONFIG: "InvalidConfigurationError",
    ErrorCode.NOT_CONTROLLER: "NotControllerError",
    ErrorCode.INVALID_REQUEST: "InvalidRequestError",
    ErrorCode.POLICY_VIOLATION: "PolicyViolationError",
    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER: "OutOfOrderSequenceNumberError",
    ErrorCode.DUPLICATE_SEQUENCE_NUMBER: "DuplicateSequenceNumberError",
    ErrorCode.INVALID_PRODUCER_EPOCH: "InvalidProducerEpochError",
    ErrorCode.INVALID_TXN_STATE: "InvalidTxnStateError",
    ErrorCode.INVALID_PRODUCER_ID_MAPPING: "InvalidProducerIdMappingError",
    ErrorCode.INVALID_TRANSACTION_TIMEOUT: "InvalidTransactionTimeoutError",
    ErrorCode.CONCURRENT_TRANSACTIONS: "ConcurrentTransactionsError",
    ErrorCode.TRANSACTION_COORDINATOR_FENCED: "TransactionCoordinatorFencedError",
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "TransactionalIdAuthorizationFailedError",
    ErrorCode.OPERATION_NOT_ATTEMPTED: "OperationNotAttemptedError",
    ErrorCode.SECURITY_DISABLED: "SecurityDisabledError",
    ErrorCode.KAFKA_STORAGE_ERROR: "KafkaStorageError",
    ErrorCode.SASL_AUTHENTICATION_FAILED: "SaslAuthenticationFailedError",
    ErrorCode.UNKNOWN_PRODUCER_ID: "UnknownProducerIdError",
    ErrorCode.NON_EMPTY_GROUP: "NonEmptyGroupError",
    ErrorCode.GROUP_ID_NOT_FOUND: "GroupIdNotFoundError",
    ErrorCode.FENCED_LEADER_EPOCH: "FencedLeaderEpochError",
    ErrorCode.UNKNOWN_LEADER_EPOCH: "UnknownLeaderEpochError",
    ErrorCode.UNSUPPORTED_COMPRESSION_TYPE: "UnsupportedCompressionTypeError",
    ErrorCode.STALE_BROKER_EPOCH: "StaleBrokerEpochError",
    ErrorCode.OFFSET_NOT_AVAILABLE: "OffsetNotAvailableError",
    ErrorCode.MEMBER_ID_REQUIRED: "MemberIdRequiredError",
    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE: "PreferredLeaderNotAvailableError",
    ErrorCode.GROUP_MAX_SIZE_REACHED: "GroupMaxSizeReachedError",
    ErrorCode.FENCED_INSTANCE_ID: "FencedInstanceIdError",
    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE: "EligibleLeadersNotAvailableError",
    ErrorCode.ELECTION_NOT_NEEDED: "ElectionNotNeededError",
    ErrorCode.INVALID_RECORD: "InvalidRecordError",
    ErrorCode.UNSTABLE_OFFSET_COMMIT: "UnstableOffsetCommitError",
    ErrorCode.PRODUCER_FENCED: "ProducerFencedError",
    ErrorCode.RESOURCE_NOT_FOUND: "ResourceNotFoundError",
    ErrorCode.DUPLICATE_RESOURCE: "DuplicateResourceError",
    ErrorCode.UNACCEPTABLE_CREDENTIAL: "UnacceptableCredentialError",
    ErrorCode.INVALID_UPDATE_VERSION: "InvalidUpdateVersionError",
    ErrorCode.TRANSACTIONAL_ID_NOT_FOUND: "TransactionalIdNotFoundError",
    ErrorCode.INELIGIBLE_REPLICA: "IneligibleReplicaError",
    ErrorCode.TRANSACTION_ABORTABLE: "TransactionAbortableError",
}

#: {code: the KafkaError subclass raised for it}
ERROR_CLASSES: dict[int, type[KafkaError]] = {}
for _code, _name in _CLASS_NAMES.items():
    _cls = type(_name, (KafkaError,), {"errno": int(_code), "__module__": __name__, "__doc__": f"Kafka error {_code.name} ({int(_code)})."})
    ERROR_CLASSES[int(_code)] = _cls
    globals()[_name] = _cls
del _code, _name, _cls

#: the names of the per-code classes (exported from ``kcoord``)
ERROR_CLASS_NAMES = tuple(_CLASS_NAMES.values())


def for_code(code: int) -> type[KafkaError]:
    """The exception class of ``code`` (KafkaError for a code without its own class)."""
    return ERROR_CLASSES.get(int(code), KafkaError)


class DecodeError(KafkaError):
    """Bytes that are not a valid message: garbage (CORRUPT_MESSAGE) or a message with
    missing or ill-typed fields (INVALID_REQUEST)."""


def raise_for_error(code: int, message: str = "") -> None:
    """Raise the code's :class:`KafkaError` subclass unless ``code`` is NONE."""
    if code:
        raise KafkaError(code, message)
