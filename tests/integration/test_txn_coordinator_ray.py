"""The transaction coordinator on real Ray (docs/transactions.md, section 2): the
TransactionCoordinatorActor deployed with the cluster, its driver writing
``__transaction_state`` and the markers to real partition leaders, read back by kcoord's
Consumer in both isolation levels. The test plays the transactional producer's part with the
coordinator's RPC methods and transactional batches built as the producer builds them."""

from __future__ import annotations

import time
import uuid

import pytest
import ray

from waiting import wait_until
from kcoord import records as R
from kcoord.client.admin import Admin
from kcoord.client.consumer import Consumer
from kcoord.client.types import TopicPartition
from kcoord.protocol import names
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.replication import ProduceRequest, ProduceResponse
from kcoord.protocol.services import RESPONSE_FOR, TRANSACTION_COORDINATOR
from kcoord.protocol.txn import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    DescribeTransactionsRequest,
    EndTxnRequest,
    ListTransactionsRequest,
    TxnInitProducerIdRequest,
)
from kcoord.txn import TRANSACTION_STATE_TOPIC

pytestmark = pytest.mark.ray

E = ErrorCode
RETRY = {E.COORDINATOR_LOAD_IN_PROGRESS, E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR, E.CONCURRENT_TRANSACTIONS}
METHOD = {request_type: name for name, request_type in TRANSACTION_COORDINATOR.methods.items()}


def coordinator(cluster):
    return ray.get_actor(names.transaction_coordinator(cluster.name, 0), namespace=cluster.namespace)


def call(cluster, request, timeout_s: float = 30.0):
    """One RPC to transaction coordinator 0 (the cluster has one): the decoded answer."""
    raw = ray.get(getattr(coordinator(cluster), METHOD[type(request)]).remote(request.encode()), timeout=timeout_s)
    return RESPONSE_FOR[type(request)].decode(raw)


def call_until_settled(cluster, request, deadline_s: float = 60.0):
    """Retry while the answer is retriable (loading, a restart, a transition in flight) or the
    actor is restarting; the first other answer."""

    def settled():
        response = call(cluster, request, timeout_s=10)
        return response if response.error_code not in RETRY else None

    return wait_until(settled, timeout=deadline_s, interval=0.1, what=f"{type(request).__name__} answered other than {sorted(RETRY)}")


def state_of(cluster, tid: str) -> str:
    return call_until_settled(cluster, DescribeTransactionsRequest([tid])).transactions[0].state


class TxnProducer:
    """The transactional producer's side: init, add partitions, produce batches, end."""

    def __init__(self, cluster, tid: str, timeout_ms: int = 60_000) -> None:
        self.cluster, self.tid = cluster, tid
        r = call_until_settled(cluster, TxnInitProducerIdRequest(tid, transaction_timeout_ms=timeout_ms))
        assert r.error_code == E.NONE, r
        self.pid, self.epoch = r.producer_id, r.producer_epoch
        self.sequences: dict[tuple[str, int], int] = {}

    def add(self, topic: str, partitions: list[int]):
        return call_until_settled(self.cluster, AddPartitionsToTxnRequest(self.tid, self.pid, self.epoch, {topic: partitions}))

    def send(self, topic: str, partition: int, values: list[bytes]) -> int:
        seq = self.sequences.get((topic, partition), 0)
        batch = R.build_batch([(None, v) for v in values], producer_id=self.pid, producer_epoch=self.epoch, base_sequence=seq, transactional=True)
        self.sequences[(topic, partition)] = seq + len(values)
        resp = self.cluster.call_leader(
            topic, partition, "produce", lambda le: ProduceRequest(topic, partition, batch, acks=-1, current_leader_epoch=le, transactional_id=self.tid), ProduceResponse
        )
        assert resp.error_code == E.NONE, resp
        return resp.base_offset

    def end(self, commit: bool):
        return call_until_settled(self.cluster, EndTxnRequest(self.tid, self.pid, self.epoch, commit))


