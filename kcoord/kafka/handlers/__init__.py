"""Kafka API handlers, one module per family, and the table of what the listener serves:
``cluster``, ``data``, ``groups``, ``transactions``, ``sasl`` (authentication), ``acls``
(ACLs and SCRAM users) and ``admin`` (configs, partitions, records). Every handler checks the ACLs of
what it touches through ``ctx.allowed`` (always true without ``kafka_security``).

A handler is ``async (ctx, conn, request, version) -> response`` on kafka-python's
schema-generated request/response objects; ``None`` means "no response" (acks=0). Each API
also has an error builder, ``(request, version, code, message) -> response``, used when a
request cannot be served (unsupported version, undecodable body, a handler failure).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from kafka.protocol.admin import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    CreateAclsRequest,
    CreateAclsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.admin.topics import DeleteRecordsRequest, DeleteRecordsResponse
from kafka.protocol.admin.transactions import (
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse

from ..server import Api
from . import acls, admin, cluster, consumer_groups, data, sasl, transactions
from ._base import ListenerContext

# (key, request, response, min, max, handler, error builder, ordered per connection)
# Versions: the lowest the clients we test need, up to what the handlers map honestly.
_TABLE = [
    (0, ProduceRequest, ProduceResponse, 3, 8, data.produce, data.produce_error, False),  # orders itself
    (1, FetchRequest, FetchResponse, 4, 11, data.fetch, data.fetch_error, False),
    (2, ListOffsetsRequest, ListOffsetsResponse, 1, 5, data.list_offsets, data.list_offsets_error, False),
    (3, MetadataRequest, MetadataResponse, 1, 8, cluster.metadata, cluster.metadata_error, False),
    (8, OffsetCommitRequest, OffsetCommitResponse, 2, 7, consumer_groups.offset_commit, consumer_groups.offset_commit_error, True),
    (9, OffsetFetchRequest, OffsetFetchResponse, 1, 7, consumer_groups.offset_fetch, consumer_groups.offset_fetch_error, False),
    (10, FindCoordinatorRequest, FindCoordinatorResponse, 0, 2, cluster.find_coordinator, cluster.find_coordinator_error, False),
    (11, JoinGroupRequest, JoinGroupResponse, 0, 5, consumer_groups.join_group, consumer_groups.join_group_error, False),
    (12, HeartbeatRequest, HeartbeatResponse, 0, 3, consumer_groups.heartbeat, consumer_groups.heartbeat_error, False),
    (13, LeaveGroupRequest, LeaveGroupResponse, 0, 3, consumer_groups.leave_group, consumer_groups.leave_group_error, True),
    (14, SyncGroupRequest, SyncGroupResponse, 0, 3, consumer_groups.sync_group, consumer_groups.sync_group_error, False),
    (15, DescribeGroupsRequest, DescribeGroupsResponse, 0, 4, consumer_groups.describe_groups, consumer_groups.describe_groups_error, False),
    (16, ListGroupsRequest, ListGroupsResponse, 0, 3, consumer_groups.list_groups, consumer_groups.list_groups_error, False),
    (19, CreateTopicsRequest, CreateTopicsResponse, 0, 4, cluster.create_topics, cluster.create_topics_error, True),
    (20, DeleteTopicsRequest, DeleteTopicsResponse, 0, 3, cluster.delete_topics, cluster.delete_topics_error, True),
    (22, InitProducerIdRequest, InitProducerIdResponse, 0, 4, cluster.init_producer_id, cluster.init_producer_id_error, False),
    (32, DescribeConfigsRequest, DescribeConfigsResponse, 0, 4, cluster.describe_configs, cluster.describe_configs_error, False),
    # transactions (handlers/transactions.py): the versions Kafka clients with a transactional
    # id send before KIP-890 part 2 (AddPartitionsToTxn v4+ is broker to broker; EndTxn v5
    # bumps the epoch per transaction)
    (24, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, 0, 3, transactions.add_partitions_to_txn, transactions.add_partitions_to_txn_error, True),
    (25, AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, 0, 3, transactions.add_offsets_to_txn, transactions.add_offsets_to_txn_error, True),
    (26, EndTxnRequest, EndTxnResponse, 0, 3, transactions.end_txn, transactions.end_txn_error, True),
    (28, TxnOffsetCommitRequest, TxnOffsetCommitResponse, 0, 3, transactions.txn_offset_commit, transactions.txn_offset_commit_error, True),
    (65, DescribeTransactionsRequest, DescribeTransactionsResponse, 0, 0, transactions.describe_transactions, transactions.describe_transactions_error, False),
    (66, ListTransactionsRequest, ListTransactionsResponse, 0, 1, transactions.list_transactions, transactions.list_transactions_error, False),
    # an operator's abort of a hanging transaction (KIP-664); v0 is gone in Kafka 4.0 (KIP-896)
    (27, WriteTxnMarkersRequest, WriteTxnMarkersResponse, 1, 2, transactions.write_txn_markers, transactions.write_txn_markers_error, True),
    (61, DescribeProducersRequest, DescribeProducersResponse, 0, 0, transactions.describe_producers, transactions.describe_producers_error, False),
    # security (handlers/sasl.py, handlers/acls.py); after SaslHandshake v0 tokens come bare
    (17, SaslHandshakeRequest, SaslHandshakeResponse, 0, 1, sasl.sasl_handshake, sasl.sasl_handshake_error, False),
    (36, SaslAuthenticateRequest, SaslAuthenticateResponse, 0, 2, sasl.sasl_authenticate, sasl.sasl_authenticate_error, False),
    (29, DescribeAclsRequest, DescribeAclsResponse, 1, 3, acls.describe_acls, acls.describe_acls_error, False),
    (30, CreateAclsRequest, CreateAclsResponse, 1, 3, acls.create_acls, acls.create_acls_error, True),
    (31, DeleteAclsRequest, DeleteAclsResponse, 1, 3, acls.delete_acls, acls.delete_acls_error, True),
    (50, DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse, 0, 0, acls.describe_user_scram_credentials, acls.describe_user_scram_credentials_error, False),
    (51, AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, 0, 0, acls.alter_user_scram_credentials, acls.alter_user_scram_credentials_error, True),
    # operators' admin calls (handlers/admin.py)
    (21, DeleteRecordsRequest, DeleteRecordsResponse, 0, 2, admin.delete_records, admin.delete_records_error, True),
    (33, AlterConfigsRequest, AlterConfigsResponse, 0, 2, admin.alter_configs, admin.alter_configs_error, True),
    (37, CreatePartitionsRequest, CreatePartitionsResponse, 0, 3, admin.create_partitions, admin.create_partitions_error, True),
    (44, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, 0, 1, admin.incremental_alter_configs, admin.incremental_alter_configs_error, True),
]


def build_apis(ctx: ListenerContext) -> dict[int, Api]:
    """The API table bound to one listener's context."""
    apis: dict[int, Api] = {}
    for key, req, resp, lo, hi, handler, error, ordered in _TABLE:
        apis[key] = Api(key, req, resp, lo, hi, partial(handler, ctx), error, ordered)
    apis[18] = Api(18, ApiVersionsRequest, ApiVersionsResponse, 0, 3, partial(cluster.api_versions_handler(apis), ctx), cluster.api_versions_error(apis))
    return apis


def served_versions() -> dict[int, tuple[int, int]]:
    """{API key: (min, max)} as advertised in ApiVersions."""
    out: dict[int, tuple[int, int]] = {k: (lo, hi) for k, _, _, lo, hi, *_ in _TABLE}
    out[18] = (0, 3)
    return out


__all__ = ["ListenerContext", "build_apis", "served_versions"]
