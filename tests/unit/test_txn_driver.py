"""TransactionCoordinatorDriver without Ray: real partition leaders (Replica cores on
MemoryLogs) for ``__transaction_state``-0 and a data topic, the real controller core for
producer ids and epochs, behind a scripted transport and a manual clock.

The partition machinery (load, fence, append pipeline) is the group coordinator's, tested in
test_group_driver.py; here: that the driver feeds the transaction core's own actions --
markers to leaders, producer ids from the allocator, metadata -- and that an incarnation's
producer epoch is the coordinator epoch on its markers.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable

from kcoord import records
from kcoord.log import LogConfig, MemoryLog
from kcoord.protocol import names
from kcoord.protocol.controller import LeaderAndIsrRequest, MetadataResponse, PartitionMetadata, TopicMetadata
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.replication import ProduceRequest
from kcoord.protocol.txn import (
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    TxnInitProducerIdRequest,
    TxnOffsetMarkerRequest,
    AddOffsetsToTxnRequest,
    WriteTxnMarkerRequest,
)
from kcoord.replication.controller import ControllerState, Persist
from kcoord.replication.replica import Replica
from kcoord.replication.actions import VerifyTxn
from kcoord.runtime import Outcome
from kcoord.txn import TRANSACTION_STATE_TOPIC, TransactionCoordinatorState, TransactionState, TxnConfig
from kcoord.txn.driver import FIRST_PRODUCER_ID, CoordinatorTimeouts, TransactionCoordinatorDriver
from kcoord.txn.records import decode_record
from manual_clock import ManualClock

CLUSTER = "c"
E = ErrorCode


class World:
    """Leaders of ``__transaction_state``-0 and ``t``-0/1 on broker 0, the controller core,
    and group coordinator 0 (answering TxnOffsetMarker, or not serving it). Every answer
    goes through the clock, never inline."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self._tokens = itertools.count()
        self._pending: dict[int, Callable] = {}
        self.replicas = {tp: self._replica(*tp) for tp in [(TRANSACTION_STATE_TOPIC, 0), ("t", 0), ("t", 1)]}
        self.controller = ControllerState(CLUSTER)
        self.controller.start({}, [0], 1, clock.now)
        self.store: dict[str, bytes] = {}
        self.calls: list[tuple[str, str, Any]] = []
        self.down: set[str] = set()  # targets whose calls die
        self.txn: Any = None  # the transaction coordinator driver, which serves the leaders' KIP-890 checks
        self.group_serves_markers = False
        self.leader_epochs = {tp: 1 for tp in self.replicas}
        self.deleted: set[str] = set()  # topics the metadata no longer lists
        self._tick()

    def _replica(self, topic: str, partition: int) -> Replica:
        r = Replica(topic, partition, 0, MemoryLog(LogConfig(flush_messages=1)), now_ms=self.clock.now)
        self._deliver(r.handle(LeaderAndIsrRequest(1, topic, partition, leader=0, leader_epoch=1, partition_epoch=1, isr=[0], replicas=[0]), None, self.clock.now))
        return r

    def _tick(self) -> None:
        for r in self.replicas.values():
            self._deliver(r.tick(self.clock.now))
        self.clock.call_at(self.clock.now + 50, self._tick)

    def _deliver(self, actions, replica=None) -> None:
        for a in actions:
            if isinstance(a, VerifyTxn):
                # a leader's KIP-890 check, served by the transaction coordinator under test
                self.calls.append(("txn", "add_partitions_to_txn", a.request))

                def verified(response, a=a, replica=replica):
                    self.clock.call_at(self.clock.now + 1, lambda: self._deliver(replica.on_txn_verified(a.verify_id, response, self.clock.now), replica))

                self.txn.serve(a.request, verified)
                continue
            done = self._pending.pop(getattr(a, "token", None), None)
            if done is not None:
                response = a.response
                self.clock.call_at(self.clock.now + 1, lambda done=done, response=response: done(response, Outcome.OK))

    def _later(self, on_done, response, outcome=Outcome.OK) -> None:
        self.clock.call_at(self.clock.now + 1, lambda: on_done(response, outcome))

    def call(self, target, method, request, response_type, timeout_ms, on_done, *, probe_after_ms=None) -> None:
        self.calls.append((target, method, request))
        if target in self.down:
            self._later(on_done, None, Outcome.DEAD)
        elif target == names.controller(CLUSTER):
            if method == "metadata":
                topics = [
                    TopicMetadata(TRANSACTION_STATE_TOPIC, partitions=[PartitionMetadata(0, leader=0, leader_epoch=1)], internal=True),
                    TopicMetadata("t", partitions=[PartitionMetadata(p, leader=0, leader_epoch=self.leader_epochs[("t", p)]) for p in (0, 1)]),
                ]
                topics = [t for t in topics if t.name not in self.deleted]
                if request.topics is not None:
                    topics = [t for t in topics if t.name in request.topics] + [
                        TopicMetadata(n, error_code=E.UNKNOWN_TOPIC_OR_PARTITION) for n in request.topics if n not in {t.name for t in topics}
                    ]
                self._later(on_done, MetadataResponse(topics=topics))
            else:
                token = ("c", next(self._tokens))
                answer = None
                for a in self.controller.handle(request, token, self.clock.now):
                    if isinstance(a, Persist):
                        self.store[a.key] = a.value
                    elif getattr(a, "token", None) == token:
                        answer = a.response
                self._later(on_done, answer)
        elif target == names.group_coordinator(CLUSTER, 0):
            assert method == "txn_offset_marker"
            self._later(on_done, response_type() if self.group_serves_markers else None, Outcome.OK if self.group_serves_markers else Outcome.ERROR)
        else:
            _, _, topic, partition, broker = target.split("/")
            token = next(self._tokens)
            self._pending[token] = on_done
            r = self.replicas[(topic, int(partition))]
            self._deliver(r.handle(request, token, self.clock.now), r)

    def new_leader_epoch(self, topic: str, partition: int) -> None:
        """The partition's leader is elected again (same broker, next epoch)."""
        epoch = self.leader_epochs[(topic, partition)] = self.leader_epochs[(topic, partition)] + 1
        self._deliver(self.replicas[(topic, partition)].handle(LeaderAndIsrRequest(1, topic, partition, leader=0, leader_epoch=epoch, partition_epoch=epoch, isr=[0], replicas=[0]), None, self.clock.now))

    def produce(self, topic: str, partition: int, data: bytes, transactional_id: str | None = "tx") -> Any:
        token = next(self._tokens)
        out = []
        self._pending[token] = lambda r, o: out.append(r)
        r = self.replicas[(topic, partition)]
        self._deliver(r.handle(ProduceRequest(topic, partition, data, acks=1, transactional_id=transactional_id), token, self.clock.now), r)
        self.clock.run_until(self.clock.now + 10)
        return out[0]


