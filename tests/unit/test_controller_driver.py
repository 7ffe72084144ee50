"""ControllerDriver without Ray: a scripted transport and store, a manual clock.

The rule under test: a decision is announced only once persisted, and a store write that
fails makes the driver drop its core and reload from the store, so that nothing the failed
write described is ever announced and no leader epoch is handed to two leaders.
"""

from __future__ import annotations


from kcoord.protocol import names
from kcoord.protocol.controller import (
    AlterPartitionRequest,
    CreateTopicsRequest,
    HeartbeatResponse,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    MetadataRequest,
)
from kcoord.protocol.errors import ErrorCode
from kcoord.replication.controller import ControllerConfig
from kcoord.replication.controller_driver import CREATED, ControllerDriver
from kcoord.replication.metastore import StoreFailure
from kcoord.replication.metadata import PartitionState, partition_key
from kcoord.runtime import Outcome
from manual_clock import ManualClock

CLUSTER = "c"


class Store:
    """A dict; ``fail_next`` makes the next write raise (applied or not)."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.fail_next: list[bool] = []  # each entry: whether the failing write lands anyway

    def get(self, key):
        return self.data.get(key)

    def keys(self, prefix=""):
        return sorted(k for k in self.data if k.startswith(prefix))

    def load(self):
        return {k: self.data[k] for k in self.keys()}

    def _write(self, key, value):
        if self.fail_next:
            applied = self.fail_next.pop(0)
            if applied:
                self._apply(key, value)
            raise StoreFailure(f"write of {key} failed")
        self._apply(key, value)

    def _apply(self, key, value):
        if value is None:
            self.data.pop(key, None)
        else:
            self.data[key] = value

    def put(self, key, value):
        self._write(key, value)

    def delete(self, key):
        self._write(key, None)


class Replicas:
    """Replica actors that answer heartbeats as alive and accept every LeaderAndIsr; what
    each was told is recorded."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.told: list[LeaderAndIsrRequest] = []
        self.dead: set[int] = set()
        self.calls: list[tuple[int, str, str]] = []  # (time, target, method)

    def ensure(self, replica, config, node, replace_if_stuck, done):
        done(CREATED)

    def delete(self, replica, done):
        self.clock.call_at(self.clock.now + 1, done)

    def call(self, target, method, request, response_type, timeout_ms, on_done, *, probe_after_ms=None):
        self.calls.append((self.clock.now, target, method))
        broker = int(target.rsplit("/", 1)[1])
        if broker in self.dead:
            self.clock.call_at(self.clock.now + 1, lambda: on_done(None, Outcome.DEAD))
            return
        if method == "leader_and_isr":
            self.told.append(request)
            self.clock.call_at(self.clock.now + 1, lambda: on_done(LeaderAndIsrResponse(), Outcome.OK))
        elif method == "heartbeat":
            topic, partition = target.split("/")[2], int(target.split("/")[3])
            status = HeartbeatResponse(topic=topic, partition=partition, broker=broker, incarnation=f"b{broker}")
            self.clock.call_at(self.clock.now + 1, lambda: on_done(status, Outcome.OK))


def make_driver(store: Store, clock: ManualClock, replicas: Replicas, **kw) -> ControllerDriver:
    config = ControllerConfig(**{**dict(heartbeat_interval_ms=100, session_timeout_ms=1000, replica_startup_grace_ms=0, auto_leader_rebalance=False), **kw})
    d = ControllerDriver(CLUSTER, [0, 1, 2], store=store, transport=replicas, clock=clock, replicas=replicas, config=config, boot_retry_ms=50)
    d.start()
    return d


def serve(d: ControllerDriver, clock: ManualClock, request) -> object:
    out = []
    d.serve(request, out.append)
    clock.run_until(clock.now + 50)
    return out[0]


def stored(store: Store) -> PartitionState:
    return PartitionState.decode(store.data[partition_key("t", 0)])


