"""A running streaming query (Ray Data, the cheaper engine) loses, each in the middle of a
batch, the leader of an input partition, the leader of an output partition, and the
transaction coordinator of a batch between prepare and commit: it keeps running, and a
read_committed consumer of its output sees each input's result once, in input order per
key, with the group's offsets at the input's end (kcoord.streaming). Executor and driver
kills, and Spark's, are in ``make stream-kill`` (tests/spark/test_stream_kill.py)."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("ray.data")

from kcoord import ray_data as krd  # noqa: E402
from stream_faults import (  # noqa: E402
    batch_in_flight, check_exactly_once, committed_batch, kill_leaders, kill_transaction_coordinator, new_topic, open_of, produce, upper_blocks,
)
from waiting import wait_until  # noqa: E402

pytestmark = pytest.mark.ray


def test_a_query_keeps_each_input_once_when_leaders_and_the_transaction_coordinator_die_mid_batch(kcluster, ray_session):
    src, out = new_topic(kcluster, "rf-in", 2), new_topic(kcluster, "rf-out", 2)
    group = f"g-{src}"
    name = f"q-{group}"
    inputs = produce(kcluster, src, 0, 80, keys=7)
    q = krd.stream(kcluster, src, group_id=group, name=name, transform=upper_blocks, sink=out, trigger_interval_ms=100, starting_offsets="earliest", max_records_per_trigger=40)
    kills = []
    started = time.monotonic()
    try:
        # the leaders of an input and of an output partition, while a batch's tasks read and write
        wait_until(lambda: batch_in_flight(kcluster, group, name, -1, offsets=False), timeout=120, what="a batch writing")
        kills.append(("leaders", round(time.monotonic() - started, 1), kill_leaders(kcluster, [(src, 0), (out, 0)])))
        inputs += produce(kcluster, src, 80, 80, keys=7)  # through the new leader; batches for the next kill
        # the transaction coordinator of a batch whose output is prepared, before its commit
        b = committed_batch(kcluster, group, name)
        ids = wait_until(lambda: batch_in_flight(kcluster, group, name, b, offsets=True), timeout=120, what="a batch between prepare and commit")
        kills.append(("transaction coordinator", round(time.monotonic() - started, 1), kill_transaction_coordinator(kcluster, ids[0]), ids[0]))
        q.processAllAvailable(timeout_s=180)
        assert q.isActive and q.exception() is None, kills
        after = committed_batch(kcluster, group, name)
        assert after > b, (after, b, kills)  # batches committed after the last kill
        caught_up = round(time.monotonic() - started, 1)
    finally:
        q.stop()
    assert q.exception() is None
    check_exactly_once(kcluster, src, out, inputs, group)
    assert open_of(kcluster, name) == []  # the killed batches' dead attempts were aborted
    print(f"\nstream faults: kills {kills}, batches 0-{after}, caught up at {caught_up} s, records checked {len(inputs)}")
