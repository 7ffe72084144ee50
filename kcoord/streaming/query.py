"""A running streaming query, with PySpark's ``StreamingQuery`` names: ``id``, ``runId``,
``name``, ``isActive``, ``lastProgress``, ``recentProgress``, ``processAllAvailable()``,
``awaitTermination(timeout)``, ``stop()``, ``exception()``; and kcoord's ``metrics()``
(the client style of ``Producer.metrics()``), also exported through ``ray.util.metrics``
(:class:`kcoord.streaming.metrics.StreamMetricsExporter`). Its driver loop
(:class:`~kcoord.streaming.driver.StreamDriver`) runs on a thread of the process."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from datetime import datetime, timezone
from typing import Any, Callable

from .driver import Batch, StreamDriver, StreamingQueryException
from .metrics import StreamMetrics, StreamMetricsExporter, lag_of

logger = logging.getLogger(__name__)

RECENT_PROGRESS = 100  # PySpark's spark.sql.streaming.numRecentProgressUpdates


class StreamingQuery:
    """Handle of a query started by ``kcoord.spark.stream`` or ``kcoord.ray_data.stream``."""

    def __init__(self, name: str, group: str, make_driver: Callable[["StreamingQuery"], StreamDriver], *, stateful: bool = False, state_partitions: int = 0) -> None:
        self.name = name
        self.group = group
        self._stateful = stateful
        self._state_partitions = state_partitions
        self._state_totals: dict[int, int] = {}  # keys held per changelog partition, as its last task saw them
        self.id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"kcoord-stream:{name}:{group}"))  # the same across restarts
        self.runId = str(uuid.uuid4())
        self._progress: deque[dict] = deque(maxlen=RECENT_PROGRESS)
        self._cond = threading.Condition()
        self._caught_up_at = -1.0
        self._stop = threading.Event()
        self._done = False
        self._error: BaseException | None = None
        self._last_end: float | None = None
        self._metrics = StreamMetrics()
        self._exporter: Any = None  # made on the first batch, when Ray is up
        self._driver = make_driver(self)
        self._thread = threading.Thread(target=self._run, name=f"kcoord-stream-{name}", daemon=True)
        self._thread.start()

    # -- the driver thread --------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._driver.run()
            error = self._driver.error
        except BaseException as exc:  # noqa: BLE001 - reported through exception()
            error = exc
        with self._cond:
            self._error = error
            self._done = True
            self._cond.notify_all()

    def _on_batch(self, batch: Batch) -> None:
        plan = batch.plan
        duration = max(batch.ended - batch.started, 1e-6)
        since = batch.started - self._last_end if self._last_end is not None else duration
        self._last_end = batch.ended
        ends: dict[str, dict[str, int]] = {}
        starts: dict[str, dict[str, int]] = {}
        latest: dict[str, dict[str, int]] = {}
        behind: dict[str, dict[str, int]] = {}
        lag = lag_of(plan.ends, batch.latest)
        for r in plan.ranges:
            starts.setdefault(r.topic, {})[str(r.partition)] = r.start
            ends.setdefault(r.topic, {})[str(r.partition)] = r.end
            latest.setdefault(r.topic, {})[str(r.partition)] = batch.latest.get((r.topic, r.partition), r.end)
            behind.setdefault(r.topic, {})[str(r.partition)] = lag[(r.topic, r.partition)]
        lags = list(lag.values()) or [0]
        progress = {
            "id": self.id,
            "runId": self.runId,
            "name": self.name,
            "timestamp": datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "batchId": plan.batch,
            "numInputRows": plan.rows,
            "numOutputRows": batch.output_rows,
            "inputRowsPerSecond": plan.rows / max(since, 1e-6),
            "processedRowsPerSecond": plan.rows / duration,
            "durationMs": {**(batch.durations_ms or {}), "triggerExecution": int(duration * 1000)},
            "stateOperators": self._state_operators(batch),
            "sources": [
                {
                    "description": f"KafkaV2[kcoord group {self.group}]",
                    "startOffset": starts,
                    "endOffset": ends,
                    "latestOffset": latest,  # the log ends (read committed) when the batch was planned
                    "numInputRows": plan.rows,
                    "inputRowsPerSecond": plan.rows / max(since, 1e-6),
                    "processedRowsPerSecond": plan.rows / duration,
                    # Spark's Kafka source metrics (strings, as in PySpark), and the lag per partition
                    "metrics": {
                        "minOffsetsBehindLatest": str(min(lags)),
                        "maxOffsetsBehindLatest": str(max(lags)),
                        "avgOffsetsBehindLatest": str(sum(lags) / len(lags)),
                    },
                    "offsetsBehindLatest": behind,
                }
            ],
            "sink": {"description": f"kcoord[{self._driver.sink}]", "numOutputRows": batch.output_rows},
        }
        self._metrics.record(plan.batch, plan.rows, batch.output_rows, duration, plan.rows / max(since, 1e-6), lag)
        self._export()
        with self._cond:
            self._progress.append(progress)
            self._cond.notify_all()

    def _state_operators(self, batch: Batch) -> list[dict[str, Any]]:
        """PySpark's ``stateOperators``: [] for a stateless query; for a stateful one its
        state operator's ``numRowsTotal`` (keys held in state after the batch),
        ``numRowsUpdated`` (keys whose state the batch set) and ``numRowsRemoved``. A batch
        runs tasks only for the changelog partitions its rows reach, so the total sums
        each partition's count as its last task in this run saw it: partitions no batch of
        this run reached yet are not counted (their state is loaded only when needed)."""
        if not self._stateful:
            return []
        counts = batch.state
        if counts is not None:
            self._state_totals.update(counts.totals)
        return [
            {
                "operatorName": "applyInPandasWithState",
                "numRowsTotal": sum(self._state_totals.values()),
                "numRowsUpdated": counts.updated if counts is not None else 0,
                "numRowsRemoved": counts.removed if counts is not None else 0,
                "numShufflePartitions": self._state_partitions,
                "numStateStoreInstances": len(counts.partitions) if counts is not None else 0,
                "customMetrics": {"numPartitionsCounted": len(self._state_totals)},
            }
        ]

    def _export(self) -> None:
        """Copy the figures into Ray's metrics (when this process is connected to Ray);
        a failure to export is logged once and never stops the query."""
        if self._exporter is False:
            return
        try:
            if self._exporter is None:
                import ray

                if not ray.is_initialized():
                    return
                self._exporter = StreamMetricsExporter(self._driver.cluster.name, self.name, self.group)
            self._exporter.export(self._metrics.snapshot())
        except Exception:  # noqa: BLE001 - metrics are not worth a stopped query
            logger.exception("query %r: exporting its metrics to Ray failed; no more attempts", self.name)
            self._exporter = False

    def _on_caught_up(self, at: float) -> None:
        with self._cond:
            self._caught_up_at = at
            self._cond.notify_all()

    # -- PySpark's StreamingQuery -------------------------------------------------------------
    @property
    def isActive(self) -> bool:
        return not self._done

    @property
    def lastProgress(self) -> dict | None:
        with self._cond:
            return dict(self._progress[-1]) if self._progress else None

    @property
    def recentProgress(self) -> list[dict]:
        with self._cond:
            return [dict(p) for p in self._progress]

    def metrics(self) -> dict[str, Any]:
        """kcoord's figures of this run (:meth:`kcoord.streaming.metrics.StreamMetrics.snapshot`):
        totals of ``batches``, ``input_rows``, ``output_rows``; the last batch's
        ``last_batch_id``, ``batch_duration_ms``, ``processed_rows_per_second``,
        ``input_rows_per_second``; ``lag`` per ``(topic, partition)`` and ``lag_total``."""
        return self._metrics.snapshot()

    def exception(self) -> StreamingQueryException | None:
        """The error that stopped the query, or None."""
        with self._cond:
            error = self._error
        if error is None:
            return None
        if isinstance(error, StreamingQueryException):
            return error
        wrapped = StreamingQueryException(f"query {self.name!r} stopped: {type(error).__name__}: {error}")
        wrapped.__cause__ = error
        return wrapped

    def _raise_if_failed(self) -> None:
        error = self.exception()
        if error is not None:
            raise error

    def processAllAvailable(self, timeout_s: float = 600.0) -> None:
        """Block until every record available now is processed and committed (PySpark's:
        for tests). Raises the query's exception if it stops with one, TimeoutError after
        ``timeout_s``."""
        called = time.monotonic()
        deadline = called + timeout_s
        with self._cond:
            while self._caught_up_at < called:
                if self._done:
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"query {self.name!r} did not catch up within {timeout_s} s")
                self._cond.wait(remaining)
        self._raise_if_failed()
        if self._done and self._caught_up_at < called:
            raise StreamingQueryException(f"query {self.name!r} stopped before it caught up")

    def awaitTermination(self, timeout: float | None = None) -> bool | None:
        """Wait for the query to stop (``timeout`` in seconds): True if it did, False if the
        timeout passed first (None without a timeout); raises its exception if it failed."""
        self._thread.join(timeout)
        self._raise_if_failed()
        if timeout is None:
            return None
        return not self._thread.is_alive()

    def stop(self, timeout_s: float = 300.0) -> None:
        """Stop after the batch in progress is committed (or aborted), and wait for it."""
        self._stop.set()
        self._thread.join(timeout_s)


__all__ = ["StreamingQuery", "StreamingQueryException"]
