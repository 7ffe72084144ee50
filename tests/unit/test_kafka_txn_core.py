"""Kafka requests through the listener's handlers into kcoord's real transaction coordinator
core and real partition leader cores (no Ray: a driver inlined here acknowledges every
coordinator append at once, writes markers into the leaders, and serves the leaders' KIP-890
checks from the coordinator cores). What a
Kafka client at each version hears for the cases it must handle: a new instance fencing the
old one, an unknown transactional id, a stale epoch, a partition of a missing topic, a
transactional batch to a partition never added, and the commit of one that was."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kafka.protocol.producer import (
    AddPartitionsToTxnRequest as A,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceResponse,
)

from kcoord.kafka.handlers import cluster, data, transactions
from kcoord.protocol import txn as T
from kcoord.protocol.errors import ErrorCode as E
from kcoord.log.config import LogConfig
from kcoord.log.memory import MemoryLog
from kcoord.protocol.controller import LeaderAndIsrRequest
from kcoord.protocol.replication import READ_COMMITTED, FetchRequest
from kcoord.replication.actions import VerifyTxn
from kcoord.replication.config import ReplicationConfig
from kcoord.replication.replica import Replica
from kcoord.runtime.actions import AppendRecords, Reply
from kcoord.txn.placement import coordinator_for
from kcoord.txn import AllocateProducerIds, RefreshMetadata, SendTxnOffsetMarker, SendWriteTxnMarker, TransactionCoordinatorState

from test_kafka_txn_wire import COORDINATORS, FakeBackend, _produce, _produce_codes, _txn_batch, make_ctx, wire


class CoreBackend(FakeBackend):
    """Transaction coordinators that are kcoord's cores; every write succeeds at once."""

    def __init__(self, verify: bool = True) -> None:
        super().__init__()
        self.verify = verify
        self.replicas: dict[tuple[str, int], Replica] = {}
        self.cores = {i: TransactionCoordinatorState(partition=i, num_partitions=COORDINATORS, offsets_partitions=COORDINATORS) for i in range(COORDINATORS)}
        self.next_pid = 1000
        self.markers: list[Any] = []
        self.now = 1_000_000
        for core in self.cores.values():
            self._run(core, core.load([], self.now), {})

    def _run(self, core: TransactionCoordinatorState, actions: list, replies: dict) -> None:
        todo = list(actions)
        while todo:
            a = todo.pop(0)
            if isinstance(a, Reply):
                replies[a.token] = a.response
            elif isinstance(a, AppendRecords):
                todo += core.on_persisted(a.persist_id, 0, self.now)
            elif isinstance(a, SendWriteTxnMarker):
                self.markers.append(a.request)
                answered = self._lead(self.replica(a.request.topic, a.request.partition), a.request)
                todo += core.on_marker_written(a.marker_id, answered.error_code, self.now)
            elif isinstance(a, SendTxnOffsetMarker):
                self.markers.append(a.request)
                todo += core.on_marker_written(a.marker_id, 0, self.now)
            elif isinstance(a, AllocateProducerIds):
                first, self.next_pid = self.next_pid, self.next_pid + a.count
                todo += core.on_producer_ids(first, a.count, 0, self.now)
            elif isinstance(a, RefreshMetadata):
                todo += core.on_metadata(dict(self.topics), self.now)

    def replica(self, topic: str, partition: int) -> Replica:
        """The sole replica (and leader) of ``topic-partition``."""
        r = self.replicas.get((topic, partition))
        if r is None:
            config = ReplicationConfig(transaction_partition_verification=self.verify)
            r = self.replicas[(topic, partition)] = Replica(topic, partition, 0, MemoryLog(LogConfig(flush_messages=1)), config, self.now, config_version=0)
            r.handle(LeaderAndIsrRequest(1, topic, partition, leader=0, leader_epoch=1, partition_epoch=1, isr=[0], replicas=[0]), None, self.now)
        return r

    def _lead(self, r: Replica, request: Any) -> Any:
        """``request`` served by leader ``r``, its KIP-890 checks answered by the coordinator
        cores; its answer."""
        replies: dict = {}
        todo = list(r.handle(request, "r", self.now))
        while todo:
            a = todo.pop(0)
            if isinstance(a, Reply):
                replies[a.token] = a.response
            elif isinstance(a, VerifyTxn):
                index = coordinator_for(a.request.transactional_id, COORDINATORS)
                self.calls.append(("add_partitions_to_txn", index, a.request))
                core, answer = self.cores[index], {}
                self._run(core, core.handle(a.request, "v", self.now), answer)
                todo += r.on_txn_verified(a.verify_id, answer["v"], self.now)
        return replies["r"]

    async def submit_produce(self, req: Any) -> Any:
        resp = self._lead(self.replica(req.topic, req.partition), req)
        if resp.error_code == 0:
            self.produced.append(req)

        async def answer() -> Any:
            return resp

        return answer()

    def last_stable_offset(self, topic: str, partition: int) -> int:
        r = self.replica(topic, partition)
        replies: dict = {}
        for a in r.handle(FetchRequest(topic, partition, 0, max_wait_ms=0, isolation_level=READ_COMMITTED), "f", self.now):
            if isinstance(a, Reply):
                replies[a.token] = a.response
        return replies["f"].last_stable_offset

    async def txn_call(self, method: str, req: Any, index: int, timeout: float = 60.0) -> Any:
        self.calls.append((method, index, req))
        self.now += 1
        core = self.cores[index]
        replies: dict = {}
        self._run(core, core.handle(type(req).decode(req.encode()), "t", self.now), replies)
        return replies["t"]


