"""One Ray Data round trip through kcoord.ray_data, shared by tests/integration/test_ray_data.py
(no Spark) and tests/spark/test_spark.py (next to a Spark session)."""

from __future__ import annotations

from pathlib import Path


def check_write_retried_once_and_read_back(kcluster, topic: str, n: int, keys: int, tmp_path: Path) -> None:
    """Write ``n`` rows (``keys`` distinct keys, a header each) to ``topic`` (3 partitions)
    with the first attempt of every block failing after it produced; Ray retries it. Each
    row must land once and read back with kcoord's Arrow schema, keyed partitions and
    headers."""
    import pyarrow as pa
    import ray

    from kcoord import ray_data as krd
    from kcoord.client.admin import Admin
    from kcoord.client.producer.partitioner import partition_for_key
    from kcoord.protocol.errors import ErrorCode, KafkaError

    items = [{"key": f"k{i % keys}", "value": f"v{i}".encode(), "hdr": [{"key": "n", "value": str(i).encode()}]} for i in range(n)]
    ds = ray.data.from_items(items, override_num_blocks=3)
    # Ray tasks do not see their attempt number, so a file marks that the first attempt happened.
    marker = str(tmp_path / "fail")

    def fail_first_attempt(index: int) -> None:
        import os

        if not os.path.exists(f"{marker}.{index}"):
            open(f"{marker}.{index}", "w").close()
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"injected failure: block {index} (first attempt) after it produced")

    result = krd.write(ds, kcluster, topic, key_col="key", value_col="value", headers_col="hdr", on_block_written=fail_first_attempt)
    assert result.records == n and result.duplicate_batches > 0 and sorted(result.tasks) == [0, 1, 2]
    assert sum(Admin(kcluster).list_offsets(topic, "latest").values()) == n

    t = pa.concat_tables(ray.get(krd.read(kcluster, topic, min_partitions=4).to_arrow_refs()))
    assert t.schema == krd.ARROW_SCHEMA and t.num_rows == n
    rows = t.select(["key", "value", "partition", "headers"]).to_pylist()
    assert sorted(r["value"] for r in rows) == sorted(x["value"] for x in items)
    assert all(r["partition"] == partition_for_key(r["key"], 3) for r in rows)
    assert all(r["headers"] == [{"key": "n", "value": r["value"][1:]}] for r in rows)
