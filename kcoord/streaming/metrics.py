"""A streaming query's figures, per committed batch: what ``StreamingQuery.metrics()``
returns and :class:`StreamMetricsExporter` copies into Ray's metrics (``ray.util.metrics``,
as kcoord's actors export theirs in :mod:`kcoord.actors.metrics`; the query runs in the
user's process, not in an actor).

Recorded once per batch (never per record), in the query's driver thread; read from any
thread under a lock. Lag is measured as Spark's Kafka source does: per input partition, the
end of the log (read committed) when the batch was planned minus where the batch ended --
what the next batches still have to read of what was there (a capped batch leaves lag
behind; records that arrived during the batch are not counted until the next plan).
"""

from __future__ import annotations

import threading
from typing import Any

from .protocol import TP


def lag_of(ends: dict[TP, int], latest: dict[TP, int]) -> dict[TP, int]:
    """Records behind the log end per partition (0 for a partition the batch caught up)."""
    return {tp: max(0, latest.get(tp, end) - end) for tp, end in ends.items()}


class StreamMetrics:
    """Running totals and the last batch's figures of one query run."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.batches = 0
        self.input_rows = 0
        self.output_rows = 0
        self.last_batch_id = -1
        self.batch_duration_ms = 0.0
        self.processed_rows_per_second = 0.0
        self.input_rows_per_second = 0.0
        self.lag: dict[TP, int] = {}

    def record(self, batch_id: int, input_rows: int, output_rows: int, duration_s: float, input_rate: float, lag: dict[TP, int]) -> None:
        with self._lock:
            self.batches += 1
            self.input_rows += input_rows
            self.output_rows += output_rows
            self.last_batch_id = batch_id
            self.batch_duration_ms = duration_s * 1000
            self.processed_rows_per_second = input_rows / max(duration_s, 1e-6)
            self.input_rows_per_second = input_rate
            self.lag = dict(lag)

    def snapshot(self) -> dict[str, Any]:
        """``batches``, ``input_rows``, ``output_rows`` (totals of this run),
        ``last_batch_id``, ``batch_duration_ms``, ``processed_rows_per_second``,
        ``input_rows_per_second`` (of the last batch), ``lag`` (``{(topic, partition):
        records}`` after the last batch) and ``lag_total``."""
        with self._lock:
            return {
                "batches": self.batches,
                "input_rows": self.input_rows,
                "output_rows": self.output_rows,
                "last_batch_id": self.last_batch_id,
                "batch_duration_ms": self.batch_duration_ms,
                "processed_rows_per_second": self.processed_rows_per_second,
                "input_rows_per_second": self.input_rows_per_second,
                "lag": dict(self.lag),
                "lag_total": sum(self.lag.values()),
            }


class StreamMetricsExporter:
    """A query's figures through ``ray.util.metrics``, tagged ``cluster``/``query``/``group``,
    exported by the process running the query's driver after each batch: the counters
    ``kcoord_stream_batches``, ``_input_rows``, ``_output_rows``; the gauges
    ``kcoord_stream_batch_duration_ms``, ``_processed_rows_per_second``,
    ``_input_rows_per_second``, ``_last_batch_id``; and ``kcoord_stream_lag`` (also tagged
    ``topic``, ``partition``). The group's committed offsets are the coordinator's
    ``kcoord_group_committed_offset``, as for any consumer group."""

    GAUGES = (
        ("batch_duration_ms", "Duration of the query's last committed micro-batch (plan to commit)"),
        ("processed_rows_per_second", "Input rows of the last batch over its duration"),
        ("input_rows_per_second", "Input rows of the last batch over the time since the previous batch ended"),
        ("last_batch_id", "Id of the query's last committed batch"),
    )
    COUNTERS = (
        ("batches", "Micro-batches the query committed"),
        ("input_rows", "Input records the query processed (committed batches)"),
        ("output_rows", "Records the query wrote to its sink (committed batches)"),
    )

    def __init__(self, cluster: str, query: str, group: str) -> None:
        from ray.util import metrics as ray_metrics  # here: the module imports without Ray

        keys = ("cluster", "query", "group")
        self._tags = {"cluster": cluster, "query": query, "group": group}
        self._gauges = {n: ray_metrics.Gauge(f"kcoord_stream_{n}", d, tag_keys=keys) for n, d in self.GAUGES}
        self._counters = {n: ray_metrics.Counter(f"kcoord_stream_{n}", d, tag_keys=keys) for n, d in self.COUNTERS}
        self._lag = ray_metrics.Gauge(
            "kcoord_stream_lag",
            "Records of an input partition behind its log end (read committed) after the query's last batch",
            tag_keys=keys + ("topic", "partition"),
        )
        self._exported: dict[str, float] = {}

    def export(self, snap: dict[str, Any]) -> None:
        for name, gauge in self._gauges.items():
            gauge.set(float(snap[name]), tags=self._tags)
        for name, counter in self._counters.items():  # Ray counters take increments
            delta = float(snap[name]) - self._exported.get(name, 0.0)
            if delta > 0:
                counter.inc(delta, tags=self._tags)
            self._exported[name] = float(snap[name])
        for (topic, partition), lag in snap["lag"].items():
            self._lag.set(float(lag), tags={**self._tags, "topic": topic, "partition": str(partition)})


__all__ = ["StreamMetrics", "StreamMetricsExporter", "lag_of"]
