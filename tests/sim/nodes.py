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
from kcoord.replication.actions import Reply, SendAlterPartition, SendFetch, SendOffsetsForLeaderEpoch
from kcoord.replication.config import ReplicationConfig
from kcoord.replication.controller import (
    ControllerState,
    CreateReplica,
    DeleteReplica,
    Persist,
    ReplicaId,
    SendHeartbeat,
    SendLeaderAndIsr,
)
from kcoord.replication.metadata import ClusterState, PartitionState
from kcoord.replication.metastore import MemoryStore
from kcoord.replication.replica import LEADER, Replica

from .kernel import DEAD, OK, Call

if TYPE_CHECKING:
    from .simulation import Simulation

TOPIC = "t"
CONTROLLER = "ctl"
IDLE_WAKE_MS = 1000  # the replica shell's timer wakes at least this often


def replica_name(broker: int) -> str:
    return f"r{broker}"


class ReplicaNode:
    def __init__(self, sim: "Simulation", broker: int) -> None:
        self.sim = sim
        self.broker = broker
        self.name = replica_name(broker)
        self.up = False
        self.incarnation = 0
        self.log: MemoryLog | None = None
        self.replica: Replica | None = None
        self._pending: dict[int, Call] = {}
        self._tokens = 0
        self._tick_at: int | None = None
        self._tick_gen = 0
        self._spin = 0
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
        self.replica = Replica(TOPIC, 0, self.broker, self.log, ReplicationConfig.from_topic_config(cfg), now)
        self.up = True
        self._pending.clear()
        self._tick_at = None
        self._tick_gen += 1
        self._spin = 0
        self._seen_epoch = -1
        self._lead_key = None
        self._prev_hw = self.replica.hw
        self.sim.trace(f"{self.incarnation_id} started: LEO {self.log.log_end_offset} HW {self.replica.hw} epochs {self.log.epoch_cache.entries}")
        self._schedule_tick()

    def crash(self) -> int:
        """Kill the process; the log keeps only what it had made durable. Returns how many
        records were lost."""
        assert self.up and self.log is not None
        lost = self.log.log_end_offset - self.log.flushed_offset
        before = self.log.log_end_offset
        self.log = self.log.crash()
        self.replica = None
        self.up = False
        self._pending.clear()
        self._tick_gen += 1
        self.sim.net.node_crashed(self.name)
        self.sim.trace(f"{self.incarnation_id} CRASHED: LEO {before} -> {self.log.log_end_offset} (lost {lost})")
        return lost

    # -- incoming calls ---------------------------------------------------------------------
    def receive(self, call: Call, request: Message) -> None:
        r = self.replica
        assert r is not None
        now = self.sim.kernel.now
        method = call.method
        if method == "produce":
            log = r.log
            before, epoch, role = log.log_end_offset, r.leader_epoch, r.role
            actions = r.produce(request, self._park(call), now)
            if log.log_end_offset > before:
                assert role == LEADER, f"{self.name} appended a produce request as {role}"
                data = log.read(before, 1 << 30)
                self.sim.history.on_leader_append(self.broker, epoch, [h.leader_epoch for _, h in records.iter_headers(data)], now)
            self._perform(actions)
        elif method == "fetch":
            self._perform(r.fetch(request, self._park(call), now))
        elif method == "offsets_for_leader_epoch":
            self.sim.net.reply(call, r.offsets_for_leader_epoch(request))
        elif method == "leader_and_isr":
            before = (r.role, r.leader_epoch, r.partition_epoch)
            response, actions = r.handle_leader_and_isr(request, now)
            if (r.role, r.leader_epoch, r.partition_epoch) != before:
                self.sim.trace(
                    f"{self.incarnation_id} now {r.role} at epoch {r.leader_epoch}/{r.partition_epoch} "
                    f"(leader {r.leader}, ISR {r.isr}, LEO {r.log.log_end_offset}, HW {r.hw})"
                )
            self._perform(actions)
            self.sim.net.reply(call, response)
        elif method == "heartbeat":
            self.sim.net.reply(call, r.status(self.incarnation_id))
        else:  # pragma: no cover - a sim bug
            raise AssertionError(f"{self.name} has no method {method}")
        self._after_core_call()

    def _park(self, call: Call) -> int:
        self._tokens += 1
        self._pending[self._tokens] = call
        return self._tokens

    # -- actions ----------------------------------------------------------------------------
    def _perform(self, actions: list) -> None:
        net = self.sim.net
        cfg = self.sim.config
        for a in actions:
            if isinstance(a, Reply):
                call = self._pending.pop(a.token, None)
                if call is not None:
                    net.reply(call, a.response)
            elif isinstance(a, SendFetch):
                net.call(
                    self,
                    replica_name(a.leader),
                    "fetch",
                    a.request,
                    FetchResponse,
                    partial(self._fetch_done, a.request),
                    a.request.max_wait_ms + cfg.call_timeout_ms,
                )
            elif isinstance(a, SendOffsetsForLeaderEpoch):
                net.call(
                    self,
                    replica_name(a.leader),
                    "offsets_for_leader_epoch",
                    a.request,
                    OffsetsForLeaderEpochResponse,
                    partial(self._offsets_done, a.request),
                    cfg.call_timeout_ms,
                )
            elif isinstance(a, SendAlterPartition):
                net.call(
                    self,
                    CONTROLLER,
                    "alter_partition",
                    a.request,
                    AlterPartitionResponse,
                    partial(self._alter_done, a.request),
                    cfg.call_timeout_ms,
                )
            else:  # pragma: no cover
                raise AssertionError(f"unknown action {a!r}")

    def _fetch_done(self, request: Any, response: Message | None, kind: str) -> None:
        assert self.replica is not None
        self._perform(self.replica.on_fetch_response(request, response, self.sim.kernel.now))
        self._after_core_call()

    def _offsets_done(self, request: Any, response: Message | None, kind: str) -> None:
        assert self.replica is not None
        r = self.replica
        before = r.log.log_end_offset
        self._perform(r.on_offsets_for_leader_epoch_response(request, response, self.sim.kernel.now))
        if r.log.log_end_offset < before:
            self.sim.trace(f"{self.incarnation_id} truncated {before} -> {r.log.log_end_offset} (leader {r.leader}, epoch {r.leader_epoch})")
        self._after_core_call()

    def _alter_done(self, request: Any, response: Message | None, kind: str) -> None:
        assert self.replica is not None
        r = self.replica
        old = list(r.isr)
        self._perform(r.on_alter_partition_response(request, response, self.sim.kernel.now))
        if r.isr != old:
            self.sim.trace(f"{self.incarnation_id} ISR {old} -> {r.isr} (partition epoch {r.partition_epoch})")
        self._after_core_call()

    # -- timer ------------------------------------------------------------------------------
    def _schedule_tick(self) -> None:
        assert self.replica is not None
        now = self.sim.kernel.now
        deadline = self.replica.next_deadline()
        target = now + IDLE_WAKE_MS if deadline is None else min(now + IDLE_WAKE_MS, max(now, deadline))
        if self._spin >= 3:
            # The shell would spin on a deadline in the past; step the clock so the run
            # goes on (the spin itself has been reported).
            target = max(target, now + 10)
        if self._tick_at is not None and self._tick_at <= target:
            return
        self._tick_gen += 1
        self._tick_at = target
        self.sim.kernel.at(target, self._on_tick, self._tick_gen)

    def _on_tick(self, gen: int) -> None:
        if gen != self._tick_gen or not self.up:
            return
        assert self.replica is not None
        self._tick_at = None
        now = self.sim.kernel.now
        self._perform(self.replica.tick(now))
        deadline = self.replica.next_deadline()
        if deadline is not None and deadline <= now:
            self._spin += 1
            if self._spin == 3:
                self.sim.history.fail(
                    "timer",
                    now,
                    f"{self.name} ({self.replica.role}) busy-loops: next_deadline() is {deadline} <= now {now} "
                    f"right after tick(now), so the shell's timer would never sleep",
                )
        else:
            self._spin = 0
        self._after_core_call()

    # -- observation ------------------------------------------------------------------------
    def _after_core_call(self) -> None:
        """Check what must hold between any two calls into the core, then re-arm the timer."""
        r = self.replica
        if r is None or not self.up:
            return
        now = self.sim.kernel.now
        h = self.sim.history
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
        self._schedule_tick()


