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
from dataclasses import dataclass, field
from typing import Any

from kcoord.group import GroupConfig
from kcoord.group.records import OFFSETS_TOPIC
from kcoord.protocol.controller import CreateTopicsRequest
from kcoord.replication.controller import ControllerConfig
from kcoord.replication.metadata import PartitionState, TopicState, decode_trust, partition_key, topic_key
from kcoord.replication.placement import PLACEMENT_KEY, decode_binding
from kcoord.replication.roles import LEADER, OFFLINE

from .checks import History, Violation, read_log
from .clients import Admin, Member, Producer, Reader
from .security import SecurityAdmin
from .faults import Nemesis
from .kernel import Kernel, NetParams, Network, resume
from .rejoin import RejoinWatch
from .processes import HEAD, ControllerProcess, CoordinatorGhost, CoordinatorProcess, Machine, ReplicaGhost, ReplicaProcess
from .scenario import Scenario, TopicSpec
from .store import FaultyStore
from .transactions import CommittedReader, TxnLedger, TxnProducer
from .transactions import final_checks as txn_final_checks
from .txn_verify import CoordinatorStandIn, LateWriter
from .txn_verify import final_checks as late_write_checks
from .txn_groups import TxnOffsetCommitter
from .txn_world import TxnWorld, state_topic

KINDS = ("replication", "groups")
MODES = ("fsync", "pagecache", "flushms")


@dataclass
class SimConfig:
    seed: int = 0
    kind: str | None = None  # "replication" or "groups"; None lets the seed choose
    mode: str | None = None  # durability of every replicated topic; None lets the seed choose
    max_events: int = 4_000  # the fault phase ends after this many events...
    fault_ms: int = 6_000  # ...or this much simulated time
    heal_timeout_ms: int = 60_000
    call_timeout_ms: int = 1000  # the drivers' per-call timeouts, scaled down for the sim
    produce_timeout_ms: int = 1500
    client_backoff_ms: int = 50
    consumer_wait_ms: int = 200
    verbose: int = 0  # 1: trace events (faults, roles, elections); 2: also every message
    security: bool = False  # an admin alters users and ACLs through the controller (security.py)
    # A transactional producer and a read_committed reader join the seed's scenario
    # (transactions.py); opt-in, so that every seed without it runs as before.
    transactions: bool = False

    def replay_command(self) -> str:
        cmd = f"python -m tests.sim.run --seed {self.seed}"
        if self.kind is not None:
            cmd += f" --kind {self.kind}"
        if self.mode is not None:
            cmd += f" --mode {self.mode}"
        if self.max_events != SimConfig.max_events:
            cmd += f" --events {self.max_events}"
        if self.fault_ms != SimConfig.fault_ms:
            cmd += f" --ms {self.fault_ms}"
        if self.security:
            cmd += " --security"
        if self.transactions:
            cmd += " --transactions"
        return cmd + " --verbose"


@dataclass
class SimResult:
    config: SimConfig
    scenario: Scenario
    violations: list[Violation]
    stats: dict[str, int]
    trace_tail: list[str] = field(default_factory=list)
    digest: str = ""  # over every traced event, the final logs and the metadata store

    @property
    def ok(self) -> bool:
        return not self.violations

    def fingerprint(self) -> tuple:
        """Equal for two runs of the same seed (the determinism check)."""
        return (self.digest, tuple(sorted(self.stats.items())), tuple(str(v) for v in self.violations))

    def summary(self) -> str:
        s = self.stats
        faults = ",".join(f"{k}={v}" for k, v in sorted(s.items()) if k.startswith("fault_") and v)
        return (
            f"seed {self.config.seed}: {'OK' if self.ok else 'FAILED'} [{self.scenario.describe()}] "
            f"events={s['events']} sim_ms={s['sim_ms']} acked_batches={s['acked_batches']} appends={s['leader_appends']} "
            f"commits={s['commits_acked']} offset_checks={s['offset_checks']} epochs_max={s['max_epoch']} "
            f"store_failures={s['store_failures']} {faults.replace('fault_', '')}"
        )

    def report(self) -> str:
        lines = [self.summary()]
        lines += [f"  {v}" for v in self.violations[:20]]
        if len(self.violations) > 20:
            lines.append(f"  ... and {len(self.violations) - 20} more")
        if self.violations and self.trace_tail:
            lines.append("  last events:")
            lines += [f"    {line}" for line in self.trace_tail[-60:]]
        lines.append(f"  replay: {self.config.replay_command()}")
        return "\n".join(lines)


