"""kcoord.ray_data without Spark (only the ``data`` extra): a Ray Data write that is
retried after producing still writes each row once, and the read gives every row back with
kcoord's Arrow schema. tests/spark/test_spark.py runs the same next to a Spark session; this
file is what runs where the ``spark`` extra is not installed (e.g. the oldest Ray of the
supported range)."""

from __future__ import annotations

import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("ray.data")

from kcoord import ray_data as krd  # noqa: E402
from kcoord.client.admin import Admin  # noqa: E402
from kcoord.client.producer.partitioner import partition_for_key  # noqa: E402
from kcoord.protocol.errors import ErrorCode, KafkaError  # noqa: E402

pytestmark = pytest.mark.ray


def test_write_retried_blocks_once_and_read_back(kcluster, ray_session, topic_name, tmp_path):
    import ray

    Admin(kcluster).create_topic(topic_name, partitions=3, replication_factor=1)
    n = 3000
    items = [{"key": f"k{i % 100}", "value": f"v{i}".encode(), "hdr": [{"key": "n", "value": str(i).encode()}]} for i in range(n)]
    ds = ray.data.from_items(items, override_num_blocks=3)
    marker = str(tmp_path / "fail")

    def fail_first_attempt(index: int) -> None:
        import os

        if not os.path.exists(f"{marker}.{index}"):
            open(f"{marker}.{index}", "w").close()
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"injected failure: block {index} (first attempt) after it produced")

    result = krd.write(ds, kcluster, topic_name, key_col="key", value_col="value", headers_col="hdr", on_block_written=fail_first_attempt)
    assert result.records == n and result.duplicate_batches > 0 and sorted(result.tasks) == [0, 1, 2]
    assert sum(Admin(kcluster).list_offsets(topic_name, "latest").values()) == n

    t = pa.concat_tables(ray.get(krd.read(kcluster, topic_name, min_partitions=4).to_arrow_refs()))
    assert t.schema == krd.ARROW_SCHEMA and t.num_rows == n
    rows = t.select(["key", "value", "partition", "headers"]).to_pylist()
    assert sorted(r["value"] for r in rows) == sorted(x["value"] for x in items)
    assert all(r["partition"] == partition_for_key(r["key"], 3) for r in rows)
    assert all(r["headers"] == [{"key": "n", "value": r["value"][1:]}] for r in rows)


def test_read_of_a_missing_topic_names_it(kcluster, topic_name):
    with pytest.raises(KafkaError, match=topic_name):
        krd.read(kcluster, f"missing-{topic_name}").take_all()
