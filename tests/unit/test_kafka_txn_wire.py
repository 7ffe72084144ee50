"""The listener's transactional APIs over a fake backend (no Ray): each Kafka request is
encoded with kafka-python's schemas at every served version, decoded as the server decodes
it, handled, and the answer encoded and decoded back at that version; what reaches kcoord's
coordinators is checked message by message (docs/transactions.md section 4)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kafka.protocol.admin.transactions import (
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse
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
)

from kcoord.kafka.batches import build_kafka_batch
from kcoord.kafka.handlers import ListenerContext, build_apis, cluster, data, served_versions, transactions
from kcoord.kafka.server import Connection
from kcoord.protocol import txn as T
from kcoord.protocol.controller import DescribeClusterResponse, InitProducerIdResponse as AllocatorResponse, PartitionMetadata, TopicMetadata
from kcoord.protocol.errors import ErrorCode as E
from kcoord.protocol.replication import ProduceResponse as ReplicaProduceResponse
from kcoord.protocol.services import TRANSACTION_COORDINATOR
from kcoord.record.control import build_control_batch
from kcoord.security.acl import ACLOperation as Op, ResourceType as RT
from kcoord.txn.placement import coordinator_for

BROKERS = [0, 1, 2]
COORDINATORS = 5


class FakeBackend:
    """Transaction coordinators that record what they were asked and answer from
    ``answers`` (method -> function of the request), a group coordinator, replicas."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, Any]] = []  # (method, coordinator index, request)
        self.group_calls: list[tuple[int, Any]] = []
        self.produced: list[Any] = []
        self.ongoing: dict[tuple[str, int, int], set[tuple[str, int]]] = {}  # what verify_only answers from
        self.topics = {"t": 3, "u": 1}
        self.answers = {
            "init_producer_id": lambda r: T.TxnInitProducerIdResponse(producer_id=4000, producer_epoch=3),
            "add_partitions_to_txn": self._add_partitions,
            "add_offsets_to_txn": lambda r: T.AddOffsetsToTxnResponse(),
            "end_txn": lambda r: T.EndTxnResponse(),
            "describe_transactions": lambda r: T.DescribeTransactionsResponse(
                transactions=[T.DescribedTransaction(t, state="Ongoing", timeout_ms=60000, start_time_ms=5, producer_id=4000, producer_epoch=3, topics={"t": [1, 0], "secret": [0]}) for t in r.transactional_ids]
            ),
            "list_transactions": lambda r: T.ListTransactionsResponse(transactions=[T.ListedTransaction(f"tx-of-{self.calls[-1][1]}", 4000 + self.calls[-1][1], "Ongoing")]),
        }

    def _add_partitions(self, r: T.AddPartitionsToTxnRequest) -> T.AddPartitionsToTxnResponse:
        mine = self.ongoing.setdefault((r.transactional_id, r.producer_id, r.producer_epoch), set())
        out: dict[str, dict[int, int]] = {}
        for topic, parts in r.topics.items():
            for p in parts:
                if r.verify_only:
                    out.setdefault(topic, {})[p] = 0 if (topic, p) in mine else E.TRANSACTION_ABORTABLE
                elif topic not in self.topics:
                    out.setdefault(topic, {})[p] = E.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    mine.add((topic, p))
                    out.setdefault(topic, {})[p] = 0
        return T.AddPartitionsToTxnResponse(results=out)

    async def transaction_coordinators(self) -> int:
        return COORDINATORS

    async def group_coordinators(self) -> int:
        return COORDINATORS

    async def txn_call(self, method: str, req: Any, index: int, timeout: float = 60.0) -> Any:
        assert TRANSACTION_COORDINATOR.methods[method] is type(req)  # the actor's method for it
        self.calls.append((method, index, req))
        # through msgpack both ways, as the actor call goes
        return T.RESPONSE_FOR[type(req)].decode(self.answers[method](type(req).decode(req.encode())).encode())

    async def txn_offset_commit(self, req: Any, index: int, timeout: float = 60.0) -> Any:
        self.group_calls.append((index, req))
        return T.TxnOffsetCommitResponse(topics={t: {p: 0 for p in ps} for t, ps in req.topics.items()})

    async def topic(self, name: str, refresh: bool = False) -> Any:
        n = self.topics.get(name)
        return None if n is None else TopicMetadata(name=name, partitions=[PartitionMetadata(partition=i, leader=0) for i in range(n)])

    async def describe_cluster(self) -> DescribeClusterResponse:
        return DescribeClusterResponse(brokers=BROKERS, group_coordinators=COORDINATORS)

    async def broker_nodes(self) -> dict:
        return {}

    async def init_producer_id(self, req: Any) -> Any:
        self.calls.append(("controller.init_producer_id", -1, req))
        return AllocatorResponse(producer_id=77, producer_epoch=0)

    async def submit_produce(self, req: Any) -> Any:
        self.produced.append(req)

        async def answer() -> ReplicaProduceResponse:
            return ReplicaProduceResponse(base_offset=len(self.produced) - 1)

        return answer()

    async def produce(self, req: Any) -> Any:
        return await (await self.submit_produce(req))

    async def describe_producers(self, req: Any) -> Any:
        from kcoord.protocol.replication import DescribeProducersResponse as Answer, ProducerState

        self.calls.append(("replica.describe_producers", req.partition, req))
        if req.topic not in self.topics:
            return Answer(E.UNKNOWN_TOPIC_OR_PARTITION, "no such topic")
        return Answer(producers=[ProducerState(4000 + req.partition, 3, last_sequence=9, last_offset=20, coordinator_epoch=2, current_txn_start_offset=11)])


