"""Who serves what: every actor's RPC methods, the request each takes, the response it gets.

One table for the whole cluster. A Ray actor exposes one method per row of its
:class:`Service` (msgpack bytes of the request in, of the response out) -- Ray calls methods
by name, so these names are what running clusters and other processes call -- and its
driver serves exactly those requests. The pairs themselves are declared next to the messages
(``RESPONSE_FOR`` of each protocol module) and combined here into :data:`RESPONSE_FOR`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from . import controller, group, replication, security, txn
from .codec import Message
from .controller import (
    AlterPartitionRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DescribeClusterRequest,
    DescribeConfigsRequest,
    HeartbeatRequest,
    IncrementalAlterConfigsRequest,
    InitProducerIdRequest,
    LeaderAndIsrRequest,
    MetadataRequest,
)
from .group import (
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    GroupHeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from .replication import (
    DeleteRecordsRequest,
    DescribeProducersRequest,
    FetchRequest,
    InternalProduceRequest,
    ListOffsetsRequest,
    OffsetsForLeaderEpochRequest,
    ProduceRequest,
)
from .security import (
    AlterUserScramCredentialsRequest,
    CreateAclsRequest,
    DeleteAclsRequest,
    DescribeAclsRequest,
    DescribeUserScramCredentialsRequest,
    SecurityMetadataRequest,
)
from .txn import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    DescribeTransactionsRequest,
    EndTxnRequest,
    ListTransactionsRequest,
    TxnInitProducerIdRequest,
    TxnOffsetCommitRequest,
    TxnOffsetMarkerRequest,
    WriteTxnMarkerRequest,
)

RESPONSE_FOR: dict[type[Message], type[Message]] = {
    **replication.RESPONSE_FOR,
    **controller.RESPONSE_FOR,
    **security.RESPONSE_FOR,
    **group.RESPONSE_FOR,
    **txn.RESPONSE_FOR,
}
"""Every request kcoord's actors serve, and the response type it gets."""


@dataclass(frozen=True)
class Service:
    """The requests one kind of actor serves, by RPC method name."""

    name: str  # for messages: "a replica", "the controller", ...
    methods: Mapping[str, type[Message]]
    requests: frozenset[type[Message]] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "requests", frozenset(self.methods.values()))

    def serves(self, request: Message) -> bool:
        return type(request) in self.requests

    def check(self, request: Message) -> type[Message]:
        """The response type for ``request``; TypeError if this service does not serve it."""
        if not self.serves(request):
            raise TypeError(f"{self.name} does not serve {type(request).__name__}")
        return RESPONSE_FOR[type(request)]


REPLICA = Service(
    "a replica",
    {
        "produce": ProduceRequest,
        "produce_internal": InternalProduceRequest,  # coordinators' appends to internal topics
        "fetch": FetchRequest,
        "list_offsets": ListOffsetsRequest,
        "offsets_for_leader_epoch": OffsetsForLeaderEpochRequest,
        "delete_records": DeleteRecordsRequest,
        "describe_producers": DescribeProducersRequest,
        "write_txn_marker": WriteTxnMarkerRequest,  # a transaction coordinator's COMMIT/ABORT
        "leader_and_isr": LeaderAndIsrRequest,
        "heartbeat": HeartbeatRequest,
    },
)

CONTROLLER = Service(
    "the controller",
    {
        "metadata": MetadataRequest,
        "create_topic": CreateTopicsRequest,
        "delete_topic": DeleteTopicsRequest,
        "alter_partition": AlterPartitionRequest,
        "init_producer_id": InitProducerIdRequest,
        "describe_cluster": DescribeClusterRequest,
        "describe_configs": DescribeConfigsRequest,
        "alter_configs": IncrementalAlterConfigsRequest,
        "create_partitions": CreatePartitionsRequest,
        # SCRAM credentials and ACLs; the Kafka listeners poll security_metadata
        "security_metadata": SecurityMetadataRequest,
        "alter_user_scram_credentials": AlterUserScramCredentialsRequest,
        "describe_user_scram_credentials": DescribeUserScramCredentialsRequest,
        "create_acls": CreateAclsRequest,
        "describe_acls": DescribeAclsRequest,
        "delete_acls": DeleteAclsRequest,
    },
)

GROUP_COORDINATOR = Service(
    "a group coordinator",
    {
        "find_coordinator": FindCoordinatorRequest,
        "join_group": JoinGroupRequest,
        "sync_group": SyncGroupRequest,
        "heartbeat": GroupHeartbeatRequest,
        "leave_group": LeaveGroupRequest,
        "offset_commit": OffsetCommitRequest,
        "offset_fetch": OffsetFetchRequest,
        "describe_groups": DescribeGroupsRequest,
        "list_groups": ListGroupsRequest,
        "delete_groups": DeleteGroupsRequest,
        # KIP-447: a transactional producer's offsets, pending until the transaction
        # coordinator's marker commits or drops them
        "txn_offset_commit": TxnOffsetCommitRequest,
        "txn_offset_marker": TxnOffsetMarkerRequest,
    },
)

TRANSACTION_COORDINATOR = Service(
    "a transaction coordinator",
    {
        "init_producer_id": TxnInitProducerIdRequest,
        "add_partitions_to_txn": AddPartitionsToTxnRequest,
        "add_offsets_to_txn": AddOffsetsToTxnRequest,
        "end_txn": EndTxnRequest,
        "list_transactions": ListTransactionsRequest,
        "describe_transactions": DescribeTransactionsRequest,
    },
)

SERVICES = (REPLICA, CONTROLLER, GROUP_COORDINATOR, TRANSACTION_COORDINATOR)


def error_response(request: Message, code: int, message: str | None = None) -> Message:
    """The failure answer to any served request: ``code`` on the response and, for requests
    answered per item (groups, members, partitions of a transaction), on every item, so a
    client that reads only the items sees it too."""
    if type(request) in group.RESPONSE_FOR:
        return group.error_response(request, code, message)
    if type(request) in txn.RESPONSE_FOR:
        return txn.error_response(request, code, message)
    try:
        response_type = RESPONSE_FOR[type(request)]
    except KeyError:
        raise TypeError(f"no actor serves {type(request).__name__}") from None
    return response_type(error_code=code, error_message=message)
