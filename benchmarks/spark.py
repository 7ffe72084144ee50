"""Spark benchmark: write and read a DataFrame of 100-byte values through a kcoord topic
(6 partitions, 3 with --quick; RF=3, acks=all, min.insync.replicas=2) with 2 RayDP executors
(1 with --quick), next to
``ray.data.from_spark(df)`` + ``ds.to_spark(spark)`` of the same DataFrame measured in the
same run. Prints JSON: medians over repeats, ratios, targets.

    python benchmarks/spark.py [--quick] [--out FILE] [--rows N] [--repeats R] [--no-warmup]

* ``write``: ``kcoord.spark.write(df)`` of a cached DataFrame, until every record is
  acknowledged (exactly-once mode: a block of producer ids, one per Spark partition).
* ``read``: ``kcoord.spark.read(...)`` of the rows just written, materialized with Spark's
  ``noop`` sink (every row reaches the JVM, nothing is kept).
* ``from_spark``: ``ray.data.from_spark(df).materialize()`` of the same cached DataFrame
  (Spark -> Ray object store), the baseline for ``write``.
* ``to_spark``: ``ds.to_spark(spark)`` of that Dataset, materialized with ``noop`` (Ray
  object store -> Spark), the baseline for ``read``.

An untimed warm-up round (a fifth of the rows, every case; not with ``--quick``) comes
first: the JVMs' JIT and the Python workers start cold, and the first round costs up to 3x
the CPU of later ones.
Ratios are kcoord / baseline (higher is better for kcoord), by wall time and by CPU per
row. CPU is counted over this process and everything it started (Ray, actors, JVMs,
Python workers), so it does not depend on other load on the machine; ``idle_cpu_per_s`` is
what the setup burns while nothing runs. Targets: write >= 300k rows/s, read >= 1M rows/s.
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

from kcoord.bench.process_tree import tree_cpu  # noqa: E402

VALUE = 100
PARTITIONS = 6
QUICK_PARTITIONS = 3  # each partition is 3 replica actors (processes): --quick starts fewer
TARGETS = {"write": 300_000, "read": 1_000_000}
IDLE_S = 3.0
QUICK_IDLE_S = 1.0


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def summarize(n: int, runs: list[float], cpu: list[float]) -> dict:
    med = median(runs)
    return {
        "rows_per_s": round(n / med),
        "mb_per_s": round(n * VALUE / med / 1e6, 1),
        "seconds": round(med, 3),
        "runs_rows_per_s": [round(n / s) for s in runs],
        "cpu_us_per_row": round(median(cpu) / n * 1e6, 2),
        "runs_cpu_seconds": [round(c, 2) for c in cpu],
    }




def cpu_since(before: dict[int, float]) -> float:
    """CPU seconds the tree used since ``before``, over the processes alive now (a process
    that exited meanwhile, e.g. a deleted topic's replica, drops out rather than making
    the sum negative)."""
    now = tree_cpu()
    return sum(max(0.0, c - before.get(pid, 0.0)) for pid, c in now.items())


def timed(fn, cpu: list[float] | None = None) -> tuple[float, object]:
    """Wall seconds of ``fn()`` (and its CPU seconds, appended to ``cpu``)."""
    cpu0 = tree_cpu()
    start = time.perf_counter()
    out = fn()
    took = time.perf_counter() - start
    if cpu is not None:
        cpu.append(cpu_since(cpu0))
    return took, out


def noop(df) -> None:
    """Materialize every row of ``df`` in the JVM and keep nothing."""
    df.write.format("noop").mode("overwrite").save()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (< 2 min)")
    parser.add_argument("--out", help="also write the JSON here")
    parser.add_argument("--rows", type=int, default=None, help="rows per run (default 1M; 100k with --quick)")
    parser.add_argument("--repeats", type=int, default=None, help="runs per case (default 5; 1 with --quick)")
    parser.add_argument("--spark-partitions", type=int, default=4, help="partitions of the written DataFrame")
    parser.add_argument("--executors", type=int, default=None, help="RayDP executors (default 2; 1 with --quick: each is a JVM to start)")
    parser.add_argument("--warmup", dest="warmup", action="store_true", default=None, help="run the untimed warm-up round (default, except with --quick)")
    parser.add_argument("--no-warmup", dest="warmup", action="store_false", help="skip the untimed warm-up round")
    args = parser.parse_args()
    if args.warmup is None:
        args.warmup = not args.quick
    n = args.rows or (100_000 if args.quick else 1_000_000)
    repeats = args.repeats or (1 if args.quick else 5)
    idle_s = QUICK_IDLE_S if args.quick else IDLE_S
    partitions = QUICK_PARTITIONS if args.quick else PARTITIONS
    if args.executors is None:
        args.executors = 1 if args.quick else 2

    import ray

    from kcoord.cluster.deploy import deploy
    from kcoord.cluster.local import start_local_ray
    from kcoord import spark as ks
    from kcoord.client.admin import Admin

    wall = time.perf_counter()
    results: dict = {
        "benchmark": "spark",
        "rows": n,
        "value_bytes": VALUE,
        "partitions": partitions,
        "replication_factor": 3,
        "acks": "all",
        "executors": args.executors,
        "executor_cores": 1,
        "spark_partitions": args.spark_partitions,
        "repeats": repeats,
        "quick": args.quick,
        "warmup": args.warmup,
        "cpus": os.cpu_count(),
        "load_average_at_start": [round(x, 1) for x in os.getloadavg()],
    }
    setup: dict = {}
    t0 = time.perf_counter()
    started = start_local_ray(num_cpus=2)
    name = f"bench-spark-{uuid.uuid4().hex[:6]}"
    cluster = deploy(name, brokers=3, group_coordinators=0, address=None)
    setup["ray_and_cluster_s"] = round(time.perf_counter() - t0, 1)
    spark = None
    try:
        from pyspark.sql import functions as F

        t0 = time.perf_counter()
        spark = ks.session(cluster, executors=args.executors, cores=1, memory="1G")
        spark.sparkContext.setLogLevel("ERROR")
        setup["spark_session_s"] = round(time.perf_counter() - t0, 1)
        df = (
            spark.range(0, n, 1, args.spark_partitions)
            .select(F.lpad(F.col("id").cast("string"), VALUE, "x").cast("binary").alias("value"))
            .cache()
        )
        t0 = time.perf_counter()
        assert df.count() == n
        setup["generate_and_cache_s"] = round(time.perf_counter() - t0, 1)
        admin = Admin(cluster)

        if args.warmup:
            # One untimed round of every case on a fifth of the rows, so that the JVMs' JIT
            # and the Python workers are warm for kcoord and the baselines alike.
            t0 = time.perf_counter()
            small = df.limit(max(1, n // 5)).cache()
            small.count()
            admin.create_topic("warmup", partitions=partitions, replication_factor=3, config={"min.insync.replicas": 2})
            ks.write(small, cluster, "warmup")
            noop(ks.read(spark, cluster, "warmup"))
            noop(ray.data.from_spark(small).materialize().to_spark(spark))
            admin.delete_topic("warmup")
            small.unpersist()
            setup["warmup_s"] = round(time.perf_counter() - t0, 1)

        write_runs, read_runs, from_runs, to_runs = [], [], [], []
        write_cpu, read_cpu, from_cpu, to_cpu, idle_cpu = [], [], [], [], []
        for i in range(repeats):
            topic = f"bench-{i}"
            admin.create_topic(topic, partitions=partitions, replication_factor=3, config={"min.insync.replicas": 2})
            took, result = timed(lambda: ks.write(df, cluster, topic), write_cpu)
            assert result.records == n, result
            write_runs.append(took)
            took, _ = timed(lambda: noop(ks.read(spark, cluster, topic)), read_cpu)
            read_runs.append(took)
            if i == 0:  # the read returns exactly what was written (outside the timing)
                check = ks.read(spark, cluster, topic)
                assert check.count() == n and check.select("value").distinct().count() == n
            # Idle replicas cost CPU too: keep one topic's worth (18 replicas) alive.
            admin.delete_topic(topic)
            took, ds = timed(lambda: ray.data.from_spark(df).materialize(), from_cpu)
            from_runs.append(took)
            took, _ = timed(lambda: noop(ds.to_spark(spark)), to_cpu)
            to_runs.append(took)
            # What the whole setup burns doing nothing (kcoord's heartbeats and follower
            # long-polls, Ray, the JVMs): part of every figure above.
            timed(lambda: time.sleep(idle_s), idle_cpu)
            del ds
            print(
                f"run {i + 1}/{repeats}: write {n / write_runs[-1]:,.0f} rows/s, read {n / read_runs[-1]:,.0f}, "
                f"from_spark {n / from_runs[-1]:,.0f}, to_spark {n / to_runs[-1]:,.0f}",
                file=sys.stderr,
                flush=True,
            )

        cases = {
            "write": summarize(n, write_runs, write_cpu),
            "read": summarize(n, read_runs, read_cpu),
            "ray_data_from_spark": summarize(n, from_runs, from_cpu),
            "ray_data_to_spark": summarize(n, to_runs, to_cpu),
        }
        results["setup"] = setup
        results["cases"] = cases
        results["idle_cpu_per_s"] = round(median(idle_cpu) / idle_s, 2)
        results["ratios"] = {
            "write_vs_from_spark": round(cases["write"]["rows_per_s"] / cases["ray_data_from_spark"]["rows_per_s"], 2),
            "read_vs_to_spark": round(cases["read"]["rows_per_s"] / cases["ray_data_to_spark"]["rows_per_s"], 2),
            # CPU per row of the baseline / of kcoord: > 1 means kcoord needs less CPU.
            "write_vs_from_spark_cpu": round(cases["ray_data_from_spark"]["cpu_us_per_row"] / cases["write"]["cpu_us_per_row"], 2),
            "read_vs_to_spark_cpu": round(cases["ray_data_to_spark"]["cpu_us_per_row"] / cases["read"]["cpu_us_per_row"], 2),
        }
        results["targets"] = {
            case: {"measured": cases[case]["rows_per_s"], "target": target, "met": cases[case]["rows_per_s"] >= target}
            for case, target in TARGETS.items()
        }
    finally:
        shutdown(name, started, spark=spark is not None)
    results["load_average_at_end"] = [round(x, 1) for x in os.getloadavg()]
    results["wall_seconds"] = round(time.perf_counter() - wall, 1)
    emit(results, args.out)


if __name__ == "__main__":
    main()
