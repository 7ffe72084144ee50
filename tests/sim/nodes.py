"""Simulated shells for the replica and controller cores, doing what the Ray actors do.

:class:`ReplicaNode` mirrors ``actors/replica.py``: it hands each request to the
:class:`~kcoord.replication.replica.Replica` with a token for the pending reply, performs the
actions it returns (replies, Fetch / OffsetsForLeaderEpoch to the leader, AlterPartition to
the controller), feeds every call's outcome back (``None`` when the call failed), and runs
one timer that calls ``tick`` at ``next_deadline()`` (at least once a second).

:class:`ControllerNode` mirrors ``actors/controller.py``: Persist actions are applied to the
store synchronously and in order, before any later action; LeaderAndIsr and heartbeat calls
run concurrently; heartbeat outcomes go back as answer / timeout / dead; the tick loop runs
at the core's deadline, clamped to [5, 100] ms.

Crashing a node drops its core object; a restart builds a fresh one (a replica on whatever
its log kept, :meth:`MemoryLog.crash`; the controller from the store's contents).
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from kcoord import records
from kcoord.log import LogConfig, MemoryLog
from kcoord.protocol.codec import Message
from kcoord.protocol.controller import (
    AlterPartitionResponse,
    CreateTopicsRequest,
    HeartbeatResponse,
    LeaderAndIsrResponse,
)
from kcoord.protocol.replication import FetchResponse, OffsetsForLeaderEpochResponse
from kcoord.replication.config import ReplicationConfig
from kcoord.replication.controller import ControllerState, ReplicaId
from kcoord.replication.controller_driver import EXISTS, ControllerDriver
from kcoord.replication.metadata import ClusterState, PartitionState
from kcoord.replication.metastore import MemoryStore
from kcoord.protocol import names
from kcoord.replication.replica import LEADER, Replica
from kcoord.replication.replica_driver import ReplicaDriver, ReplicaTimeouts

from .kernel import DEAD, OK, Call
from .world import SimClock, SimTransport

if TYPE_CHECKING:
    from .simulation import Simulation

TOPIC = "t"
CLUSTER = "sim"
CONTROLLER = "ctl"
IDLE_WAKE_MS = 1000  # the replica shell's timer wakes at least this often


def replica_name(broker: int) -> str:
    return f"r{broker}"


def resolve(target: str) -> str:
    """Actor name (kcoord.protocol.names) -> simulated node name."""
    if target == names.controller(CLUSTER):
        return CONTROLLER
    parts = target.split("/")
    if len(parts) == 5 and parts[1] == "replica":
        return replica_name(int(parts[4]))
    raise AssertionError(f"the simulation has no actor {target!r}")


class ReplicaNode:
    """One replica process: the production :class:`ReplicaDriver` on the simulated clock
    and network. Crashing drops the driver (and its core); a restart builds new ones on
    whatever the log kept."""

    def __init__(self, sim: "Simulation", broker: int) -> None:
        self.sim = sim
        self.broker = broker
        self.name = replica_name(broker)
        self.up = False
        self.incarnation = 0
        self.log: MemoryLog | None = None
        self.replica: Replica | None = None
        self.driver: ReplicaDriver | None = None
        # what invariant checks compare against between calls
        self._seen_epoch = -1
        self._lead_key: tuple[int, int] | None = None
        self._lead_hw = 0
        self._prev_hw = 0

    @property
    def incarnation_id(self) -> str:
        return f"{self.name}#{self.incarnation}"

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        now = self.sim.kernel.now
        cfg = self.sim.topic_config
        if self.log is None:
            self.log = MemoryLog(LogConfig.from_topic_config(cfg), now_ms=now)
        self.incarnation += 1
        inc = self.incarnation
        alive = lambda: self.up and self.incarnation == inc  # noqa: E731
        self.replica = Replica(TOPIC, 0, self.broker, self.log, ReplicationConfig.from_topic_config(cfg), now, incarnation=self.incarnation_id)
        self.driver = ReplicaDriver(
            self.replica,
            cluster=CLUSTER,
            transport=SimTransport(self.sim.net, self, resolve, after=self._after_core_call),
            clock=SimClock(self.sim.kernel, alive, after=self._after_core_call),
            timeouts=ReplicaTimeouts(call_ms=self.sim.config.call_timeout_ms, idle_wake_ms=IDLE_WAKE_MS),
            trace=lambda m: self.sim.trace(f"{self.incarnation_id} {m}"),
        )
        self.up = True
        self._seen_epoch = -1
        self._lead_key = None
        self._prev_hw = self.replica.hw
        self.sim.trace(f"{self.incarnation_id} started: LEO {self.log.log_end_offset} HW {self.replica.hw} epochs {self.log.epoch_cache.entries}")
        self.driver.start()

    def crash(self) -> int:
        """Kill the process; the log keeps only what it had made durable. Returns how many
        records were lost."""
        assert self.up and self.log is not None and self.driver is not None
        lost = self.log.log_end_offset - self.log.flushed_offset
        before = self.log.log_end_offset
        if self.driver.max_timer_spins >= 3:
            self._report_spin()
        self.log = self.log.crash()
        self.replica = None
        self.driver = None
        self.up = False
        self.sim.net.node_crashed(self.name)
        self.sim.trace(f"{self.incarnation_id} CRASHED: LEO {before} -> {self.log.log_end_offset} (lost {lost})")
        return lost

    def _report_spin(self) -> None:
        self.sim.history.fail("timer", self.sim.kernel.now, f"{self.name}'s timer busy-looped: next_deadline() stayed in the past right after tick()")

    # -- incoming calls ---------------------------------------------------------------------
    def receive(self, call: Call, request: Message) -> None:
        r = self.replica
        assert r is not None and self.driver is not None
        now = self.sim.kernel.now
        net = self.sim.net
        log = r.log
        before, epoch, role = log.log_end_offset, r.leader_epoch, r.role
        self.driver.serve(request, lambda response: net.reply(call, response))
        if call.method == "produce" and log.log_end_offset > before:
            assert role == LEADER, f"{self.name} appended a produce request as {role}"
            data = log.read(before, 1 << 30)
            self.sim.history.on_leader_append(self.broker, epoch, [h.leader_epoch for _, h in records.iter_headers(data)], now)
        self._after_core_call()

    # -- observation ------------------------------------------------------------------------
    def _after_core_call(self) -> None:
        """Check what must hold between any two calls into the core."""
        r = self.replica
        if r is None or not self.up:
            return
        now = self.sim.kernel.now
        h = self.sim.history
        if self.driver is not None and self.driver.max_timer_spins >= 3 and not getattr(self, "_spin_reported", False):
            self._spin_reported = True
            self._report_spin()
        if r.leader_epoch != self._seen_epoch:
            h.on_replica_epoch(self.broker, self._seen_epoch, r.leader_epoch, now)
            self._seen_epoch = max(self._seen_epoch, r.leader_epoch)
        if r.role == LEADER and r.leader_state is not None:
            key = (self.incarnation, r.leader_epoch)
            if key != self._lead_key:
                # A tenure starts from the HW the process had before (as a follower, or at
                # start), so an advance made while becoming leader is recorded too.
                self._lead_key = key
                self._lead_hw = min(self._prev_hw, r.hw)
            if r.hw < self._lead_hw:
                h.fail("4", now, f"leader {self.broker} HW went back from {self._lead_hw} to {r.hw} at epoch {r.leader_epoch}")
            elif r.hw > self._lead_hw:
                # The promise holds when an acks=all write waiting for this HW would be acked:
                # the confirmed ISR has min.insync.replicas members (all of them hold it).
                strong = h.every_append_durable or len(r.isr) >= h.min_insync
                h.on_leader_hw(self.broker, r.leader_epoch, self._lead_hw, r.hw, r.log, strong, now)
                self._lead_hw = r.hw
        self._prev_hw = r.hw
        self.sim.on_replica_progress(self)


class SimReplicaHost:
    """CreateReplica/DeleteReplica in the simulation: a replica that never ran is started
    (a crashed one is restarted by the fault scheduler, as Ray restarts an actor)."""

    def __init__(self, sim: "Simulation") -> None:
        self.sim = sim

    def ensure(self, replica: ReplicaId, config: dict, node: str | None, replace_if_stuck: bool) -> str:
        self.sim.ensure_replica(replica.broker)
        return EXISTS

    def delete(self, replica: ReplicaId, done) -> None:  # pragma: no cover - the sim never deletes
        raise AssertionError("unexpected DeleteReplica")


class ControllerNode:
    """The controller process: the production :class:`ControllerDriver` on the simulated
    clock, network and metadata store."""

    def __init__(self, sim: "Simulation") -> None:
        self.sim = sim
        self.name = CONTROLLER
        self.up = False
        self.incarnation = 0
        self.store = MemoryStore()
        self.driver: ControllerDriver | None = None
        self.created_topic = False

    @property
    def core(self) -> ControllerState | None:
        return None if self.driver is None else self.driver.core

    def start(self) -> None:
        sim = self.sim
        self.incarnation += 1
        inc = self.incarnation
        alive = lambda: self.up and self.incarnation == inc  # noqa: E731
        self.up = True
        self.driver = ControllerDriver(
            CLUSTER,
            list(sim.brokers),
            store=self.store,
            transport=SimTransport(sim.net, self, resolve),
            clock=SimClock(sim.kernel, alive),
            replicas=SimReplicaHost(sim),
            config=sim.controller_config,
            call_timeout_ms=sim.config.call_timeout_ms,
            on_persist=self._on_persist,
        )
        self.driver.start()
        sim.trace(f"controller #{self.incarnation} started at controller epoch {self.core.controller_epoch if self.core else '?'}")
        if not self.created_topic:
            # What Admin.create_topic does through the controller's API.
            def created(response: Message) -> None:
                assert response.error_code == 0, response.error_message
                self.created_topic = True

            self.driver.serve(
                CreateTopicsRequest(
                    name=TOPIC,
                    partitions=1,
                    replication_factor=len(sim.brokers),
                    config=dict(sim.topic_config),
                    assignment={0: list(sim.brokers)},
                ),
                created,
            )
            self.created_topic = True

    def _on_persist(self, key: str, value: bytes | None) -> None:
        sim = self.sim
        now = sim.kernel.now
        if value is None:
            return
        if key.startswith("partition/"):
            p = PartitionState.decode(value)
            sim.history.on_persist_partition(key, p.leader_epoch, now)
            sim.trace(f"controller persisted leader {p.leader} epoch {p.leader_epoch}/{p.partition_epoch} ISR {p.isr}")
        elif key == "cluster":
            sim.history.on_persist_cluster(ClusterState.decode(value).controller_epoch, now)

    def crash(self) -> None:
        self.up = False
        if self.driver is not None:
            self.driver.close()
        self.driver = None
        self.sim.net.node_crashed(self.name)
        self.sim.trace(f"controller #{self.incarnation} CRASHED")

    # -- incoming calls ---------------------------------------------------------------------
    def receive(self, call: Call, request: Message) -> None:
        assert self.driver is not None
        self.driver.serve(request, lambda response: self.sim.net.reply(call, response))

    def rebalance(self) -> None:
        """What the admin ``rebalance_leaders`` call does."""
        if self.driver is not None:
            self.driver.rebalance_leaders(lambda moved: None)
