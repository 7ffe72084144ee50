"""A stateless streaming query against the same work as one batch job, in the same run:
``kcoord.spark.stream`` (transform: upper-case the value; output exactly once with the
group's offsets) consuming N records already in the topic from ``earliest`` until caught up,
against ``ks.read`` of the same records + the same transform + ``ks.write(...,
transactional_id=...)`` as one batch. 100-byte values, 3 partitions, RF=3, acks=all,
min.insync.replicas=2, 1 RayDP executor. Prints JSON: medians of rows/s over the repeats
(the two cases alternate) and the ratio stream / batch (issue 35's goal: at least 0.7).

    python benchmarks/streaming.py [--rows N] [--repeats R] [--max-records-per-trigger M] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

VALUE = 100
PARTITIONS = 3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-records-per-trigger", type=int, default=None, help="cap per micro-batch (default: no cap, one batch)")
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()
    n = args.rows

    from kcoord import spark as ks
    from kcoord.client.admin import Admin
    from kcoord.client.producer import Producer
    from kcoord.cluster.deploy import deploy, teardown
    from kcoord.cluster.local import start_local_ray

    results: dict = {
        "benchmark": "streaming",
        "rows": n,
        "value_bytes": VALUE,
        "partitions": PARTITIONS,
        "replication_factor": 3,
        "executors": 1,
        "repeats": args.repeats,
        "max_records_per_trigger": args.max_records_per_trigger,
        "cpus": os.cpu_count(),
        "load_average_at_start": [round(x, 1) for x in os.getloadavg()],
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

        def batch_job() -> None:
            ks.write(upper(ks.read(spark, cluster, source)), cluster, new_topic("out"), key_col="key", value_col="value", transactional_id=f"b-{uuid.uuid4().hex[:8]}")

        def stream_job() -> None:
            group = f"g-{uuid.uuid4().hex[:8]}"
            q = ks.stream(spark, cluster, source, group_id=group, transform=upper, sink=new_topic("out"), trigger_interval_ms=0,
                          starting_offsets="earliest", max_records_per_trigger=args.max_records_per_trigger)
            try:
                q.processAllAvailable(timeout_s=1800)
                results.setdefault("batches_per_stream_run", []).append(len(q.recentProgress))
            finally:
                q.stop()

        def timed(fn) -> float:
            t0 = time.perf_counter()
            fn()
            return time.perf_counter() - t0

        # warm-up (Python workers, the decision topic) untimed
        batch_job()
        runs: dict[str, list[float]] = {"batch_read_write": [], "stream": []}
        pair = [("batch_read_write", batch_job), ("stream", stream_job)]
        for i in range(args.repeats):
            for case, fn in pair if i % 2 == 0 else pair[::-1]:
                runs[case].append(timed(fn))
            print(f"run {i + 1}/{args.repeats}: " + ", ".join(f"{k} {n / v[-1]:,.0f} rows/s" for k, v in runs.items()), file=sys.stderr, flush=True)
        for case, xs in runs.items():
            med = statistics.median(xs)
            results[case] = {"rows_per_s": round(n / med), "seconds": round(med, 3), "runs_rows_per_s": [round(n / x) for x in xs]}
        results["ratios"] = {"stream_vs_batch": round(results["stream"]["rows_per_s"] / results["batch_read_write"]["rows_per_s"], 3)}
    finally:
        try:
            ks.stop()
        finally:
            teardown(name, delete_data=True, address=None)
            if started:
                import ray

                ray.shutdown()
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