class FakeSecurity:
    """ACLs as a set of allowed (operation, resource type, name)."""

    def __init__(self, allowed: set[tuple[Op, RT, str]]) -> None:
        self.allowed = allowed

    def authorize(self, conn: Any, op: Op, rt: RT, name: str) -> bool:
        return (op, rt, name) in self.allowed

    def authorize_any(self, conn: Any, op: Op, rt: RT) -> bool:
        return any(a[0] == op and a[1] == rt for a in self.allowed)


def make_ctx(backend: FakeBackend | None = None, security: Any = None) -> ListenerContext:
    return ListenerContext(backend=backend or FakeBackend(), host="127.0.0.1", ports={0: 9092, 1: 9093, 2: 9094}, security=security)


def wire(handler: Any, ctx: ListenerContext, req: Any, version: int, response_cls: Any, conn: Connection | None = None) -> Any:
    """The request through kafka-python's encoder and the server's decoder, the answer back."""
    decoded = type(req).decode(req.encode(version=version), version=version)
    resp = asyncio.run(handler(ctx, conn or Connection(), decoded, version))
    return response_cls.decode(resp.encode(version=version), version=version)


def sent(ctx: ListenerContext, method: str) -> list[tuple[int, Any]]:
    return [(i, r) for m, i, r in ctx.backend.calls if m == method]


# -- ApiVersions, FindCoordinator ------------------------------------------------------------


def test_api_versions_advertise_exactly_the_transactional_versions_served():
    served = served_versions()
    assert {k: served[k] for k in (22, 24, 25, 26, 28, 61, 65, 66)} == {22: (0, 4), 24: (0, 3), 25: (0, 3), 26: (0, 3), 28: (0, 3), 61: (0, 0), 65: (0, 0), 66: (0, 1)}
    apis = build_apis(make_ctx())
    assert {k: (a.min_version, a.max_version) for k, a in apis.items()} == served
    for key in (24, 25, 26, 28, 61, 65, 66):  # kafka-python has the schema of every served version
        assert apis[key].request.max_version >= served[key][1] and apis[key].response.max_version >= served[key][1]


@pytest.mark.parametrize("version", [1, 2])
def test_find_coordinator_for_a_transactional_id_names_the_broker_of_its_coordinator(version):
    ctx = make_ctx()
    for tid in ("tx-a", "tx-b", "etl-1", "x"):
        resp = wire(cluster.find_coordinator, ctx, FindCoordinatorRequest(key=tid, key_type=1), version, FindCoordinatorResponse)
        broker = BROKERS[coordinator_for(tid, COORDINATORS) % len(BROKERS)]
        assert (resp.error_code, resp.node_id, resp.host, resp.port) == (0, broker, "127.0.0.1", 9092 + broker)