def read_all(cluster, topic: str, partitions: int, isolation_level: str) -> list[bytes]:
    """Every record a fresh consumer reads from the start up to the end offsets of its
    isolation level (the LSO for read_committed: it moves past markers and aborted batches),
    polling until its positions reach them (30 s at most)."""
    got: list[bytes] = []
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    with Consumer(cluster=cluster, auto_offset_reset="earliest", isolation_level=isolation_level) as c:
        c.assign(tps)
        ends = c.end_offsets(tps)
        deadline = time.monotonic() + 30
        while any(c.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, f"positions {[c.position(tp) for tp in tps]} never reached {ends}"
            for recs in c.poll(timeout_ms=200).values():
                got.extend(r.value for r in recs)
    return sorted(got)


def lso(cluster, topic: str, partition: int) -> int:
    with Consumer(cluster=cluster, isolation_level="read_committed") as c:
        return c.end_offsets([TopicPartition(topic, partition)])[TopicPartition(topic, partition)]


@pytest.fixture(scope="module")
def txn_cluster(kcluster):
    """The shared cluster with its transaction coordinator loaded."""
    ray.get(coordinator(kcluster).ready.remote(60), timeout=90)
    return kcluster


@pytest.fixture
def topic(txn_cluster):
    name = f"txn-{uuid.uuid4().hex[:6]}"
    Admin(txn_cluster).create_topic(name, partitions=2, replication_factor=3, config={"min.insync.replicas": 2})
    yield name
    Admin(txn_cluster).delete_topic(name)


def tid() -> str:
    return f"tx-{uuid.uuid4().hex[:8]}"


def test_deploy_creates_the_transaction_state_topic_and_the_coordinator(txn_cluster):
    described = Admin(txn_cluster).describe_topic(TRANSACTION_STATE_TOPIC)
    assert described["internal"]
    assert described["config"]["cleanup.policy"] == "compact"
    assert len(described["partitions"]) == 1
    d = ray.get(coordinator(txn_cluster).describe.remote(), timeout=30)
    assert d["loaded"] and not d["fenced"]
    assert d["coordinator_epoch"] == d["producer"][1] >= 0


def test_init_producer_id_bumps_the_epoch_and_fences_the_older_instance(txn_cluster, topic):
    t = tid()
    old = TxnProducer(txn_cluster, t)
    new = TxnProducer(txn_cluster, t)
    assert (new.pid, new.epoch) == (old.pid, old.epoch + 1)
    assert old.add(topic, [0]).results[topic][0] == E.PRODUCER_FENCED
    assert old.end(commit=True).error_code == E.PRODUCER_FENCED
    assert new.add(topic, [0]).results[topic][0] == E.NONE
    # An ongoing transaction of the older instance is aborted by the next init.
    new.send(topic, 0, [b"zombie"])
    newest = TxnProducer(txn_cluster, t)  # CONCURRENT_TRANSACTIONS until the abort completed
    assert newest.epoch == new.epoch + 2  # the abort's bump, then this instance's
    assert state_of(txn_cluster, t) == "Empty"
    assert new.end(commit=True).error_code == E.PRODUCER_FENCED
    assert read_all(txn_cluster, topic, 1, "read_committed") == []
    assert lso(txn_cluster, topic, 0) == 2  # the zombie's record and the abort marker


def test_producer_ids_of_different_transactional_ids_differ_and_come_from_the_allocator(txn_cluster):
    a, b = TxnProducer(txn_cluster, tid()), TxnProducer(txn_cluster, tid())
    assert a.pid != b.pid
    assert min(a.pid, b.pid) >= 1000  # the controller's allocator: below are coordinators' ids


def test_commit_writes_markers_and_read_committed_sees_the_records(txn_cluster, topic):
    p = TxnProducer(txn_cluster, tid())
    assert p.add(topic, [0, 1]).results == {topic: {0: E.NONE, 1: E.NONE}}
    first = p.send(topic, 0, [b"a-0", b"a-1"])
    p.send(topic, 1, [b"b-0"])
    assert lso(txn_cluster, topic, 0) == first  # the open transaction holds the LSO
    started = time.monotonic()
    r = p.end(commit=True)
    answered_s = time.monotonic() - started
    assert r.error_code == E.NONE, r
    wait_until(lambda: state_of(txn_cluster, p.tid) == "CompleteCommit", timeout=30, what="the markers of the commit")
    completed_s = time.monotonic() - started
    assert read_all(txn_cluster, topic, 2, "read_committed") == [b"a-0", b"a-1", b"b-0"]
    assert lso(txn_cluster, topic, 0) == first + 3  # two records and the marker
    print(f"\nEndTxn commit answered in {answered_s * 1000:.0f} ms, markers written in {completed_s * 1000:.0f} ms")


def test_abort_hides_the_records_from_read_committed_only(txn_cluster, topic):
    p = TxnProducer(txn_cluster, tid())
    p.add(topic, [0])
    p.send(topic, 0, [b"x-0", b"x-1"])
    assert p.end(commit=False).error_code == E.NONE
    wait_until(lambda: state_of(txn_cluster, p.tid) == "CompleteAbort", timeout=30, what="the abort markers")
    assert read_all(txn_cluster, topic, 1, "read_uncommitted") == [b"x-0", b"x-1"]
    assert read_all(txn_cluster, topic, 1, "read_committed") == []
    # The next transaction of the same producer commits as usual.
    assert p.add(topic, [0]).results[topic][0] == E.NONE
    p.send(topic, 0, [b"y-0"])
    assert p.end(commit=True).error_code == E.NONE
    wait_until(lambda: state_of(txn_cluster, p.tid) == "CompleteCommit", timeout=30, what="the commit markers")
    assert read_all(txn_cluster, topic, 1, "read_committed") == [b"y-0"]


def test_a_transaction_completes_after_its_coordinator_is_killed(txn_cluster, topic):
    p = TxnProducer(txn_cluster, tid())
    p.add(topic, [0, 1])
    p.send(topic, 0, [b"k-0"])
    p.send(topic, 1, [b"k-1"])
    before = ray.get(coordinator(txn_cluster).describe.remote(), timeout=30)
    ray.kill(coordinator(txn_cluster), no_restart=False)
    # The restarted incarnation loads the ongoing transaction and takes EndTxn.
    r = p.end(commit=True)
    assert r.error_code == E.NONE, r
    # Killed again right after the decision: the next incarnation resumes PREPARE_COMMIT's markers.
    ray.kill(coordinator(txn_cluster), no_restart=False)
    wait_until(lambda: state_of(txn_cluster, p.tid) == "CompleteCommit", timeout=60, what="the commit after restarts")
    after = ray.get(coordinator(txn_cluster).describe.remote(), timeout=30)
    assert after["incarnation"] != before["incarnation"]
    assert after["coordinator_epoch"] > before["coordinator_epoch"]
    assert read_all(txn_cluster, topic, 2, "read_committed") == [b"k-0", b"k-1"]


def test_a_transaction_that_outlives_its_timeout_is_aborted_and_its_producer_fenced(txn_cluster, topic):
    p = TxnProducer(txn_cluster, tid(), timeout_ms=1_000)
    p.add(topic, [0])
    p.send(topic, 0, [b"late"])
    wait_until(lambda: state_of(txn_cluster, p.tid) == "CompleteAbort", timeout=30, what="the timeout's abort")
    assert p.end(commit=True).error_code == E.PRODUCER_FENCED
    assert read_all(txn_cluster, topic, 1, "read_committed") == []
    assert lso(txn_cluster, topic, 0) == 2  # the record and the abort marker: stable again


def test_add_offsets_to_txn_adds_the_groups_offsets_partition(txn_cluster):
    p = TxnProducer(txn_cluster, tid())
    assert call_until_settled(txn_cluster, AddOffsetsToTxnRequest(p.tid, p.pid, p.epoch, "some-group")).error_code == E.NONE
    described = call_until_settled(txn_cluster, DescribeTransactionsRequest([p.tid])).transactions[0]
    assert described.state == "Ongoing" and described.topics == {"__consumer_offsets": [0]}
    listed = call_until_settled(txn_cluster, ListTransactionsRequest(states_filter=["Ongoing"]))
    assert p.tid in {t.transactional_id for t in listed.transactions}
    # Leave no transaction waiting on the group coordinator's marker: a newer instance with an
    # epoch of its own is not needed; aborting would wait on that marker.


def test_bad_input_answers_an_error_code(txn_cluster, topic):
    unknown = call(txn_cluster, EndTxnRequest(tid(), 12345, 0, commit=True))
    assert unknown.error_code == E.INVALID_PRODUCER_ID_MAPPING
    p = TxnProducer(txn_cluster, tid())
    assert call(txn_cluster, EndTxnRequest(p.tid, p.pid, p.epoch - 1 if p.epoch else p.epoch + 5, commit=True)).error_code == E.PRODUCER_FENCED
    missing = p.add(f"no-such-topic-{uuid.uuid4().hex[:6]}", [0])
    assert list(missing.results.values())[0][0] == E.UNKNOWN_TOPIC_OR_PARTITION
    both = call(txn_cluster, AddPartitionsToTxnRequest(p.tid, p.pid, p.epoch, {topic: [0], "no-such-topic": [0]}))
    assert both.results["no-such-topic"][0] == E.UNKNOWN_TOPIC_OR_PARTITION
    assert both.results[topic][0] == E.OPERATION_NOT_ATTEMPTED
    assert p.add(topic, [7]).results[topic][7] == E.UNKNOWN_TOPIC_OR_PARTITION  # the topic has 2
    assert call(txn_cluster, TxnInitProducerIdRequest(tid(), transaction_timeout_ms=0)).error_code == E.INVALID_TRANSACTION_TIMEOUT
    assert call(txn_cluster, EndTxnRequest(p.tid, p.pid, p.epoch, commit=True)).error_code == E.INVALID_TXN_STATE  # nothing to commit
    assert call(txn_cluster, TxnInitProducerIdRequest("")).error_code == E.INVALID_REQUEST