def _init(ctx, tid: str, version: int = 4) -> Any:
    for _ in range(10):  # CONCURRENT_TRANSACTIONS while an older instance's abort completes
        resp = wire(cluster.init_producer_id, ctx, InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=60000), version, InitProducerIdResponse)
        if resp.error_code != E.CONCURRENT_TRANSACTIONS:
            return resp
    return resp


def _end(ctx, tid: str, pid: int, epoch: int, commit: bool, version: int = 3) -> int:
    return wire(transactions.end_txn, ctx, EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit), version, EndTxnResponse).error_code


def _add(ctx, tid: str, pid: int, epoch: int, topics: dict[str, list[int]], version: int = 3) -> dict:
    req = A(v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch, v3_and_below_topics=[A.AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in topics.items()])
    for _ in range(3):  # COORDINATOR_LOAD_IN_PROGRESS until the coordinator has read the topics once
        resp = wire(transactions.add_partitions_to_txn, ctx, req, version, AddPartitionsToTxnResponse)
        got = {r.name: {p.partition_index: p.partition_error_code for p in r.results_by_partition} for r in resp.results_by_topic_v3_and_below}
        if {c for ps in got.values() for c in ps.values()} != {E.COORDINATOR_LOAD_IN_PROGRESS}:
            return got
    return got


def test_a_transaction_through_the_listener_commits_with_markers_at_its_epoch():
    ctx = make_ctx(CoreBackend())
    first = _init(ctx, "etl")
    assert first.error_code == 0 and first.producer_epoch == 0
    pid, epoch = first.producer_id, first.producer_epoch
    assert _add(ctx, "etl", pid, epoch, {"t": [0, 1]}) == {"t": {0: 0, 1: 0}}
    resp = wire(data.produce, ctx, _produce("etl", {("t", 0): _txn_batch(0, pid, epoch), ("t", 1): _txn_batch(0, pid, epoch), ("t", 2): _txn_batch(0, pid, epoch)}), 8, ProduceResponse)
    assert _produce_codes(resp) == {("t", 0): 0, ("t", 1): 0, ("t", 2): E.INVALID_TXN_STATE}  # t-2 was never added
    assert _end(ctx, "etl", pid, epoch, commit=True) == 0
    assert sorted((m.topic, m.partition, m.commit, m.producer_epoch) for m in ctx.backend.markers) == [("t", 0, True, 0), ("t", 1, True, 0)]
    # the same instance goes on at the same epoch (EndTxn v0-3 does not bump it)
    assert _add(ctx, "etl", pid, epoch, {"t": [2]}) == {"t": {2: 0}}
    assert _end(ctx, "etl", pid, epoch, commit=False) == 0


