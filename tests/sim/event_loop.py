"""The run of a simulation: start everything, step the kernel through the fault phase, heal,
step until quiet (``quiesce.py``), then the final checks and the result. Part of
:class:`~tests.sim.simulation.Simulation`, whose world it runs."""

from __future__ import annotations

from typing import Any

from kcoord.protocol.controller import CreateTopicsRequest
from kcoord.replication.roles import OFFLINE

from .final_checks import check_partition_logs
from .log_reading import read_log
from .producer import Producer
from .rejoin import RejoinWatch
from .sim_result import SimResult
from .transactions import CommittedReader
from .transactions import final_checks as txn_final_checks
from .txn_verify import final_checks as late_write_checks


class EventLoop:
    """``run()``: one seed's run, start to result; and the producers' send loop."""

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
            check_partition_logs(self.history, (topic, partition), p.leader, logs, leader.replica.hw, self.kernel.now)
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
            "unclean_elections": sum(len(p.unclean_at) for p in h.parts.values()),
            "forgotten_recommits": sum(p.forgotten_recommits for p in h.parts.values()),
            "late_window_stops": h.late_window_stops,
            "deleted_retry_stops": h.deleted_retry_stops,
            "late_writes_voided": sum(w.voided for w in self.late_writers),
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

    def _produce(self, p: Producer) -> None:
        if self.phase != "faults":
            return
        if p.unacked() < 30:
            p.send_new()
        self.kernel.after(self.kernel.rng.randint(*self.scenario.produce_gap_ms), self._produce, p)
