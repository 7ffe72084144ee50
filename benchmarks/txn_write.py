"""Transactional Spark writes and read_committed reads against their plain baselines, in the
same run: ``kcoord.spark.write(df, transactional_id=...)`` (every task's transaction
prepared, the driver's decision recorded, one commit per task) against the same write
without ``transactional_id`` (idempotent, one producer id per Spark partition), and
``kcoord.spark.read(isolation_level="read_committed")`` of the transactional topic against
the same read uncommitted. 100-byte values, RF=3, acks=all, min.insync.replicas=2, 2 RayDP
executors (1 with --quick). Prints JSON: medians of rows/s over the repeats (the two cases
of a pair alternate within each repeat) and the ratios transactional / plain.

    python benchmarks/txn_write.py [--quick] [--rows N] [--repeats R] [--out FILE]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (about 3 min with the Spark session)")
    parser.add_argument("--rows", type=int, default=None, help="rows per write (default 500k; 100k with --quick)")
    parser.add_argument("--repeats", type=int, default=None, help="runs per case (default 5; 3 with --quick)")
    parser.add_argument("--spark-partitions", type=int, default=4, help="partitions of the written DataFrame (= transactions per write)")
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()
    n = args.rows or (100_000 if args.quick else 500_000)
    repeats = args.repeats or (3 if args.quick else 5)
    executors = 1 if args.quick else 2

    from kcoord import spark as ks
    from kcoord.client.admin import Admin
    from kcoord.cluster.deploy import deploy
    from kcoord.cluster.local import start_local_ray

    results: dict = {
        "benchmark": "txn_write",
        "rows": n,
        "value_bytes": VALUE,
        "partitions": PARTITIONS,
        "replication_factor": 3,
        "spark_partitions": args.spark_partitions,
        "executors": executors,
        "repeats": repeats,
        "cpus": os.cpu_count(),
        "load_average_at_start": [round(x, 1) for x in os.getloadavg()],
    }
    started = start_local_ray(num_cpus=2)
    name = f"bench-txw-{uuid.uuid4().hex[:6]}"
    cluster = deploy(name, brokers=3, group_coordinators=1, address=None)
    try:
        from pyspark.sql import functions as F

        spark = ks.session(cluster, executors=executors, cores=1, memory="1G")
        spark.sparkContext.setLogLevel("ERROR")
        df = spark.range(0, n, 1, args.spark_partitions).select(F.lpad(F.col("id").cast("string"), VALUE, "x").cast("binary").alias("value")).cache()
        assert df.count() == n
        admin = Admin(cluster)

        def new_topic() -> str:
            topic = f"t-{uuid.uuid4().hex[:6]}"
            admin.create_topic(topic, partitions=PARTITIONS, replication_factor=3, config={"min.insync.replicas": 2})
            return topic

        def timed(fn) -> float:
            t0 = time.perf_counter()
            fn()
            return time.perf_counter() - t0

        # Untimed warm-up of both paths (JIT, Python workers, the decision topic).
        small = df.limit(max(1, n // 10))
        ks.write(small, cluster, new_topic())
        ks.write(small, cluster, new_topic(), transactional_id=f"warm-{uuid.uuid4().hex[:6]}")

        runs: dict[str, list[float]] = {"plain_write": [], "txn_write": [], "read_uncommitted": [], "read_committed": []}
        for i in range(repeats):
            plain, txn = new_topic(), new_topic()
            pair = [("plain_write", lambda: ks.write(df, cluster, plain)), ("txn_write", lambda: ks.write(df, cluster, txn, transactional_id=f"bench-{uuid.uuid4().hex[:8]}"))]
            for case, fn in pair if i % 2 == 0 else pair[::-1]:
                runs[case].append(timed(fn))
            reads = [
                ("read_uncommitted", lambda: ks.read(spark, cluster, txn).write.format("noop").mode("overwrite").save()),
                ("read_committed", lambda: ks.read(spark, cluster, txn, isolation_level="read_committed").write.format("noop").mode("overwrite").save()),
            ]
            for case, fn in reads if i % 2 == 0 else reads[::-1]:
                runs[case].append(timed(fn))
            if i == 0:
                assert ks.read(spark, cluster, txn, isolation_level="read_committed").count() == n
            admin.delete_topic(plain)
            admin.delete_topic(txn)
            print(f"run {i + 1}/{repeats}: " + ", ".join(f"{k} {n / v[-1]:,.0f} rows/s" for k, v in runs.items()), file=sys.stderr, flush=True)

        for case, xs in runs.items():
            med = statistics.median(xs)
            results[case] = {"rows_per_s": round(n / med), "seconds": round(med, 3), "runs_rows_per_s": [round(n / x) for x in xs]}
        results["ratios"] = {
            "txn_write_vs_plain_write": round(results["txn_write"]["rows_per_s"] / results["plain_write"]["rows_per_s"], 3),
            "read_committed_vs_read_uncommitted": round(results["read_committed"]["rows_per_s"] / results["read_uncommitted"]["rows_per_s"], 3),
        }
    finally:
        shutdown(name, started)
    emit(results, args.out)


if __name__ == "__main__":
    main()
