"""The heal and quiesce phase: links heal, losses stop, faults clear, every process and
machine is back, producers stop sending new records (but retry what is unacknowledged), and
the run goes on until the cluster is quiet -- every partition led, its ISR full, every
replica at the leader's log end and HW, readers caught up, groups Stable with every member
in the same generation, and nothing left for the controller's periodic preferred-leader
check to move (its moves wait until every ISR member answered the controller itself, so a
replica never heard would leave leadership where it is for good) -- twice in a row 200 ms
apart. Part of :class:`~tests.sim.simulation.Simulation`."""

from __future__ import annotations

from kcoord.replication.roles import LEADER, OFFLINE

from .kernel import resume
from .processes import HEAD
from .transactions import CommittedReader, TxnProducer


class Quiesce:
    """``_heal()`` ends the fault phase; ``_check_quiet()`` polls ``_not_quiet()`` until
    the cluster is quiet (``phase`` becomes "quiet")."""

    def _heal(self) -> None:
        self.phase = "heal"
        self.trace("HEAL: links restored, no more loss, faults cleared, every process back")
        self.net.heal_all()
        self.net.params.drop_rate = 0.0
        self.net.params.duplicate_rate = 0.0
        self.store.fail_rate = 0.0
        for ghost in list(self.twins.ghosts):
            self.twins.end_twin(ghost)
        for name in list(self._restart_gen):
            self._restart_gen[name] += 1  # cancel scheduled restarts: restart now instead
        for m in self.machines.values():
            m.disk.clear_faults()
            self.machine_up(m)
            self.twins.machine_back(m)
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
        moves = self.controller.driver.core.pending_preferred_moves()
        if moves:
            return f"the preferred-leader check would still move {moves[:3]}"
        for prod in self.producers:
            if not prod.idle:
                return f"{prod.name} has {prod.unacked()} unacknowledged batches"
        why = None if self.txn_world is None else self.txn_world.hanging()
        if why is not None:
            return why
        for reader in self.readers:
            p = self.stored_partition(reader.topic, reader.partition)
            lead = self.replicas[(reader.topic, reader.partition, p.leader)]
            hung = self.txn_world is not None and (reader.topic, reader.partition) in self.txn_world.unclean_hanging
            if reader.position != lead.replica.log.log_end_offset and not (hung and isinstance(reader, CommittedReader)):
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
