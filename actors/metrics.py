"""Export kcoord metrics through ``ray.util.metrics`` (Ray dashboard / Prometheus).

The state machines keep plain counters; this module copies them into Ray metric objects
periodically, so the cores stay free of Ray.
"""

from __future__ import annotations

from typing import Any

from ray.util.metrics import Counter, Gauge, Histogram

FAILOVER_BOUNDARIES_MS = [50, 100, 200, 500, 1000, 2000, 5000, 10000]


class ControllerMetricsExporter:
    def __init__(self, cluster: str) -> None:
        tags = ("cluster",)
        self._tags = {"cluster": cluster}
        self._gauges = {
            name: Gauge(f"kcoord_{name}", description, tag_keys=tags)
            for name, description in (
                ("partitions", "Partitions in the cluster"),
                ("under_replicated_partitions", "Partitions whose ISR is smaller than their replica set"),
                ("offline_partitions", "Partitions without a leader"),
                ("controller_epoch", "Current controller epoch"),
            )
        }
        self._counters = {
            name: Counter(f"kcoord_{name}", description, tag_keys=tags)
            for name, description in (
                ("failovers_total", "Leader failovers that elected a new leader"),
                ("failovers_failed", "Leader failures that left a partition offline"),
                ("unclean_elections", "Unclean leader elections"),
                ("preferred_leader_elections", "Leadership moves back to the preferred replica"),
                ("isr_shrinks", "ISR shrinks applied by the controller"),
                ("isr_expands", "ISR expansions applied by the controller"),
                ("replicas_recreated", "Replica actors recreated after dying"),
            )
        }
        self._failover = Histogram(
            "kcoord_failover_duration_ms",
            "Failure detection to new leader accepting writes (ms)",
            boundaries=FAILOVER_BOUNDARIES_MS,
            tag_keys=tags,
        )
        self._exported: dict[str, float] = {}
        self._observed = 0

    def export(self, core: Any) -> None:
        snap = core.metrics_snapshot()
        for name, gauge in self._gauges.items():
            gauge.set(float(snap.get(name, 0)), tags=self._tags)
        for name, counter in self._counters.items():
            value = float(snap.get(name, 0))
            delta = value - self._exported.get(name, 0.0)
            if delta > 0:
                counter.inc(delta, tags=self._tags)
            self._exported[name] = value
        durations = list(core.metrics.failover_ms)
        total = core.metrics.failovers_total
        new = min(len(durations), max(0, total - self._observed))
        for d in durations[len(durations) - new :] if new else []:
            self._failover.observe(float(d), tags=self._tags)
        self._observed = total
