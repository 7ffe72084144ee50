"""What the simulation records while it runs, and the invariants it checks (README).

Checked after every event, on the process that handled it:

* **3** one writer per (partition, leader epoch); a replica's epoch never goes back; the
  controller persists leader epochs and controller epochs that only grow.
* **4** a leader's HW never goes back within its tenure; readers are only served data below
  the HW they are served with; the HW a reader sees never goes back across leader changes.
* **KIP-497** the controller's ISR is a subset of the current leader's maximal ISR.
* **ISR** every ISR member, and every ELR member, holds everything below the leader's HW.
* **epochs** a replica's leader-epoch cache matches the epochs of the batches in its log
  (a leader, or a replica not yet reconciled, may add one epoch it has not written in).
* **6** a committed group offset never goes back through a commit of an older generation;
  in a Stable generation each subscribed partition has exactly one owner, both as the
  coordinator holds it and as members were told.

Issue 32's invariants, checked after every event too:

* **deleted** records below an acknowledged DeleteRecords, or below the log start every
  replica of the partition has reached (retention, or DeleteRecords followed), are never
  readable again: the partition's current leader holds none of them (unless an unclean
  election came after);
* **config** an acknowledged topic config is never replaced by an older one on any replica:
  a topic's configs are numbered in the order the operator's alters were made (each is
  retried until acknowledged, one at a time), and the number a replica runs never goes
  back -- across its processes, so a restarted process must not run an older one either;
* **isr-liveness** a leader never proposes to drop a follower from the ISR that was caught
  up within ``replica.lag.time.max.ms``, by Kafka's rule (a fetch at or past the leader's
  log end, or at or past the log end the leader had at that follower's previous fetch)
  over the fetches of one follower process; ISR members count as caught up when the
  leader took over (the grace), credited to the process each had then;
* **isr-rejoin** (after the heal) a follower its leader heard caught up is in the stored ISR
  within ``replica.lag.time.max.ms`` plus the controller's session timeout;
* **5** (also during the run) an idempotent producer's record committed with the promise is
  never committed again at another offset: a retried batch written twice, compaction
  included -- unless the leader writing it again has its log start past every record of
  that producer committed before (Kafka rebuilds dedup state only from the log start on).

Checked once the healed system is quiet: **1** every record acknowledged with acks=all
while the promise held is in the final leader's log at its offset; **2** replicas agree
below the HW; what a leader committed with the promise, and what a reader was served, is
still there; **5** each idempotent producer's records appear exactly once, in order.

The promise (invariant 1): an acks=all record acknowledged while the ISR had at least
``min.insync.replicas`` members (the leader's config then: operators change it) stays,
unless an unclean election happened after it (which Kafka allows to lose it). For topics
that do not fsync every append the promise also needs ``min.insync.replicas >= 2``: such a
topic survives losing one copy's page cache, not all of them, and with 1 the controller may
shrink the ISR to a single copy at any time. Records below the log start (retention,
DeleteRecords) and, on compacted topics, records a later record of the same key supersedes
may be gone: the final checks are exact about both.

Where each is checked: ``partition_history.py`` (**2**-**5** as records are written,
committed and read), ``replica_checks.py`` (**epochs**, **KIP-497**, **ISR**, **deleted**),
``group_history.py`` (**6**), ``configs.py`` (**config**), ``liveness.py``
(**isr-liveness**), ``rejoin.py`` (**isr-rejoin**), the controller's store and the coordinators' epochs here, and the final
checks in ``final_checks.py``. :class:`History` records the run and dispatches: the
simulated processes call it after every event they handle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kcoord import records
from kcoord.protocol.controller import AlterPartitionRequest, LeaderAndIsrRequest
from kcoord.protocol.replication import FetchRequest
from kcoord.replication.metadata import PartitionState
from kcoord.replication.roles import LEADER, OFFLINE

from . import liveness
from .configs import ConfigHistory
from .group_history import GroupHistory
from .log_reading import read_log
from .partition_history import PartitionHistory
from .replica_checks import ReplicaView, check_deleted, check_epoch_cache, check_isr_subset, check_members_hold, check_tombstone_age, check_transactions

if TYPE_CHECKING:
    from .processes import CoordinatorProcess, ReplicaProcess
    from .scenario import TopicSpec
    from .simulation import Simulation


@dataclass
class Violation:
    invariant: str  # "1".."6", "kip497", "isr", "epochs", or "liveness" / "timer"
    at_ms: int
    message: str

    def __str__(self) -> str:
        return f"[inv {self.invariant} @ {self.at_ms} ms] {self.message}"


class History:
    def __init__(self, sim: "Simulation") -> None:
        self.sim = sim
        self.violations: list[Violation] = []
        self.parts: dict[tuple[str, int], PartitionHistory] = {}
        self.groups = GroupHistory(self)
        self.views: dict[str, ReplicaView] = {}
        self.stored_epochs: dict[str, int] = {}
        self.controller_epoch = -1
        self.epoch_checks = 0
        self.sim_producer_ids: set[int] = set()  # ids of the simulation's idempotent producers
        self.late_window_stops = 0  # producers whose retry a late write pushed out of the dedup window
        self.deleted_retry_stops = 0  # producers whose retry was of a batch below the log start
        self.coordinator_epochs: dict[tuple[int, int], str] = {}  # (producer id, epoch) -> incarnation
        self.configs = ConfigHistory(self, sim.scenario.broker_config)

    def fail(self, invariant: str, now: int, message: str) -> None:
        if len(self.violations) < 200:
            self.violations.append(Violation(invariant, now, message))

    def add_topic(self, spec: "TopicSpec") -> None:
        for p in range(spec.partitions):
            self.add_partition(spec, p)
        self.configs.add_topic(spec)

    def add_partition(self, spec: "TopicSpec", p: int) -> None:
        self.parts[(spec.name, p)] = PartitionHistory(self, (spec.name, p), spec)

    def partition(self, tp: tuple[str, int]) -> PartitionHistory:
        return self.parts[tp]

    # -- the controller's store -------------------------------------------------------------
    def on_store_write(self, key: str, value: bytes | None) -> None:
        now = self.sim.kernel.now
        if value is None:
            return
        if key.startswith("partition/"):
            p = PartitionState.decode(value)
            last = self.stored_epochs.get(key, -1)
            if p.leader_epoch < last:
                self.fail("3", now, f"controller persisted {key} at leader epoch {p.leader_epoch} after {last}")
            self.stored_epochs[key] = max(last, p.leader_epoch)
            part = self.parts.get((p.topic, p.partition))
            if part is None:
                return
            before = part.stored
            if (
                before is not None
                and p.leader >= 0
                and p.leader_epoch > before.leader_epoch
                and (
                    (p.leader != before.leader and p.leader not in before.isr and p.leader not in before.elr)
                    # the controller's own record: an ISR member whose directory was wiped
                    # (a new directory id) is elected only uncleanly
                    or p.last_unclean_epoch == p.leader_epoch
                )
            ):
                part.unclean_at.append(now)
                part.unclean_epoch = max(part.unclean_epoch, p.leader_epoch)
                self.sim.trace(f"{p.topic}-{p.partition}: unclean election of {p.leader} at epoch {p.leader_epoch}")
            part.stored = p
            nemesis = getattr(self.sim, "nemesis", None)
            if nemesis is not None:
                nemesis.on_partition_stored(p)
            if self.sim.tracing:
                self.sim.trace(f"store: {p.topic}-{p.partition} leader {p.leader} epoch {p.leader_epoch}/{p.partition_epoch} ISR {p.isr} ELR {p.elr}")
            check_isr_subset(self, part, now)
        elif key == "cluster":
            from kcoord.replication.metadata import ClusterState

            epoch = ClusterState.decode(value).controller_epoch
            if self.sim.tracing:
                self.sim.trace(f"store: controller epoch {epoch}")
            if epoch < self.controller_epoch:
                self.fail("3", now, f"controller epoch went back from {self.controller_epoch} to {epoch}")
            self.controller_epoch = max(self.controller_epoch, epoch)
        elif key.startswith("topic/"):
            from kcoord.replication.metadata import TopicState

            t = TopicState.decode(value)
            self.configs.on_stored(t.name, t.config_version, self.sim.replica_config(t.name), now)

    # -- replicas ---------------------------------------------------------------------------
    def on_replica_start(self, proc: "ReplicaProcess") -> None:
        self.views[proc.name] = ReplicaView(prev_hw=proc.replica.hw if proc.replica else 0)

    def on_replica_stop(self, proc: "ReplicaProcess") -> None:
        self.views.pop(proc.name, None)

    def on_replica_twin(self, proc: "ReplicaProcess", ghost: "ReplicaProcess") -> None:
        """``proc`` runs on as ``ghost``: what was checked of it continues under its name."""
        view = self.views.pop(proc.name, None)
        if view is not None:
            self.views[ghost.name] = view

    # -- issue 32: what reaches a replica, and what it sends -----------------------------------
    def on_replica_request(self, proc: "ReplicaProcess", request: Any) -> Any:
        """Before ``proc`` handles ``request``; returns what :meth:`after_replica_request`
        needs."""
        r = proc.replica
        if r is None or r.role != LEADER:
            return None
        if isinstance(request, FetchRequest) and request.replica_id >= 0:
            liveness.on_fetch(self.parts[proc.tp], proc, request, self.sim.kernel.now)
        elif isinstance(request, LeaderAndIsrRequest) and request.leader_epoch == r.leader_epoch and request.partition_epoch > r.partition_epoch:
            return list(r.isr)
        return None

    def after_replica_request(self, proc: "ReplicaProcess", request: Any, before: Any) -> None:
        r = proc.replica
        if before is not None and r is not None and r.role == LEADER and list(r.isr) != before:
            liveness.on_controller_isr(self.parts[proc.tp], proc, self.sim.kernel.now)

    def on_replica_call(self, proc: "ReplicaProcess", method: str, request: Any) -> None:
        if method == "alter_partition" and isinstance(request, AlterPartitionRequest):
            liveness.on_proposal(self.parts[proc.tp], proc, request, self.sim.kernel.now)

    def on_produce_handled(self, proc: "ReplicaProcess", leo_before: int, epoch: int, role: Any) -> None:
        r = proc.replica
        if r is None or r.role == OFFLINE:
            return
        log = r.log
        if log.log_end_offset > leo_before:
            now = self.sim.kernel.now
            if role != LEADER:
                self.parts[proc.tp].fail("3", now, f"broker {proc.broker} appended a produce request as {role}")
            data = read_log(self, proc.tp, proc.broker, log, leo_before)
            stamped = [h.leader_epoch for _, h in records.iter_headers(data)]
            self.parts[proc.tp].on_leader_append(proc.broker, epoch, stamped, now, ghost=proc.name if proc.is_ghost else None)

    def observe_replica(self, proc: "ReplicaProcess") -> None:
        r = proc.replica
        view = self.views.get(proc.name)
        if r is None or view is None or r.role == OFFLINE:
            return
        now = self.sim.kernel.now
        part = self.parts[proc.tp]
        if r.leader_epoch < view.seen_epoch:
            part.fail("3", now, f"replica {proc.broker} went from leader epoch {view.seen_epoch} back to {r.leader_epoch}")
        view.seen_epoch = max(view.seen_epoch, r.leader_epoch)
        if r.role == LEADER and r.leader_state is not None:
            key = (proc.incarnation, r.leader_epoch)
            if key != view.lead_key:
                view.lead_key = key
                view.lead_hw = min(view.prev_hw, r.hw)
                liveness.on_lead(part, proc, now)
            if r.hw < view.lead_hw:
                part.fail("4", now, f"leader {proc.broker} HW went back from {view.lead_hw} to {r.hw} at epoch {r.leader_epoch}")
            elif r.hw > view.lead_hw:
                part.on_leader_hw(proc.broker, r.leader_epoch, view.lead_hw, r.hw, r.log, part.strong(len(r.isr), r.config.min_insync_replicas), now)
                view.lead_hw = r.hw
            check_isr_subset(self, part, now)
        view.prev_hw = r.hw
        check_epoch_cache(self, proc, view, now)
        check_members_hold(self, part, now)
        if not proc.is_ghost:
            self.configs.check(proc, now)
            log = r.log
            part.on_log_start(proc.broker, log.log_start_offset, self.sim.assignments[proc.tp], now)
            if r.role == LEADER:
                check_deleted(self, part, proc, now)
        if part.compacted or r.log.config.compact:
            check_tombstone_age(proc, view, part, now)
        if self.sim.scenario.txn_producers:
            check_transactions(self, proc, part, now)
        self.sim.damage.on_replica_progress(proc)


    # -- controller and coordinators ---------------------------------------------------------
    def observe_controller(self, proc: Any) -> None:
        # Its partition decisions are checked where they land: the store (on_store_write);
        # its security metadata against what it acknowledged (tests/sim/security.py).
        admin = self.sim.security_admin
        driver = proc.driver
        if admin is not None and driver is not None and driver.booted and driver.core is not None:
            admin.check(driver.core)

    def observe_coordinator(self, proc: "CoordinatorProcess") -> None:
        topics = {t.name: t.partitions for t in self.sim.scenario.topics}
        self.groups.check_stable(proc, topics, self.sim.kernel.now)
        d = proc.driver
        held = None if d is None else d.held_producer
        if held is not None:
            # The controller hands a coordinator's producer epoch to one incarnation only
            # (owned_producers.py); two writers on one epoch defeat the fence.
            holder = self.coordinator_epochs.setdefault(held, d.incarnation)
            if holder != d.incarnation:
                self.fail("6", self.sim.kernel.now, f"coordinator {proc.index}: producer {held[0]} epoch {held[1]} held by {holder} and {d.incarnation}")