def test_nothing_a_failed_store_write_describes_is_announced_and_no_epoch_is_reused():
    clock, store = ManualClock(), Store()
    replicas = Replicas(clock)
    d = make_driver(store, clock, replicas)
    created = serve(d, clock, CreateTopicsRequest(name="t", partitions=1, replication_factor=3, assignment={0: [0, 1, 2]}))
    assert created.error_code == 0
    assert stored(store).leader == 0 and stored(store).leader_epoch == 0
    epoch_before = d.core.controller_epoch
    # leader 0 dies; the election's write is refused
    replicas.dead.add(0)
    replicas.told.clear()
    store.fail_next = [False]
    clock.run_until(clock.now + 3_000)
    # whatever was announced was persisted first, and one epoch never has two leaders
    announced = {}
    for req in replicas.told:
        assert req.leader_epoch <= stored(store).leader_epoch, f"announced epoch {req.leader_epoch}, stored {stored(store).leader_epoch}"
        announced.setdefault(req.leader_epoch, set()).add(req.leader)
    assert all(len(leaders) == 1 for leaders in announced.values()), announced
    assert d.resigns == 1 and d.booted, "the driver reloaded from the store and carries on"
    assert d.core.controller_epoch > epoch_before
    p = stored(store)
    assert p.leader in (1, 2) and p.leader_epoch >= 1


def test_a_request_whose_write_failed_gets_an_unknown_outcome_and_the_truth_comes_after():
    clock, store = ManualClock(), Store()
    replicas = Replicas(clock)
    d = make_driver(store, clock, replicas)
    serve(d, clock, CreateTopicsRequest(name="t", partitions=1, replication_factor=3, assignment={0: [0, 1, 2]}))
    clock.run_until(clock.now + 500)
    p = stored(store)
    store.fail_next = [True]  # the ISR change times out but lands
    answer = serve(d, clock, AlterPartitionRequest("t", 0, leader=p.leader, leader_epoch=p.leader_epoch, partition_epoch=p.partition_epoch, new_isr=[0, 1]))
    assert answer.error_code == ErrorCode.REQUEST_TIMED_OUT, "unknown outcome, not a refusal"
    clock.run_until(clock.now + 2_000)
    assert stored(store).isr == [0, 1]
    # the reloaded controller tells the leader what the store holds
    assert any(r.leader == 0 and r.isr == [0, 1] for r in replicas.told if r.partition_epoch == stored(store).partition_epoch)


def test_requests_wait_for_the_boot_and_a_failed_store_read_is_retried():
    clock, store = ManualClock(), Store()
    replicas = Replicas(clock)

    class Unreadable(Store):
        fails = 2

        def keys(self, prefix=""):
            if self.fails:
                self.fails -= 1
                raise StoreFailure("GCS unavailable")
            return super().keys(prefix)

    store = Unreadable()
    d = make_driver(store, clock, replicas)
    out = []
    d.serve(MetadataRequest(), out.append)
    assert out == [] and not d.booted
    clock.run_until(clock.now + 500)
    assert d.booted and out and out[0].error_code == 0
    assert names.controller(CLUSTER) == "c/controller"