class ControllerNode:
    def __init__(self, sim: "Simulation") -> None:
        self.sim = sim
        self.name = CONTROLLER
        self.up = False
        self.incarnation = 0
        self.store = MemoryStore()
        self.core: ControllerState | None = None
        self._tick_gen = 0
        self._tick_at: int | None = None
        self.created_topic = False

    def start(self) -> None:
        sim = self.sim
        now = sim.kernel.now
        self.incarnation += 1
        self.up = True
        self.core = ControllerState("sim", sim.controller_config)
        stored = {k: v for k in self.store.keys() if (v := self.store.get(k)) is not None}
        actions = self.core.start(stored, list(sim.brokers), 0, now)
        sim.trace(f"controller #{self.incarnation} started at controller epoch {self.core.controller_epoch}")
        self.execute(actions)
        if not self.created_topic:
            # What Admin.create_topic does through the controller's API.
            response, actions = self.core.create_topic(
                CreateTopicsRequest(
                    name=TOPIC,
                    partitions=1,
                    replication_factor=len(sim.brokers),
                    config=dict(sim.topic_config),
                    assignment={0: list(sim.brokers)},
                ),
                now,
            )
            assert response.error_code == 0, response.error_message
            self.created_topic = True
            self.execute(actions)
        self._tick_at = None
        self._tick_gen += 1
        self._schedule_tick()

    def crash(self) -> None:
        self.up = False
        self.core = None
        self._tick_gen += 1
        self.sim.net.node_crashed(self.name)
        self.sim.trace(f"controller #{self.incarnation} CRASHED")

    # -- executing actions ------------------------------------------------------------------
    def execute(self, actions: list) -> None:
        sim = self.sim
        now = sim.kernel.now
        for a in actions:
            if not self.up:
                return
            if isinstance(a, Persist):
                if a.value is None:
                    self.store.delete(a.key)
                else:
                    self.store.put(a.key, a.value)
                    if a.key.startswith("partition/"):
                        p = PartitionState.decode(a.value)
                        sim.history.on_persist_partition(a.key, p.leader_epoch, now)
                        sim.trace(f"controller persisted leader {p.leader} epoch {p.leader_epoch}/{p.partition_epoch} ISR {p.isr}")
                    elif a.key == "cluster":
                        sim.history.on_persist_cluster(ClusterState.decode(a.value).controller_epoch, now)
            elif isinstance(a, CreateReplica):
                sim.ensure_replica(a.replica.broker)
            elif isinstance(a, SendLeaderAndIsr):
                sim.net.call(
                    self,
                    replica_name(a.replica.broker),
                    "leader_and_isr",
                    a.request,
                    LeaderAndIsrResponse,
                    partial(self._lai_done, a),
                    sim.config.call_timeout_ms,
                )
            elif isinstance(a, SendHeartbeat):
                assert self.core is not None
                self.core.on_heartbeat_sent(a.replica, now)
                sim.net.call(
                    self,
                    replica_name(a.replica.broker),
                    "heartbeat",
                    a.request,
                    HeartbeatResponse,
                    partial(self._heartbeat_done, a.replica),
                    self.core.config.session_timeout_ms,
                )
            elif isinstance(a, DeleteReplica):  # pragma: no cover - the sim never deletes
                raise AssertionError("unexpected DeleteReplica")
            else:  # pragma: no cover - a new action kind the sim must learn to perform
                raise AssertionError(f"the simulated controller shell does not know {a!r}")

    def _lai_done(self, action: SendLeaderAndIsr, response: Message | None, kind: str) -> None:
        assert self.core is not None
        now = self.sim.kernel.now
        if kind == DEAD:
            self.execute(self.core.on_replica_dead(action.replica, now))
        if self.core is not None:
            # The core may answer with follow-up actions (e.g. elect again when the designated
            # leader refused the epoch); run them as the shell does.
            self.execute(self.core.on_leader_and_isr_result(action.replica, action.request, response, now) or [])

    def _heartbeat_done(self, replica: ReplicaId, response: Message | None, kind: str) -> None:
        assert self.core is not None
        now = self.sim.kernel.now
        if kind == OK:
            actions = self.core.on_heartbeat(replica, response, now)
        else:
            actions = self.core.on_heartbeat(replica, None, now, dead=kind == DEAD)
        self.execute(actions)

    # -- incoming calls ---------------------------------------------------------------------
    def receive(self, call: Call, request: Message) -> None:
        assert self.core is not None
        now = self.sim.kernel.now
        if call.method == "alter_partition":
            response, actions = self.core.alter_partition(request, now)
            self.execute(actions)
            self.sim.trace(f"controller AlterPartition from {request.leader}@{request.leader_epoch}/{request.partition_epoch} {request.new_isr}: error {response.error_code}")
        elif call.method == "metadata":
            response = self.core.metadata(request)
        elif call.method == "init_producer_id":
            response, actions = self.core.init_producer_id(request)
            self.execute(actions)
        else:  # pragma: no cover
            raise AssertionError(f"controller has no method {call.method}")
        self.sim.net.reply(call, response)

    def rebalance(self) -> None:
        """What the admin ``rebalance_leaders`` call does."""
        if self.core is not None:
            self.execute(self.core.rebalance_leaders(self.sim.kernel.now))

    # -- timer ------------------------------------------------------------------------------
    def _schedule_tick(self) -> None:
        assert self.core is not None
        now = self.sim.kernel.now
        deadline = self.core.next_deadline(now)
        delay = 100 if deadline is None else min(100, max(5, deadline - now))
        self._tick_gen += 1
        self._tick_at = now + delay
        self.sim.kernel.at(now + delay, self._on_tick, self._tick_gen)

    def _on_tick(self, gen: int) -> None:
        if gen != self._tick_gen or not self.up or self.core is None:
            return
        self.execute(self.core.tick(self.sim.kernel.now))
        if self.up:
            self._schedule_tick()
