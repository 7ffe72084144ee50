"""WriteTxnMarkers (27) on the listener, what Kafka's Admin.abortTransaction sends (KIP-664):
through kafka-python's encoder into the handler, whose leaders here are real kcoord logs
(``MemoryLog.append_control_as_leader``, the checks a partition leader makes), so the epochs
are checked by the code the replicas run. No Ray."""

from __future__ import annotations

from typing import Any

import pytest
from kafka.protocol.producer import WriteTxnMarkersRequest as W, WriteTxnMarkersResponse

from kcoord import record as R
from kcoord.kafka.handlers import build_apis, served_versions, transactions
from kcoord.log import LogConfig, MemoryLog
from kcoord.protocol import txn as T
from kcoord.protocol.errors import ErrorCode as E, KafkaError
from kcoord.security.acl import CLUSTER_NAME, ACLOperation as Op, ResourceType as RT

from test_kafka_txn_wire import FakeBackend, FakeSecurity, make_ctx, wire

NOW = 1_700_000_000_000


class LogBackend(FakeBackend):
    """Partition leaders that are kcoord logs: a marker is appended with the leader's checks."""

    def __init__(self) -> None:
        super().__init__()
        self.logs = {(t, p): MemoryLog(LogConfig(), now_ms=NOW) for t, n in self.topics.items() for p in range(n)}
        self.offset_markers: list[tuple[int, Any]] = []

    async def write_txn_marker(self, req: T.WriteTxnMarkerRequest) -> T.WriteTxnMarkerResponse:
        log = self.logs.get((req.topic, req.partition))
        if log is None:
            return T.WriteTxnMarkerResponse(E.UNKNOWN_TOPIC_OR_PARTITION, f"{req.topic}-{req.partition}: no leader known")
        try:
            info = log.append_control_as_leader(
                commit=req.commit, producer_id=req.producer_id, producer_epoch=req.producer_epoch, coordinator_epoch=req.coordinator_epoch, leader_epoch=0, now_ms=NOW
            )
        except KafkaError as exc:
            return T.WriteTxnMarkerResponse(int(exc.code), exc.message)
        return T.WriteTxnMarkerResponse(offset=info.base_offset)

    async def txn_offset_marker(self, req: T.TxnOffsetMarkerRequest, index: int, timeout: float = 60.0) -> Any:
        self.offset_markers.append((index, req))
        return T.TxnOffsetMarkerResponse()


def _hang(backend: LogBackend, topic: str, partition: int, pid: int, epoch: int = 0) -> MemoryLog:
    """A transaction of ``pid`` open at ``topic``-``partition`` that no coordinator will end."""
    log = backend.logs[(topic, partition)]
    log.append_as_leader(R.build_batch([(None, b"x")], producer_id=pid, producer_epoch=epoch, base_sequence=0, transactional=True), 0, NOW)
    return log


def _abort(pid: int, epoch: int, coordinator_epoch: int, topics: dict[str, list[int]], commit: bool = False) -> Any:
    M = W.WritableTxnMarker
    return W(markers=[M(producer_id=pid, producer_epoch=epoch, transaction_result=commit, coordinator_epoch=coordinator_epoch, topics=[M.WritableTxnMarkerTopic(name=t, partition_indexes=ps) for t, ps in topics.items()])])


def _codes(resp: Any) -> dict[tuple[int, str, int], int]:
    return {(m.producer_id, t.name, p.partition_index): p.error_code for m in resp.markers for t in m.topics for p in t.partitions}


def test_write_txn_markers_is_served_at_the_versions_kafka_4_serves_and_kafka_python_encodes():
    assert served_versions()[27] == (1, 2)
    api = build_apis(make_ctx())[27]
    assert api.request.max_version >= 2 and api.response.max_version >= 2


