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


def test_a_stateful_ray_data_query_keeps_an_exact_count_per_key_in_its_changelog(kcluster, ray_session):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "spark"))
    from test_stream import changelog_state, check_counts, counting, new_topic, produce

    src, out = new_topic(kcluster, "rss-in", 2), new_topic(kcluster, "rss-out", 2)
    group = f"g-{src}"
    inputs = produce(kcluster, src, 0, 30, keys=3)
    options = dict(group_id=group, update_state=counting(), state_key="key", sink=out, trigger_interval_ms=200, starting_offsets="earliest")
    q = krd.stream(kcluster, src, state_partitions=3, **options)
    try:
        q.processAllAvailable(timeout_s=180)
        inputs += produce(kcluster, src, 30, 15, keys=3)
        q.processAllAvailable(timeout_s=180)
    finally:
        q.stop()
    assert q.exception() is None
    check_counts(kcluster, out, inputs)
    assert changelog_state(kcluster, group, 3) == {f"k{i}".encode(): 15 for i in range(3)}


def test_stable_ends_wait_for_an_open_transaction_to_be_decided(kcluster, topic_name):
    """A read up to the LSO would miss what an open transaction commits afterwards: a
    decision lookup or a state load reads up to the HW once the LSO has reached it."""
    from kcoord.client.producer import Producer
    from kcoord.client.types import TopicPartition
    from kcoord.protocol.errors import ErrorCode, KafkaError
    from kcoord.txn_write import stable_ends

    Admin(kcluster).create_topic(topic_name, partitions=1, replication_factor=3, config={"min.insync.replicas": 2})
    tp = TopicPartition(topic_name, 0)
    with Producer(kcluster, acks="all", linger_ms=0) as plain:
        plain.send(topic_name, value=b"before", partition=0).get(timeout=30)
    assert stable_ends(kcluster, [tp], timeout_s=5) == {tp: 1}
    with Producer(kcluster, transactional_id=f"open-{topic_name}", acks="all", linger_ms=0) as txn:
        txn.init_transactions()
        txn.begin_transaction()
        txn.send(topic_name, value=b"open", partition=0).get(timeout=30)
        with pytest.raises(KafkaError) as waited:
            stable_ends(kcluster, [tp], timeout_s=0.5)
        assert waited.value.code == ErrorCode.REQUEST_TIMED_OUT and "stayed at 1, below 2" in str(waited.value)
        txn.commit_transaction()
    assert stable_ends(kcluster, [tp], timeout_s=30)[tp] >= 2  # past the record (and its marker, once replicated)
