"""Deterministic simulation of a whole kcoord cluster running its production code.

One seed fixes everything: the scenario (``scenario.py``: cluster shape, topics, clients,
fault mix) and every later choice -- message delays and losses, fault timing, torn writes.
The replicas, the controller and the group coordinators are the production drivers
(``kcoord.replication.replica_driver``, ``controller_driver``, ``kcoord.group.coordinator_driver``) over
the production cores and the production on-disk ``Log``; only time (``kernel.py``), the
network (``kernel.py``), disks (``disk.py``), the metadata store (``store.py``) and Ray's
process management (``processes.py``) are simulated, as TigerBeetle's VOPR and
FoundationDB's simulator do.

A run has two phases.

1. Faults, bounded by ``max_events`` and ``fault_ms``: clients work while the nemesis
   (``faults.py``) crashes, pauses and powers off, cuts links, fails disks and the store.
   The invariants of ``checks.py`` are checked after every event.
2. Heal and quiesce: links heal, losses stop, faults clear, every process and machine is
   back, producers stop sending new records (but retry what is unacknowledged), and the run
   goes on until the cluster is quiet: every partition led, its ISR full, every replica at
   the leader's log end and HW, readers caught up, groups Stable with every member in the
   same generation. Not getting there within ``heal_timeout_ms`` is a liveness failure.
   Then the final checks run against the logs.

A failing seed prints the one command that replays it (``python -m tests.sim.run --seed N``).
"""
from __future__ import annotations

import hashlib
from collections import deque
from typing import Any

from kcoord.group import GroupConfig
from kcoord.group.records import OFFSETS_TOPIC
from kcoord.replication.controller import ControllerConfig
from kcoord.replication.metadata import PartitionState, TopicState, partition_key, topic_key
from kcoord.replication.placement import PLACEMENT_KEY, decode_binding

from .admin import Admin
from .checks import History
from .damage import PageCacheDamage
from .event_loop import EventLoop
from .faults import Nemesis
from .group_member import Member
from .kernel import Kernel, NetParams, Network
from .process_control import ProcessControl
from .processes import HEAD, ControllerProcess, CoordinatorProcess, Machine, ReplicaProcess
from .producer import Producer
from .quiesce import Quiesce
from .reader import Reader
from .scenario import Scenario, TopicSpec
from .security import SecurityAdmin
from .sim_config import SimConfig
from .sim_result import SimResult
from .store import FaultyStore
from .transactions import CommittedReader, TxnLedger, TxnProducer
from .twins import Twins
from .txn_groups import TxnOffsetCommitter
from .txn_verify import CoordinatorStandIn, LateWriter
from .txn_world import TxnWorld, state_topic


