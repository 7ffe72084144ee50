"""Messages between the FailoverCoordinator (the controller), replicas and clients:
Metadata, LeaderAndIsr, AlterPartition, Heartbeat, and the admin calls the controller
serves (CreateTopics, DeleteTopics, InitProducerId, DescribeCluster, DescribeConfigs,
IncrementalAlterConfigs, CreatePartitions)."""

from __future__ import annotations

from dataclasses import field
from typing import ClassVar

from .codec import Message, register

NO_LEADER = -1


@register
class PartitionMetadata(Message):
    API_KEY: ClassVar[int] = 1003
    partition: int
    leader: int = NO_LEADER
    leader_epoch: int = -1
    partition_epoch: int = -1
    replicas: list[int] = field(default_factory=list)
    isr: list[int] = field(default_factory=list)
    offline_replicas: list[int] = field(default_factory=list)
    error_code: int = 0


@register
class TopicMetadata(Message):
    API_KEY: ClassVar[int] = 1004
    name: str
    error_code: int = 0
    error_message: str | None = None
    partitions: list[PartitionMetadata] = field(default_factory=list)
    config: dict[str, str] = field(default_factory=dict)
    internal: bool = False


@register
class MetadataRequest(Message):
    API_KEY: ClassVar[int] = 3
    VERSION: ClassVar[int] = 1
    topics: list[str] | None = None  # None = all topics


@register
class MetadataResponse(Message):
    API_KEY: ClassVar[int] = 3
    VERSION: ClassVar[int] = 1
    IS_RESPONSE: ClassVar[bool] = True
    error_code: int = 0
    error_message: str | None = None
    cluster: str = ""
    controller_epoch: int = -1
    brokers: list[int] = field(default_factory=list)
    topics: list[TopicMetadata] = field(default_factory=list)


@register
class LeaderAndIsrRequest(Message):
    """Controller -> replica: your role at ``leader_epoch``. ``leader`` equal to the
    receiver's broker id means BecomeLeader, anything else BecomeFollower.

    ``incarnation``: the replica process the controller last heard from ("" if none).
    Ray hands a call made to an actor that is restarting to its next process, which may
    hold less than the one the controller meant (a lost page cache, another node's empty
    disk); that process refuses with STALE_BROKER_EPOCH (KIP-380's broker epoch)."""

    API_KEY: ClassVar[int] = 4
    VERSION: ClassVar[int] = 1
    controller_epoch: int
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    partition_epoch: int
    isr: list[int]
    replicas: list[int]
    config: dict[str, str] | None = None
    # The version of ``config`` (TopicState.config_version): a replica applies a config
    # only when its version is newer than the one it runs, whatever the epochs.
    config_version: int = -1
    incarnation: str = ""
    # The log directory the controller last heard the receiver report ("" if none): asked
    # to lead from another directory -- its disk was wiped since -- a replica refuses.
    directory_id: str = ""


@register
class LeaderAndIsrResponse(Message):
    API_KEY: ClassVar[int] = 4
    VERSION: ClassVar[int] = 1
    IS_RESPONSE: ClassVar[bool] = True
    error_code: int = 0
    error_message: str | None = None
    # The answering replica's storage lineage (see HeartbeatResponse.storage): a restarted
    # designated leader refuses with FENCED_LEADER_EPOCH, and this says whether it kept
    # its page cache.
    storage: str = ""
    # ... and its log directory's id (HeartbeatResponse.directory_id).
    directory_id: str = ""


@register
class AlterPartitionRequest(Message):
    """Leader -> controller: please make ``new_isr`` the ISR (KIP-497). Applied only when
    ``leader_epoch`` and ``partition_epoch`` match the controller's view."""

    API_KEY: ClassVar[int] = 56
    VERSION: ClassVar[int] = 1
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    partition_epoch: int
    new_isr: list[int]
    # The process of each follower in ``new_isr`` whose fetches the leader judged (KIP-903):
    # a member that restarted since (maybe without its log) is refused as ineligible.
    incarnations: dict[int, str] = field(default_factory=dict)
    # The topic config version the leader judged under (LeaderAndIsrRequest.config_version;
    # -1: unknown). A proposal judged under an older config than the controller's is refused.
    config_version: int = -1


@register
class AlterPartitionResponse(Message):
    API_KEY: ClassVar[int] = 56
    VERSION: ClassVar[int] = 1
    IS_RESPONSE: ClassVar[bool] = True
    error_code: int = 0
    error_message: str | None = None
    leader: int = NO_LEADER
    leader_epoch: int = -1
    partition_epoch: int = -1
    isr: list[int] = field(default_factory=list)