def driver_on(world: World, clock: ManualClock, config: TxnConfig | None = None) -> TransactionCoordinatorDriver:
    core = TransactionCoordinatorState(config or TxnConfig(), partition=0, num_partitions=1, offsets_partitions=1)
    d = TransactionCoordinatorDriver(CLUSTER, core, transport=world, clock=clock, timeouts=CoordinatorTimeouts(persist_ms=2_000))
    world.txn = d
    d.start()
    clock.run_until(clock.now + 1_000)
    assert d.loaded
    return d


def ask(d: TransactionCoordinatorDriver, clock: ManualClock, request, ms: int = 1_000):
    out = []
    d.serve(request, out.append)
    clock.run_until(clock.now + ms)
    assert out, f"{type(request).__name__} unanswered"
    return out[0]


def markers_in(world: World, topic: str, partition: int) -> list[WriteTxnMarkerRequest]:
    return [req for target, method, req in world.calls if method == "write_txn_marker" and (req.topic, req.partition) == (topic, partition)]


def test_loads_fences_with_its_own_producer_id_and_stamps_markers_with_its_epoch():
    clock = ManualClock(1_000_000)
    world = World(clock)
    d = driver_on(world, clock)
    assert d.producer_id == FIRST_PRODUCER_ID and d.producer_epoch == 0
    assert d.core.coordinator_epoch == 0
    init = ask(d, clock, TxnInitProducerIdRequest("tx"))
    assert init.error_code == E.NONE and init.producer_id >= 1000, init  # from the allocator
    assert any(m == "init_producer_id" and req.count > 1 for _, m, req in world.calls), "a block of ids was asked for"
    assert ask(d, clock, AddPartitionsToTxnRequest("tx", init.producer_id, init.producer_epoch, {"t": [0, 1]})).results == {"t": {0: E.NONE, 1: E.NONE}}
    batch = records.build_batch([(None, b"v")], producer_id=init.producer_id, producer_epoch=init.producer_epoch, base_sequence=0, transactional=True)
    assert world.produce("t", 0, batch).error_code == E.NONE
    end = ask(d, clock, EndTxnRequest("tx", init.producer_id, init.producer_epoch, commit=True))
    assert end.error_code == E.NONE
    clock.run_until(clock.now + 1_000)
    assert d.core.transaction("tx").state == TransactionState.COMPLETE_COMMIT
    for p in (0, 1):
        (marker,) = markers_in(world, "t", p)
        assert (marker.producer_id, marker.commit, marker.coordinator_epoch, marker.current_leader_epoch) == (init.producer_id, True, 0, 1)
    # the marker is in the data partition's log, behind the record
    assert world.replicas[("t", 0)].log.log_end_offset == 2
    # the whole history is in __transaction_state: a replay ends COMPLETE_COMMIT
    log = world.replicas[(TRANSACTION_STATE_TOPIC, 0)].log
    decoded = [decode_record(r.key, r.value) for r in records.iter_records(log.read(0, 1 << 24))]
    states = [v.state for k, v in (x for x in decoded if x is not None) if v is not None]
    assert states[-1] == TransactionState.COMPLETE_COMMIT and TransactionState.PREPARE_COMMIT in states