def test_find_coordinator_refuses_unknown_key_types_and_undescribable_transactional_ids():
    resp = wire(cluster.find_coordinator, make_ctx(), FindCoordinatorRequest(key="x", key_type=2), 2, FindCoordinatorResponse)
    assert resp.error_code == E.INVALID_REQUEST and resp.node_id == -1
    ctx = make_ctx(security=FakeSecurity({(Op.DESCRIBE, RT.TRANSACTIONAL_ID, "mine")}))
    assert wire(cluster.find_coordinator, ctx, FindCoordinatorRequest(key="other", key_type=1), 2, FindCoordinatorResponse).error_code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert wire(cluster.find_coordinator, ctx, FindCoordinatorRequest(key="mine", key_type=1), 2, FindCoordinatorResponse).error_code == 0


# -- InitProducerId --------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_init_producer_id_with_a_transactional_id_goes_to_its_coordinator(version):
    ctx = make_ctx()
    req = InitProducerIdRequest(transactional_id="tx-a", transaction_timeout_ms=30000, producer_id=4000 if version >= 3 else -1, producer_epoch=2 if version >= 3 else -1)
    resp = wire(cluster.init_producer_id, ctx, req, version, InitProducerIdResponse)
    assert (resp.error_code, resp.producer_id, resp.producer_epoch) == (0, 4000, 3)
    [(index, kreq)] = sent(ctx, "init_producer_id")
    assert index == coordinator_for("tx-a", COORDINATORS)
    assert kreq == T.TxnInitProducerIdRequest("tx-a", 30000, 4000 if version >= 3 else -1, 2 if version >= 3 else -1, wire_version=version)


def test_init_producer_id_without_a_transactional_id_is_the_controllers_and_an_empty_one_is_invalid():
    ctx = make_ctx()
    resp = wire(cluster.init_producer_id, ctx, InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=0), 4, InitProducerIdResponse)
    assert (resp.error_code, resp.producer_id) == (0, 77) and [m for m, _, _ in ctx.backend.calls] == ["controller.init_producer_id"]
    resp = wire(cluster.init_producer_id, ctx, InitProducerIdRequest(transactional_id="", transaction_timeout_ms=100), 4, InitProducerIdResponse)
    assert resp.error_code == E.INVALID_REQUEST and not sent(ctx, "init_producer_id")


@pytest.mark.parametrize("version,expected", [(3, E.INVALID_PRODUCER_EPOCH), (4, E.PRODUCER_FENCED)])
def test_a_fenced_producer_hears_the_code_its_version_knows(version, expected):
    """KIP-588: the coordinator picks the code from ``wire_version``, which the listener sets."""
    ctx = make_ctx()
    ctx.backend.answers["init_producer_id"] = lambda r: T.TxnInitProducerIdResponse(T.fenced_error(r))
    ctx.backend.answers["end_txn"] = lambda r: T.EndTxnResponse(T.fenced_error(r))
    resp = wire(cluster.init_producer_id, ctx, InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=100, producer_id=1, producer_epoch=0), version, InitProducerIdResponse)
    assert (resp.error_code, resp.producer_id, resp.producer_epoch) == (expected, -1, -1)
    end_version = 1 if version == 3 else 2
    resp = wire(transactions.end_txn, ctx, EndTxnRequest(transactional_id="tx", producer_id=1, producer_epoch=0, committed=True), end_version, EndTxnResponse)
    assert resp.error_code == expected


# -- AddPartitionsToTxn, AddOffsetsToTxn, EndTxn ---------------------------------------------


def _add(tid: str, topics: dict[str, list[int]], pid: int = 4000, epoch: int = 3) -> AddPartitionsToTxnRequest:
    A = AddPartitionsToTxnRequest
    return A(
        v3_and_below_transactional_id=tid,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[A.AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in topics.items()],
    )


def _results(resp: Any) -> dict[str, dict[int, int]]:
    return {t.name: {p.partition_index: p.partition_error_code for p in t.results_by_partition} for t in resp.results_by_topic_v3_and_below}


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_add_partitions_to_txn_answers_per_partition(version):
    ctx = make_ctx()
    resp = wire(transactions.add_partitions_to_txn, ctx, _add("tx", {"t": [1, 0], "u": [0]}), version, AddPartitionsToTxnResponse)
    assert _results(resp) == {"t": {0: 0, 1: 0}, "u": {0: 0}}
    [(index, kreq)] = sent(ctx, "add_partitions_to_txn")
    assert index == coordinator_for("tx", COORDINATORS)
    assert kreq == T.AddPartitionsToTxnRequest("tx", 4000, 3, {"t": [0, 1], "u": [0]}, verify_only=False, wire_version=version)


