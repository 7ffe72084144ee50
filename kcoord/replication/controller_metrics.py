"""Failover and ISR counters kept by the controller (exported by the shell via
ray.util.metrics and readable through Admin.describe_cluster())."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass
class ControllerMetrics:
    failovers_total: int = 0  # leader elections after a leader failure that found a leader
    failovers_failed: int = 0  # leader failures that left the partition offline
    unclean_elections: int = 0
    preferred_leader_elections: int = 0
    isr_shrinks: int = 0
    isr_expands: int = 0
    replicas_failed: int = 0
    replicas_recovered: int = 0
    replicas_recreated: int = 0
    replicas_replaced_stuck: int = 0  # killed and recreated after a Ray restart that hung
    directories_replaced: int = 0  # replicas seen back with another log directory (wiped disk)
    failover_ms: deque = field(default_factory=lambda: deque(maxlen=1000))  # detect -> new leader accepts

    def snapshot(self) -> dict[str, float]:
        durations = sorted(self.failover_ms)

        def pct(q: float) -> float:
            if not durations:
                return -1.0
            return float(durations[min(len(durations) - 1, int(q * len(durations)))])

        return {
            "failovers_total": self.failovers_total,
            "failovers_failed": self.failovers_failed,
            "unclean_elections": self.unclean_elections,
            "preferred_leader_elections": self.preferred_leader_elections,
            "isr_shrinks": self.isr_shrinks,
            "isr_expands": self.isr_expands,
            "replicas_failed": self.replicas_failed,
            "replicas_recovered": self.replicas_recovered,
            "replicas_recreated": self.replicas_recreated,
            "replicas_replaced_stuck": self.replicas_replaced_stuck,
            "directories_replaced": self.directories_replaced,
            "failover_ms_p50": pct(0.5),
            "failover_ms_p99": pct(0.99),
            "failover_ms_max": float(durations[-1]) if durations else -1.0,
            "failover_ms_last": float(self.failover_ms[-1]) if self.failover_ms else -1.0,
        }
