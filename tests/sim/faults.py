"""The fault scheduler (nemesis): what goes wrong, when, drawn from the seed.

Faults, by kind (weights per scenario):

* ``crash_replica`` / ``crash_leader``: a replica process dies (its machine's page cache
  survives). Logical brokers: Ray restarts it after a while. Bound brokers: it stays dead
  until the controller recreates it.
* ``crash_controller``, ``crash_coordinator``: the process dies; Ray restarts it.
* ``pause``: a replica, the controller or a coordinator stops (SIGSTOP) for 0.3-5 s -- often
  longer than the session timeout -- then resumes with its stale state.
* ``power_loss`` (bound brokers): a whole machine goes down with every replica on it and
  whatever its disk had not made durable; it returns later (or not before healing).
* ``zombie``: a replica (usually a leader) is cut off from the controller only.
* ``split`` / ``one_way``: two processes cannot talk, both ways or one way.
* ``storage``: a replica's disk fails an operation (EIO or ENOSPC on a write, an fsync, a
  rename): the replica goes offline; an operator restarts it later.
* ``store``: for a while the metadata store refuses or times out on writes.
* ``rebalance``: an admin asks for preferred-leader elections.
* ``member``: a group member leaves (and rejoins later) or dies silently.
* ``wipe``: a replica's log directory is gone with its disk (replaced, or deleted by an
  operator) and its process dies; it comes back on an empty directory on the same machine
  and boot, where its storage lineage alone cannot tell (only its directory id can).

Issue 32's kinds (operators, and two live processes):

* ``alter_config``: an operator's IncrementalAlterConfigs on a user topic: min.insync.replicas
  down (preferably while a partition's ISR is below it, "to get writes going") and up,
  flush.messages=1 on and off, unclean election on and off, retention.ms / retention.bytes,
  segment.bytes / segment.ms. A topic's alters go in order, each retried until acknowledged.
* ``create_partitions``: a user topic grows by one or two partitions (replication
  scenarios), each with an idempotent producer and a reader.
* ``delete_records``: DeleteRecords at a partition's leader, up to an offset at or below its
  HW (or -1, the HW), retried until acknowledged.
* ``stray_write``: a client (not a coordinator) produces a batch into a ``__consumer_offsets``
  partition, as a new user might; internal topics refuse client writes (issue 32, #9).
* ``twin``: two live processes of one actor for 0.5-4 s. A coordinator, or a replica of
  logical brokers: its process is cut off from the head (the controller, Ray's GCS) and Ray
  starts the next one; the old one runs on, reaching its peers, reached by calls made to it
  before and by callers that have not noticed (a few, picked at random). A replica's next
  process cannot open the log while the old one holds its directory lock, so it keeps
  failing to start until the old one is gone. Bound brokers: a whole machine is cut off
  from the head, every replica process on it runs on, and the controller may recreate
  them on the spare machine meanwhile.

The failure model for topics that do not fsync every append (``pagecache``, ``flushms``):
their promise is replication, which survives losing one copy's page cache, so at most one
replica of such a partition is *damaged* at a time (it lost unsynced data and does not yet
hold everything committed, nor everything a leader still counts it for). Only power loss,
fsync failures and wipes damage; the scheduler does not inject one that would damage a
second replica of a partition. Wipes hit only such topics with ``min.insync.replicas`` >= 2:
losing a disk is losing a copy, which fsync does not protect against (RF 1 topics are always
fsync), and with 1 the ISR may shrink to the wiped replica alone -- the partition then
waits for an operator's unclean election, as in Kafka, which the simulation does not play
(so topics whose min.insync.replicas or flush.messages operators change are never wiped
either: either change clears the ELR that may be all that is left beside a wiped replica,
seed 11536).
A wiped replica stays damaged until it is back in the ISR, not only caught up: the
controller trusts a replica on another directory again only then.
"""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING

from kcoord.group.records import OFFSETS_TOPIC

from .kernel import resume
from .processes import HEAD, ReplicaProcess

if TYPE_CHECKING:
    from .simulation import Simulation


