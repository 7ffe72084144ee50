"""Two live processes of one actor (issue 32): Ray gives up on a process whose node lost the
head and starts its next one while the old one runs on, cut off from the controller, for
a while (``faults.py``, ``twin`` and ``node cut off``). ``Simulation.twins``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kcoord.replication.roles import OFFLINE

from .processes import Machine, ReplicaGhost, ReplicaProcess

if TYPE_CHECKING:
    from .simulation import Simulation


class Twins:
    """A process that runs on after Ray replaced it (``ghosts``: those still running)."""

    def __init__(self, sim: "Simulation") -> None:
        self.sim = sim
        self.ghosts: list[Any] = []  # older processes still running

    def twin(self, proc: Any, duration: int) -> bool:
        """Ray gives up on ``proc`` (its node lost the head) while it runs on, and starts its
        next process; the old one lives ``duration`` ms more (see faults.py, ``twin``)."""
        rng = self.sim.kernel.rng
        if isinstance(proc, ReplicaProcess):
            ghost: Any = ReplicaGhost(proc)
            callers = [p.name for p in self.sim.producers + self.sim.readers] + [c.name for c in self.sim.coordinators]
            callers += [r.name for r in self.sim.replica_list if r.tp == proc.tp and r is not proc]
            self.sim.history.on_replica_twin(proc, ghost)
            proc.ghost = ghost
            proc.replica = None
        else:  # a group or transaction coordinator
            ghost, callers, state_tp = proc.twin_ghost()
            if rng.random() < 0.5:
                # Its partition's replicas unreachable too: an append times out after
                # persist_ms and it asks for a newer epoch, as it would against a leader
                # stuck below min ISR (issue 32, finding 6: only the controller may grant it).
                for r in self.sim.replica_list:
                    if r.tp == state_tp:
                        self.sim.net.cut(ghost.name, r.name)
        self.sim.net.cut(ghost.name, self.sim.controller.name)
        for caller in callers:
            if rng.random() < 0.3:
                self.sim.net.route_stale(caller, proc.name, ghost)
        proc.driver = None
        proc.up = False  # Ray's view: gone (its calls are the ghost's now)
        self.ghosts.append(ghost)
        self.sim.trace(f"TWIN: {proc.incarnation_id} runs on as {ghost.name}, cut off from the controller, for {duration} ms")
        self.sim.kernel.after(duration, self.end_twin, ghost)
        if not (isinstance(proc, ReplicaProcess) and self.sim.scenario.bound):
            self.sim.restart_later(proc, rng.choice([5, 50, 300]))
        return True

    def cut_off_machine(self, machine: Machine, duration: int) -> bool:
        """Bound brokers: ``machine`` loses the head; Ray takes it (and its actors) for dead,
        while every replica process on it runs on as a ghost. A paused one is replaced too
        and stays paused until Ray stops it: never the current process again (seed 200061)."""
        procs = [p for p in self.sim.replica_list if p.machine is machine and p.up and p.ghost is None and p.replica is not None and p.replica.role != OFFLINE]
        machine.cut_off = True
        self.sim.trace(f"NODE CUT OFF: {machine.id} loses the head for {duration} ms ({len(procs)} replica processes run on)")
        for p in procs:
            paused = p.paused
            self.twin(p, duration)
            if paused:
                p.paused, p.deferred = False, []
                p.ghost.paused = True
        self.sim.kernel.after(duration, self.machine_back, machine)
        return True

    def machine_back(self, machine: Machine) -> None:
        if machine.cut_off:
            machine.cut_off = False
            self.sim.trace(f"{machine.id} reaches the head again")

    def end_twin(self, ghost: Any) -> None:
        """The old process is finally stopped (its node is back, and Ray kills what it
        replaced), or was already gone."""
        if ghost in self.ghosts:
            self.ghosts.remove(ghost)
        if ghost.up:
            ghost.crash("stopped: Ray replaced it")
        self.sim.net.heal(ghost.name, self.sim.controller.name)
        if isinstance(ghost, ReplicaGhost) and ghost.of.ghost is ghost:
            ghost.of.ghost = None