def test_a_new_incarnation_raises_the_coordinator_epoch_and_resumes_prepared_markers():
    clock = ManualClock(1_000_000)
    world = World(clock)
    first = driver_on(world, clock)
    init = ask(first, clock, TxnInitProducerIdRequest("tx"))
    ask(first, clock, AddPartitionsToTxnRequest("tx", init.producer_id, init.producer_epoch, {"t": [0]}))
    # the leader of t-0 is unreachable: the decision is made, its marker cannot be written
    world.down.add(names.replica(CLUSTER, "t", 0, 0))
    assert ask(first, clock, EndTxnRequest("tx", init.producer_id, init.producer_epoch, commit=False)).error_code == E.NONE
    assert first.core.transaction("tx").state == TransactionState.PREPARE_ABORT
    second = driver_on(world, clock)
    assert second.producer_epoch == 1 and second.core.coordinator_epoch == 1
    assert second.core.transaction("tx").state == TransactionState.PREPARE_ABORT  # loaded
    world.down.clear()
    clock.run_until(clock.now + 10_000)
    assert second.core.transaction("tx").state == TransactionState.COMPLETE_ABORT
    written = [m for m in markers_in(world, "t", 0) if m.coordinator_epoch == 1]
    assert written and not written[-1].commit


def test_an_offsets_marker_the_group_coordinator_cannot_take_is_retried_until_it_can():
    """A group coordinator without ``txn_offset_marker`` (an older build) fails the call: the
    marker is retried, the transaction waits in PREPARE_COMMIT, and completes once it serves."""
    clock = ManualClock(1_000_000)
    world = World(clock)
    d = driver_on(world, clock)
    init = ask(d, clock, TxnInitProducerIdRequest("tx"))
    assert ask(d, clock, AddOffsetsToTxnRequest("tx", init.producer_id, init.producer_epoch, "g")).error_code == E.NONE
    assert ask(d, clock, EndTxnRequest("tx", init.producer_id, init.producer_epoch, commit=True)).error_code == E.NONE
    clock.run_until(clock.now + 5_000)
    sent = [req for _, m, req in world.calls if m == "txn_offset_marker"]
    assert len(sent) > 2 and all(isinstance(r, TxnOffsetMarkerRequest) and r.partition == 0 for r in sent)
    assert d.core.transaction("tx").state == TransactionState.PREPARE_COMMIT
    world.group_serves_markers = True
    clock.run_until(clock.now + 10_000)
    assert d.core.transaction("tx").state == TransactionState.COMPLETE_COMMIT


def test_partitions_of_an_unknown_topic_are_refused_after_reading_the_metadata():
    clock = ManualClock(1_000_000)
    world = World(clock)
    d = driver_on(world, clock)
    init = ask(d, clock, TxnInitProducerIdRequest("tx"))
    r = ask(d, clock, AddPartitionsToTxnRequest("tx", init.producer_id, init.producer_epoch, {"nope": [0], "t": [5]}))
    assert r.results == {"nope": {0: E.UNKNOWN_TOPIC_OR_PARTITION}, "t": {5: E.UNKNOWN_TOPIC_OR_PARTITION}}


def test_a_marker_follows_a_new_leader_epoch_and_a_deleted_partition_is_dropped():
    clock = ManualClock(1_000_000)
    world = World(clock)
    d = driver_on(world, clock)
    init = ask(d, clock, TxnInitProducerIdRequest("tx"))
    ask(d, clock, AddPartitionsToTxnRequest("tx", init.producer_id, init.producer_epoch, {"t": [0, 1]}))
    world.new_leader_epoch("t", 0)  # the driver's cached leader epoch (1) is stale now
    world.down.add(names.replica(CLUSTER, "t", 1, 0))  # t-1's leader is unreachable
    assert ask(d, clock, EndTxnRequest("tx", init.producer_id, init.producer_epoch, commit=True)).error_code == E.NONE
    clock.run_until(clock.now + 2_000)
    sent = markers_in(world, "t", 0)
    assert [m.current_leader_epoch for m in sent] == [1, 2], "refused at the stale epoch, re-sent at the new one"
    assert d.core.pending_markers("tx") == {("t", 1)}
    world.deleted.add("t")  # t is deleted: t-1's marker can never be written
    clock.run_until(clock.now + 10_000)
    assert d.core.transaction("tx").state == TransactionState.COMPLETE_COMMIT  # t-1 dropped
    assert d.core.stats.markers_dropped >= 1
