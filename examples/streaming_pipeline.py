"""A continuous pipeline with Spark on Ray, exactly once from an input topic to an output topic.

1. A producer writes keyed events to ``events`` while the query runs.
2. ``kcoord.spark.stream`` runs a micro-batch query for the consumer group ``upper``: each
   trigger reads what the group has not processed, upper-cases the values in Spark and
   writes them to ``events-upper``, committing the group's offsets in the same
   transactions (kcoord.streaming).
3. The query is stopped and started again (same name): it resumes after the last
   committed batch. A read_committed consumer then sees every event's result once, and the
   group's offsets equal the input's end.

    .venv/bin/python examples/streaming_pipeline.py [--rows 5000] [--executors 1]

Starts (and always stops) its own Ray instance, kcoord cluster and Spark session.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import kcoord  # noqa: E402
from kcoord import spark as ks  # noqa: E402
from kcoord.client.admin import Admin  # noqa: E402
from kcoord.client.consumer import Consumer  # noqa: E402
from kcoord.client.producer import Producer  # noqa: E402
from kcoord.client.types import TopicPartition  # noqa: E402
from kcoord.spark.offsets import group_offsets  # noqa: E402

SOURCE, SINK, GROUP = "events", "events-upper", "upper"


def produce(cluster: kcoord.ClusterClient, start: int, n: int) -> None:
    with Producer(cluster, acks="all", linger_ms=5) as p:
        p.send_batch(SOURCE, values=[f"event-{i}".encode() for i in range(start, start + n)], keys=[f"user-{i % 20}".encode() for i in range(start, start + n)])


def committed_output(cluster: kcoord.ClusterClient) -> list[bytes]:
    with Consumer(cluster=cluster, isolation_level="read_committed", auto_offset_reset="earliest", enable_auto_commit=False) as c:
        tps = [TopicPartition(SINK, p) for p in cluster.partitions_for(SINK)]
        c.assign(tps)
        end = c.end_offsets(tps)
        out: list[bytes] = []
        while any(c.position(tp) < end[tp] for tp in tps):
            for records in c.poll(timeout_ms=500).values():
                out.extend(r.value for r in records)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--executors", type=int, default=1)
    args = parser.parse_args()

    def upper(df, batch_id):
        return df.selectExpr("key", "upper(CAST(value AS STRING)) AS value")

    with kcoord.local_cluster(brokers=3, ray_init={"num_cpus": 2}) as cluster:
        admin = Admin(cluster)
        for t in (SOURCE, SINK):
            admin.create_topic(t, partitions=3, replication_factor=3, config={"min.insync.replicas": 2})
        spark = ks.session(cluster, executors=args.executors)
        spark.sparkContext.setLogLevel("ERROR")
        try:
            half = args.rows // 2
            produce(cluster, 0, half)
            q = ks.stream(spark, cluster, SOURCE, group_id=GROUP, transform=upper, sink=SINK, trigger_interval_ms=500, starting_offsets="earliest")
            q.processAllAvailable()
            p = q.lastProgress
            print(f"1. query {q.name!r}: {len(q.recentProgress)} batch(es), last batch {p['batchId']}: {p['numInputRows']} rows, "
                  f"{p['processedRowsPerSecond']:.0f} rows/s, {p['durationMs']['triggerExecution']} ms")
            q.stop()
            print("2. stopped; more events arrive while it is down")
            produce(cluster, half, args.rows - half)
            q = ks.stream(spark, cluster, SOURCE, group_id=GROUP, transform=upper, sink=SINK, trigger_interval_ms=500)
            q.processAllAvailable()
            print(f"3. restarted: resumed at batch {q.recentProgress[0]['batchId']} with {sum(x['numInputRows'] for x in q.recentProgress)} rows")
            q.stop()
            out = committed_output(cluster)
            offsets = {p: o for p, (o, _) in group_offsets(cluster, GROUP)[SOURCE].items()}
            ends = dict(admin.list_offsets(SOURCE, "latest"))
            ok = len(out) == args.rows == len(set(out)) and all(v.startswith(b"EVENT-") for v in out) and offsets == ends
            print(f"4. read_committed output: {len(out)} records ({len(set(out))} distinct) for {args.rows} events; group offsets {offsets} = ends {ends}")
            print("summary:", "OK" if ok else "MISMATCH")
            if not ok:
                sys.exit(1)
        finally:
            ks.stop()


if __name__ == "__main__":
    main()
