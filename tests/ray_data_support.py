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


def check_transactional_write_once(kcluster, topic: str, n: int, tmp_path: Path) -> None:
    """A transactional Ray Data write (``transactional_id``) to ``topic`` whose first attempt
    of every block fails after it prepared its transaction: read_committed sees each row
    once, the failed attempts' transactions are aborted, and the same write again (a driver
    re-run) is recognised and writes nothing."""
    import pyarrow as pa
    import ray

    from kcoord import ray_data as krd
    from kcoord.client.admin import Admin
    from kcoord.protocol.errors import ErrorCode, KafkaError
    from kcoord.txn_write import TransactionalWrite

    items = [{"key": f"k{i % 50}", "value": f"v{i}".encode()} for i in range(n)]
    ds = ray.data.from_items(items, override_num_blocks=3)
    marker = str(tmp_path / "txn-fail")
    prefix = f"{topic}-w"

    def fail_first_attempt(index: int) -> None:
        import os

        if not os.path.exists(f"{marker}.{index}"):
            open(f"{marker}.{index}", "w").close()
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"injected failure: block {index} (first attempt) after it prepared")

    result = krd.write(ds, kcluster, topic, key_col="key", value_col="value", on_block_written=fail_first_attempt, transactional_id=prefix)
    assert result.records == n and sorted(result.transactions) == [0, 1, 2] and not result.already_written
    assert TransactionalWrite(kcluster, prefix).open_transactions() == []
    ends = Admin(kcluster).list_offsets(topic, "latest")
    assert sum(ends.values()) > n  # the failed attempts' records are in the log, aborted

    def values(isolation_level: str) -> list[bytes]:
        t = pa.concat_tables(ray.get(krd.read(kcluster, topic, isolation_level=isolation_level).to_arrow_refs()))
        return sorted(t.column("value").to_pylist())

    assert values("read_committed") == sorted(x["value"] for x in items)
    assert len(values("read_uncommitted")) == 2 * n

    again = krd.write(ds, kcluster, topic, key_col="key", value_col="value", transactional_id=prefix)
    assert again.already_written and again.records == n
    assert Admin(kcluster).list_offsets(topic, "latest") == ends
