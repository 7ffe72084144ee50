"""Simulated clients: what every one of them shares.

They speak kcoord's protocol over the fake network like the real clients do, and report
what they were told to the history. :class:`Client` is a client process;
:class:`LeaderDiscovery` finds a partition's leader through the controller's Metadata API;
``METHOD`` names the call of each request type. The clients themselves: ``admin.py`` (an
operator's actions), ``producer.py``, ``reader.py``, ``group_member.py``, and the
transactional ones (``transactions.py``, ``txn_clients.py``, ``txn_groups.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kcoord.protocol import names
from kcoord.protocol.codec import Message
from kcoord.protocol.controller import (
    CreatePartitionsRequest,
    CreateTopicsRequest,
    IncrementalAlterConfigsRequest,
    InitProducerIdRequest,
    MetadataRequest,
    MetadataResponse,
)
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.group import (
    GroupHeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kcoord.protocol.replication import DeleteRecordsRequest, FetchRequest, ProduceRequest

from .processes import CLUSTER

if TYPE_CHECKING:
    from .simulation import Simulation

E = ErrorCode
CONTROLLER = names.controller(CLUSTER)

RETRIABLE_METADATA = (
    E.NOT_LEADER_OR_FOLLOWER,
    E.FENCED_LEADER_EPOCH,
    E.UNKNOWN_LEADER_EPOCH,
    E.LEADER_NOT_AVAILABLE,
    E.KAFKA_STORAGE_ERROR,
)
# What an idempotent or transactional write retries (as a Kafka producer does): a metadata
# refresh's codes, too few replicas before or after the append, a timeout.
RETRIABLE_WRITE = (*RETRIABLE_METADATA, E.NOT_ENOUGH_REPLICAS, E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, E.REQUEST_TIMED_OUT)


class Client:
    """A client process: never crashes (the fault scheduler crashes members by making
    them go silent), never pauses."""

    def __init__(self, sim: "Simulation", name: str) -> None:
        self.sim = sim
        self.name = name
        self.up = True
        self.incarnation = 1
        self.paused = False
        self.deferred: list = []
        self.catching_up: list = []

    def call(self, target: str, request: Message, response_type: type[Message], on_done, timeout_ms: int | None = None) -> None:
        method = METHOD[type(request)]
        self.sim.net.call(self, target, method, request, response_type, on_done, timeout_ms or self.sim.config.call_timeout_ms)

    def later(self, delay_ms: int, fn, *args: Any) -> None:
        self.sim.kernel.after(delay_ms, fn, *args)


METHOD: dict[type[Message], str] = {
    MetadataRequest: "metadata",
    CreateTopicsRequest: "create_topic",
    InitProducerIdRequest: "init_producer_id",
    ProduceRequest: "produce",
    FetchRequest: "fetch",
    JoinGroupRequest: "join_group",
    SyncGroupRequest: "sync_group",
    GroupHeartbeatRequest: "heartbeat",
    LeaveGroupRequest: "leave_group",
    OffsetCommitRequest: "offset_commit",
    OffsetFetchRequest: "offset_fetch",
    IncrementalAlterConfigsRequest: "alter_configs",
    CreatePartitionsRequest: "create_partitions",
    DeleteRecordsRequest: "delete_records",
}


class LeaderDiscovery:
    """Leader discovery through the controller's Metadata API (what ClusterClient does)."""

    def _init_metadata(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.leader = -1
        self.leader_epoch = -1
        self._metadata_in_flight = False
        self._metadata_wanted = False

    def refresh_metadata(self) -> None:
        if self._metadata_in_flight:
            self._metadata_wanted = True
            return
        self._metadata_in_flight = True
        self._metadata_wanted = False
        self.call(CONTROLLER, MetadataRequest([self.topic]), MetadataResponse, self._metadata_done)  # type: ignore[attr-defined]

    def _metadata_done(self, response: Message | None, kind: str) -> None:
        self._metadata_in_flight = False
        if isinstance(response, MetadataResponse) and response.topics and response.topics[0].partitions:
            parts = response.topics[0].partitions
            if self.partition < len(parts):
                p = parts[self.partition]
                if p.leader_epoch >= self.leader_epoch:
                    self.leader, self.leader_epoch = p.leader, p.leader_epoch
        if self._metadata_wanted or self.leader < 0:
            self.later(self.sim.config.client_backoff_ms, self.refresh_metadata)  # type: ignore[attr-defined]
        self.on_metadata()

    def on_metadata(self) -> None:
        raise NotImplementedError

    def leader_name(self) -> str:
        return names.replica(CLUSTER, self.topic, self.partition, self.leader)
