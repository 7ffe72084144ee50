"""kcoord.ray_data.stream: the micro-batch engine of kcoord.spark.stream on Ray Data, each
input's output once with the group's offsets at the input's end (kcoord.streaming)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("ray.data")

from kcoord import ray_data as krd  # noqa: E402
from kcoord.client.admin import Admin  # noqa: E402
from kcoord.streaming.driver import StreamingQueryException  # noqa: E402

pytestmark = pytest.mark.ray


def test_a_ray_data_query_writes_each_input_once_with_its_offsets(kcluster, ray_session, topic_name):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "spark"))
    from test_stream import check_exactly_once, new_topic, produce, read_committed

    src, out = new_topic(kcluster, "rs-in", 2), new_topic(kcluster, "rs-out", 2)
    group = f"g-{src}"
    inputs = produce(kcluster, src, 0, 40)

    def upper(ds, batch_id):
        return ds.map_batches(lambda t: t.select(["key", "value"]).set_column(1, "value", __import__("pyarrow").compute.utf8_upper(t["value"].cast("string"))), batch_format="pyarrow")

    q = krd.stream(kcluster, src, group_id=group, transform=upper, sink=out, trigger_interval_ms=200, starting_offsets="earliest", max_records_per_trigger=25)
    try:
        q.processAllAvailable(timeout_s=180)
        inputs += produce(kcluster, src, 40, 10)
        q.processAllAvailable(timeout_s=180)
        assert sum(p["numInputRows"] for p in q.recentProgress) == 50
    finally:
        q.stop()
    assert q.exception() is None
    check_exactly_once(kcluster, src, out, inputs, group)

    bad = krd.stream(kcluster, src, group_id=f"{group}-bad", transform=lambda ds, b: ds.select_columns(["key"]), sink=out, starting_offsets="earliest")
    with pytest.raises(StreamingQueryException, match="no 'value' column"):
        bad.awaitTermination(120)
    assert len(read_committed(kcluster, out)) == 50  # nothing of the failed query's batch