def test_a_replica_whose_connection_broke_is_heartbeaten_at_once_and_its_death_fails_over():
    """Heartbeats are seconds apart; the shell's hint (a broken direct-call connection)
    makes the next one go out now, so a dead leader is replaced in milliseconds."""
    clock, store = ManualClock(), Store()
    replicas = Replicas(clock)
    d = make_driver(store, clock, replicas, heartbeat_interval_ms=5_000, follower_heartbeat_interval_ms=5_000, session_timeout_ms=20_000)
    serve(d, clock, CreateTopicsRequest(name="t", partitions=1, replication_factor=3, assignment={0: [0, 1, 2]}))
    clock.run_until(clock.now + 1_000)  # the first heartbeats are answered; the next are 5 s away
    leader = names.replica(CLUSTER, "t", 0, 0)
    replicas.dead.add(0)
    replicas.calls.clear()
    hinted_at = clock.now
    d.on_replica_unreachable("c/replica/nope/0/0")  # not a replica it watches: nothing
    d.on_replica_unreachable(leader)
    d.on_replica_unreachable(leader)  # one heartbeat in flight is enough
    clock.run_until(clock.now + 50)
    beats = [t for t, target, method in replicas.calls if method == "heartbeat"]
    assert [target for _, target, method in replicas.calls if method == "heartbeat"] == [leader]
    assert beats[0] <= hinted_at + d.min_wake_gap_ms
    p = stored(store)
    assert p.leader in (1, 2) and p.leader_epoch == 1, "the dead leader was replaced at once"


class SlowCreations(Replicas):
    """Replica actors whose creation reports back only when the test says (Ray's GCS
    answering late under load); the calls made to each replica are recorded."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.creating: dict[str, list] = {}  # replica name -> its pending done callbacks

    def ensure(self, replica, config, node, replace_if_stuck, done):
        self.creating.setdefault(names.replica(CLUSTER, replica.topic, replica.partition, replica.broker), []).append(done)

    def finish(self, name: str, result: str = CREATED) -> None:
        for done in self.creating.pop(name):
            done(result)


def test_a_slow_replica_creation_holds_only_that_replicas_calls_and_the_controller_keeps_serving():
    clock, store = ManualClock(), Store()
    replicas = SlowCreations(clock)
    d = make_driver(store, clock, replicas, replica_startup_grace_ms=5_000)  # new replicas' grace outlasts the wait
    out: list = []
    d.serve(CreateTopicsRequest(name="t", partitions=1, replication_factor=3, assignment={0: [0, 1, 2]}), out.append)
    clock.run_until(clock.now + 50)
    names_ = [names.replica(CLUSTER, "t", 0, b) for b in range(3)]
    assert sorted(replicas.creating) == sorted(names_), "each replica's creation is under way"
    assert replicas.calls == [], "no replica is called before its actor exists"
    assert out == [], "the topic is answered once its replicas were told"
    # the controller answers metadata meanwhile, and asks for no second creation
    assert serve(d, clock, MetadataRequest(topics=["t"])).error_code == 0
    clock.run_until(clock.now + 2_000)
    assert all(len(waiting) == 1 for waiting in replicas.creating.values()), replicas.creating
    assert replicas.calls == []
    # one creation reports back: that replica, and only it, is called now
    replicas.finish(names_[0])
    clock.run_until(clock.now + 10)
    assert {target for _, target, _ in replicas.calls} == {names_[0]}
    assert {m for _, _, m in replicas.calls} >= {"leader_and_isr"}
    assert out == []
    for name in names_[1:]:
        replicas.finish(name)
    clock.run_until(clock.now + 50)
    assert {target for _, target, _ in replicas.calls} == set(names_)
    assert len(out) == 1 and out[0].error_code == 0, out
    assert stored(store).leader == 0 and sorted(stored(store).isr) == [0, 1, 2]


def test_a_creation_that_raises_releases_the_calls_waiting_for_it():
    clock, store = ManualClock(), Store()
    replicas = Replicas(clock)
    failing = {"t/0/1"}

    def ensure(replica, config, node, replace_if_stuck, done):
        if f"{replica.topic}/{replica.partition}/{replica.broker}" in failing:
            raise RuntimeError("the GCS is gone")
        done(CREATED)

    replicas.ensure = ensure
    d = make_driver(store, clock, replicas)
    created = serve(d, clock, CreateTopicsRequest(name="t", partitions=1, replication_factor=3, assignment={0: [0, 1, 2]}))
    assert created.error_code == 0
    assert any(target == names.replica(CLUSTER, "t", 0, 1) for _, target, _ in replicas.calls)
    assert d._ensuring == {}