def test_add_partitions_to_a_missing_topic_is_unknown_topic_or_partition():
    ctx = make_ctx()
    ctx.backend.answers["add_partitions_to_txn"] = lambda r: T.AddPartitionsToTxnResponse(
        results={"t": {0: E.OPERATION_NOT_ATTEMPTED}, "missing": {0: E.UNKNOWN_TOPIC_OR_PARTITION}}
    )
    resp = wire(transactions.add_partitions_to_txn, ctx, _add("tx", {"t": [0], "missing": [0]}), 3, AddPartitionsToTxnResponse)
    assert _results(resp) == {"t": {0: E.OPERATION_NOT_ATTEMPTED}, "missing": {0: E.UNKNOWN_TOPIC_OR_PARTITION}}


def test_a_request_level_failure_reaches_every_partition():
    ctx = make_ctx()
    ctx.backend.answers["add_partitions_to_txn"] = lambda r: T.error_response(r, E.CONCURRENT_TRANSACTIONS)
    resp = wire(transactions.add_partitions_to_txn, ctx, _add("tx", {"t": [0, 2]}), 1, AddPartitionsToTxnResponse)
    assert _results(resp) == {"t": {0: E.CONCURRENT_TRANSACTIONS, 2: E.CONCURRENT_TRANSACTIONS}}


def test_add_partitions_to_txn_acls_are_kafkas():
    ctx = make_ctx(security=FakeSecurity({(Op.WRITE, RT.TRANSACTIONAL_ID, "tx"), (Op.WRITE, RT.TOPIC, "t")}))
    resp = wire(transactions.add_partitions_to_txn, ctx, _add("other", {"t": [0]}), 3, AddPartitionsToTxnResponse)
    assert _results(resp) == {"t": {0: E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}}
    resp = wire(transactions.add_partitions_to_txn, ctx, _add("tx", {"t": [0], "u": [0]}), 3, AddPartitionsToTxnResponse)
    assert _results(resp) == {"t": {0: E.OPERATION_NOT_ATTEMPTED}, "u": {0: E.TOPIC_AUTHORIZATION_FAILED}}
    assert not ctx.backend.calls  # nothing reached the coordinator


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_add_offsets_to_txn(version):
    ctx = make_ctx()
    resp = wire(transactions.add_offsets_to_txn, ctx, AddOffsetsToTxnRequest(transactional_id="tx", producer_id=4000, producer_epoch=3, group_id="g"), version, AddOffsetsToTxnResponse)
    assert resp.error_code == 0
    assert sent(ctx, "add_offsets_to_txn") == [(coordinator_for("tx", COORDINATORS), T.AddOffsetsToTxnRequest("tx", 4000, 3, "g", wire_version=version))]
    ctx = make_ctx(security=FakeSecurity({(Op.WRITE, RT.TRANSACTIONAL_ID, "tx")}))
    resp = wire(transactions.add_offsets_to_txn, ctx, AddOffsetsToTxnRequest(transactional_id="tx", producer_id=4000, producer_epoch=3, group_id="g"), version, AddOffsetsToTxnResponse)
    assert resp.error_code == E.GROUP_AUTHORIZATION_FAILED and not ctx.backend.calls


@pytest.mark.parametrize("version", [0, 1, 2, 3])
@pytest.mark.parametrize("commit", [True, False])
def test_end_txn_never_bumps_the_epoch_for_wire_clients(version, commit):
    ctx = make_ctx()
    resp = wire(transactions.end_txn, ctx, EndTxnRequest(transactional_id="tx", producer_id=4000, producer_epoch=3, committed=commit), version, EndTxnResponse)
    assert resp.error_code == 0
    assert sent(ctx, "end_txn") == [(coordinator_for("tx", COORDINATORS), T.EndTxnRequest("tx", 4000, 3, commit, bump_epoch=False, wire_version=version))]


@pytest.mark.parametrize("code", [E.INVALID_PRODUCER_ID_MAPPING, E.PRODUCER_FENCED, E.INVALID_TXN_STATE, E.CONCURRENT_TRANSACTIONS, E.NOT_COORDINATOR])
def test_end_txn_passes_the_coordinators_error_through(code):
    ctx = make_ctx()
    ctx.backend.answers["end_txn"] = lambda r: T.EndTxnResponse(code, "no")
    resp = wire(transactions.end_txn, ctx, EndTxnRequest(transactional_id="unknown", producer_id=1, producer_epoch=0, committed=True), 3, EndTxnResponse)
    assert resp.error_code == code


