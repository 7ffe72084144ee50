"""A running stateful streaming query (Ray Data, the cheaper engine) loses, each in the
middle of a batch, the leader of an input partition, the leader of an output partition, and
the transaction coordinator of a batch between prepare and commit: it keeps running, and a
read_committed consumer of its output sees each input's result once, in input order per
key, numbered with its key's running count computed from the input, with the group's
offsets at the input's end (kcoord.streaming). Executor and driver
kills, and Spark's, are in ``make stream-kill`` (tests/spark/test_stream_kill.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("ray.data")

from kcoord import ray_data as krd  # noqa: E402
from stream_faults import leaders_and_coordinator_killed_mid_batch  # noqa: E402
from test_stream import check_numbered, numbering  # noqa: E402

pytestmark = pytest.mark.ray


def test_a_stateful_query_keeps_each_input_once_with_exact_counts_when_leaders_and_the_transaction_coordinator_die_mid_batch(kcluster, ray_session):
    """A stateful query (``update_state`` numbering each result with its key's running
    count): output, state and offsets under the kills. (The stateless path's kills run in
    make stream-kill, on Spark.)"""

    def start(src, **options):
        return krd.stream(kcluster, src, update_state=numbering(), state_key="key", **options)

    print(f"\nstream faults (ray data, stateful): {leaders_and_coordinator_killed_mid_batch(kcluster, start, check=check_numbered)}")
