"""Start-up and placement: booting from the metadata store (repairing what a cut-short
write left) and creating each replica where its broker is bound.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping
from ..controller_actions import ControllerAction, CreateReplica, Persist, ReplicaId
from ..election import shrink_isr_without
from ..owned_producers import OwnedProducer
from ..owned_producers import PREFIX as OWNED_PRODUCER_PREFIX
from ..placement import PLACEMENT_KEY, decode_binding
from ..metadata import (
    NO_LEADER,
    ClusterState,
    PartitionState,
    ReplicaTrust,
    TopicState,
    cluster_key,
    decode_trust,
)
from .context import ControllerContext
from .isr_changes import IsrChanges
from .liveness import Liveness


class StartUp:
    """Boot from the store; create replicas where their brokers are bound."""

    def __init__(self, ctx: ControllerContext, isr: IsrChanges, liveness: Liveness) -> None:
        self.ctx = ctx
        self.isr = isr
        self.liveness = liveness

    def start(self, stored: dict[str, bytes], brokers: list[int], group_coordinators: int, now_ms: int) -> list[ControllerAction]:
        """Boot from whatever the store holds (``stored``: key -> value; empty for a new
        cluster). Bumps the controller epoch and re-sends every replica its role."""
        raw = stored.get(cluster_key())
        if raw is None:
            self.ctx.cluster = ClusterState(self.ctx.name, sorted(brokers), 0, 1000, group_coordinators)
        else:
            self.ctx.cluster = ClusterState.decode(raw)
        self.ctx.cluster.controller_epoch += 1
        actions: list[ControllerAction] = [Persist(cluster_key(), self.ctx.cluster.encode())]
        self.ctx.security.load(stored, self.ctx.cluster.controller_epoch)
        raw_binding = stored.get(PLACEMENT_KEY)
        if raw_binding is not None:
            try:
                self.ctx.placement.binding = decode_binding(raw_binding)
            except ValueError:
                raw_binding = None  # unreadable: fall back to the deploy-time binding
        if raw_binding is None and self.ctx.placement.bound:
            actions.append(Persist(PLACEMENT_KEY, self.ctx.placement.encode()))
        for key, value in stored.items():
            if key.startswith("topic/"):
                t = TopicState.decode(value)
                self.ctx.topics[t.name] = t
        trust_records: dict[tuple[str, int], dict[int, ReplicaTrust] | None] = {}
        for key, value in stored.items():
            if key.startswith("partition/"):
                p = PartitionState.decode(value)
                if p.topic in self.ctx.topics and p.partition < self.ctx.topics[p.topic].num_partitions:
                    self.ctx.partitions[(p.topic, p.partition)] = p
                    trust_records[(p.topic, p.partition)] = decode_trust(value)
                else:
                    # Left by a topic creation or create_partitions (partitions are written
                    # before the topic) or deletion (the topic goes first) that did not finish.
                    actions.append(Persist(key, None))
        for name in sorted(self.ctx.topics):
            topic = self.ctx.topics[name]
            if any((name, i) not in self.ctx.partitions for i in range(topic.num_partitions)):
                # Cannot happen through this controller (the topic record is written last);
                # a store edited by hand. Serve what is whole rather than fail on boot.
                del self.ctx.topics[name]
        for (name, i), records in trust_records.items():
            for b, record in (records or {}).items():
                self.ctx.trust.load(ReplicaId(name, i, b), record)
        # A store written before partition records carried their replicas' trust: take up
        # the separate records, rewrite each such partition with them, then delete them.
        legacy = sorted(key for key in stored if key.startswith("replica/"))
        for key in legacy:
            topic_name, partition, broker = key[len("replica/") :].rsplit("/", 2)
            if trust_records.get((topic_name, int(partition)), {}) is None:
                self.ctx.trust.load(ReplicaId(topic_name, int(partition), int(broker)), ReplicaTrust.decode(stored[key]))
        for key, records in sorted(trust_records.items()):
            if records is None:
                actions.append(self.ctx.persist(self.ctx.partitions[key]))
        actions += [Persist(key, None) for key in legacy]
        for p in self.ctx.sorted_partitions():
            actions += self._repair(p)
        for key, value in stored.items():
            if key.startswith(OWNED_PRODUCER_PREFIX):
                self.ctx.owned_producers[key[len(OWNED_PRODUCER_PREFIX) :]] = OwnedProducer.decode(value)
        self.ctx.next_rebalance_ms = now_ms + self.ctx.config.leader_rebalance_interval_ms
        for p in self.ctx.sorted_partitions():
            topic = self.ctx.topics[p.topic]
            for b in p.replicas:
                rid = ReplicaId(p.topic, p.partition, b)
                self.ctx.detector.add(rid, now_ms, self.ctx.config.replica_startup_grace_ms)
                actions += self.ensure_replica(rid, now_ms)
            # Followers learn (again) whom to follow, which completes an election that was
            # persisted but not announced. The leader is not re-sent its leadership blindly:
            # it may have restarted meanwhile and lost what it held; its first heartbeat
            # tells (_verify re-sends if it is merely behind; a new process is re-elected).
            actions += self.ctx.send_state(p, [b for b in p.replicas if b != p.leader])
        return actions

    def _repair(self, p: PartitionState) -> list[ControllerAction]:
        """Boot: put right a state no decision leaves but a write cut short can. What a
        replica is found to be is written before the decision it leads to; if only that
        went through, an online partition's ISR may name a follower marked *replaced*, which
        nothing would ever clear (it is no candidate while the ISR holds it, and an ISR
        cannot grow by a member it has). It leaves the ISR, as the lost write said; its
        followers are told below, its leader at its first heartbeat (_verify)."""
        if p.leader == NO_LEADER:
            return []  # an offline ISR is kept whole; elections pass replaced members over
        holds_data = self.ctx.holds_data(p)
        isr = list(p.isr)
        for b in [b for b in p.isr if not holds_data(b)]:
            isr = shrink_isr_without(replace(p, isr=isr), b) or isr
        if isr == p.isr:
            return []
        self.isr.set_isr(p, isr)
        p.partition_epoch += 1
        return [self.ctx.persist(p)]

    def on_nodes(self, alive: list[str], hosts: Mapping[str, str] | None, now_ms: int) -> list[ControllerAction]:
        """Which nodes are alive now, and the host of each node the runtime knows, dead ones
        included (the driver asks its runtime before each tick when brokers are bound to
        nodes). Placement acts on it at the next ensure, so nothing is decided here."""
        self.ctx.placement.alive = set(alive)
        if hosts:
            self.ctx.placement.hosts.update(hosts)
        return []

    def ensure_replica(self, rid: ReplicaId, now_ms: int) -> list[ControllerAction]:
        """CreateReplica for ``rid`` where its broker's binding says, re-binding the broker
        first (persisted) if its node is gone; nothing when it has to wait for a node (the
        ensure timer asks again)."""
        topic = self.ctx.topics.get(rid.topic)
        if topic is None:
            return []
        b = rid.broker
        movable = all(b not in p.isr and b not in p.elr for p in self.ctx.partitions.values() if b in p.replicas)
        decision = self.ctx.placement.decide(b, (p.replicas for p in self.ctx.partitions.values()), movable)
        if decision.wait:
            self.ctx.next_ensure.setdefault(rid, now_ms + self.ctx.config.ensure_replica_interval_ms)
            return []
        actions: list[ControllerAction] = []
        if decision.rebound_from is not None:
            actions.append(Persist(PLACEMENT_KEY, self.ctx.placement.encode()))
            actions += self.liveness.left_behind(b, now_ms)
        actions.append(CreateReplica(rid, self.ctx.replica_config(topic), decision.node))
        return actions

    def ensure_due(self, now_ms: int) -> list[ControllerAction]:
        """Replicas due another ensure (failed ones, and those waiting for a node)."""
        actions: list[ControllerAction] = []
        for rid, at in list(self.ctx.next_ensure.items()):
            if now_ms >= at:
                if rid.topic not in self.ctx.topics:
                    del self.ctx.next_ensure[rid]
                    continue
                self.ctx.next_ensure[rid] = now_ms + self.ctx.config.ensure_replica_interval_ms
                actions += self.ensure_replica(rid, now_ms)
        return actions
