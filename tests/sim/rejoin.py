"""Invariant **isr-rejoin**: once the faults have healed, a caught-up follower is back in the
ISR within a bound (issue 32: the chaos run's longest client waits were caught-up followers
left outside the ISR while ``min.insync.replicas`` froze the HW).

From the heal on, every ``SAMPLE_MS`` the watch looks at each partition as the metadata
store holds it. A follower *waits* while all of this holds: the controller is up and
booted; the stored leader's process is up and leads the stored leader epoch; the follower's
process is up, follows that epoch and its log ends where the leader's does, and the leader
has heard so from that process (a fetch at its log end since the heal); and the stored ISR
leaves it out. (A fetch lost before the heal delays the leader's hearing by the follower's
fetch timeout; that is the fetch's, not the ISR's, and not counted.)

A wait longer than the bound fails: ``replica.lag.time.max.ms`` of the topic (the window
in which a leader must not drop a caught-up follower, isr-liveness) plus the controller's
``session_timeout_ms``. The lag window holds a lost proposal's timeout and backoff (the
drivers' AlterPartition timeout) and the follower's next fetch; the session timeout is
what a controller that has not heard the follower's process yet may take to hear it: it
refuses the follower until then (KIP-903), and it gives up a heartbeat whose answer was
lost before the heal only after the session timeout (seed 352: 1.3 s past the heal).

A wait ends (and starts over) when any condition fails, e.g. the leader appends and the
follower is one batch behind: only an unbroken span of being caught up counts, which is what
a leader needs to propose the follower.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kcoord.replication.roles import FOLLOWER, LEADER

if TYPE_CHECKING:
    from .simulation import Simulation

SAMPLE_MS = 20


class RejoinWatch:
    def __init__(self, sim: "Simulation") -> None:
        self.sim = sim
        self.since: dict[tuple[str, int, int], int] = {}  # (topic, partition, follower) -> waiting since
        self.longest_ms = 0
        self.healed_ms = sim.kernel.now
        self.failed: set[tuple[str, int, int]] = set()

    def start(self) -> None:
        self.sim.kernel.after(SAMPLE_MS, self._sample)

    def _sample(self) -> None:
        sim = self.sim
        if sim.phase != "heal":
            return
        now = sim.kernel.now
        waiting = self._waiting()
        for key in list(self.since):
            if key not in waiting:
                del self.since[key]
        for key, (bound, why) in waiting.items():
            since = self.since.setdefault(key, now)
            self.longest_ms = max(self.longest_ms, now - since)
            if now - since > bound and key not in self.failed:
                self.failed.add(key)
                topic, partition, b = key
                sim.history.fail(
                    "isr-rejoin", now,
                    f"{topic}-{partition}: follower {b} caught up ({why}) but outside the ISR for {now - since} ms after the heal (bound {bound} ms)",
                )
        sim.kernel.after(SAMPLE_MS, self._sample)

    def _waiting(self) -> dict[tuple[str, int, int], tuple[int, str]]:
        """The followers waiting to rejoin now: key -> (bound, what the state is)."""
        sim = self.sim
        controller = sim.controller
        if not controller.up or controller.paused or controller.driver is None or not controller.driver.booted:
            return {}
        out: dict[tuple[str, int, int], tuple[int, str]] = {}
        for (topic, partition), replicas in sorted(sim.assignments.items()):
            p = sim.stored_partition(topic, partition)
            if p is None or p.leader < 0:
                continue
            lead = sim.replicas[(topic, partition, p.leader)]
            r = lead.replica
            if not lead.up or lead.paused or r is None or r.role != LEADER or r.leader_epoch != p.leader_epoch:
                continue
            leo = r.log.log_end_offset
            bound = r.config.replica_lag_time_max_ms + sim.controller_config.session_timeout_ms
            for b in replicas:
                if b in p.isr:
                    continue
                proc = sim.replicas[(topic, partition, b)]
                f = proc.replica
                if not proc.up or proc.paused or f is None or f.role != FOLLOWER or f.leader_epoch != p.leader_epoch:
                    continue
                heard = r.leader_state.followers.get(b) if r.leader_state is not None else None
                if f.log.log_end_offset == leo and heard is not None and heard.incarnation == proc.incarnation_id and heard.log_end_offset >= leo and heard.last_fetch_ms >= self.healed_ms:
                    out[(topic, partition, b)] = (bound, f"LEO {leo} = leader {p.leader}'s at epoch {p.leader_epoch}, stored ISR {p.isr}")
        return out
