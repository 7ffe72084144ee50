"""Streaming benchmark (issue 35's figures), each case next to its baseline in the same run.
3 partitions, RF=3, acks=all, min.insync.replicas=2, 100-byte values, 1 RayDP executor
(1 core). Prints JSON: medians, ratios, goals.

    python benchmarks/streaming.py [--quick] [--rows N] [--repeats R] [--rates 1000,10000]
                                   [--latency-seconds S] [--max-records-per-trigger M] [--out FILE]

* ``throughput``: a stateless query (``kcoord.spark.stream``, transform: upper-case the
  value; output exactly once with the group's offsets) consuming N records already in the
  topic from ``earliest`` until caught up (``processAllAvailable``), against the same work
  as one batch job: ``ks.read`` + the same transform + ``ks.write(...,
  transactional_id=...)``. The two cases alternate; output topics are created before the
  timing, one per case (each repeat appends to it). ``stream`` includes the query's start (fencing older copies, joining the group:
  ``start_s``); ``rows_per_s_in_batches`` leaves it out. ``stateful_stream``: a stateful
  query over the same records (``update_state``: a running count per key, 100 keys; the
  changelog and the shuffle by its partition); its changelog topic is created before the
  timing like the output topics (``changelog_create_s``: what a query's first start adds),
  ``phase_ms_median`` its batches' ``durationMs``. Goal: each stream / batch >= 0.7
  (``met`` needs both).
* ``latency``: at a steady offered load (1k and 10k records/s, sent every 20 ms by a
  producer in a Ray actor of its own, acks=all), a query with trigger 500 ms; the time
  from ``send_batch()`` (stamped in the value) to the record's output being returned by a
  read_committed consumer of the sink (in another actor: the load and the readers share no
  process, no GIL, with the query). Baseline in the same window: the same records returned by a plain
  consumer of the input topic (what producing and fetching cost without the query). The
  load starts once the query has started (caught up with the empty topic); records sent
  in the first ``--latency-warmup`` seconds are left out. Goal: p50 < 1.5 s, p99 < 3 s.
* ``spark_read``: ``ks.read`` of the N input records materialized with Spark's ``noop``
  sink, against ``ds.to_spark(spark)`` (RayDP's Ray Data -> Spark) of a Dataset holding the
  same records' key and value columns (``ray.data.from_spark`` of them, untimed), also
  materialized with ``noop``. Goal: read / to_spark >= 1.0.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._report import emit, shutdown  # noqa: E402

VALUE = 100
PARTITIONS = 3
TICK_S = 0.02  # the latency producer sends rate * TICK_S records per tick
GOALS = {"stream_vs_batch": 0.7, "latency_p50_s": 1.5, "latency_p99_s": 3.0, "read_vs_to_spark": 1.0}


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def quantile(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def noop(df) -> None:
    """Materialize every row of ``df`` in the JVM and keep nothing."""
    df.write.format("noop").mode("overwrite").save()


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a few minutes)")
    parser.add_argument("--rows", type=int, default=None, help="records of the throughput and read cases (default 200k; 50k with --quick)")
    parser.add_argument("--repeats", type=int, default=None, help="runs per throughput/read case (default 3; 1 with --quick)")
    parser.add_argument("--rates", default="1000,10000", help="offered loads of the latency case, records/s")
    parser.add_argument("--latency-seconds", type=float, default=None, help="how long each load is offered (default 20; 8 with --quick)")
    parser.add_argument("--latency-warmup", type=float, default=2.0, help="seconds of each load left out of the latency figures")
    parser.add_argument("--max-records-per-trigger", type=int, default=None, help="cap per micro-batch of the throughput case (default: no cap)")
    parser.add_argument("--skip", default="", help="comma-separated cases to leave out: throughput, latency, spark_read")
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()
    n = args.rows or (50_000 if args.quick else 200_000)
    repeats = args.repeats or (1 if args.quick else 3)
    seconds = args.latency_seconds or (8.0 if args.quick else 20.0)
    rates = [int(r) for r in args.rates.split(",") if r]
    skip = {s for s in args.skip.split(",") if s}

    import ray

    from kcoord import spark as ks
    from kcoord.client.admin import Admin
    from kcoord.client.producer import Producer
    from kcoord.cluster.deploy import deploy
    from kcoord.cluster.local import start_local_ray

    wall = time.perf_counter()
    results: dict = {
        "benchmark": "streaming",
        "rows": n,
        "value_bytes": VALUE,
        "partitions": PARTITIONS,
        "replication_factor": 3,
        "executors": 1,
        "repeats": repeats,
        "quick": args.quick,
        "max_records_per_trigger": args.max_records_per_trigger,
        "cpus": os.cpu_count(),
        "load_average_at_start": load(),
        "goals": GOALS,
    }
    started = start_local_ray(num_cpus=2)
    name = f"bench-st-{uuid.uuid4().hex[:6]}"
    cluster = deploy(name, brokers=3, group_coordinators=1, address=None)
    try:
        spark = ks.session(cluster, executors=1, cores=1, memory="1G")
        spark.sparkContext.setLogLevel("ERROR")
        admin = Admin(cluster)

        def new_topic(prefix: str) -> str:
            topic = f"{prefix}-{uuid.uuid4().hex[:6]}"
            admin.create_topic(topic, partitions=PARTITIONS, replication_factor=3, config={"min.insync.replicas": 2})
            return topic

        def upper(df, batch_id=0):
            return df.selectExpr("key", "upper(CAST(value AS STRING)) AS value")

        source = new_topic("in")
        with Producer(cluster, acks="all", linger_ms=5) as p:
            for start in range(0, n, 10_000):
                k = min(10_000, n - start)
                p.send_batch(source, values=[str(i).rjust(VALUE, "x").encode() for i in range(start, start + k)], keys=[f"k{i % 100}".encode() for i in range(start, start + k)])

        # One output topic per case, created before the timed runs (a create waits for 9
        # replicas' leaders) and written by each repeat: every replica is a Ray actor's
        # process, and a topic per run made ~130 of them on 2 cores.
        outs: dict[str, str] = {}
        create_s: list[float] = []

        def out_topic(case: str) -> str:
            if case not in outs:
                create_s.append(timed(lambda: outs.__setitem__(case, new_topic("out"))))
            return outs[case]

        def batch_job() -> None:
            ks.write(upper(ks.read(spark, cluster, source)), cluster, out_topic("batch"), key_col="key", value_col="value", transactional_id=f"b-{uuid.uuid4().hex[:8]}")

        trigger_ms: list[list[int]] = []

        def stream_job() -> None:
            q = ks.stream(spark, cluster, source, group_id=f"g-{uuid.uuid4().hex[:8]}", transform=upper, sink=out_topic("stream"), trigger_interval_ms=0,
                          starting_offsets="earliest", max_records_per_trigger=args.max_records_per_trigger)
            try:
                q.processAllAvailable(timeout_s=1800)
                trigger_ms.append([p["durationMs"]["triggerExecution"] for p in q.recentProgress if p["numInputRows"]])
            finally:
                q.stop()

        def running_count(key, rows, state):
            import pandas as pd

            count = (state or 0) + len(rows)
            return pd.DataFrame({"key": [key], "value": [str(count)]}), count

        stateful_ms: list[list[int]] = []
        stateful_phases: list[dict] = []
        changelog_s: list[float] = []
        stateful_names: list[str] = []

        def make_changelogs(k: int) -> None:
            # A query's changelog is an output topic too: created before the timing, by the
            # function ks.stream() calls for a query whose changelog does not exist yet.
            from kcoord.streaming.state import ensure_changelog

            for _ in range(k):
                name = f"s-{uuid.uuid4().hex[:8]}"
                changelog_s.append(timed(lambda: ensure_changelog(cluster, name, None, PARTITIONS)))
                stateful_names.append(name)

        def stateful_job() -> None:
            # a running count per key (100 keys): the changelog and the shuffle by its partition
            q = ks.stream(spark, cluster, source, group_id=stateful_names.pop(), update_state=running_count, state_key="key", sink=out_topic("stateful"),
                          trigger_interval_ms=0, starting_offsets="earliest", max_records_per_trigger=args.max_records_per_trigger)
            try:
                q.processAllAvailable(timeout_s=1800)
                progress = [p for p in q.recentProgress if p["numInputRows"]]
                stateful_ms.append([p["durationMs"]["triggerExecution"] for p in progress])
                stateful_phases.extend(p["durationMs"] for p in progress)
            finally:
                q.stop()

        def stateful_warm_up() -> None:
            # one small batch of a stateful query (applyInPandas' first use in the workers),
            # as batch_job() warms up the other cases; the first stateful run paid it before
            make_changelogs(1)
            q = ks.stream(spark, cluster, source, group_id=stateful_names.pop(), update_state=running_count, state_key="key", sink=out_topic("stateful"),
                          trigger_interval_ms=0, starting_offsets="earliest", max_records_per_trigger=1000)
            try:
                deadline = time.monotonic() + 300
                while not any(p["numInputRows"] for p in q.recentProgress):
                    if time.monotonic() > deadline or q.exception() is not None:
                        raise RuntimeError(f"the stateful warm-up ran no batch: {q.exception()}")
                    q.awaitTermination(0.2)
            finally:
                q.stop()
            changelog_s.clear()

        # Untimed warm-up (JIT, Python workers, the decision topic, the Ray Data path).
        batch_job()
        if "throughput" not in skip:
            stateful_warm_up()
        if "spark_read" not in skip:
            noop(ray.data.from_spark(ks.read(spark, cluster, source).select("key", "value").limit(max(1, n // 5))).materialize().to_spark(spark))

        if "throughput" not in skip:
            for case in ("stream", "stateful"):
                out_topic(case)
            make_changelogs(repeats)
            results["create_topic_s"] = round(statistics.median(create_s), 2)
            results["load_average_before_throughput"] = load()
            runs: dict[str, list[float]] = {"batch_read_write": [], "stream": [], "stateful_stream": []}
            pair = [("batch_read_write", batch_job), ("stream", stream_job), ("stateful_stream", stateful_job)]
            for i in range(repeats):
                for case, fn in pair if i % 2 == 0 else pair[::-1]:
                    runs[case].append(timed(fn))
                print(f"throughput {i + 1}/{repeats}: " + ", ".join(f"{k} {n / v[-1]:,.0f} rows/s" for k, v in runs.items()), file=sys.stderr, flush=True)
            cases = {}
            for case, xs in runs.items():
                med = statistics.median(xs)
                cases[case] = {"rows_per_s": round(n / med), "seconds": round(med, 3), "runs_rows_per_s": [round(n / x) for x in xs]}
            cases["stream"]["triggers_per_run"] = [len(t) for t in trigger_ms]
            cases["stream"]["trigger_ms_per_run"] = trigger_ms
            # The query's start (fence its older copies, join the group, look up its last
            # batch) is in "stream"; without it, the batches alone:
            in_batches = statistics.median(sum(t) / 1000 for t in trigger_ms)
            cases["stream"]["start_s"] = round(cases["stream"]["seconds"] - in_batches, 3)
            cases["stream"]["rows_per_s_in_batches"] = round(n / in_batches)
            # the stateful query's start includes creating its changelog topic (ks.stream())
            st = cases["stateful_stream"]
            st["trigger_ms_per_run"] = stateful_ms
            st["changelog_create_s"] = round(statistics.median(changelog_s), 3)  # not in the timing, as the output topics
            st_batches = statistics.median(sum(t) / 1000 for t in stateful_ms)
            st["start_s"] = round(st["seconds"] - st_batches, 3)
            st["rows_per_s_in_batches"] = round(n / st_batches)
            st["phase_ms_median"] = {k: statistics.median(d.get(k, 0) for d in stateful_phases) for k in sorted({k for d in stateful_phases for k in d})}
            batch = cases["batch_read_write"]["rows_per_s"]
            ratio = round(cases["stream"]["rows_per_s"] / batch, 3)
            stateful_ratio = round(st["rows_per_s"] / batch, 3)
            results["throughput"] = {
                "cases": cases,
                "stream_vs_batch": ratio,
                "stateful_stream_vs_batch": stateful_ratio,
                "stream_batches_vs_batch": round(cases["stream"]["rows_per_s_in_batches"] / batch, 3),
                "stateful_batches_vs_batch": round(st["rows_per_s_in_batches"] / batch, 3),
                "met": ratio >= GOALS["stream_vs_batch"] and stateful_ratio >= GOALS["stream_vs_batch"],
            }

        if "spark_read" not in skip:
            results["load_average_before_spark_read"] = load()
            ds = ray.data.from_spark(ks.read(spark, cluster, source).select("key", "value")).materialize()
            assert ds.count() == n
            check = ks.read(spark, cluster, source)
            assert check.count() == n and check.select("value").distinct().count() == n
            runs = {"read": [], "ray_data_to_spark": []}
            pair = [("read", lambda: noop(ks.read(spark, cluster, source))), ("ray_data_to_spark", lambda: noop(ds.to_spark(spark)))]
            for i in range(repeats):
                for case, fn in pair if i % 2 == 0 else pair[::-1]:
                    runs[case].append(timed(fn))
                print(f"spark_read {i + 1}/{repeats}: " + ", ".join(f"{k} {n / v[-1]:,.0f} rows/s" for k, v in runs.items()), file=sys.stderr, flush=True)
            del ds
            cases = {}
            for case, xs in runs.items():
                med = statistics.median(xs)
                cases[case] = {"rows_per_s": round(n / med), "seconds": round(med, 3), "runs_rows_per_s": [round(n / x) for x in xs]}
            ratio = round(cases["read"]["rows_per_s"] / cases["ray_data_to_spark"]["rows_per_s"], 3)
            results["spark_read"] = {"cases": cases, "read_vs_to_spark": ratio, "met": ratio >= GOALS["read_vs_to_spark"]}

        if "latency" not in skip:
            results["latency"] = {}
            for rate in rates:
                results["load_average_before_latency_" + str(rate)] = load()
                results["latency"][str(rate)] = latency_case(spark, cluster, new_topic, upper, rate, seconds, args.latency_warmup, ks=ks)
                print(f"latency at {rate}/s: {results['latency'][str(rate)]}", file=sys.stderr, flush=True)
    finally:
        shutdown(name, started)
    results["load_average_at_end"] = load()
    results["wall_seconds"] = round(time.perf_counter() - wall, 1)
    emit(results, args.out)


class LoadProducer:
    """The latency case's offered load, in a process of its own (a Ray actor): the query's
    process then measures the pipeline, not its contention with the load generator for
    the GIL. Sends ``rate * TICK_S`` records every ``TICK_S``, each stamped with
    ``time.time_ns()`` at ``send_batch()``."""

    def run(self, cluster, source: str, rate: int, seconds: float) -> int:
        from kcoord.client.producer import Producer

        per_tick = max(1, round(rate * TICK_S))
        with Producer(cluster, acks="all", linger_ms=0) as p:
            next_at = time.monotonic()
            end = next_at + seconds
            i = 0
            while next_at < end:
                stamp = str(time.time_ns()).rjust(VALUE, "x").encode()
                p.send_batch(source, values=[stamp] * per_tick, keys=[f"k{(i + j) % 100}".encode() for j in range(per_tick)])
                i += per_tick
                next_at += TICK_S
                delay = next_at - time.monotonic()
                if delay > 0:
                    time.sleep(delay)  # pacing the offered load, not synchronisation
            p.flush()
        return i


class VisibilityReader:
    """The latency case's readers, in a process of their own (a Ray actor, two calls at
    once: ``run`` and ``expect``): a read_committed consumer of the sink (the query's
    output) and a plain consumer of the input (the baseline), each record's latency the
    time it is returned minus its stamp (records stamped before ``cutoff_ns`` left out)."""

    def __init__(self) -> None:
        self.expected: int | None = None
        self.consumers: dict = {}

    def ready(self, cluster, topics: dict[str, tuple[str, str]]) -> bool:
        from kcoord.client.consumer.consumer import Consumer
        from kcoord.client.types import TopicPartition

        for case, (topic, level) in topics.items():
            c = Consumer(cluster=cluster, isolation_level=level, max_poll_records=100_000, fetch_max_wait_ms=100)
            c.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
            c.seek_to_beginning()
            c.poll(timeout_ms=0)
            self.consumers[case] = c
        return True

    def expect(self, sent: int) -> None:
        self.expected = sent

    def run(self, cutoff_ns: int, timeout_s: float) -> dict:
        latencies: dict[str, list[float]] = {case: [] for case in self.consumers}
        seen = {case: 0 for case in self.consumers}
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                for case, c in self.consumers.items():
                    for recs in c.poll(timeout_ms=10).values():
                        now_ns = time.time_ns()
                        for r in recs:
                            seen[case] += 1
                            stamp = int(bytes(r.value).lstrip(b"xX"))
                            if stamp >= cutoff_ns:
                                latencies[case].append((now_ns - stamp) / 1e9)
                if self.expected is not None and all(v >= self.expected for v in seen.values()):
                    return {"seen": seen, "latencies": latencies, "complete": True}
            return {"seen": seen, "latencies": latencies, "complete": False}
        finally:
            for c in self.consumers.values():
                c.close()


def latency_case(spark, cluster, new_topic, transform, rate: int, seconds: float, warmup: float, *, ks) -> dict:
    """Offer ``rate`` records/s for ``seconds`` to a running query (trigger 500 ms) and
    measure send -> visible to a read_committed consumer of the sink, and send -> visible
    to a plain consumer of the input (the baseline), in the same window. The load and the
    readers run in Ray actors of their own (no CPU reserved: they share the 2 cores with
    everything else, as a load generator on the same machine would)."""
    import ray

    source, sink = new_topic("lat-in"), new_topic("lat-out")
    q = ks.stream(spark, cluster, source, group_id=f"lat-{uuid.uuid4().hex[:8]}", transform=transform, sink=sink, trigger_interval_ms=500, starting_offsets="earliest")
    producer = ray.remote(num_cpus=0)(LoadProducer).remote()
    reader = ray.remote(num_cpus=0, max_concurrency=2)(VisibilityReader).remote()
    sent = None
    try:
        ray.get(reader.ready.remote(cluster, {"stream": (sink, "read_committed"), "produce_fetch_baseline": (source, "read_uncommitted")}), timeout=120)
        q.processAllAvailable(timeout_s=300)  # started (fenced, joined, first empty batch): load from now on
        t_start = time.time()
        sending = producer.run.remote(cluster, source, rate, seconds)
        reading = reader.run.remote(int((t_start + warmup) * 1e9), seconds + 120)
        deadline = time.monotonic() + seconds + 150
        while True:
            ready, _ = ray.wait([sending, reading] if sent is None else [reading], timeout=0.5, num_returns=1)
            if sent is None and sending in ready:
                sent = ray.get(sending)
                reader.expect.remote(sent)
            elif reading in ready:
                got = ray.get(reading)
                break
            if q.exception() is not None:
                raise q.exception()
            if time.monotonic() > deadline:
                raise TimeoutError(f"latency at {rate}/s: the load or its readers did not finish in {seconds + 150:.0f} s (sent {sent})")
        if not got["complete"]:
            raise TimeoutError(f"latency at {rate}/s: sent {sent}, seen {got['seen']} after {seconds + 120:.0f} s")
        progress = [p for p in q.recentProgress if p["numInputRows"]]
    finally:
        q.stop()
        for actor in (producer, reader):
            ray.kill(actor)
    out: dict = {"offered_rows_per_s": rate, "seconds": seconds, "sent": sent, "trigger_interval_ms": 500, "load_and_readers": "ray actors (own processes)"}
    if progress:  # what the query's batches took (recentProgress keeps the last 100)
        out["batches"] = len(progress)
        out["batch_ms_median"] = statistics.median(p["durationMs"]["triggerExecution"] for p in progress)
        out["batch_rows_median"] = statistics.median(p["numInputRows"] for p in progress)
        phases = sorted({k for p in progress for k in p["durationMs"]})
        out["batch_phase_ms_median"] = {k: statistics.median(p["durationMs"].get(k, 0) for p in progress) for k in phases}
    for case, xs in got["latencies"].items():
        out[case] = {"p50_s": round(quantile(xs, 0.5), 3), "p99_s": round(quantile(xs, 0.99), 3), "max_s": round(max(xs), 3) if xs else None, "records": len(xs)}
    s = out["stream"]
    out["met"] = s["p50_s"] < GOALS["latency_p50_s"] and s["p99_s"] < GOALS["latency_p99_s"]
    return out


if __name__ == "__main__":
    main()
