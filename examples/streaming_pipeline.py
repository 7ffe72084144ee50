"""A continuous pipeline with Spark on Ray, exactly once from an input topic to an output topic.

1. A producer writes keyed events to ``events`` while the query runs.
2. ``kcoord.spark.stream`` runs a micro-batch query for the consumer group ``upper``: each
   trigger reads what the group has not processed, upper-cases the values in Spark and
   writes them to ``events-upper``, committing the group's offsets in the same
   transactions (kcoord.streaming).
3. The query is stopped and started again (same name): it resumes after the last
   committed batch. A read_committed consumer then sees every event's result once, and the
   group's offsets equal the input's end.
4. A stateful query (``update_state``) for the group ``counts`` keeps a running count of
   events per user in its changelog and writes each new count to ``events-counts``: the
   last count per user equals that user's events.

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
COUNTS = "events-counts"
USERS = 20


def produce(cluster: kcoord.ClusterClient, start: int, n: int) -> None:
    with Producer(cluster, acks="all", linger_ms=5) as p:
        p.send_batch(SOURCE, values=[f"event-{i}".encode() for i in range(start, start + n)], keys=[f"user-{i % USERS}".encode() for i in range(start, start + n)])


def committed_output(cluster: kcoord.ClusterClient, topic: str = SINK) -> list[tuple[bytes, bytes]]:
    """(key, value) of every committed record of ``topic``, per partition in offset order."""
    with Consumer(cluster=cluster, isolation_level="read_committed", auto_offset_reset="earliest", enable_auto_commit=False) as c:
        tps = [TopicPartition(topic, p) for p in cluster.partitions_for(topic)]
        c.assign(tps)
        end = c.end_offsets(tps)
        out: list[tuple[bytes, bytes]] = []
        while any(c.position(tp) < end[tp] for tp in tps):
            for records in c.poll(timeout_ms=500).values():
                out.extend((r.key, r.value) for r in records)
    return out


def running_count(key, rows, state):
    """update_state: a user's events so far (state), emitted once per batch it appears in."""
    import pandas as pd

    n = (state or 0) + len(rows)
    return pd.DataFrame({"key": [key], "value": [str(n)]}), n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--executors", type=int, default=1)
    args = parser.parse_args()

    def upper(df, batch_id):
        return df.selectExpr("key", "upper(CAST(value AS STRING)) AS value")

    with kcoord.local_cluster(brokers=3, ray_init={"num_cpus": 2}) as cluster:
        admin = Admin(cluster)
        for t in (SOURCE, SINK, COUNTS):
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
            out = [v for _, v in committed_output(cluster)]
            offsets = {p: o for p, (o, _) in group_offsets(cluster, GROUP)[SOURCE].items()}
            ends = dict(admin.list_offsets(SOURCE, "latest"))
            ok = len(out) == args.rows == len(set(out)) and all(v.startswith(b"EVENT-") for v in out) and offsets == ends
            print(f"4. read_committed output: {len(out)} records ({len(set(out))} distinct) for {args.rows} events; group offsets {offsets} = ends {ends}")
            counts = ks.stream(spark, cluster, SOURCE, group_id="counts", update_state=running_count, state_key="key", sink=COUNTS, starting_offsets="earliest")
            counts.processAllAvailable()
            counts.stop()
            last = dict(committed_output(cluster, COUNTS))  # the newest count per user
            want = {f"user-{u}".encode(): str(sum(1 for i in range(args.rows) if i % USERS == u)).encode() for u in range(USERS)}
            ok = ok and last == want
            print(f"5. stateful query: running counts of {len(last)} users in {COUNTS}, state in counts-state-changelog; "
                  f"they equal the events per user: {last == want}")
            print("summary:", "OK" if ok else "MISMATCH")
            if not ok:
                sys.exit(1)
        finally:
            ks.stop()


if __name__ == "__main__":
    main()