def test_a_cluster_without_transaction_coordinators_answers_coordinator_not_available():
    backend = FakeBackend()

    async def none() -> int:
        return 0

    backend.transaction_coordinators = none  # type: ignore[method-assign]
    ctx = make_ctx(backend)
    assert wire(transactions.end_txn, ctx, EndTxnRequest(transactional_id="tx", producer_id=1, producer_epoch=0, committed=True), 3, EndTxnResponse).error_code == E.COORDINATOR_NOT_AVAILABLE
    assert wire(cluster.find_coordinator, ctx, FindCoordinatorRequest(key="tx", key_type=1), 2, FindCoordinatorResponse).error_code == E.COORDINATOR_NOT_AVAILABLE


# -- TxnOffsetCommit -------------------------------------------------------------------------


def _commit(topics: dict[str, dict[int, int]], **member: Any) -> TxnOffsetCommitRequest:
    C = TxnOffsetCommitRequest
    Tp = C.TxnOffsetCommitRequestTopic
    return C(
        transactional_id="tx",
        group_id="g",
        producer_id=4000,
        producer_epoch=3,
        topics=[Tp(name=t, partitions=[Tp.TxnOffsetCommitRequestPartition(partition_index=p, committed_offset=o, committed_leader_epoch=2, committed_metadata="m") for p, o in ps.items()]) for t, ps in topics.items()],
        **member,
    )


def _commit_results(resp: Any) -> dict[str, dict[int, int]]:
    return {t.name: {p.partition_index: p.error_code for p in t.partitions} for t in resp.topics}


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_txn_offset_commit_goes_to_the_groups_coordinator(version):
    from kcoord.group.placement import coordinator_for as group_for

    ctx = make_ctx()
    member = {"generation_id": 7, "member_id": "m-1", "group_instance_id": "i-1"} if version >= 3 else {}
    resp = wire(transactions.txn_offset_commit, ctx, _commit({"t": {0: 10, 2: 12}, "missing": {0: 1}}, **member), version, TxnOffsetCommitResponse)
    assert _commit_results(resp) == {"t": {0: 0, 2: 0}, "missing": {0: E.UNKNOWN_TOPIC_OR_PARTITION}}
    [(index, kreq)] = ctx.backend.group_calls
    assert index == group_for("g", COORDINATORS)
    assert (kreq.transactional_id, kreq.group_id, kreq.producer_id, kreq.producer_epoch, kreq.wire_version) == ("tx", "g", 4000, 3, version)
    assert (kreq.generation_id, kreq.member_id, kreq.group_instance_id) == ((7, "m-1", "i-1") if version >= 3 else (-1, "", None))
    assert {t: {p: (o.offset, o.metadata, o.leader_epoch) for p, o in ps.items()} for t, ps in kreq.topics.items()} == {
        "t": {0: (10, "m", 2 if version >= 2 else -1), 2: (12, "m", 2 if version >= 2 else -1)}
    }


def test_txn_offset_commit_acls_are_kafkas():
    allowed = {(Op.WRITE, RT.TRANSACTIONAL_ID, "tx"), (Op.READ, RT.GROUP, "g"), (Op.READ, RT.TOPIC, "t")}
    ctx = make_ctx(security=FakeSecurity(allowed - {(Op.READ, RT.GROUP, "g")}))
    assert _commit_results(wire(transactions.txn_offset_commit, ctx, _commit({"t": {0: 1}}), 3, TxnOffsetCommitResponse)) == {"t": {0: E.GROUP_AUTHORIZATION_FAILED}}
    ctx = make_ctx(security=FakeSecurity(allowed - {(Op.WRITE, RT.TRANSACTIONAL_ID, "tx")}))
    assert _commit_results(wire(transactions.txn_offset_commit, ctx, _commit({"t": {0: 1}}), 3, TxnOffsetCommitResponse)) == {"t": {0: E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}}
    ctx = make_ctx(security=FakeSecurity(allowed))
    assert _commit_results(wire(transactions.txn_offset_commit, ctx, _commit({"t": {0: 1}, "u": {0: 1}}), 3, TxnOffsetCommitResponse)) == {"t": {0: 0}, "u": {0: E.TOPIC_AUTHORIZATION_FAILED}}
    assert [set(r.topics) for _, r in ctx.backend.group_calls] == [{"t"}]


