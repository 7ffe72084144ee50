"""A batch pipeline with Spark on Ray and a consumer group, on an embedded kcoord cluster.

1. Spark generates a DataFrame of purchase events (a struct value, sent as JSON) and writes
   it to the topic ``events`` from its executors (exactly once under task retries).
2. A consumer group ``billing`` (a plain kcoord Consumer) processes part of it and commits.
3. Spark reads the group's committed offsets and the records the group has not processed
   yet (``starting_offsets="group:billing"``) -- :func:`kcoord.spark.pipeline.topic_report`,
   which ``kcoord demo`` uses too.
4. A Spark batch job catches up for the group: it counts the remaining events per user,
   writes the counts to ``user-counts`` and commits the offsets it read
   (:func:`kcoord.spark.pipeline.catch_up`). The group's lag is then 0.

    .venv/bin/python examples/spark_pipeline.py [--rows 50000] [--executors 2]

Starts (and always stops) its own Ray instance, kcoord cluster and Spark session.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import kcoord  # noqa: E402
from kcoord import spark as ks  # noqa: E402
from kcoord.client.admin import Admin  # noqa: E402
from kcoord.client.consumer import Consumer  # noqa: E402
from kcoord.client.types import OffsetAndMetadata  # noqa: E402
from kcoord.spark.pipeline import catch_up, topic_report  # noqa: E402

TOPIC = "events"
COUNTS = "user-counts"
GROUP = "billing"


def process_some(cluster: kcoord.ClusterClient, want: int, timeout_s: float = 120.0) -> int:
    """A consumer-group member processes about ``want`` records, commits after each poll,
    and leaves. Returns how many it processed."""
    consumer = Consumer(cluster=cluster, group_id=GROUP, auto_offset_reset="earliest", enable_auto_commit=False, max_poll_records=2000)
    consumer.subscribe([TOPIC])
    done = 0
    deadline = time.monotonic() + timeout_s
    try:
        while done < want and time.monotonic() < deadline:
            batch = consumer.poll(timeout_ms=500, max_records=min(2000, want - done))
            offsets = {}
            for tp, records in batch.items():
                done += len(records)  # "processing" is counting here
                offsets[tp] = OffsetAndMetadata(records[-1].offset + 1)
            if offsets:
                consumer.commit(offsets)
    finally:
        consumer.close()
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--executors", type=int, default=2)
    parser.add_argument("--processed-fraction", type=float, default=0.4, help="share of the events the consumer group handles")
    args = parser.parse_args()

    with kcoord.local_cluster(brokers=3, ray_init={"num_cpus": 2}) as cluster:
        admin = Admin(cluster)
        admin.create_topic(TOPIC, partitions=3, replication_factor=3, config={"min.insync.replicas": 2})
        admin.create_topic(COUNTS, partitions=1, replication_factor=3, config={"min.insync.replicas": 2})
        print(f"kcoord cluster {cluster.name!r}: topics {TOPIC!r} (3 partitions) and {COUNTS!r}, RF=3", flush=True)
        spark = ks.session(cluster, executors=args.executors)
        spark.sparkContext.setLogLevel("ERROR")
        try:
            from pyspark.sql import functions as F

            events = spark.range(0, args.rows, 1, 4).select(
                F.concat(F.lit("user-"), (F.col("id") % 50).cast("string")).alias("user"),
                F.struct(F.col("id").alias("event_id"), (F.col("id") % 50).alias("user_id"), ((F.col("id") * 37) % 1000 / 10).alias("amount")).alias("event"),
            )
            written = ks.write(events, cluster, TOPIC, key_col="user", value_col="event")
            print(f"1. Spark wrote {written.records} events (JSON values) from {len(written.tasks)} tasks: per partition {written.partitions}")

            processed = process_some(cluster, int(args.rows * args.processed_fraction))
            print(f"2. consumer group {GROUP!r} processed {processed} events and committed")

            report = topic_report(spark, cluster, TOPIC, GROUP)
            print(f"3. Spark sees {report['rows_read']} events from {report['keys']} users (top: {report['top_keys']})")
            for r in report["committed"]:
                print(f"     {r['topic']}-{r['partition']}: committed {r['offset']}, log end {r['log_end_offset']}, lag {r['lag']}")
            print(f"   records not yet processed by {GROUP!r} (read from 'group:{GROUP}'): {report['remaining_rows']} "
                  f"(= the group's lag: {report['consistent']})")

            caught = catch_up(spark, cluster, TOPIC, GROUP, COUNTS)
            print(f"4. Spark caught up: read {caught['read_rows']} events, wrote {caught['keys_written']} per-user counts "
                  f"to {COUNTS!r}, committed {caught['committed']}")
            lag = sum(r.lag for r in ks.committed_offsets(spark, cluster, GROUP).collect())
            sample = ks.read(spark, cluster, COUNTS).orderBy("offset").limit(3).selectExpr("cast(key as string) as user", "cast(value as string) as events").collect()
            print(f"   group {GROUP!r} lag is now {lag}; first counts: {[(r.user, r.events) for r in sample]}")
            ok = report["consistent"] and lag == 0 and processed + caught["read_rows"] == written.records
            print("summary:", "OK" if ok else "MISMATCH")
            if not ok:
                sys.exit(1)
        finally:
            ks.stop()


if __name__ == "__main__":
    main()
