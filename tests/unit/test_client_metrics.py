"""The arithmetic behind Producer.metrics() and Consumer.metrics() (kcoord.client.metrics):
latency over a bounded window of requests, and failures counted by error. No Ray."""

from __future__ import annotations

import threading

import pytest

from kcoord.bench.stats import percentile
from kcoord.client.metrics import ErrorCounts, LatencyWindow, RequestStats, error_key
from kcoord.protocol.errors import ErrorCode, KafkaError


def test_no_samples_reads_none_not_zero():
    w = LatencyWindow(8)
    assert w.snapshot("x") == {"x_avg": None, "x_max": None, "x_p50": None, "x_p99": None}
    assert w.count == 0


def test_figures_over_a_partly_filled_window_match_the_benchmark_percentiles():
    w = LatencyWindow(1024)
    samples = [float(v) for v in (5, 1, 9, 3, 7, 2, 8, 4, 6, 10)]
    for v in samples:
        w.record(v)
    s = w.snapshot("request_latency")
    assert s["request_latency_avg"] == pytest.approx(5.5)
    assert s["request_latency_max"] == 10.0
    assert s["request_latency_p50"] == percentile(samples, 0.5) == 5.0
    assert s["request_latency_p99"] == percentile(samples, 0.99) == 10.0
    assert w.count == 10


def test_window_forgets_old_requests():
    """Only the last ``size`` requests count: a slow start-up request leaves the max once
    ``size`` newer requests came in; ``count`` keeps the total."""
    w = LatencyWindow(4)
    w.record(1000.0)
    for v in (1.0, 2.0, 3.0):
        w.record(v)
    assert w.snapshot("l")["l_max"] == 1000.0
    w.record(4.0)  # pushes the 1000 ms one out
    s = w.snapshot("l")
    assert (s["l_max"], s["l_avg"], s["l_p50"], s["l_p99"]) == (4.0, 2.5, 2.0, 4.0)
    for v in range(100):
        w.record(float(v))
    assert w.snapshot("l")["l_max"] == 99.0 and w.snapshot("l")["l_avg"] == pytest.approx(97.5)
    assert w.count == 105


def test_p99_of_a_full_window():
    w = LatencyWindow(1000)
    for v in range(1, 1001):  # 1..1000 ms, shuffled order must not matter
        w.record(float((v * 7919) % 1000 + 1))
    s = w.snapshot("f")
    assert (s["f_p50"], s["f_p99"], s["f_max"]) == (500.0, 990.0, 1000.0)


def test_bad_window_size():
    for bad in (0, -1, 1.5, "8"):
        with pytest.raises(ValueError, match="size must be an int >= 1"):
            LatencyWindow(bad)


def test_errors_by_kafka_name_or_class_name():
    assert error_key(KafkaError(ErrorCode.MESSAGE_TOO_LARGE, "big")) == "MESSAGE_TOO_LARGE"
    assert error_key(KafkaError(9999, "odd")) == "UNKNOWN_ERROR_CODE_9999"
    assert error_key(TimeoutError()) == "TimeoutError"
    e = ErrorCounts()
    e.add(KafkaError(ErrorCode.MESSAGE_TOO_LARGE, "big"))
    e.add(KafkaError(ErrorCode.REQUEST_TIMED_OUT, "late"), 3)  # a batch of 3 records
    e.add("ActorGoneError")
    snap = e.snapshot("record_error")
    assert snap == {"record_error_total": 5, "record_errors": {"MESSAGE_TOO_LARGE": 1, "REQUEST_TIMED_OUT": 3, "ActorGoneError": 1}}
    snap["record_errors"]["MESSAGE_TOO_LARGE"] = 99
    assert e.snapshot("record_error")["record_errors"]["MESSAGE_TOO_LARGE"] == 1  # a copy


def test_error_counts_from_two_threads_lose_nothing():
    e = ErrorCounts()

    def hammer():
        for _ in range(20_000):
            e.add("X")

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert e.snapshot("e") == {"e_total": 80_000, "es": {"X": 80_000}}


def test_request_stats_names_its_figures():
    s = RequestStats("fetch_latency", "fetch_error", window=16)
    s.latency.record(2.0)
    s.request_errors.add(KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, ""))
    snap = s.snapshot()
    assert set(snap) == {
        "fetch_latency_avg", "fetch_latency_max", "fetch_latency_p50", "fetch_latency_p99",
        "fetch_error_total", "fetch_errors", "record_error_total", "record_errors",
    }
    assert snap["fetch_latency_max"] == 2.0 and snap["fetch_errors"] == {"NOT_LEADER_OR_FOLLOWER": 1}
    assert snap["record_error_total"] == 0 and snap["record_errors"] == {}