# -- DescribeTransactions, ListTransactions --------------------------------------------------


def test_describe_transactions_asks_each_ids_coordinator_and_keeps_the_request_order():
    ids = [f"tx-{i}" for i in range(8)]
    ctx = make_ctx(security=FakeSecurity({(Op.DESCRIBE, RT.TRANSACTIONAL_ID, t) for t in ids if t != "tx-3"} | {(Op.DESCRIBE, RT.TOPIC, "t")}))
    resp = wire(transactions.describe_transactions, ctx, DescribeTransactionsRequest(transactional_ids=ids), 0, DescribeTransactionsResponse)
    assert [s.transactional_id for s in resp.transaction_states] == ids
    for s in resp.transaction_states:
        if s.transactional_id == "tx-3":
            assert s.error_code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        else:
            assert (s.error_code, s.transaction_state, s.producer_id, s.producer_epoch, s.transaction_timeout_ms, s.transaction_start_time_ms) == (0, "Ongoing", 4000, 3, 60000, 5)
            assert [(t.topic, t.partitions) for t in s.topics] == [("t", [0, 1])]  # "secret" is not describable
    for index, kreq in sent(ctx, "describe_transactions"):
        assert all(coordinator_for(t, COORDINATORS) == index for t in kreq.transactional_ids)
    assert sorted(t for _, r in sent(ctx, "describe_transactions") for t in r.transactional_ids) == sorted(set(ids) - {"tx-3"})


@pytest.mark.parametrize("version", [0, 1])
def test_list_transactions_lists_the_coordinators_of_the_connections_broker(version):
    ctx = make_ctx()
    seen = []
    for broker in BROKERS:
        req = ListTransactionsRequest(state_filters=["Ongoing", "Nope"], producer_id_filters=[4001], duration_filter=1000)
        resp = wire(transactions.list_transactions, ctx, req, version, ListTransactionsResponse, conn=Connection(broker=broker))
        assert resp.error_code == 0 and resp.unknown_state_filters == ["Nope"]
        seen += [s.transactional_id for s in resp.transaction_states]
    assert sorted(seen) == sorted(f"tx-of-{i}" for i in range(COORDINATORS))  # each once
    for index, kreq in sent(ctx, "list_transactions"):
        assert (kreq.states_filter, kreq.producer_ids_filter, kreq.duration_filter_ms) == (["Ongoing", "Nope"], [4001], 1000 if version >= 1 else -1)


def test_describe_producers_answers_each_partition_from_its_leader():
    ctx = make_ctx(security=FakeSecurity({(Op.READ, RT.TOPIC, "t"), (Op.READ, RT.TOPIC, "missing")}))
    Q = DescribeProducersRequest
    req = Q(topics=[Q.TopicRequest(name="t", partition_indexes=[0, 2]), Q.TopicRequest(name="u", partition_indexes=[0]), Q.TopicRequest(name="missing", partition_indexes=[1])])
    resp = wire(transactions.describe_producers, ctx, req, 0, DescribeProducersResponse)
    got = {(t.name, p.partition_index): (p.error_code, [(s.producer_id, s.producer_epoch, s.last_sequence, s.last_timestamp, s.coordinator_epoch, s.current_txn_start_offset) for s in p.active_producers]) for t in resp.topics for p in t.partitions}
    assert got == {
        ("t", 0): (0, [(4000, 3, 9, -1, 2, 11)]),
        ("t", 2): (0, [(4002, 3, 9, -1, 2, 11)]),
        ("u", 0): (E.TOPIC_AUTHORIZATION_FAILED, []),
        ("missing", 1): (E.UNKNOWN_TOPIC_OR_PARTITION, []),
    }


# -- Produce ---------------------------------------------------------------------------------


def _produce(tid: str | None, batches: dict[tuple[str, int], bytes]) -> ProduceRequest:
    P = ProduceRequest
    by_topic: dict[str, list] = {}
    for (t, p), b in batches.items():
        by_topic.setdefault(t, []).append(P.TopicProduceData.PartitionProduceData(index=p, records=b))
    return P(transactional_id=tid, acks=-1, timeout_ms=1000, topic_data=[P.TopicProduceData(name=t, partition_data=ps) for t, ps in by_topic.items()])


def _txn_batch(seq: int = 0, pid: int = 4000, epoch: int = 3) -> bytes:
    return build_kafka_batch([(None, b"v", [], 1)], producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=True)


