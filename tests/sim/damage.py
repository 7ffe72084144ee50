"""The failure model of page-cache topics (topics that do not fsync every append): which
replica may lose unsynced records now, which ones did (*damaged*), and when one is whole
again. The checks leave damaged replicas out of what must hold committed data. ``Simulation.damage``."""

from __future__ import annotations

from kcoord.replication.metadata import decode_trust, partition_key
from kcoord.replication.roles import OFFLINE

from typing import TYPE_CHECKING

from .processes import ReplicaProcess

if TYPE_CHECKING:
    from .simulation import Simulation


class PageCacheDamage:
    """``damaged``: replicas that may have lost unsynced records and are not whole again;
    ``damage_pending``, ``damaged_until_in_isr``: what they wait for to be whole."""

    def __init__(self, sim: "Simulation") -> None:
        self.sim = sim
        self.damaged: set[tuple[str, int, int]] = set()
        self.damage_pending: dict[tuple[str, int, int], tuple] = {}
        # Wiped replicas: whole again only once back in the stored ISR, since the controller
        # trusts a replica back on another directory only then (seed 6383).
        self.damaged_until_in_isr: set[tuple[str, int, int]] = set()

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
        p = self.sim.stored_partition(proc.topic, proc.partition)
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
        self.sim.trace(f"{proc.name} is damaged (may have lost unsynced records)")

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
        live = [p for p in self.sim.replica_list if p.tp == proc.tp and p.up and p.replica is not None and p.replica.role != OFFLINE]
        frontier = max([self.sim.history.parts[proc.tp].strong_hw] + [p.replica.hw for p in live])
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
            stored = self.sim.stored_partition(proc.topic, proc.partition)
            raw = self.sim.store.get(partition_key(proc.topic, proc.partition))
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
            self.sim.trace(f"{proc.name} caught up again (LEO {proc.replica.log.log_end_offset} >= HW {frontier}): no longer damaged")