def test_a_second_instance_fences_the_first_with_the_code_each_version_knows():
    ctx = make_ctx(CoreBackend())
    old = _init(ctx, "shared")
    assert _add(ctx, "shared", old.producer_id, old.producer_epoch, {"t": [0]}) == {"t": {0: 0}}
    new = _init(ctx, "shared")  # aborts the old instance's transaction first
    assert (new.error_code, new.producer_id, new.producer_epoch) == (0, old.producer_id, old.producer_epoch + 2)
    assert [(m.commit, m.producer_epoch) for m in ctx.backend.markers] == [(False, old.producer_epoch + 1)]
    for version, code in ((3, E.PRODUCER_FENCED), (2, E.PRODUCER_FENCED), (1, E.INVALID_PRODUCER_EPOCH), (0, E.INVALID_PRODUCER_EPOCH)):
        assert _end(ctx, "shared", old.producer_id, old.producer_epoch, True, version) == code
        assert _add(ctx, "shared", old.producer_id, old.producer_epoch, {"t": [1]}, version) == {"t": {1: code}}
    # and its produce never lands
    resp = wire(data.produce, ctx, _produce("shared", {("t", 0): _txn_batch(1, old.producer_id, old.producer_epoch)}), 8, ProduceResponse)
    assert _produce_codes(resp) == {("t", 0): E.INVALID_PRODUCER_EPOCH} and not ctx.backend.produced
    assert ctx.backend.replica("t", 0).log.producer_state.ongoing_transactions() == {}


def test_bad_transactional_requests_get_kafkas_codes():
    ctx = make_ctx(CoreBackend())
    assert _end(ctx, "nobody", 42, 0, commit=True) == E.INVALID_PRODUCER_ID_MAPPING
    assert _add(ctx, "nobody", 42, 0, {"t": [0]}) == {"t": {0: E.INVALID_PRODUCER_ID_MAPPING}}
    p = _init(ctx, "tx")
    assert _add(ctx, "tx", p.producer_id, p.producer_epoch, {"t": [0], "missing": [0]}) == {"t": {0: E.OPERATION_NOT_ATTEMPTED}, "missing": {0: E.UNKNOWN_TOPIC_OR_PARTITION}}
    assert _add(ctx, "tx", p.producer_id, p.producer_epoch, {"t": [7]}) == {"t": {7: E.UNKNOWN_TOPIC_OR_PARTITION}}  # no such partition
    assert _end(ctx, "tx", p.producer_id, p.producer_epoch, commit=True) == E.INVALID_TXN_STATE  # nothing to commit
    assert _end(ctx, "tx", p.producer_id + 1, p.producer_epoch, commit=True) == E.INVALID_PRODUCER_ID_MAPPING
    assert wire(cluster.init_producer_id, ctx, InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=10**9), 4, InitProducerIdResponse).error_code == E.INVALID_TRANSACTION_TIMEOUT


@pytest.mark.parametrize("verify", [True, False])
def test_a_retried_produce_after_its_transactions_markers_cannot_hang_the_lso(verify):
    """KIP-890 part 1 over the wire: a Kafka client's produce of its aborted transaction,
    arriving after the transaction's markers (a retry, or a zombie at the same epoch), is
    refused by the leader, and the LSO reaches the log end. With verification off (kcoord's
    leaders before KIP-890, with a check at the listener racing the markers) the write
    lands after the marker and opens a transaction no marker will end: the LSO hangs."""
    ctx = make_ctx(CoreBackend(verify=verify))
    p = _init(ctx, "late")
    pid, epoch = p.producer_id, p.producer_epoch
    assert _add(ctx, "late", pid, epoch, {"t": [0]}) == {"t": {0: 0}}
    resp = wire(data.produce, ctx, _produce("late", {("t", 0): _txn_batch(0, pid, epoch)}), 8, ProduceResponse)
    assert _produce_codes(resp) == {("t", 0): 0}
    assert _end(ctx, "late", pid, epoch, commit=False) == 0  # aborted; its marker landed
    end = ctx.backend.replica("t", 0).log.log_end_offset
    assert ctx.backend.last_stable_offset("t", 0) == end
    late = wire(data.produce, ctx, _produce("late", {("t", 0): _txn_batch(1, pid, epoch)}), 8, ProduceResponse)
    if verify:
        assert _produce_codes(late) == {("t", 0): E.INVALID_TXN_STATE}
        assert ctx.backend.replica("t", 0).log.log_end_offset == end
        assert ctx.backend.last_stable_offset("t", 0) == end
    else:
        assert _produce_codes(late) == {("t", 0): 0}
        assert ctx.backend.last_stable_offset("t", 0) == end < ctx.backend.replica("t", 0).log.log_end_offset
        assert ctx.backend.cores[coordinator_for("late", COORDINATORS)].transaction("late").state.name == "COMPLETE_ABORT"