class Simulation:
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
        self.damaged: set[tuple[str, int, int]] = set()
        self.damage_pending: dict[tuple[str, int, int], tuple] = {}
        # Wiped replicas: whole again only once back in the stored ISR, since the controller
        # trusts a replica back on another directory only then (seed 6383).
        self.damaged_until_in_isr: set[tuple[str, int, int]] = set()
        self._restart_gen: dict[str, int] = {}
        self._quiet_state: tuple | None = None
        self.ghosts: list[Any] = []  # older processes still running (twin)
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

    # -- running ----------------------------------------------------------------------------
    def run(self) -> SimResult:
        k = self.kernel
        cfg = self.config
        self.trace(f"seed {cfg.seed}: {self.scenario.describe()}")
        self.controller.start()
        for spec in self.topics:
            self.admin.create(
                CreateTopicsRequest(
                    name=spec.name,
                    partitions=spec.partitions,
                    replication_factor=spec.rf,
                    config=spec.config(),
                    assignment={p: self.assignments[(spec.name, p)] for p in range(spec.partitions)},
                )
            )
        for c in self.coordinators:
            k.after(k.rng.randint(1, 50), c.start)
        for p in self.producers:
            p.start()
            k.after(k.rng.randint(*self.scenario.produce_gap_ms), self._produce, p)
        for r in self.readers:
            r.start()
        for m in self.members:
            k.after(k.rng.randint(100, 1000), m.start)
        for c in self.txn_committers:
            c.start()
        if self.txn_world is not None:
            self.txn_world.start()
        if self.security_admin is not None:
            self.security_admin.start()
        self.nemesis.start()
        while k.events < cfg.max_events and k.now < cfg.fault_ms and k.step():
            pass
        self._heal()
        heal_started = k.now
        RejoinWatch(self).start()  # invariant isr-rejoin (rejoin.py)
        k.after(200, self._check_quiet)
        while self.phase == "heal" and k.now - heal_started < cfg.heal_timeout_ms and k.step():
            pass
        if self.phase != "quiet":
            self.history.fail("liveness", k.now, f"no quiet state {cfg.heal_timeout_ms} ms after healing: {self._not_quiet()}")
        else:
            self._final_checks()
        return self._result()

    def _final_checks(self) -> None:
        for (topic, partition), replicas in sorted(self.assignments.items()):
            p = self.stored_partition(topic, partition)
            assert p is not None
            leader = self.replicas[(topic, partition, p.leader)]
            logs = {b: self.replicas[(topic, partition, b)].replica.log for b in replicas}
            self.history.final_checks((topic, partition), p.leader, logs, leader.replica.hw, self.kernel.now)
        if self.security_admin is not None and self.controller.core is not None:
            self.security_admin.check(self.controller.core)
        if self.scenario.txn_producers:
            txn_final_checks(self)
            late_write_checks(self, self.late_writers)
        for c in self.txn_committers:
            c.final_check()
        if self.txn_world is not None:
            self.txn_world.final_checks()

    def _result(self) -> SimResult:
        h = self.history
        stats: dict[str, Any] = {
            "events": self.kernel.events,
            "sim_ms": self.kernel.now,
            "acked_batches": sum(len(p.acked) for p in h.parts.values()),
            "leader_appends": sum(p.leader_appends for p in h.parts.values()),
            "consumed_batches": sum(p.consumer_batches for p in h.parts.values()),
            "commits_acked": h.groups.commits_acked,
            "offset_checks": h.groups.fetches_checked,
            "epoch_checks": h.epoch_checks,
            "max_epoch": max(h.stored_epochs.values(), default=-1),
            "calls": self.net.stats.calls,
            "dropped": self.net.stats.dropped,
            "duplicated": self.net.stats.duplicated,
            "store_writes": self.store.writes,
            "store_failures": self.store.failures,
            "power_losses": sum(m.power_losses for m in self.machines.values()),
        }
        if self.scenario.txn_producers:
            ledger = self.txn_ledger
            stats["txn_markers"] = ledger.markers
            stats["txn_aborts"] = ledger.aborts
            stats["txn_read"] = len(ledger.read)
            stats["txn_stand_in_answered"] = self.txn_stand_in.answered if self.txn_stand_in is not None else 0
            stats["committed_records_read"] = sum(r.returned for r in self.readers if isinstance(r, CommittedReader))
        for c in self.txn_committers:
            for name, n in c.stats.items():
                stats[f"txg_{name}"] = n
        if self.txn_world is not None:
            stats.update(self.txn_world.stats())
        for kind, n in self.nemesis.counts.items():
            stats[f"fault_{kind}"] = n
        for proc in self.replica_list:
            log = proc.log
            if log is not None and proc.replica is not None and proc.replica.role != OFFLINE and log.log_end_offset > log.log_start_offset:
                self._digest.update(proc.name.encode() + read_log(self.history, proc.tp, proc.broker, log, log.log_start_offset))
        for key in self.store.keys():
            self._digest.update(key.encode() + (self.store.get(key) or b""))
        return SimResult(self.config, self.scenario, list(h.violations), stats, list(self._tail), self._digest.hexdigest())

    # -- clients ----------------------------------------------------------------------------
    def _produce(self, p: Producer) -> None:
        if self.phase != "faults":
            return
        if p.unacked() < 30:
            p.send_new()
        self.kernel.after(self.kernel.rng.randint(*self.scenario.produce_gap_ms), self._produce, p)

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

    def start_replica(self, proc: ReplicaProcess, machine: Machine) -> None:
        if not proc.start(machine) and not proc.up and not self.scenario.bound and self.phase != "quiet":
            self.restart_later(proc, 200)  # Ray keeps restarting an actor whose constructor failed

    def restart_later(self, proc: Any, delay: int) -> None:
        gen = self._restart_gen.get(proc.name, 0) + 1
        self._restart_gen[proc.name] = gen
        self.kernel.after(delay, self._restart, proc, gen)

    def _restart(self, proc: Any, gen: int) -> None:
        if self._restart_gen.get(proc.name) != gen or proc.up:
            return
        if isinstance(proc, ReplicaProcess):
            self.start_replica(proc, self.machines[HEAD])
        else:
            proc.start()

    def machine_up(self, machine: Machine) -> None:
        if not machine.up:
            machine.up = True
            self.trace(f"{machine.id} is back")

    def heal_link(self, a: str, b: str) -> None:
        if self.phase == "faults":
            self.net.heal(a, b)
            self.trace(f"link {a} <-> {b} healed")

    def heal_one_way(self, src: str, dst: str) -> None:
        if self.phase == "faults":
            self.net.heal_one_way(src, dst)
            self.trace(f"link {src} -> {dst} healed")

    def store_recovers(self) -> None:
        self.store.fail_rate = 0.0
        self.trace("METADATA STORE healthy again")

    def repair_storage(self, proc: ReplicaProcess, machine: Machine, rule: Any) -> None:
        """An operator fixes the disk and restarts the replica if its log went offline."""
        machine.disk.remove_fault(rule)
        if proc.up and proc.replica is not None and proc.replica.role == OFFLINE and proc.machine is machine:
            self.trace(f"operator restarts {proc.name} after its disk failed")
            proc.crash("restarted by the operator")
            self.start_replica(proc, machine)

    # -- issue 32: operators and two live processes -----------------------------------------
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

    def twin(self, proc: Any, duration: int) -> bool:
        """Ray gives up on ``proc`` (its node lost the head) while it runs on, and starts its
        next process; the old one lives ``duration`` ms more (see faults.py, ``twin``)."""
        rng = self.kernel.rng
        if isinstance(proc, ReplicaProcess):
            ghost: Any = ReplicaGhost(proc)
            callers = [p.name for p in self.producers + self.readers] + [c.name for c in self.coordinators]
            callers += [r.name for r in self.replica_list if r.tp == proc.tp and r is not proc]
            self.history.on_replica_twin(proc, ghost)
            proc.ghost = ghost
            proc.replica = None
        else:
            ghost = CoordinatorGhost(proc)
            callers = [m.name for m in self.members]
            if rng.random() < 0.5:
                # Its partition's replicas unreachable too: an append times out after
                # persist_ms and it asks for a newer epoch, as it would against a leader
                # stuck below min ISR (issue 32, finding 6: only the controller may grant it).
                for r in self.replica_list:
                    if r.tp == (OFFSETS_TOPIC, proc.index):
                        self.net.cut(ghost.name, r.name)
        self.net.cut(ghost.name, self.controller.name)
        for caller in callers:
            if rng.random() < 0.3:
                self.net.route_stale(caller, proc.name, ghost)
        proc.driver = None
        proc.up = False  # Ray's view: gone (its calls are the ghost's now)
        self.ghosts.append(ghost)
        self.trace(f"TWIN: {proc.incarnation_id} runs on as {ghost.name}, cut off from the controller, for {duration} ms")
        self.kernel.after(duration, self.end_twin, ghost)
        if not (isinstance(proc, ReplicaProcess) and self.scenario.bound):
            self.restart_later(proc, rng.choice([5, 50, 300]))
        return True

    def cut_off_machine(self, machine: Machine, duration: int) -> bool:
        """Bound brokers: ``machine`` loses the head; Ray takes it (and its actors) for dead,
        while every replica process on it runs on as a ghost."""
        procs = [
            p for p in self.replica_list if p.machine is machine and p.up and not p.paused and p.ghost is None and p.replica is not None and p.replica.role != OFFLINE
        ]
        machine.cut_off = True
        self.trace(f"NODE CUT OFF: {machine.id} loses the head for {duration} ms ({len(procs)} replica processes run on)")
        for p in procs:
            self.twin(p, duration)
        self.kernel.after(duration, self._machine_back, machine)
        return True

    def _machine_back(self, machine: Machine) -> None:
        if machine.cut_off:
            machine.cut_off = False
            self.trace(f"{machine.id} reaches the head again")

    def end_twin(self, ghost: Any) -> None:
        """The old process is finally stopped (its node is back, and Ray kills what it
        replaced), or was already gone."""
        if ghost in self.ghosts:
            self.ghosts.remove(ghost)
        if ghost.up:
            ghost.crash("stopped: Ray replaced it")
        self.net.heal(ghost.name, self.controller.name)
        if isinstance(ghost, ReplicaGhost) and ghost.of.ghost is ghost:
            ghost.of.ghost = None

    # -- the failure model of page-cache topics ---------------------------------------------
    def may_damage(self, proc: ReplicaProcess) -> bool:
        """Whether ``proc`` may lose unsynced data now (topics that do not fsync every
        append): at most one damaged replica per partition, and never the last member of
        its ISR and ELR."""
        if not proc.spec.lossy:
            return True
        key = (proc.topic, proc.partition, proc.broker)
        if any(d[:2] == proc.tp and d != key for d in self.damaged):
            return False
        # The README's promise: a page cache loss is covered as long as not every ISR member
        # loses it at once. Some other member of the ISR (or ELR) must keep its copy.
        p = self.stored_partition(proc.topic, proc.partition)
        if p is None:
            return True
        return any(b != proc.broker for b in (*p.isr, *p.elr))

    def mark_damaged(self, proc: ReplicaProcess, pending: tuple | None = None, until_in_isr: bool = False) -> None:
        """``pending``: (fault rule, incarnation) of a failed fsync still to come: the
        damage is not over before the rule fired and the process restarted (or the rule
        was removed unfired). ``until_in_isr``: a wiped replica, whole again only once it
        is back in the ISR, where the controller trusts it again: caught up but outside
        the ISR it is still no candidate to lead, so the copy it holds does not count."""
        key = (proc.topic, proc.partition, proc.broker)
        self.damaged.add(key)
        if pending is not None:
            self.damage_pending[key] = pending
        if until_in_isr:
            self.damaged_until_in_isr.add(key)
        self.trace(f"{proc.name} is damaged (may have lost unsynced records)")

    def is_damaged(self, proc: ReplicaProcess) -> bool:
        return (proc.topic, proc.partition, proc.broker) in self.damaged

    def on_replica_progress(self, proc: ReplicaProcess) -> None:
        """A damaged replica is whole again once it holds everything committed so far."""
        key = (proc.topic, proc.partition, proc.broker)
        if key not in self.damaged or proc.replica is None or proc.replica.role in ("none", OFFLINE) or proc.is_ghost:
            return
        pending = self.damage_pending.get(key)
        if pending is not None:
            rule, incarnation = pending
            if (rule.fired == 0 and rule in proc.machine.disk.rules) or (rule.fired > 0 and proc.incarnation == incarnation):
                return  # the failed fsync has not happened yet, or its damage not surfaced
            del self.damage_pending[key]
        # everything committed so far: the highest HW reached with the promise, and any
        # live replica's HW now; and everything a leader still counts this replica for.
        # A leader keeps the position the lost incarnation last fetched from until the new
        # one fetches (as Kafka does between a broker's restart and its first fetch), and
        # may advance its HW on that stale count; the replica is whole only once it holds
        # what it is counted for (seed 34993).
        live = [p for p in self.replica_list if p.tp == proc.tp and p.up and p.replica is not None and p.replica.role != OFFLINE]
        frontier = max([self.history.parts[proc.tp].strong_hw] + [p.replica.hw for p in live])
        for p in live:
            state = p.replica.leader_state
            counted = state.followers.get(proc.broker) if state is not None else None
            if counted is not None:
                frontier = max(frontier, counted.log_end_offset)
        if key in self.damaged_until_in_isr:
            # Whole only where the controller trusts it again: back in the ISR, and recorded
            # (in the store) on the directory it now has, not as replaced. In the ISR alone
            # is not enough: it may be there still from before its wipe, with a controller
            # yet to learn of it (seed 23499).
            stored = self.stored_partition(proc.topic, proc.partition)
            raw = self.store.get(partition_key(proc.topic, proc.partition))
            trust = None if raw is None else (decode_trust(raw) or {}).get(proc.broker)
            if (
                stored is None
                or proc.broker not in stored.isr
                or trust is None
                or trust.replaced
                or trust.directory != proc.replica.log.directory_id
            ):
                return
        if proc.replica.log.log_end_offset >= frontier:
            self.damaged.discard(key)
            self.damaged_until_in_isr.discard(key)
            self.trace(f"{proc.name} caught up again (LEO {proc.replica.log.log_end_offset} >= HW {frontier}): no longer damaged")

    # -- heal and quiesce -------------------------------------------------------------------
    def _heal(self) -> None:
        self.phase = "heal"
        self.trace("HEAL: links restored, no more loss, faults cleared, every process back")
        self.net.heal_all()
        self.net.params.drop_rate = 0.0
        self.net.params.duplicate_rate = 0.0
        self.store.fail_rate = 0.0
        for ghost in list(self.ghosts):
            self.end_twin(ghost)
        for name in list(self._restart_gen):
            self._restart_gen[name] += 1  # cancel scheduled restarts: restart now instead
        for m in self.machines.values():
            m.disk.clear_faults()
            self.machine_up(m)
            self._machine_back(m)
        for proc in [*self.replica_list, self.controller, *self.coordinators]:
            if proc.up and proc.paused:
                resume(proc)
        if not self.controller.up:
            self.controller.start()
        for c in self.coordinators:
            if not c.up:
                c.start()
        binding = self.current_binding()
        for proc in self.replica_list:
            if proc.up and proc.replica is not None and proc.replica.role == OFFLINE:
                proc.crash("restarted by the operator")
            if not proc.up and proc.tp in self.grown and self.stored_partition(proc.topic, proc.partition) is None:
                continue  # create_partitions not applied yet: the controller creates it
            if not proc.up:
                if self.scenario.bound:
                    # what the controller would create it with (Ray restarts a logical
                    # broker's actor on its creation arguments instead)
                    proc.create_config = self.replica_config(proc.topic)
                machine = self.machines[binding[proc.broker]] if self.scenario.bound else self.machines[HEAD]
                proc.start(machine)
        for m in self.members:
            if not m.alive:
                m.start()
        for prod in self.producers:
            if isinstance(prod, TxnProducer):
                prod.finish()  # its open transaction ends, as a coordinator's timeout would end it
        for w in self.late_writers:
            w.arm()
        if self.txn_world is not None:
            self.txn_world.heal()

    def _not_quiet(self) -> str | None:
        """Why the cluster is not quiet yet, or None when it is."""
        if not self.controller.up or self.controller.driver is None or not self.controller.driver.booted:
            return "controller not up"
        if not self.admin.done:
            return f"admin busy: {self.admin.busy() or 'topics not created yet'}"
        for (topic, partition), replicas in sorted(self.assignments.items()):
            p = self.stored_partition(topic, partition)
            if p is None or p.leader < 0:
                return f"{topic}-{partition} has no leader ({p})"
            lead = self.replicas[(topic, partition, p.leader)]
            r = lead.replica
            if r is None or r.role != LEADER or r.leader_epoch != p.leader_epoch:
                return f"{topic}-{partition}: broker {p.leader} does not lead epoch {p.leader_epoch} yet"
            leo = r.log.log_end_offset
            if r.hw != leo:
                return f"{topic}-{partition}: leader HW {r.hw} != LEO {leo}"
            if sorted(p.isr) != sorted(replicas) or sorted(r.isr) != sorted(replicas):
                return f"{topic}-{partition}: ISR is {p.isr} (leader sees {r.isr})"
            for b in replicas:
                f = self.replicas[(topic, partition, b)].replica
                if f is None or f.role == OFFLINE or f.leader_epoch != p.leader_epoch or f.log.log_end_offset != leo or f.hw != leo:
                    state = None if f is None else (f.role, f.leader_epoch, f.log.log_end_offset if f.role != OFFLINE else -1, f.hw)
                    return f"{topic}-{partition}: replica {b} not caught up ({state}, leader LEO {leo})"
        for prod in self.producers:
            if not prod.idle:
                return f"{prod.name} has {prod.unacked()} unacknowledged batches"
        why = None if self.txn_world is None else self.txn_world.hanging()
        if why is not None:
            return why
        for reader in self.readers:
            p = self.stored_partition(reader.topic, reader.partition)
            lead = self.replicas[(reader.topic, reader.partition, p.leader)]
            if reader.position != lead.replica.log.log_end_offset:
                return f"{reader.name} at {reader.position}, {reader.topic}-{reader.partition} ends at {lead.replica.log.log_end_offset}"
        for c in self.coordinators:
            if c.driver is None or not c.driver.loaded:
                return f"{c.name} has not loaded its partition"
        for c in self.txn_committers:
            if not c.idle:
                return f"{c.name} has transaction {c.txn} open"
        for w in self.late_writers:
            if not w.idle:
                return f"{w.name} has not heard the final answer to its late write"
        why = None if self.txn_world is None else self.txn_world.busy()
        if why is not None:
            return why
        if self.members:
            gens = {m.generation for m in self.members}
            if any(m.state != "stable" for m in self.members) or len(gens) != 1:
                return f"members not all stable in one generation: {[(m.name, m.state, m.generation) for m in self.members]}"
            coordinator = next(c for c in self.coordinators if c.name == self.members[0].coordinator)
            group = coordinator.core.group("g") if coordinator.core is not None else None
            if group is None or group.state.value != "Stable" or group.generation_id not in gens:
                return f"group g is {None if group is None else (group.state.value, group.generation_id)}"
        return None

    def _check_quiet(self) -> None:
        if self.phase != "heal":
            return
        reason = self._not_quiet()
        if reason is None:
            state = tuple(
                (t, p, self.stored_partition(t, p).leader_epoch, self.replicas[(t, p, self.stored_partition(t, p).leader)].replica.log.log_end_offset)
                for (t, p) in sorted(self.assignments)
            )
            if self._quiet_state == state:
                self.phase = "quiet"
                self.trace("QUIET")
                return
            self._quiet_state = state
        else:
            self._quiet_state = None
        self.kernel.after(200, self._check_quiet)


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