@register
class HeartbeatRequest(Message):
    """Controller -> replica liveness probe; the answer is the replica's own view, which
    lets the controller verify state after a restart."""

    API_KEY: ClassVar[int] = 63
    VERSION: ClassVar[int] = 1
    controller_epoch: int = -1


@register
class HeartbeatResponse(Message):
    API_KEY: ClassVar[int] = 63
    VERSION: ClassVar[int] = 1
    IS_RESPONSE: ClassVar[bool] = True
    error_code: int = 0
    error_message: str | None = None
    topic: str = ""
    partition: int = -1
    broker: int = -1
    role: str = "none"  # "leader" | "follower" | "none" (not yet told)
    leader: int = NO_LEADER
    leader_epoch: int = -1
    partition_epoch: int = -1
    log_start_offset: int = -1
    log_end_offset: int = -1
    high_watermark: int = -1
    isr: list[int] = field(default_factory=list)
    # Leader only: per follower broker id, its LEO and how far it lags (records).
    follower_leo: dict[int, int] = field(default_factory=dict)
    incarnation: str = ""  # changes on every actor (re)start
    # Which page cache the log's unflushed writes live in (machine boot and Ray node): it
    # changes only when they may be gone, so a process that restarted with the same storage
    # lost nothing it had written (writes are os.write calls, which SIGKILL does not undo).
    storage: str = ""
    # Which directory its log is in (Log.directory_id): another id than before means its
    # disk was wiped or replaced -- it holds nothing it held, whatever its log says.
    directory_id: str = ""
    # Leader only: the followers it has heard from in this leadership, each as
    # (ms since its latest fetch arrived (0 while one is parked), that fetch's offset,
    # incarnation, storage, partition epoch, directory id) -- the status a heartbeat of its own would
    # give. A follower's fetches are its heartbeat: the controller beats it directly only
    # when no leader vouches for it.
    followers_heard: dict[int, tuple[int, int, str, str, int, str]] = field(default_factory=dict)


@register
class CreateTopicsRequest(Message):
    API_KEY: ClassVar[int] = 19
    VERSION: ClassVar[int] = 1
    name: str
    partitions: int = 1
    replication_factor: int = 1
    config: dict[str, str] | None = None
    # Explicit assignment: partition -> broker ids (first is the preferred leader).
    assignment: dict[int, list[int]] | None = None


@register
class CreateTopicsResponse(Message):
    API_KEY: ClassVar[int] = 19
    VERSION: ClassVar[int] = 1
    IS_RESPONSE: ClassVar[bool] = True
    error_code: int = 0
    error_message: str | None = None
    topic: TopicMetadata | None = None


@register
class DeleteTopicsRequest(Message):
    API_KEY: ClassVar[int] = 20
    VERSION: ClassVar[int] = 1
    name: str


@register
class DeleteTopicsResponse(Message):
    API_KEY: ClassVar[int] = 20
    VERSION: ClassVar[int] = 1
    IS_RESPONSE: ClassVar[bool] = True
    error_code: int = 0
    error_message: str | None = None


@register
class InitProducerIdRequest(Message):
    """Ask the controller for ``count`` consecutive fresh producer ids; or, with ``owner``
    (a group coordinator's ``__consumer_offsets-<i>``), for the producer id kept for that
    owner at an epoch no other incarnation gets (fencing, like Kafka's InitProducerId for a
    transactional id): an incarnation's first request (``producer_epoch`` -1) gets the next
    epoch, a later one presents the id and epoch it holds to get the next after those, and
    an incarnation replaced by a newer one is answered PRODUCER_FENCED. A retried request
    of the current incarnation gets the same answer again."""

    API_KEY: ClassVar[int] = 22
    VERSION: ClassVar[int] = 1
    count: int = 1
    owner: str | None = None
    incarnation: str = ""
    # What the incarnation holds; with producer_epoch -1 (nothing yet), producer_id is the
    # id the owner used before the controller kept it (kept if the controller has none).
    producer_id: int = -1
    producer_epoch: int = -1
    min_epoch: int = 0  # epochs below it were seen in use (written before the controller kept them)


@register
class InitProducerIdResponse(Message):
    API_KEY: ClassVar[int] = 22
    VERSION: ClassVar[int] = 1
    IS_RESPONSE: ClassVar[bool] = True
    error_code: int = 0
    error_message: str | None = None
    producer_id: int = -1
    producer_epoch: int = 0
    count: int = 0


