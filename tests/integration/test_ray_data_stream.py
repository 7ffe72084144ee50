"""kcoord.ray_data.stream: the micro-batch engine of kcoord.spark.stream on Ray Data, each
input's output once with the group's offsets at the input's end (kcoord.streaming)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("ray.data")

from kcoord import ray_data as krd  # noqa: E402
from kcoord.client.admin import Admin  # noqa: E402
from kcoord.streaming import protocol as P  # noqa: E402
from kcoord.streaming.driver import StreamingQueryException  # noqa: E402
from kcoord.txn_write import TransactionalWrite, prepare_task  # noqa: E402

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
        # A zombie attempt of batch 0 (a task attempt still running after its batch was
        # decided and finished) writes and prepares now: the next batch's commit aborts it,
        # else its open transaction would hold the sink's LSO back for good.
        zombie = f"{q.name}/0/0/{P.attempt_tag(q._driver.epoch, 'zombie')}"

        def write_one(producer):
            producer.send(out, value=b"ZOMBIE", partition=0).get(timeout=30)
            return {0: 1}

        prepare_task(kcluster, zombie, 0, write_one)
        inputs += produce(kcluster, src, 40, 10)
        q.processAllAvailable(timeout_s=180)
        assert sum(p["numInputRows"] for p in q.recentProgress) == 50
        assert TransactionalWrite(kcluster, f"{q.name}/0", batch=True).transaction_state(zombie) in ("CompleteAbort", "Empty")  # aborted (by a new instance)
    finally:
        q.stop()
    assert q.exception() is None
    check_exactly_once(kcluster, src, out, inputs, group)

    bad = krd.stream(kcluster, src, group_id=f"{group}-bad", transform=lambda ds, b: ds.select_columns(["key"]), sink=out, starting_offsets="earliest")
    with pytest.raises(StreamingQueryException, match="no 'value' column"):
        bad.awaitTermination(120)
    assert len(read_committed(kcluster, out)) == 50  # nothing of the failed query's batch


def _helpers():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "spark"))
    import test_stream

    return test_stream


def _upper(ds, batch_id):
    import pyarrow.compute as pc

    return ds.map_batches(lambda t: t.select(["key", "value"]).set_column(1, "value", pc.utf8_upper(t["value"].cast("string"))), batch_format="pyarrow")


def _describe(kcluster, group: str, *flags: str):
    from click.testing import CliRunner

    from kcoord.cli import cli

    res = CliRunner().invoke(cli, ["--name", kcluster.name, "--namespace", kcluster.namespace, "groups", "describe", group, *flags])
    assert res.exit_code == 0, res.output
    return res.output


def test_a_stopped_query_leaves_its_group_resumes_under_its_name_and_shows_on_the_cli(kcluster, ray_session):
    import json
    import time
    import uuid

    h = _helpers()
    src, out = h.new_topic(kcluster, "rl-in", 2), h.new_topic(kcluster, "rl-out", 2)
    group, name = f"g-{src}", f"q-{uuid.uuid4().hex[:6]}"
    inputs = h.produce(kcluster, src, 0, 30)

    q = krd.stream(kcluster, src, group_id=group, name=name, transform=_upper, sink=out, trigger_interval_ms=100, starting_offsets="earliest", max_records_per_trigger=10)
    try:
        q.processAllAvailable(timeout_s=180)
        progress = q.recentProgress
        # lag per partition: the first batch took 10 of the 30 it saw
        first = progress[0]["sources"][0]
        assert sum(first["offsetsBehindLatest"][src].values()) == 20 and first["metrics"]["maxOffsetsBehindLatest"] != "0"
        assert sum(first["latestOffset"][src].values()) == 30
        assert sum(progress[-1]["sources"][0]["offsetsBehindLatest"][src].values()) == 0
        m = q.metrics()
        assert m["batches"] == len(progress) >= 3 and m["input_rows"] == 30 and m["output_rows"] == 30
        assert m["lag_total"] == 0 and m["last_batch_id"] == progress[-1]["batchId"] and m["batch_duration_ms"] > 0
        # the CLI: the group is a streaming query's, running, with its lag and last batch
        desc = json.loads(_describe(kcluster, group, "--json"))
        assert desc["streaming"] == [{"query": name, "last_batch": progress[-1]["batchId"], "lag": 0, "running": True, "member_id": desc["members"][0]["member_id"]}]
        text = _describe(kcluster, group)
        assert f"streaming query {name}: last committed batch {progress[-1]['batchId']}, lag 0, running as member" in text
        assert any(name in line and "streaming query" in line and "running as" not in line for line in text.splitlines())  # the member's kind
    finally:
        q.stop()
    assert q.exception() is None
    # every batch's decision was recorded DONE (appended beside the next batch; the last by stop())
    from kcoord.streaming.protocol import batch_prefix
    from kcoord.txn_write import DONE, TransactionalWrite

    states = {p["batchId"]: TransactionalWrite(kcluster, batch_prefix(name, p["batchId"]), batch=True, isolation_level="read_committed").last_decision().state for p in progress}
    assert set(states.values()) == {DONE}, states
    # stopped: its static member left (LeaveGroup with its instance id); the lag shows
    inputs += h.produce(kcluster, src, 30, 6)
    desc = json.loads(_describe(kcluster, group, "--json"))
    assert desc["members"] == [] and desc["streaming"][0]["running"] is False and desc["streaming"][0]["lag"] == 6

    # the same name resumes where it stopped
    q = krd.stream(kcluster, src, group_id=group, name=name, transform=_upper, sink=out, trigger_interval_ms=100)
    try:
        q.processAllAvailable(timeout_s=180)
        assert sum(p["numInputRows"] for p in q.recentProgress) == 6 and q.recentProgress[0]["batchId"] == progress[-1]["batchId"] + 1
    finally:
        q.stop()
    assert q.exception() is None

    # another query (another name) takes the group at once, not after the 30 s session timeout
    inputs += h.produce(kcluster, src, 36, 4)
    started = time.monotonic()
    other = krd.stream(kcluster, src, group_id=group, name=f"{name}-b", transform=_upper, sink=out, trigger_interval_ms=100)
    try:
        other.processAllAvailable(timeout_s=180)
        took = time.monotonic() - started
        print(f"\nanother query on the stopped query's group: caught up {took:.1f} s after its start")
        assert other.exception() is None and sum(p["numInputRows"] for p in other.recentProgress) == 4
        assert took < 20, f"the second query ran its batch after {took:.1f} s"
    finally:
        other.stop()
    h.check_exactly_once(kcluster, src, out, inputs, group)


def test_a_backlog_drains_in_bounded_batches_planned_after_a_slow_transform(kcluster, ray_session):
    """Back-pressure: no batch holds more than max_records_per_trigger, and each is planned
    after the previous one committed (records that arrived during a slow batch are in the
    next plan's view: nothing was read ahead)."""
    import time

    h = _helpers()
    src, out = h.new_topic(kcluster, "rb-in", 2), h.new_topic(kcluster, "rb-out", 2)
    group = f"g-{src}"
    inputs = h.produce(kcluster, src, 0, 35)
    arrived = []

    def slow(ds, batch_id):
        time.sleep(0.5)
        if batch_id == 0:  # records arrive while the first batch is slow
            arrived.extend(h.produce(kcluster, src, 35, 10))
        return _upper(ds, batch_id)

    q = krd.stream(kcluster, src, group_id=group, transform=slow, sink=out, trigger_interval_ms=0, starting_offsets="earliest", max_records_per_trigger=10)
    try:
        q.processAllAvailable(timeout_s=300)
        progress = q.recentProgress
    finally:
        q.stop()
    assert q.exception() is None
    inputs += arrived
    assert [p["numInputRows"] for p in progress] == [10, 10, 10, 10, 5]
    for before, after in zip(progress, progress[1:]):
        assert after["sources"][0]["startOffset"] == before["sources"][0]["endOffset"]
    assert sum(progress[0]["sources"][0]["latestOffset"][src].values()) == 35
    assert sum(progress[1]["sources"][0]["latestOffset"][src].values()) == 45  # planned after batch 0's transform
    h.check_exactly_once(kcluster, src, out, inputs, group)


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


def test_a_ray_data_query_keeps_exact_state_per_key_across_batches_and_a_restart(kcluster, ray_session):
    # the state path on Ray Data: shuffle by changelog partition, one prepared transaction
    # per changelog partition with rows, restored from the changelog by a new query
    t = _helpers()
    src, out = t.new_topic(kcluster, "rds-in", 2), t.new_topic(kcluster, "rds-out", 2)
    group = f"g-{src}"
    inputs = t.produce(kcluster, src, 0, 50, keys=4)
    options = dict(group_id=group, update_state=t.counting(), state_key="key", sink=out, trigger_interval_ms=100, starting_offsets="earliest")
    q = krd.stream(kcluster, src, max_records_per_trigger=25, **options)
    try:
        q.processAllAvailable(timeout_s=180)
        ops = [p["stateOperators"] for p in q.recentProgress if p["numInputRows"]]
        assert len(ops) >= 2 and [(o[0]["numRowsTotal"], o[0]["numRowsUpdated"]) for o in ops] == [(4, 4)] * len(ops)
    finally:
        q.stop()
    assert q.exception() is None
    t.check_counts(kcluster, out, inputs)
    assert t.changelog_state(kcluster, group, 2) == {f"k{i}".encode(): 50 // 4 + (i < 50 % 4) for i in range(4)}

    inputs += t.produce(kcluster, src, 50, 30, keys=4)
    q2 = krd.stream(kcluster, src, **options)
    try:
        q2.processAllAvailable(timeout_s=180)
    finally:
        q2.stop()
    assert q2.exception() is None
    t.check_counts(kcluster, out, inputs)
    ends = Admin(kcluster).list_offsets(src, "latest")
    assert {p: o for p, (o, _) in t.group_offsets(kcluster, group)[src].items()} == dict(ends)
    assert t.changelog_state(kcluster, group, 2) == {f"k{i}".encode(): 80 // 4 for i in range(4)}
