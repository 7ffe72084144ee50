"""A running streaming query (Ray Data, the cheaper engine) loses, each in the middle of a
batch, the leader of an input partition, the leader of an output partition, and the
transaction coordinator of a batch between prepare and commit: it keeps running, and a
read_committed consumer of its output sees each input's result once, in input order per
key, with the group's offsets at the input's end (kcoord.streaming). Executor and driver
kills, and Spark's, are in ``make stream-kill`` (tests/spark/test_stream_kill.py)."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("ray.data")

from kcoord import ray_data as krd  # noqa: E402
from stream_faults import leaders_and_coordinator_killed_mid_batch, upper_blocks  # noqa: E402

pytestmark = [
    pytest.mark.ray,
    # In make stream-kill, not make test, for the suite's time (30-45 s). It failed
    # intermittently until bc73d84 (a batch returned before its markers were written, so a
    # read_committed read right after missed its output: tests/integration/test_txn_write_kills_ray.py).
    pytest.mark.skipif(os.environ.get("KCOORD_STREAM_KILL") != "1", reason="kills leaders and a transaction coordinator for 30-45 s: make stream-kill (KCOORD_STREAM_KILL=1)"),
]


def test_a_query_keeps_each_input_once_when_leaders_and_the_transaction_coordinator_die_mid_batch(kcluster, ray_session):
    def start(src, **options):
        return krd.stream(kcluster, src, transform=upper_blocks, **options)

    print(f"\nstream faults (ray data): {leaders_and_coordinator_killed_mid_batch(kcluster, start)}")
