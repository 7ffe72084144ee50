"""Client-side metrics of the Producer and Consumer: request latency over a bounded window
and error counts by Kafka error name, read through ``metrics()``.

Why this shape: a latency is recorded once per *request* (a produce request carries a
whole batch, a fetch answer many records), never per record, and costs a float store into
a preallocated ring; the order statistics (avg, max, p50, p99) are computed only when
``metrics()`` is called. A window of the last :data:`WINDOW` requests (instead of all-time
figures) keeps one slow request at start-up from showing as the maximum forever, as
kafka-python's time-windowed ``request-latency-max`` does. Errors are rare, so they are
counted under a lock (the producer counts from the caller's thread and its sender thread).
"""

from __future__ import annotations

import math
import threading
from typing import Any

from ..protocol.errors import KafkaError

#: requests in the latency window
WINDOW = 1024


class LatencyWindow:
    """The last ``size`` latencies (ms) of one kind of request, and how many there were.

    ``record`` is called from one thread (the producer's sender, the consumer's poll);
    ``snapshot`` may run in any other: it copies the ring, so a concurrent ``record`` at
    worst leaves one slot from either side of the copy."""

    __slots__ = ("_ring", "_size", "_next", "count")

    def __init__(self, size: int = WINDOW) -> None:
        if type(size) is not int or size < 1:
            raise ValueError(f"size must be an int >= 1, got {size!r}")
        self._ring = [0.0] * size
        self._size = size
        self._next = 0
        self.count = 0  # latencies recorded since the client started

    def record(self, ms: float) -> None:
        self._ring[self._next] = ms
        self._next = (self._next + 1) % self._size
        self.count += 1

    def snapshot(self, prefix: str) -> dict[str, float | None]:
        """``{prefix_avg, prefix_max, prefix_p50, prefix_p99}`` in ms over the window
        (nearest-rank percentiles, as :func:`kcoord.bench.stats.percentile`); None while
        there is no sample yet."""
        n = min(self.count, self._size)
        if n == 0:
            return {f"{prefix}_avg": None, f"{prefix}_max": None, f"{prefix}_p50": None, f"{prefix}_p99": None}
        window = sorted(self._ring[:n])

        def pct(q: float) -> float:
            return window[max(1, math.ceil(q * n)) - 1]

        return {
            f"{prefix}_avg": sum(window) / n,
            f"{prefix}_max": window[-1],
            f"{prefix}_p50": pct(0.50),
            f"{prefix}_p99": pct(0.99),
        }


def error_key(error: BaseException) -> str:
    """How an error is counted: a KafkaError by its code's name (MESSAGE_TOO_LARGE), a call
    that failed (:class:`kcoord.calls.CallFailed`) by the name a Kafka client gives it
    (NETWORK_EXCEPTION: the actor went away; REQUEST_TIMED_OUT), any other exception by its
    class name."""
    if isinstance(error, KafkaError):
        return error.name
    return getattr(error, "kafka_name", None) or type(error).__name__


class ErrorCounts:
    """Failures counted by :func:`error_key`, and their total (thread-safe)."""

    __slots__ = ("_lock", "by_error", "total")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.by_error: dict[str, int] = {}
        self.total = 0

    def add(self, error: BaseException | str, n: int = 1) -> None:
        key = error if isinstance(error, str) else error_key(error)
        with self._lock:
            self.by_error[key] = self.by_error.get(key, 0) + n
            self.total += n

    def snapshot(self, prefix: str) -> dict[str, Any]:
        """``{prefix_total: n, prefixs: {name: n}}`` (a new dict each time)."""
        with self._lock:
            return {f"{prefix}_total": self.total, f"{prefix}s": dict(self.by_error)}


class RequestStats:
    """What a client counts besides its own counters: the latency of its requests (produce
    requests, fetches), requests that failed, and records that failed, each by error."""

    __slots__ = ("latency", "request_errors", "record_errors", "_latency_prefix", "_request_prefix")

    def __init__(self, latency_prefix: str, request_prefix: str, window: int = WINDOW) -> None:
        self.latency = LatencyWindow(window)
        self.request_errors = ErrorCounts()
        self.record_errors = ErrorCounts()
        self._latency_prefix = latency_prefix
        self._request_prefix = request_prefix

    def snapshot(self) -> dict[str, Any]:
        return {
            **self.latency.snapshot(self._latency_prefix),
            **self.request_errors.snapshot(self._request_prefix),
            **self.record_errors.snapshot("record_error"),
        }