@pytest.mark.parametrize("version", [1, 2])
def test_an_admin_abort_ends_a_hanging_transaction_and_the_lso_moves_past_it(version):
    backend = LogBackend()
    log = _hang(backend, "t", 1, pid=9000)
    assert log.last_stable_offset(log.log_end_offset) == 0  # the open transaction holds the LSO
    resp = wire(transactions.write_txn_markers, make_ctx(backend), _abort(9000, 0, 0, {"t": [1]}), version, WriteTxnMarkersResponse)
    assert _codes(resp) == {(9000, "t", 1): 0}
    assert log.producer_state.ongoing_transactions() == {} and log.last_stable_offset(log.log_end_offset) == log.log_end_offset == 2
    assert [(e.producer_id, e.first_offset, e.last_offset) for e in log.txn_index.entries()] == [(9000, 0, 1)]


def test_wrong_epochs_and_missing_partitions_are_kafka_error_codes_per_partition():
    backend = LogBackend()
    log = _hang(backend, "t", 0, pid=9001, epoch=5)
    backend.logs[("t", 2)].append_control_as_leader(commit=True, producer_id=9001, producer_epoch=5, coordinator_epoch=7, leader_epoch=0, now_ms=NOW)
    resp = wire(transactions.write_txn_markers, make_ctx(backend), _abort(9001, 4, 7, {"t": [0, 2, 9], "nope": [0]}), 1, WriteTxnMarkersResponse)
    assert _codes(resp) == {
        (9001, "t", 0): E.INVALID_PRODUCER_EPOCH,  # older than the producer's epoch at the leader
        (9001, "t", 2): E.INVALID_PRODUCER_EPOCH,
        (9001, "t", 9): E.UNKNOWN_TOPIC_OR_PARTITION,
        (9001, "nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION,
    }
    resp = wire(transactions.write_txn_markers, make_ctx(backend), _abort(9001, 5, 6, {"t": [2]}), 1, WriteTxnMarkersResponse)
    assert _codes(resp) == {(9001, "t", 2): E.TRANSACTION_COORDINATOR_FENCED}  # an older coordinator epoch than the last marker's
    assert log.producer_state.ongoing_transactions() == {9001: 0}  # nothing was written to the open one


def test_write_txn_markers_needs_cluster_action():
    backend = LogBackend()
    log = _hang(backend, "t", 0, pid=9002)
    denied = make_ctx(backend, security=FakeSecurity({(Op.DESCRIBE, RT.CLUSTER, CLUSTER_NAME), (Op.ALL, RT.TOPIC, "t")}))
    resp = wire(transactions.write_txn_markers, denied, _abort(9002, 0, 0, {"t": [0]}), 1, WriteTxnMarkersResponse)
    assert _codes(resp) == {(9002, "t", 0): E.CLUSTER_AUTHORIZATION_FAILED} and log.producer_state.ongoing_transactions() == {9002: 0}
    allowed = make_ctx(backend, security=FakeSecurity({(Op.CLUSTER_ACTION, RT.CLUSTER, CLUSTER_NAME)}))
    resp = wire(transactions.write_txn_markers, allowed, _abort(9002, 0, 0, {"t": [0]}), 1, WriteTxnMarkersResponse)
    assert _codes(resp) == {(9002, "t", 0): 0} and log.producer_state.ongoing_transactions() == {}


def test_a_marker_for_consumer_offsets_goes_to_that_partitions_group_coordinator():
    backend = LogBackend()
    resp = wire(transactions.write_txn_markers, make_ctx(backend), _abort(9003, 1, 2, {"__consumer_offsets": [1, 99]}, commit=True), 1, WriteTxnMarkersResponse)
    assert _codes(resp) == {(9003, "__consumer_offsets", 1): 0, (9003, "__consumer_offsets", 99): E.UNKNOWN_TOPIC_OR_PARTITION}
    assert [(i, r.producer_id, r.producer_epoch, r.coordinator_epoch, r.commit, r.partition) for i, r in backend.offset_markers] == [(1, 9003, 1, 2, True, 1)]