@register
class DescribeClusterRequest(Message):
    API_KEY: ClassVar[int] = 60
    VERSION: ClassVar[int] = 1


@register
class DescribeClusterResponse(Message):
    API_KEY: ClassVar[int] = 60
    VERSION: ClassVar[int] = 1
    IS_RESPONSE: ClassVar[bool] = True
    error_code: int = 0
    error_message: str | None = None
    cluster: str = ""
    controller_epoch: int = -1
    brokers: list[int] = field(default_factory=list)
    group_coordinators: int = 0
    # Failover/ISR metrics snapshot (names documented in kcoord.replication.metrics).
    metrics: dict[str, float] = field(default_factory=dict)


@register
class ConfigEntry(Message):
    """One topic config key as DescribeConfigs reports it: its effective value and where
    that comes from (``source``: Kafka's ConfigSource numbers, see
    kcoord.replication.topic_configs.ConfigSource)."""

    API_KEY: ClassVar[int] = 1032
    name: str
    value: str | None = None
    source: int = 5  # DEFAULT_CONFIG
    read_only: bool = False


@register
class DescribeConfigsRequest(Message):
    """One topic's config; ``keys`` None means every topic config key."""

    API_KEY: ClassVar[int] = 32
    VERSION: ClassVar[int] = 1
    topic: str
    keys: list[str] | None = None


@register
class DescribeConfigsResponse(Message):
    API_KEY: ClassVar[int] = 32
    VERSION: ClassVar[int] = 1
    IS_RESPONSE: ClassVar[bool] = True
    error_code: int = 0
    error_message: str | None = None
    topic: str = ""
    configs: list[ConfigEntry] = field(default_factory=list)


@register
class AlterConfigOp(Message):
    """One key of an IncrementalAlterConfigs: ``op`` is Kafka's OpType (0 SET, 1 DELETE
    back to the default; 2 APPEND and 3 SUBTRACT are refused)."""

    API_KEY: ClassVar[int] = 1044
    name: str
    op: int = 0
    value: str | None = None


@register
class IncrementalAlterConfigsRequest(Message):
    """Change some keys of a topic's config, leaving the others as they are (KIP-339)."""

    API_KEY: ClassVar[int] = 44
    VERSION: ClassVar[int] = 1
    topic: str
    ops: list[AlterConfigOp] = field(default_factory=list)
    validate_only: bool = False


@register
class IncrementalAlterConfigsResponse(Message):
    """The topic's config after the change (what DescribeConfigs would answer)."""

    API_KEY: ClassVar[int] = 44
    VERSION: ClassVar[int] = 1
    IS_RESPONSE: ClassVar[bool] = True
    error_code: int = 0
    error_message: str | None = None
    configs: list[ConfigEntry] = field(default_factory=list)


@register
class CreatePartitionsRequest(Message):
    """Grow ``topic`` to ``count`` partitions; ``assignment`` lists the brokers of each new
    partition (None: placed as topic creation places them)."""

    API_KEY: ClassVar[int] = 37
    VERSION: ClassVar[int] = 1
    topic: str
    count: int
    assignment: list[list[int]] | None = None
    validate_only: bool = False


@register
class CreatePartitionsResponse(Message):
    API_KEY: ClassVar[int] = 37
    VERSION: ClassVar[int] = 1
    IS_RESPONSE: ClassVar[bool] = True
    error_code: int = 0
    error_message: str | None = None
    topic: TopicMetadata | None = None


RESPONSE_FOR: dict[type[Message], type[Message]] = {
    LeaderAndIsrRequest: LeaderAndIsrResponse,
    HeartbeatRequest: HeartbeatResponse,
    MetadataRequest: MetadataResponse,
    CreateTopicsRequest: CreateTopicsResponse,
    DeleteTopicsRequest: DeleteTopicsResponse,
    AlterPartitionRequest: AlterPartitionResponse,
    InitProducerIdRequest: InitProducerIdResponse,
    DescribeClusterRequest: DescribeClusterResponse,
    DescribeConfigsRequest: DescribeConfigsResponse,
    IncrementalAlterConfigsRequest: IncrementalAlterConfigsResponse,
    CreatePartitionsRequest: CreatePartitionsResponse,
}
"""The answer to each request of this module (``kcoord.protocol.services`` has them all)."""