class Simulation(EventLoop, Quiesce, ProcessControl):
    """The world of one seed: the scenario's machines, store, network, replica, controller
    and coordinator processes, clients and nemesis, built here in the seed's order. What it
    does is in its parts: ``event_loop.py`` (the run), ``quiesce.py`` (heal and quiet),
    ``process_control.py`` (restarts and repairs), ``twins.py`` (two live processes),
    ``damage.py`` (page-cache loss)."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.kernel = Kernel(config.seed)
        rng = self.kernel.rng
        self.scenario = sc = Scenario.draw(rng, config.kind, config.mode)
        self.tracing = config.verbose > 0
        self._tail: deque[str] = deque(maxlen=400)
        self._digest = hashlib.sha256()
        self.net = Network(self.kernel, NetParams(1, sc.max_delay_ms, sc.drop_rate, sc.duplicate_rate))
        if config.verbose >= 2:
            self.net.trace = self._trace_message
        self.history = History(self)
        self.store = FaultyStore(rng)
        self.store.on_write = self.history.on_store_write
        # machines: the head (controller, coordinators, clients; never loses power), and
        # with bound brokers one per broker plus a spare
        self.machines: dict[str, Machine] = {HEAD: Machine(HEAD, rng)}
        self.binding: dict[int, str] = {}
        if sc.bound:
            for b in range(sc.brokers + 1):
                mid = f"m{b + 1}"
                self.machines[mid] = Machine(mid, rng)
                if b < sc.brokers:
                    self.binding[b] = mid
        for m in self.machines.values():
            m.disk.clock = lambda: self.kernel.now
            m.disk.fsync_error_drops = True
        self.controller_config = ControllerConfig(
            heartbeat_interval_ms=200,
            follower_heartbeat_interval_ms=500,
            session_timeout_ms=1500,
            ensure_replica_interval_ms=500,
            replica_startup_grace_ms=1000,
            auto_leader_rebalance=True,
            leader_rebalance_interval_ms=3000,
            restart_stuck_ms=10**9,
            broker_config=dict(sc.broker_config),
        )
        self.group_config = GroupConfig(
            group_min_session_timeout_ms=500,
            group_initial_rebalance_delay_ms=100,
            offsets_retention_check_interval_ms=600_000,
        )
        # topics: the user's, and __consumer_offsets when there are groups
        self.topics: list[TopicSpec] = list(sc.topics)
        if sc.coordinators:
            rf = min(3, sc.brokers)
            self.topics.append(
                TopicSpec(
                    OFFSETS_TOPIC,
                    sc.coordinators,
                    rf,
                    min(2, rf),
                    False,
                    "fsync" if rf == 1 else sc.offsets_mode,
                    compact=sc.offsets_compacted,
                    internal=True,
                )
            )
        txn_state = state_topic(self) if config.transactions else None
        if txn_state is not None:
            self.topics.append(txn_state)  # transaction coordinators' (txn_world.py)
        # N of coordinator_for(transactional_id, N): what the replicas' drivers are told
        self.txn_coordinator_count = txn_state.partitions if txn_state is not None else 1
        self.txn_stand_in: CoordinatorStandIn | None = None
        self.replicas: dict[tuple[str, int, int], ReplicaProcess] = {}
        self.assignments: dict[tuple[str, int], list[int]] = {}
        for ti, spec in enumerate(self.topics):
            self.history.add_topic(spec)
            for p in range(spec.partitions):
                replicas = [(p + ti + j) % sc.brokers for j in range(spec.rf)]
                self.assignments[(spec.name, p)] = replicas
                for b in replicas:
                    self.replicas[(spec.name, p, b)] = ReplicaProcess(self, spec, p, b)
        self.replica_list = [self.replicas[k] for k in sorted(self.replicas)]
        self.controller = ControllerProcess(self)
        self.coordinators = [CoordinatorProcess(self, i) for i in range(sc.coordinators)]
        self.admin = Admin(self)
        self.producers: list[Producer] = []
        plain_parts = [(t, p) for t in sc.topics if not t.compact for p in range(t.partitions)]
        for i in range(sc.producers + sc.acks1_producers):
            spec, p = plain_parts[i % len(plain_parts)]
            self.producers.append(Producer(self, i, spec, p, acks=-1 if i < sc.producers else 1, max_in_flight=sc.max_in_flight, max_batch=sc.max_batch))
        keyed_parts = [(t, p) for t in sc.topics if t.compact for p in range(t.partitions)]
        for j in range(sc.keyed_producers if keyed_parts else 0):
            spec, p = keyed_parts[j % len(keyed_parts)]
            i = len(self.producers)
            self.producers.append(Producer(self, i, spec, p, acks=-1, max_in_flight=sc.max_in_flight, max_batch=3, keys=spec.keys))
        user_parts = [(t, p) for t in sc.topics for p in range(t.partitions)]
        self.readers = [Reader(self, i, t.name, p) for i, (t, p) in enumerate(user_parts)]
        self.txn_ledger = TxnLedger()
        if config.transactions:
            sc.txn_producers = 1
        for i in range(sc.txn_producers):
            spec, p = user_parts[i % len(user_parts)]
            self.producers.append(TxnProducer(self, i, spec, p, max_in_flight=sc.max_in_flight, max_batch=sc.max_batch))
            self.readers.append(CommittedReader(self, i, spec.name, p))
        txn_producers = [p for p in self.producers if isinstance(p, TxnProducer)]
        self.late_writers = [LateWriter(self, p) for p in txn_producers]
        self.txn_stand_in = CoordinatorStandIn(self, txn_producers) if txn_producers else None
        txn_stand_in = [self.txn_stand_in] if self.txn_stand_in is not None else []
        self.members = [Member(self, i, "g", [t.name for t in sc.topics]) for i in range(sc.members)]
        # with --transactions, a transactional offset committer per groups run (txn_groups.py)
        self.txn_committers = [TxnOffsetCommitter(self, 0)] if config.transactions and sc.coordinators else []
        self.txn_world = TxnWorld(self, txn_state) if txn_state is not None else None
        if self.txn_world is not None:
            self.readers += self.txn_world.readers
        self.security_admin = SecurityAdmin(self) if config.security else None
        for node in [*self.replica_list, self.controller, *self.coordinators, self.admin, *self.producers, *self.readers, *self.members, *self.txn_committers, *self.late_writers, *txn_stand_in]:
            self.net.add(node)
        for node in self.txn_world.nodes() if self.txn_world is not None else []:
            self.net.add(node)
        self.nemesis = Nemesis(self)
        self.phase = "faults"
        self.damage = PageCacheDamage(self)  # page-cache loss (damage.py)
        self._restart_gen: dict[str, int] = {}
        self._quiet_state: tuple | None = None
        self.twins = Twins(self)  # two live processes of one actor (twins.py)
        self.grown: set[tuple[str, int]] = set()  # partitions create_partitions added

    def route_call(self, dst: str, method: str, request: Any) -> str:
        """Where a replica's call goes: the KIP-890 checks for the old TxnProducer's ids to
        its coordinator stand-in (txn_verify.py); everything else where it was sent."""
        if self.txn_stand_in is not None and method == "add_partitions_to_txn":
            return self.txn_stand_in.route(dst, request)
        return dst

    # -- tracing ----------------------------------------------------------------------------
    def trace(self, message: str) -> None:
        line = f"{self.kernel.now:>7} {message}"
        self._tail.append(line)
        self._digest.update(line.encode())
        if self.config.verbose:
            print(line)

    def _trace_message(self, message: str) -> None:
        print(f"{self.kernel.now:>7} {message}")

    # -- what processes and the nemesis use --------------------------------------------------
    def stored_partition(self, topic: str, partition: int) -> PartitionState | None:
        raw = self.store.get(partition_key(topic, partition))
        return None if raw is None else PartitionState.decode(raw)

    def replica_config(self, topic: str) -> dict[str, str] | None:
        """The config the controller gives a replica of ``topic`` it creates (CreateReplica):
        the broker configs and the topic's, as stored."""
        raw = self.store.get(topic_key(topic))
        if raw is None:
            return None
        return {**self.controller_config.broker_config, **self.controller_config.default_topic_config, **TopicState.decode(raw).config}

    def current_binding(self) -> dict[int, str]:
        raw = self.store.get(PLACEMENT_KEY)
        return decode_binding(raw) if raw else dict(self.binding)

    def alive_machines(self) -> list[str]:
        return [mid for mid, m in sorted(self.machines.items()) if m.up and not m.cut_off]

    # -- issue 32: an operator grows a topic ------------------------------------------------
    def grow_topic(self, spec: TopicSpec, count: int) -> None:
        """create_partitions: the new partitions' replica processes, producer and reader
        exist before the request is sent (the controller creates their actors through
        Ray, i.e. :class:`SimReplicaHost`); they are placed as creation places them."""
        ti = self.topics.index(spec)
        assignment = []
        for p in range(spec.partitions, count):
            replicas = [(p + ti + j) % self.scenario.brokers for j in range(spec.rf)]
            assignment.append(replicas)
            self.assignments[(spec.name, p)] = replicas
            self.grown.add((spec.name, p))
            for b in replicas:
                proc = ReplicaProcess(self, spec, p, b)
                self.replicas[(spec.name, p, b)] = proc
                self.net.add(proc)
            self.history.add_partition(spec, p)
            producer = Producer(
                self, len(self.producers), spec, p, acks=-1, max_in_flight=self.scenario.max_in_flight, max_batch=self.scenario.max_batch, keys=spec.keys
            )
            self.producers.append(producer)
            self.net.add(producer)
            producer.start()
            self.kernel.after(self.kernel.rng.randint(*self.scenario.produce_gap_ms), self._produce, producer)
            reader = Reader(self, len(self.readers), spec.name, p)
            self.readers.append(reader)
            self.net.add(reader)
            reader.start()
        self.replica_list = [self.replicas[k] for k in sorted(self.replicas)]
        self.trace(f"admin: create_partitions {spec.name} {spec.partitions} -> {count} ({assignment})")
        spec.partitions = count
        self.admin.create_partitions(spec.name, count, assignment)


def run_seed(
    seed: int,
    kind: str | None = None,
    mode: str | None = None,
    max_events: int | None = None,
    verbose: int = 0,
    fault_ms: int | None = None,
    security: bool = False,
    transactions: bool = False,
) -> SimResult:
    """One run. ``max_events`` alone also lifts the time bound, so that more events means
    a longer run."""
    cfg = SimConfig(seed=seed, kind=kind, mode=mode, verbose=verbose, security=security, transactions=transactions)
    if max_events is not None:
        cfg.max_events = max_events
        cfg.fault_ms = max(cfg.fault_ms, max_events * 2)
    if fault_ms is not None:
        cfg.fault_ms = fault_ms
    return Simulation(cfg).run()
