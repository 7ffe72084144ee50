"""A FailoverCoordinator core (ControllerState) with an explicit clock and a MemoryStore,
shared by the controller unit tests.

The shell runs actions in order and applies every Persist before anything after it, so
:class:`Harness` does the same and checks, at each SendLeaderAndIsr, that the store already
holds exactly the partition state the message announces.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kcoord.protocol.controller import AlterPartitionRequest, CreateTopicsRequest, HeartbeatResponse
from kcoord.replication.controller import (
    ControllerConfig,
    ControllerState,
    Persist,
    ReplicaId,
    SendLeaderAndIsr,
)
from kcoord.replication.metadata import NO_LEADER, ClusterState, PartitionState, cluster_key, partition_key
from kcoord.replication.metastore import MemoryStore

BROKERS = [0, 1, 2]
TOPIC = "t"


def config(**kw) -> ControllerConfig:
    base = dict(heartbeat_interval_ms=200, session_timeout_ms=3000, replica_startup_grace_ms=0, auto_leader_rebalance=False)
    base.update(kw)
    return ControllerConfig(**base)


@dataclass
class Harness:
    """One controller, its store, and everything it asked for so far."""

    cfg: ControllerConfig = field(default_factory=config)
    store: MemoryStore = field(default_factory=MemoryStore)
    sent: list = field(default_factory=list)
    now: int = 0
    binding: dict = field(default_factory=dict)  # broker -> node ({}: brokers stay logical)

    def __post_init__(self) -> None:
        self.core = ControllerState("c", self.cfg, binding=self.binding)
        self.apply(self.core.start(dict(self.store.data), BROKERS, 0, self.now))

    def apply(self, actions: list) -> list:
        """Execute like the shell: Persist at once and in order; check that each
        LeaderAndIsr announces what the store already holds."""
        for a in actions:
            if isinstance(a, Persist):
                if a.value is None:
                    self.store.delete(a.key)
                else:
                    self.store.put(a.key, a.value)
            elif isinstance(a, SendLeaderAndIsr):
                raw = self.store.get(partition_key(a.request.topic, a.request.partition))
                assert raw is not None, f"{a} sent before its partition was persisted"
                stored = PartitionState.decode(raw)
                req = a.request
                assert (stored.leader, stored.leader_epoch, stored.partition_epoch, stored.isr) == (
                    req.leader,
                    req.leader_epoch,
                    req.partition_epoch,
                    req.isr,
                ), f"{a} announces a state the store does not hold yet ({stored})"
                assert req.controller_epoch == ClusterState.decode(self.store.get(cluster_key())).controller_epoch
        self.sent += actions
        return actions

    def restart(self) -> "Harness":
        """A new controller on the same store (the old one's memory is gone)."""
        return Harness(self.cfg, self.store, now=self.now, binding=self.binding)

    def create(self, name: str = TOPIC, partitions: int = 1, rf: int = 3, **kw) -> list:
        """Partition i gets replicas [i, i+1, ...] (mod brokers) unless told otherwise."""
        if name == TOPIC:
            kw.setdefault("assignment", {i: [(i + j) % len(BROKERS) for j in range(rf)] for i in range(partitions)})
        resp, actions = self.core.create_topic(CreateTopicsRequest(name=name, partitions=partitions, replication_factor=rf, **kw), self.now)
        assert resp.error_code == 0, resp.error_message
        actions = self.apply(actions)
        if name == TOPIC:
            # New replicas answer their first heartbeat at once, as real ones do. (No
            # incarnation: tests that care about processes give their own.)
            for i in range(partitions):
                for b in self.partition(i).replicas:
                    self.beat(b, incarnation="", p=i)
        return actions

    def partition(self, p: int = 0, topic: str = TOPIC) -> PartitionState:
        return self.core.partitions[(topic, p)]

    def stored(self, p: int = 0, topic: str = TOPIC) -> PartitionState:
        return PartitionState.decode(self.store.get(partition_key(topic, p)))

    def dead(self, broker: int, p: int = 0) -> list:
        return self.apply(self.core.on_heartbeat(ReplicaId(TOPIC, p, broker), None, self.now, dead=True))

    def beat(self, broker: int, incarnation: str = "i0", p: int = 0, **status) -> list:
        rid = ReplicaId(TOPIC, p, broker)
        part = self.partition(p)
        fields = dict(
            topic=TOPIC,
            partition=p,
            broker=broker,
            role="leader" if part.leader == broker else ("follower" if part.leader != NO_LEADER else "none"),
            leader=part.leader,
            leader_epoch=part.leader_epoch,
            partition_epoch=part.partition_epoch,
            log_end_offset=10,
            incarnation=incarnation,
        )
        fields.update(status)
        self.core.on_heartbeat_sent(rid, self.now)
        return self.apply(self.core.on_heartbeat(rid, HeartbeatResponse(**fields), self.now))

    def alter(
        self,
        new_isr,
        leader: int | None = None,
        leader_epoch: int | None = None,
        partition_epoch: int | None = None,
        partition: int = 0,
        incarnations: dict | None = None,
    ):
        p = self.partition(partition)
        req = AlterPartitionRequest(
            topic=TOPIC,
            partition=partition,
            leader=p.leader if leader is None else leader,
            leader_epoch=p.leader_epoch if leader_epoch is None else leader_epoch,
            partition_epoch=p.partition_epoch if partition_epoch is None else partition_epoch,
            new_isr=list(new_isr),
            incarnations=dict(incarnations or {}),
        )
        resp, actions = self.core.alter_partition(req, self.now)
        self.apply(actions)
        return resp, actions


def lai_targets(actions) -> list[int]:
    return [a.replica.broker for a in actions if isinstance(a, SendLeaderAndIsr)]


def persists(actions) -> list[Persist]:
    return [a for a in actions if isinstance(a, Persist)]