class Nemesis:
    def __init__(self, sim: "Simulation") -> None:
        self.sim = sim
        self.counts: dict[str, int] = {}
        kinds = [k for k, w in sim.scenario.fault_weights.items() if w > 0]
        self._kinds = kinds
        self._weights = [sim.scenario.fault_weights[k] for k in kinds]
        # Operators also react to what they see (issue 32): lower min.insync.replicas where an
        # ISR fell below it, and a leader may fail right after a DeleteRecords.
        self._operators = sim.scenario.fault_weights.get("alter_config", 0) > 0
        self._reacting: set[str] = set()

    def start(self) -> None:
        self._next()

    def _next(self) -> None:
        sim = self.sim
        sim.kernel.after(sim.kernel.rng.randint(*sim.scenario.fault_gap_ms), self._strike)

    def _strike(self) -> None:
        sim = self.sim
        if sim.phase != "faults":
            return
        if self._kinds:
            kind = sim.kernel.rng.choices(self._kinds, self._weights)[0]
            if getattr(self, f"_{kind}")():
                self.counts[kind] = self.counts.get(kind, 0) + 1
        self._next()

    # -- helpers ----------------------------------------------------------------------------
    def _downtime(self) -> int:
        return self.sim.kernel.rng.choice([5, 50, 300, 1000, 3000])

    def _pick(self, items: list):
        return self.sim.kernel.rng.choice(items) if items else None

    def _live_replicas(self) -> list[ReplicaProcess]:
        return [p for p in self.sim.replica_list if p.up and not p.paused]

    def _crash(self, proc: ReplicaProcess) -> None:
        sim = self.sim
        proc.crash()
        if not sim.scenario.bound:
            sim.restart_later(proc, self._downtime())

    # -- faults (each returns whether it did anything) -------------------------------------
    def _crash_replica(self) -> bool:
        proc = self._pick(self._live_replicas())
        if proc is None:
            return False
        self._crash(proc)
        return True

    def _crash_leader(self) -> bool:
        proc = self._pick([p for p in self._live_replicas() if p.replica is not None and p.replica.role == "leader"])
        if proc is None:
            return False
        self._crash(proc)
        return True

    def _crash_controller(self) -> bool:
        sim = self.sim
        if not sim.controller.up:
            return False
        sim.controller.crash()
        sim.restart_later(sim.controller, self._downtime())
        return True

    def _crash_coordinator(self) -> bool:
        sim = self.sim
        proc = self._pick([c for c in sim.coordinators if c.up])
        if proc is None:
            return False
        proc.crash()
        sim.restart_later(proc, self._downtime())
        return True

    def _pause(self) -> bool:
        sim = self.sim
        rng = sim.kernel.rng
        candidates = [p for p in [*self._live_replicas(), sim.controller, *sim.coordinators] if p.up and not p.paused]
        proc = self._pick(candidates)
        if proc is None:
            return False
        proc.paused = True
        incarnation = proc.incarnation
        duration = rng.choice([300, 1000, 2500, 5000])
        sim.trace(f"PAUSE {proc.name} for {duration} ms")
        sim.kernel.after(duration, self._resume, proc, incarnation)
        return True

    def _resume(self, proc, incarnation: int) -> None:
        if proc.up and proc.paused and proc.incarnation == incarnation:
            self.sim.trace(f"RESUME {proc.name} ({len(proc.deferred)} events waiting)")
            resume(proc)

    def _power_loss(self) -> bool:
        sim = self.sim
        if not sim.scenario.bound:
            return False
        machines = [m for mid, m in sorted(sim.machines.items()) if mid != HEAD and m.up]
        machine = self._pick(machines)
        if machine is None:
            return False
        # every replica whose files are on this disk loses what was not synced, whether its
        # process is running or not
        on_disk = [p for p in sim.replica_list if p.machine is machine]
        if not all(sim.damage.may_damage(p) for p in on_disk):
            return False
        for g in [g for g in sim.twins.ghosts if g.machine is machine and g.up]:
            g.crash("lost power")
        victims = [p for p in on_disk if p.up]
        for p in victims:
            p.crash("lost power")
        machine.disk.power_loss()
        machine.up = False
        machine.power_losses += 1
        for p in on_disk:
            if p.spec.lossy:
                sim.damage.mark_damaged(p)
        sim.trace(f"POWER LOSS {machine.id} ({len(victims)} replicas)")
        if sim.kernel.rng.random() < 0.8:
            sim.kernel.after(sim.kernel.rng.choice([300, 1000, 3000, 8000]), sim.machine_up, machine)
        return True

    def _zombie(self) -> bool:
        sim = self.sim
        rng = sim.kernel.rng
        leaders = [p for p in self._live_replicas() if p.replica is not None and p.replica.role == "leader"]
        proc = self._pick(leaders) if leaders and rng.random() < 0.7 else self._pick(self._live_replicas())
        if proc is None:
            return False
        a, b = sim.controller.name, proc.name
        sim.net.cut(a, b)
        sim.trace(f"ZOMBIE: {b} cut off from the controller")
        sim.kernel.after(rng.randint(300, 5000), sim.heal_link, a, b)
        return True

    def _split(self) -> bool:
        sim = self.sim
        rng = sim.kernel.rng
        by_partition: dict[tuple[str, int], list[ReplicaProcess]] = {}
        for p in sim.replica_list:
            by_partition.setdefault(p.tp, []).append(p)
        groups = [ps for _, ps in sorted(by_partition.items()) if len(ps) > 1]
        if not groups:
            return False
        a, b = rng.sample(self._pick(groups), 2)
        sim.net.cut(a.name, b.name)
        sim.trace(f"SPLIT: {a.name} <-/-> {b.name}")
        sim.kernel.after(rng.randint(300, 4000), sim.heal_link, a.name, b.name)
        return True

    def _one_way(self) -> bool:
        sim = self.sim
        rng = sim.kernel.rng
        processes = [p.name for p in sim.replica_list] + [sim.controller.name] + [c.name for c in sim.coordinators]
        if len(processes) < 2:
            return False
        src, dst = rng.sample(processes, 2)
        sim.net.cut_one_way(src, dst)
        sim.trace(f"ONE-WAY CUT: {src} -/-> {dst}")
        sim.kernel.after(rng.randint(300, 4000), sim.heal_one_way, src, dst)
        return True

    def _storage(self) -> bool:
        sim = self.sim
        rng = sim.kernel.rng
        proc = self._pick([p for p in self._live_replicas() if p.machine is not None])
        if proc is None:
            return False
        op, err = rng.choice([("write", errno.EIO), ("write", errno.ENOSPC), ("fsync", errno.EIO), ("replace", errno.EIO), ("write", errno.EIO)])
        if op == "fsync" and proc.spec.lossy and not sim.damage.may_damage(proc):
            op = "write"  # a failed fsync may drop unsynced pages: only where damage is allowed
        directory = proc.directory(proc.machine)
        machine = proc.machine
        rule = machine.disk.fail(op, f"{directory}/*", err, times=rng.choice([1, 3, None]))
        if op == "fsync" and proc.spec.lossy:
            # A failed fsync drops the unsynced pages: damaged from when it fires until the
            # replica has restarted on what was durable and caught up again.
            sim.damage.mark_damaged(proc, pending=(rule, proc.incarnation))
        sim.trace(f"STORAGE FAULT: {op} on {directory} fails with {errno.errorcode[err]}")
        sim.kernel.after(rng.choice([300, 1500, 4000]), sim.repair_storage, proc, machine, rule)
        return True

    def _wipe(self) -> bool:
        sim = self.sim
        procs = [
            p
            for p in sim.replica_list
            if p.machine is not None
            and p.spec.lossy
            and p.spec.min_insync >= 2
            and not p.spec.min_isr_alterable
            and not p.spec.flush_toggles
            and not p.paused
            and p.ghost is None
            and sim.damage.may_damage(p)
        ]
        proc = self._pick(procs)
        if proc is None:
            return False
        machine = proc.machine
        was_up = proc.up
        proc.crash("disk replaced")
        directory = proc.directory(machine)
        machine.disk.wipe(directory)
        sim.damage.mark_damaged(proc, until_in_isr=True)
        sim.trace(f"DISK REPLACED: {directory} on {machine.id} is gone")
        if was_up and not sim.scenario.bound:
            sim.restart_later(proc, self._downtime())
        return True

    def _store(self) -> bool:
        sim = self.sim
        if sim.store.fail_rate > 0:
            return False
        sim.store.fail_rate = sim.scenario.store_fail_rate
        duration = sim.kernel.rng.randint(200, 2000)
        sim.trace(f"METADATA STORE failing {sim.store.fail_rate:.0%} of writes for {duration} ms")
        sim.kernel.after(duration, sim.store_recovers)
        return True

    def _rebalance(self) -> bool:
        sim = self.sim
        if not sim.controller.up or sim.controller.paused:
            return False
        sim.trace("admin: preferred leader election")
        sim.controller.rebalance()
        return True

    def _member(self) -> bool:
        sim = self.sim
        rng = sim.kernel.rng
        member = self._pick(sim.members)
        if member is None:
            return False
        if not member.alive:
            member.start()
            sim.trace(f"{member.name} starts again")
        elif rng.random() < 0.5:
            sim.trace(f"{member.name} leaves the group")
            member.leave(rng.choice([None, 500, 2000]))
        else:
            sim.trace(f"{member.name} dies silently")
            member.crash(rng.choice([None, 1000, 4000]))
        return True

    # -- issue 32: operators ----------------------------------------------------------------
    def _alter_config(self) -> bool:
        sim = self.sim
        rng = sim.kernel.rng
        topics = [t for t in sim.topics if t.alterable and not t.internal and t.name in sim.admin.created]
        if not topics:
            return False
        configs = sim.history.configs
        # An operator lowers min.insync.replicas to get writes going where an ISR shrank
        # below it (issue 32, finding 1), now and then.
        starved = [
            t
            for t in topics
            if t.min_isr_alterable
            and configs.latest(t.name).get("min.insync.replicas") == "2"
            and any((p := sim.stored_partition(t.name, i)) is not None and len(p.isr) < 2 for i in range(t.partitions))
        ]
        if starved and rng.random() < 0.7:
            topic = self._pick(starved)
            sim.trace(f"admin: {topic.name} min.insync.replicas 2 -> 1 (an ISR is below it)")
            sim.admin.alter_configs(topic.name, {"min.insync.replicas": "1"})
            return True
        topic = self._pick(topics)
        current = configs.latest(topic.name)
        choices = ["unclean", "segment"]
        if topic.min_isr_alterable:
            choices += ["min_isr", "min_isr"]
        if topic.flush_toggles:
            choices += ["flush", "flush"]
        if not topic.compact:
            choices += ["retention", "retention"]
        what = rng.choice(choices)
        if what == "min_isr":
            changes = {"min.insync.replicas": "1" if current.get("min.insync.replicas") == "2" else "2"}
        elif what == "flush":
            changes = {"flush.messages": None if current.get("flush.messages") == "1" else "1"}
        elif what == "unclean":
            changes = {"unclean.leader.election.enable": "false" if current.get("unclean.leader.election.enable") == "true" else "true"}
        elif what == "retention":
            key = rng.choice(["retention.ms", "retention.bytes"])
            value = rng.choice([None, "-1", "1500", "5000"] if key == "retention.ms" else [None, "-1", "8192", "20000"])
            changes = {key: value}
            if value not in (None, "-1") and "segment.ms" not in current:
                changes["segment.ms"] = "500"  # so that an idle partition's segment rolls
        else:
            key = rng.choice(["segment.bytes", "segment.ms"])
            changes = {key: rng.choice(["2048", "4096", "8192"]) if key == "segment.bytes" else rng.choice([None, "300", "1000"])}
        sim.trace(f"admin: alter_configs {topic.name} {changes}")
        sim.admin.alter_configs(topic.name, changes)
        return True

    def _create_partitions(self) -> bool:
        sim = self.sim
        rng = sim.kernel.rng
        topics = [t for t in sim.scenario.topics if t.name not in sim.admin._growing and t.partitions < 5]
        topic = self._pick(topics)
        if topic is None or not sim.admin.done:
            return False
        sim.grow_topic(topic, topic.partitions + rng.choice([1, 1, 2]))
        return True

    def _delete_records(self) -> bool:
        sim = self.sim
        rng = sim.kernel.rng
        parts = [(t, p) for t in sim.scenario.topics for p in range(t.partitions) if sim.admin._deletes.get((t.name, p)) is None]
        if not parts:
            return False
        spec, p = self._pick(parts)
        stored = sim.stored_partition(spec.name, p)
        lead = None if stored is None or stored.leader < 0 else sim.replicas.get((spec.name, p, stored.leader))
        hw = lead.replica.hw if lead is not None and lead.up and lead.replica is not None and lead.replica.role == "leader" else 0
        offset = -1 if rng.random() < 0.25 else rng.randint(max(0, hw - 30), hw)
        sim.trace(f"admin: delete_records {spec.name}-{p} up to {offset} (leader HW {hw})")
        return sim.admin.delete_records(spec.name, p, offset)

    # -- issue 32: two live processes of one actor ------------------------------------------
    def _twin(self) -> bool:
        sim = self.sim
        rng = sim.kernel.rng
        coordinators = [c for c in sim.coordinators if c.up and not c.paused and c.driver is not None]
        if coordinators and rng.random() < 0.4:
            return sim.twins.twin(self._pick(coordinators), rng.choice([500, 1500, 4000]))
        if sim.scenario.bound:
            machines = [m for mid, m in sorted(sim.machines.items()) if mid != HEAD and m.up and not m.cut_off]
            machine = self._pick(machines)
            if machine is None:
                return False
            return sim.twins.cut_off_machine(machine, rng.choice([500, 1500, 4000]))
        procs = [p for p in self._live_replicas() if p.ghost is None and p.replica is not None and p.replica.role != "offline"]
        proc = self._pick(procs)
        if proc is None:
            return False
        return sim.twins.twin(proc, rng.choice([500, 1500, 4000]))

    def _stray_write(self) -> bool:
        sim = self.sim
        if not sim.coordinators:
            return False
        partition = sim.kernel.rng.randrange(len(sim.coordinators))
        sim.trace(f"a client writes into {OFFSETS_TOPIC}-{partition}")
        sim.admin.stray_write(partition)
        return True

    # -- issue 32: what operators do when they see something ---------------------------------
    def on_partition_stored(self, p) -> None:
        """The controller stored ``p``: an operator who watches may lower
        min.insync.replicas of a topic whose ISR fell below it, to get writes going."""
        sim = self.sim
        if not self._operators or sim.phase != "faults" or p.leader < 0 or len(p.isr) >= 2 or p.topic in self._reacting:
            return
        spec = next((t for t in sim.topics if t.name == p.topic), None)
        if spec is None or not spec.min_isr_alterable or sim.history.configs.latest(spec.name).get("min.insync.replicas") != "2":
            return
        rng = sim.kernel.rng
        if rng.random() < 0.5:
            self._reacting.add(p.topic)
            sim.kernel.after(rng.randint(50, 800), self._lower_min_isr, spec)

    def _lower_min_isr(self, spec) -> None:
        sim = self.sim
        self._reacting.discard(spec.name)
        if sim.phase != "faults" or sim.history.configs.latest(spec.name).get("min.insync.replicas") != "2":
            return
        sim.trace(f"admin: {spec.name} min.insync.replicas 2 -> 1 (an ISR is below it)")
        sim.admin.alter_configs(spec.name, {"min.insync.replicas": "1"})
        self.counts["alter_config"] = self.counts.get("alter_config", 0) + 1

    def after_records_deleted(self, tp: tuple[str, int]) -> None:
        """A DeleteRecords was acknowledged: now and then its leader fails at once, before
        every follower has heard of the new log start."""
        sim = self.sim
        rng = sim.kernel.rng
        if sim.phase == "faults" and rng.random() < 0.5:
            sim.kernel.after(rng.randint(0, 150), self._crash_leader_of, tp)

    def _crash_leader_of(self, tp: tuple[str, int]) -> None:
        sim = self.sim
        if sim.phase != "faults":
            return
        stored = sim.stored_partition(*tp)
        proc = None if stored is None or stored.leader < 0 else sim.replicas.get((tp[0], tp[1], stored.leader))
        if proc is not None and proc.up and not proc.paused:
            sim.trace(f"{proc.name} fails right after a DeleteRecords")
            self._crash(proc)
            self.counts["crash_leader"] = self.counts.get("crash_leader", 0) + 1
