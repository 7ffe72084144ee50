"""A streaming query in a process of its own, for tests/spark/test_stream_kill.py to SIGKILL:
``python stream_kill_child.py ENGINE GCS_ADDRESS CLUSTER NAMESPACE SOURCE SINK GROUP``."""

from __future__ import annotations

import sys

import ray

from kcoord.client.cluster import ClusterClient


def main() -> None:
    engine, address, name, namespace, source, sink, group = sys.argv[1:8]
    ray.init(address=address, namespace=namespace, log_to_driver=False, logging_level="WARNING")
    cluster = ClusterClient(name, namespace=namespace, address=None)
    options = dict(group_id=group, sink=sink, name=f"q-{group}", trigger_interval_ms=100, starting_offsets="earliest", max_records_per_trigger=150)
    if engine == "spark":
        from kcoord import spark as ks

        spark = ks.session(cluster, executors=1, cores=1, memory="1G")
        q = ks.stream(spark, cluster, source, transform=lambda df, b: df.selectExpr("key", "upper(CAST(value AS STRING)) AS value"), **options)
    else:
        import pyarrow.compute as pc

        from kcoord import ray_data as krd

        def upper(ds, b):
            return ds.map_batches(lambda t: t.select(["key", "value"]).set_column(1, "value", pc.utf8_upper(t["value"].cast("string"))), batch_format="pyarrow")

        q = krd.stream(cluster, source, transform=upper, **options)
    print("started", flush=True)
    q.awaitTermination()


if __name__ == "__main__":
    main()
