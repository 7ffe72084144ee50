"""Ray's process management and the operator's repairs, as the nemesis (``faults.py``) and
the processes use them: restarts (Ray restarts a crashed actor; a scheduled restart is
cancelled by a newer one or by the heal), machines and links back, the metadata store
healthy again, a failed disk repaired. Part of
:class:`~tests.sim.simulation.Simulation`."""

from __future__ import annotations

from typing import Any

from kcoord.replication.roles import OFFLINE

from .processes import HEAD, Machine, ReplicaProcess


class ProcessControl:
    """Restarts, machines, links, the store and disks coming back."""

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