def _produce_codes(resp: Any) -> dict[tuple[str, int], int]:
    return {(t.name, p.index): p.error_code for t in resp.responses for p in t.partition_responses}


def test_a_transactional_batch_needs_a_transactional_id():
    resp = wire(data.produce, make_ctx(), _produce(None, {("t", 0): _txn_batch()}), 8, ProduceResponse)
    assert _produce_codes(resp) == {("t", 0): E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}


def test_transactional_batches_go_to_their_leaders_with_the_transactional_id_and_no_check_here():
    """The leaders verify a transaction's first batch with the coordinator (KIP-890 part 1,
    atomically with the append: tests/unit/test_txn_verification.py); the listener asks
    nobody, so a transactional produce costs no extra round trip here."""
    ctx = make_ctx()
    resp = wire(data.produce, ctx, _produce("tx", {("t", 0): _txn_batch(0), ("t", 1): _txn_batch(0)}), 8, ProduceResponse)
    assert _produce_codes(resp) == {("t", 0): 0, ("t", 1): 0}
    assert sorted((r.topic, r.partition, r.transactional_id) for r in ctx.backend.produced) == [("t", 0, "tx"), ("t", 1, "tx")]
    assert R_attributes(ctx.backend.produced[0].records) & 0x10  # stored as sent: transactional
    assert not sent(ctx, "add_partitions_to_txn")


def test_a_leaders_refusal_of_an_unverified_batch_reaches_the_client():
    from kcoord.protocol.replication import ProduceResponse as ReplicaProduceResponse

    class Refusing(FakeBackend):
        async def submit_produce(self, req: Any) -> Any:
            self.produced.append(req)

            async def answer() -> ReplicaProduceResponse:
                return ReplicaProduceResponse(E.INVALID_TXN_STATE, "t-0 is not in its ongoing transaction")

            return answer()

    resp = wire(data.produce, make_ctx(Refusing()), _produce("tx", {("t", 0): _txn_batch(0)}), 8, ProduceResponse)
    assert _produce_codes(resp) == {("t", 0): E.INVALID_TXN_STATE}


def test_a_control_batch_from_a_client_is_invalid_record():
    marker = build_control_batch(commit=True, producer_id=4000, producer_epoch=3, coordinator_epoch=0, timestamp_ms=1)
    resp = wire(data.produce, make_ctx(), _produce("tx", {("t", 0): marker}), 8, ProduceResponse)
    assert _produce_codes(resp) == {("t", 0): E.INVALID_RECORD}


def R_attributes(batch: bytes) -> int:
    from kcoord import records as R

    return R.read_header(batch).attributes


# -- OffsetFetch v7 require_stable (KIP-447) ----------------------------------------------------


@pytest.mark.parametrize("version", [5, 6, 7])
def test_offset_fetch_passes_require_stable_from_v7_and_answers_unstable_offsets(version):
    from kafka.protocol.consumer import OffsetFetchRequest, OffsetFetchResponse

    from kcoord.kafka.handlers import consumer_groups
    from kcoord.protocol import group as G

    asked = []

    class Groups(FakeBackend):
        async def group_call(self, method: str, req: Any, index: int, timeout: float = 330.0) -> Any:
            asked.append(req)
            code = E.UNSTABLE_OFFSET_COMMIT if req.require_stable else 0
            return G.OffsetFetchResponse(offsets={"t": {0: G.OffsetFetchPartition(offset=-1 if code else 5, error_code=code)}})

    assert served_versions()[9] == (1, 7)
    ctx = make_ctx(Groups())
    Q = OffsetFetchRequest
    req = Q(group_id="g", topics=[Q.OffsetFetchRequestTopic(name="t", partition_indexes=[0])], require_stable=True)
    resp = wire(consumer_groups.offset_fetch, ctx, req, version, OffsetFetchResponse)
    [p] = resp.topics[0].partitions
    assert [r.require_stable for r in asked] == [version >= 7]
    assert (p.error_code, p.committed_offset) == ((E.UNSTABLE_OFFSET_COMMIT, -1) if version >= 7 else (0, 5))


def test_the_listener_reads_the_deployment_record_where_deployment_writes_it():
    from cluster.deploy_info import DEPLOY_INFO_KEY

    from kcoord.kafka.addresses import DEPLOY_INFO_KEY as READ_AT

    assert READ_AT == DEPLOY_INFO_KEY
