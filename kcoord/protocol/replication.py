"""Messages served by a partition replica: Produce, Fetch, ListOffsets, OffsetsForLeaderEpoch,
DeleteRecords, DescribeProducers.

Every ReplicaActor holds exactly one partition, so unlike Kafka's multi-partition
requests each of these names a single (topic, partition). ``records`` fields carry whole
record batches (see :mod:`kcoord.records`) as opaque bytes.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any, ClassVar

from .codec import Message, register

# ListOffsets special timestamps (Kafka's numbering).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2

# Fetch replica_id for consumers (anything >= 0 is a follower's broker id).
CONSUMER_REPLICA_ID = -1

# Fetch and ListOffsets isolation_level (Kafka's numbering).
READ_UNCOMMITTED = 0
READ_COMMITTED = 1


@register
class ProduceRequest(Message):
    API_KEY: ClassVar[int] = 0
    VERSION: ClassVar[int] = 1
    topic: str
    partition: int
    records: bytes
    acks: int = -1  # 0, 1 or -1 (all)
    timeout_ms: int = 30000
    # The leader epoch the producer believes current, or -1 to skip the check.
    current_leader_epoch: int = -1
    # The transactional producer's id, as sent in Kafka's Produce (None: not transactional).
    # Carried for the leader's KIP-890 check with the transaction coordinator; the
    # transactional bit of each batch is what marks its records transactional.
    transactional_id: str | None = None
    # KIP-890 part 2 (kcoord's own producer only): the producer sends no AddPartitionsToTxn
    # for its produce partitions; the leader's call to the coordinator adds this partition to
    # the transaction instead of only verifying it. Wire clients leave it False.
    implicit_add: bool = False


@register
class InternalProduceRequest(ProduceRequest):
    """A coordinator's append to an internal topic (``names.INTERNAL_TOPICS``), the only way
    to write one: a replica serves it as ``produce_internal``, which neither the client API
    nor the Kafka listener calls, and refuses it for any other topic. It keeps mistakes and
    stray clients out of coordinator state, not code that can call any Ray actor. Answered
    with a ProduceResponse."""

    API_KEY: ClassVar[int] = 1000


@register
class ProduceResponse(Message):
    API_KEY: ClassVar[int] = 0
    VERSION: ClassVar[int] = 1
    IS_RESPONSE: ClassVar[bool] = True
    error_code: int = 0
    error_message: str | None = None
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    leader_epoch: int = -1
    # True when an idempotent producer re-sent one of its last five batches (Kafka's
    # dedup window); base_offset is then the offset of the original append.
    duplicate: bool = False


@register
class FetchRequest(Message):
    API_KEY: ClassVar[int] = 1
    VERSION: ClassVar[int] = 1
    topic: str
    partition: int
    fetch_offset: int
    max_bytes: int = 8 << 20
    min_bytes: int = 1
    max_wait_ms: int = 500
    replica_id: int = CONSUMER_REPLICA_ID
    current_leader_epoch: int = -1
    # The requester's Ray node id: a leader on the same node may answer with file hints.
    node_id: str = ""
    # A follower's process (its incarnation): the leader's view of a follower is only as
    # good as the process it came from (KIP-903's broker epoch, per replica).
    replica_incarnation: str = ""
    # ... its storage lineage and partition epoch: with the two above, what the leader
    # vouches for in its heartbeat answer so the controller need not beat a fetching
    # follower itself (HeartbeatResponse.followers_heard).
    replica_storage: str = ""
    replica_partition_epoch: int = -1
    replica_directory_id: str = ""
    # A follower's log start offset (Kafka's FetchRequest log_start_offset): the leader's
    # DeleteRecords waits for it, and a follower joins the ISR only once it reports the
    # leader's.
    replica_log_start_offset: int = -1
    # READ_COMMITTED: read up to the last stable offset, with the aborted transactions in
    # range (docs/transactions.md section 1, "Fetch"); followers read everything.
    isolation_level: int = READ_UNCOMMITTED


@register
class FetchResponse(Message):
    API_KEY: ClassVar[int] = 1
    VERSION: ClassVar[int] = 1
    IS_RESPONSE: ClassVar[bool] = True
    error_code: int = 0
    error_message: str | None = None
    high_watermark: int = -1
    log_start_offset: int = -1
    log_end_offset: int = -1
    leader_epoch: int = -1
    records: bytes = b""
    # Instead of ``records``, for a requester on the leader's node: [(path, position,
    # length)] spans of the leader's segment files to read (see kcoord.log.hints).
    file_hint: list[tuple[str, int, int]] | None = None
    # To consumers: min(first unstable offset, HW), and, for READ_COMMITTED, the aborted
    # transactions that may have batches in what was returned: [(producer_id, first_offset)].
    last_stable_offset: int = -1
    aborted_transactions: list[tuple[int, int]] | None = None
    # To a follower whose fetch offset is below the log start (OFFSET_OUT_OF_RANGE): the
    # producer state below it (ProducerStateManager.snapshot_below), which it starts over with.
    producer_state: dict[int, dict[str, Any]] | None = None
    # OFFSET_OUT_OF_RANGE to a follower holding records below a tombstone this leader's
    # cleaner removed (its fetch offset below the tombstone horizon): it starts over at
    # log_start_offset (with producer_state), or it could keep a value the tombstone deleted.
    start_over: bool = False


@register
class ListOffsetsRequest(Message):
    API_KEY: ClassVar[int] = 2
    VERSION: ClassVar[int] = 1
    topic: str
    partition: int
    timestamp: int = LATEST_TIMESTAMP
    current_leader_epoch: int = -1
    # READ_COMMITTED: LATEST answers the last stable offset, and a time lookup ignores
    # records at or past it.
    isolation_level: int = READ_UNCOMMITTED


@register
class ListOffsetsResponse(Message):
    API_KEY: ClassVar[int] = 2
    VERSION: ClassVar[int] = 1
    IS_RESPONSE: ClassVar[bool] = True
    error_code: int = 0
    error_message: str | None = None
    offset: int = -1
    timestamp: int = -1
    leader_epoch: int = -1


@register
class OffsetsForLeaderEpochRequest(Message):
    """A follower asks: where does ``leader_epoch`` end in your log? (KIP-101/KIP-279)"""

    API_KEY: ClassVar[int] = 23
    VERSION: ClassVar[int] = 1
    topic: str
    partition: int
    leader_epoch: int
    current_leader_epoch: int = -1
    replica_id: int = CONSUMER_REPLICA_ID


@register
class OffsetsForLeaderEpochResponse(Message):
    API_KEY: ClassVar[int] = 23
    VERSION: ClassVar[int] = 1
    IS_RESPONSE: ClassVar[bool] = True
    error_code: int = 0
    error_message: str | None = None
    # The largest epoch <= the requested one that the leader knows, and the offset where
    # it ends (the start of the next epoch, or the leader's LEO for its current epoch).
    leader_epoch: int = -1
    end_offset: int = -1


@register
class ProducerState(Message):
    """One idempotent producer as a partition leader knows it (DescribeProducers)."""

    API_KEY: ClassVar[int] = 1061
    producer_id: int
    producer_epoch: int
    last_sequence: int = -1
    last_offset: int = -1  # where its last batch ends in the log
    coordinator_epoch: int = -1  # of the last transaction marker it got here
    current_txn_start_offset: int = -1  # first offset of its ongoing transaction here
    last_timestamp: int = -1  # the max timestamp of its last batch (-1: none in the log)


@register
class DescribeProducersRequest(Message):
    """Kafka's DescribeProducers (KIP-664) for one partition: the leader's idempotent
    producer state (``producer_ids``: only these; None: all)."""

    API_KEY: ClassVar[int] = 61
    VERSION: ClassVar[int] = 1
    topic: str
    partition: int
    producer_ids: list[int] | None = None
    current_leader_epoch: int = -1


@register
class DescribeProducersResponse(Message):
    API_KEY: ClassVar[int] = 61
    VERSION: ClassVar[int] = 1
    IS_RESPONSE: ClassVar[bool] = True
    error_code: int = 0
    error_message: str | None = None
    producers: list[ProducerState] = field(default_factory=list)
    # Batches below it are committed: a producer whose last_offset is below it holds them.
    high_watermark: int = -1
    leader_epoch: int = -1


@register
class DeleteRecordsRequest(Message):
    """Client -> partition leader: make ``offset`` the log start offset (Kafka's
    DeleteRecords). -1 means the high watermark. Answered once the partition's low
    watermark has reached ``offset``, or REQUEST_TIMED_OUT after ``timeout_ms``."""

    API_KEY: ClassVar[int] = 21
    VERSION: ClassVar[int] = 1
    topic: str
    partition: int
    offset: int
    current_leader_epoch: int = -1
    timeout_ms: int = 30_000


@register
class DeleteRecordsResponse(Message):
    API_KEY: ClassVar[int] = 21
    VERSION: ClassVar[int] = 1
    IS_RESPONSE: ClassVar[bool] = True
    error_code: int = 0
    error_message: str | None = None
    # The partition's low watermark: the smallest log start offset over the replicas the
    # leader waited for (Leader.low_watermark), at least the requested offset.
    low_watermark: int = -1
    leader_epoch: int = -1


RESPONSE_FOR: dict[type[Message], type[Message]] = {
    ProduceRequest: ProduceResponse,
    InternalProduceRequest: ProduceResponse,
    FetchRequest: FetchResponse,
    ListOffsetsRequest: ListOffsetsResponse,
    OffsetsForLeaderEpochRequest: OffsetsForLeaderEpochResponse,
    DeleteRecordsRequest: DeleteRecordsResponse,
    DescribeProducersRequest: DescribeProducersResponse,
}
"""The answer to each request of this module (``kcoord.protocol.services`` has them all)."""
