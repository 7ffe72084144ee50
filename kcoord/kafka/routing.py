"""The one module of kcoord.kafka that calls kcoord's actors.

Every call goes through an actor's public Ray method with kcoord's msgpack messages
(``produce``/``fetch``/``list_offsets``/``delete_records`` on a replica; ``metadata``/
``create_topic``/``delete_topic``/``init_producer_id``/``describe_cluster``/``placement``/
``alter_configs``/``create_partitions`` and the security metadata on the controller;
``join_group``/``sync_group``/... on a group coordinator), so re-pointing the listener at a
new actor layout means editing this file only. Handlers see :class:`Backend` and kcoord
messages, never Ray.

Calls go through kcoord's one call stack (:mod:`kcoord.calls`: a leader on this node over
its direct-call channel, anything else through Ray, a late call asking Ray's GCS whether
its actor is gone). The listener does not retry: failures are answered the way a Kafka
broker would, and its clients retry. A replica that is dead or restarting gives
NOT_LEADER_OR_FOLLOWER (the client refreshes metadata and retries), a call that does not
finish in time REQUEST_TIMED_OUT, a coordinator that is gone COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Any, Awaitable

from ..calls import TIMEOUT, ActorCalls, CallFailed, actor_calls
from ..calls.retry import PROBING, probing_after
from ..protocol import names
from ..protocol.codec import Message
from ..protocol import security as S
from ..protocol.controller import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    MetadataRequest,
    MetadataResponse,
    TopicMetadata,
)
from ..protocol.errors import DecodeError, ErrorCode, METADATA_REFRESH
from ..protocol.group import RESPONSE_FOR, error_response
from ..protocol.replication import (
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DescribeProducersRequest,
    DescribeProducersResponse,
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ProduceRequest,
    ProduceResponse,
)
from ..protocol.txn import WriteTxnMarkerRequest, WriteTxnMarkerResponse
from .addresses import listener_records

logger = logging.getLogger("kcoord.kafka")

_METADATA_TTL_S = 5.0
CALL_STATS: dict[str, float] = {}
_CLUSTER_TTL_S = 5.0


class Backend:
    """kcoord's actors, seen from a listener: a metadata cache and one call per API."""

    def __init__(self, cluster: str, namespace: str = names.DEFAULT_NAMESPACE, node_id: str = "") -> None:
        self.cluster = cluster
        self.namespace = namespace
        # This listener's Ray node: a leader on the same node answers a fetch with file hints
        # (spans of its segment files) that are read here instead of copied through Ray.
        self.node_id = node_id
        self._calls: ActorCalls | None = None  # the listener loop's (made at the first call)
        self._topics: dict[str, tuple[float, TopicMetadata]] = {}
        self._cluster_info: tuple[float, DescribeClusterResponse] | None = None
        self._placement: tuple[float, dict[int, str]] | None = None
        self._deployed: tuple[float, dict] | None = None  # the deployment record and when read

    # -- plumbing -------------------------------------------------------------------------
    @property
    def calls(self) -> ActorCalls:
        if self._calls is None:
            self._calls = actor_calls(self.namespace)
        return self._calls

    async def _call(self, name: str, method: str, payload: Any, timeout: float) -> Any:
        """Call ``name.method(payload)``; raises ``_Gone`` (no such actor, dead, or the call
        raised) or ``asyncio.TimeoutError``."""
        try:
            return await self.calls.call(name, method, *(() if payload is None else (payload,)), timeout=timeout)
        except CallFailed as exc:
            if exc.kind == TIMEOUT:
                raise asyncio.TimeoutError() from None
            raise _Gone(exc.detail) from None

    async def _controller(self, method: str, req: Message | None, response_type: type, timeout: float = 30.0) -> Any:
        try:
            raw = await self._call(names.controller(self.cluster), method, None if req is None else req.encode(), timeout)
        except (_Gone, asyncio.TimeoutError) as exc:
            if response_type is None:
                raise
            return response_type(ErrorCode.NOT_CONTROLLER if isinstance(exc, _Gone) else ErrorCode.REQUEST_TIMED_OUT, f"controller: {exc!r}")
        if response_type is None:
            return raw
        try:
            return response_type.decode(raw)
        except DecodeError as exc:
            return response_type(int(exc.code), exc.message)

    # -- cluster and topic metadata -----------------------------------------------------------
    async def describe_cluster(self) -> DescribeClusterResponse:
        now = time.monotonic()
        if self._cluster_info is not None and now - self._cluster_info[0] < _CLUSTER_TTL_S:
            return self._cluster_info[1]
        resp = await self._controller("describe_cluster", DescribeClusterRequest(), DescribeClusterResponse)
        if resp.error_code == 0:
            self._cluster_info = (now, resp)
        elif self._cluster_info is not None:
            return self._cluster_info[1]
        return resp

    async def broker_nodes(self) -> dict[int, str]:
        """broker id -> Ray node id it is bound to ({} on one node: brokers are logical)."""
        now = time.monotonic()
        if self._placement is not None and now - self._placement[0] < _CLUSTER_TTL_S:
            return self._placement[1]
        try:
            placed = await self._call(names.controller(self.cluster), "placement", None, 10.0)
            nodes = {int(b): v["node"] for b, v in (placed or {}).get("brokers", {}).items() if v.get("node")}
        except Exception:
            nodes = self._placement[1] if self._placement else {}
        self._placement = (now, nodes)
        return nodes

    async def metadata(self, topics: list[str] | None) -> MetadataResponse:
        resp = await self._controller("metadata", MetadataRequest(topics=topics), MetadataResponse)
        if resp.error_code == 0:
            now = time.monotonic()
            for t in resp.topics:
                if t.error_code == 0:
                    self._topics[t.name] = (now, t)
                else:
                    self._topics.pop(t.name, None)
        return resp

    async def topic(self, name: str, refresh: bool = False) -> TopicMetadata | None:
        cached = self._topics.get(name)
        if not refresh and cached is not None and time.monotonic() - cached[0] < _METADATA_TTL_S:
            return cached[1]
        resp = await self.metadata([name])
        for t in resp.topics:
            if t.name == name and t.error_code == 0:
                return t
        return None

    def invalidate(self, topic: str) -> None:
        self._topics.pop(topic, None)

    async def _leader(self, topic: str, partition: int) -> tuple[int, int] | tuple[None, int]:
        """(leader broker, leader epoch), or (None, error code)."""
        t = await self.topic(topic)
        if t is None:
            return None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        for p in t.partitions:
            if p.partition == partition:
                if p.leader < 0:
                    self.invalidate(topic)
                    return None, ErrorCode.LEADER_NOT_AVAILABLE
                return p.leader, p.leader_epoch
        return None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    async def _replica_call(self, method: str, req: Any, response_type: type, timeout: float, parked_s: float = 0.0) -> Any:
        return await (await self._replica_submit(method, req, response_type, timeout, parked_s))

    async def _replica_submit(self, method: str, req: Any, response_type: type, timeout: float, parked_s: float = 0.0) -> Awaitable[Any]:
        """Resolve the leader and send the call; returns an awaitable of the answer. When this
        returns, the call is on its way (callers use that to keep calls in order).
        ``parked_s``: how long the leader may hold it (a fetch's max wait)."""
        leader, epoch_or_error = await self._leader(req.topic, req.partition)
        if leader is None:
            return _ready(response_type(int(epoch_or_error), f"{req.topic}-{req.partition}: no leader known"))
        name = names.replica(self.cluster, req.topic, req.partition, leader)
        probing = probing_after(parked_s) if parked_s else PROBING
        answer = await self.calls.submit(name, method, req.encode(), timeout=timeout, probing=probing)
        return self._replica_answer(answer, leader, req, response_type)

    async def _replica_answer(self, answer: Awaitable[bytes], leader: int, req: Any, response_type: type) -> Any:
        """The call's answer as a response: a leader that is gone (or whose call raised) is
        NOT_LEADER_OR_FOLLOWER, one that did not answer in time REQUEST_TIMED_OUT."""
        started = time.perf_counter()
        try:
            resp = response_type.decode(await answer)
            CALL_STATS[req.__class__.__name__] = CALL_STATS.get(req.__class__.__name__, 0.0) + (time.perf_counter() - started) * 1000
            CALL_STATS[req.__class__.__name__ + "_n"] = CALL_STATS.get(req.__class__.__name__ + "_n", 0) + 1
        except CallFailed as exc:
            if exc.kind == TIMEOUT:
                return response_type(ErrorCode.REQUEST_TIMED_OUT, f"leader {leader} of {req.topic}-{req.partition} did not answer in time")
            self.invalidate(req.topic)
            return response_type(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"leader {leader} of {req.topic}-{req.partition} is gone ({exc})")
        except DecodeError as exc:
            return response_type(int(exc.code), exc.message)
        if resp.error_code in METADATA_REFRESH:
            self.invalidate(req.topic)
        return resp

    # -- replica APIs ---------------------------------------------------------------------------
    async def produce(self, req: ProduceRequest) -> ProduceResponse:
        return await self._replica_call("produce", req, ProduceResponse, req.timeout_ms / 1000 + 10)

    async def submit_produce(self, req: ProduceRequest) -> Awaitable[ProduceResponse]:
        """Send a produce now, answer later (see :meth:`_replica_submit`)."""
        return await self._replica_submit("produce", req, ProduceResponse, req.timeout_ms / 1000 + 10)

    async def fetch(self, req: FetchRequest) -> FetchResponse:
        if self.node_id:
            req = dataclasses.replace(req, node_id=self.node_id)
        resp = await self._replica_call("fetch", req, FetchResponse, req.max_wait_ms / 1000 + 10, parked_s=req.max_wait_ms / 1000)
        if resp.file_hint:
            from ..log.hints import read_hinted

            data = read_hinted(resp.file_hint, req.fetch_offset)
            if data is None:  # the leader's files moved under us: ask for the bytes
                plain = dataclasses.replace(req, node_id="", max_wait_ms=0)
                return await self._replica_call("fetch", plain, FetchResponse, 10)
            resp.records, resp.file_hint = data, None
        return resp

    async def list_offsets(self, req: ListOffsetsRequest) -> ListOffsetsResponse:
        return await self._replica_call("list_offsets", req, ListOffsetsResponse, 30.0)

    async def describe_producers(self, req: DescribeProducersRequest) -> DescribeProducersResponse:
        return await self._replica_call("describe_producers", req, DescribeProducersResponse, 30.0)

    async def write_txn_marker(self, req: WriteTxnMarkerRequest) -> WriteTxnMarkerResponse:
        """A transaction marker on the partition's leader (an operator's abort, KIP-664): it
        answers once the marker is below the HW, or after ``req.timeout_ms``."""
        return await self._replica_call("write_txn_marker", req, WriteTxnMarkerResponse, req.timeout_ms / 1000 + 10)

    async def delete_records(self, req: DeleteRecordsRequest) -> DeleteRecordsResponse:
        return await self._replica_call("delete_records", req, DeleteRecordsResponse, 30.0)

    # -- controller APIs ------------------------------------------------------------------------
    async def create_topic(self, req: CreateTopicsRequest) -> CreateTopicsResponse:
        resp = await self._controller("create_topic", req, CreateTopicsResponse, timeout=60.0)
        self.invalidate(req.name)
        return resp

    async def delete_topic(self, req: DeleteTopicsRequest) -> DeleteTopicsResponse:
        resp = await self._controller("delete_topic", req, DeleteTopicsResponse, timeout=60.0)
        self.invalidate(req.name)
        return resp

    async def describe_configs(self, req: DescribeConfigsRequest) -> DescribeConfigsResponse:
        return await self._controller("describe_configs", req, DescribeConfigsResponse)

    async def init_producer_id(self, req: InitProducerIdRequest) -> InitProducerIdResponse:
        return await self._controller("init_producer_id", req, InitProducerIdResponse)

    async def alter_configs(self, req: IncrementalAlterConfigsRequest) -> IncrementalAlterConfigsResponse:
        resp = await self._controller("alter_configs", req, IncrementalAlterConfigsResponse, timeout=60.0)
        self.invalidate(req.topic)
        return resp

    async def create_partitions(self, req: CreatePartitionsRequest) -> CreatePartitionsResponse:
        resp = await self._controller("create_partitions", req, CreatePartitionsResponse, timeout=120.0)
        self.invalidate(req.topic)
        return resp

    # -- security metadata (the controller's; kcoord.replication.security_metadata) -------------
    async def security_metadata(self, req: S.SecurityMetadataRequest) -> S.SecurityMetadataResponse:
        return await self._controller("security_metadata", req, S.SecurityMetadataResponse, timeout=10.0)

    async def create_acls(self, req: S.CreateAclsRequest) -> S.CreateAclsResponse:
        return await self._controller("create_acls", req, S.CreateAclsResponse)

    async def describe_acls(self, req: S.DescribeAclsRequest) -> S.DescribeAclsResponse:
        return await self._controller("describe_acls", req, S.DescribeAclsResponse)

    async def delete_acls(self, req: S.DeleteAclsRequest) -> S.DeleteAclsResponse:
        return await self._controller("delete_acls", req, S.DeleteAclsResponse)

    async def alter_user_scram_credentials(self, req: S.AlterUserScramCredentialsRequest) -> S.AlterUserScramCredentialsResponse:
        return await self._controller("alter_user_scram_credentials", req, S.AlterUserScramCredentialsResponse)

    async def describe_user_scram_credentials(self, req: S.DescribeUserScramCredentialsRequest) -> S.DescribeUserScramCredentialsResponse:
        return await self._controller("describe_user_scram_credentials", req, S.DescribeUserScramCredentialsResponse)

    # -- group coordinators ---------------------------------------------------------------------
    async def group_coordinators(self) -> int:
        return int((await self.describe_cluster()).group_coordinators)

    async def group_call(self, method: str, req: Message, index: int, timeout: float = 330.0) -> Any:
        """``method`` on group coordinator ``index`` (JoinGroup may park up to the rebalance
        timeout, hence the long default)."""
        response_type = RESPONSE_FOR[type(req)]
        name = names.group_coordinator(self.cluster, index)
        try:
            raw = await self._call(name, method, req.encode(), timeout)
            return response_type.decode(raw)
        except _Gone as exc:
            return error_response(req, ErrorCode.COORDINATOR_NOT_AVAILABLE, f"group coordinator {index}: {exc}")
        except asyncio.TimeoutError:
            return error_response(req, ErrorCode.REQUEST_TIMED_OUT, f"group coordinator {index} did not answer in time")
        except DecodeError as exc:
            return error_response(req, int(exc.code), exc.message)

    # -- transaction coordinators (docs/transactions.md) ----------------------------------------
    async def transaction_coordinators(self) -> int:
        """N of ``kcoord.txn.coordinator_for(transactional_id, N)``: what the controller
        reports, else the deployment record's ``transaction_coordinators`` (GCS KV, read at
        most every 5 s), else the number of group coordinators (the deployment's default)."""
        info = await self.describe_cluster()
        reported = getattr(info, "transaction_coordinators", None)
        if reported is not None:
            return int(reported)
        now = time.monotonic()
        if self._deployed is None or now - self._deployed[0] > _CLUSTER_TTL_S:
            try:
                from .addresses import deployment_record

                record = deployment_record(self.cluster)
            except Exception:  # noqa: BLE001 - no record readable: the default below
                record = {}
            self._deployed = (now, record)
        count = self._deployed[1].get("transaction_coordinators")
        return int(info.group_coordinators if count is None else count)

    async def txn_call(self, method: str, req: Message, index: int, timeout: float = 60.0) -> Any:
        """``method`` on transaction coordinator ``index``. One that is gone, or that does not
        answer in time, is COORDINATOR_NOT_AVAILABLE: every transactional client finds the
        coordinator again and retries on it (a timed-out EndTxn that landed is recognised as
        its own retry by the coordinator)."""
        return await self._coordinator_call(names.transaction_coordinator(self.cluster, index), f"transaction coordinator {index}", method, req, timeout)

    async def txn_offset_commit(self, req: Message, index: int, timeout: float = 60.0) -> Any:
        """TxnOffsetCommit on group coordinator ``index`` (KIP-447)."""
        return await self._coordinator_call(names.group_coordinator(self.cluster, index), f"group coordinator {index}", "txn_offset_commit", req, timeout)

    async def txn_offset_marker(self, req: Message, index: int, timeout: float = 60.0) -> Any:
        """A transaction's end for ``__consumer_offsets`` partition ``index`` on its group
        coordinator (what a WriteTxnMarkers to that partition means, KIP-447)."""
        return await self._coordinator_call(names.group_coordinator(self.cluster, index), f"group coordinator {index}", "txn_offset_marker", req, timeout)

    async def _coordinator_call(self, name: str, who: str, method: str, req: Message, timeout: float) -> Any:
        from ..protocol.services import RESPONSE_FOR as ANSWERS, error_response as failed

        try:
            raw = await self._call(name, method, req.encode(), timeout)
            return ANSWERS[type(req)].decode(raw)
        except _Gone as exc:
            return failed(req, ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{who}: {exc}")
        except asyncio.TimeoutError:
            return failed(req, ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{who} did not answer in {timeout:.0f} s")
        except DecodeError as exc:
            return failed(req, int(exc.code), exc.message)

    # -- listeners ------------------------------------------------------------------------------
    def listeners(self) -> dict[str, dict]:
        """Ray node id -> {"host": advertised host, "ports": {broker: port}} of every
        listener of the cluster (GCS KV)."""
        return listener_records(self.cluster)


class _Gone(Exception):
    pass


async def _ready(value: Any) -> Any:
    return value
