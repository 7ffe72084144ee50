"""A streaming query's driver process SIGKILLed in the middle of a batch, twice, then a new
process runs the same query: a read_committed consumer of the output sees each input's
result once, in input order per key, and the group's offsets equal the input's end.

Several processes each start a Ray driver (and, for Spark, a RayDP session of their own):
minutes, so not in ``make test``: ``make stream-kill`` (KCOORD_STREAM_KILL=1)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kcoord.client.admin import Admin
from kcoord.spark.offsets import group_offsets
from kcoord.streaming import protocol as P

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from test_stream import check_exactly_once, new_topic, open_transactions, produce  # noqa: E402

pytestmark = [
    pytest.mark.ray,
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("KCOORD_STREAM_KILL") != "1", reason="kills driver processes for minutes: make stream-kill (KCOORD_STREAM_KILL=1)"),
]


def wait_for(what: str, condition, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = condition()
        if got:
            return got
        time.sleep(0.05)  # polling a condition with a deadline, not a synchronisation sleep
    raise AssertionError(f"{what}: not within {timeout_s} s")


def committed_batch(cluster, group: str) -> int:
    try:
        return P.last_batch(f"q-{group}", {(t, p): om for t, parts in group_offsets(cluster, group).items() for p, om in parts.items()})
    except Exception:  # noqa: BLE001 - no group yet
        return -1


@pytest.mark.parametrize("engine", ["ray_data", "spark"])
def test_a_driver_killed_mid_batch_then_restarted_writes_each_input_once(kcluster, ray_session, engine):
    import ray

    src, out = new_topic(kcluster, f"sk-{engine}-in", 2), new_topic(kcluster, f"sk-{engine}-out", 2)
    group = f"g-{src}"
    inputs = produce(kcluster, src, 0, 3000, keys=7)
    address = ray.get_runtime_context().gcs_address
    cmd = [sys.executable, str(HERE / "stream_kill_child.py"), engine, address, kcluster.name, kcluster.namespace, src, out, group]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE.parents[1]), os.environ.get("PYTHONPATH", "")]))
    for round_ in range(2):
        before = committed_batch(kcluster, group)
        child = subprocess.Popen(cmd, env=env, start_new_session=True)
        try:
            # mid-batch: a batch after the last committed one has open (prepared or being written) transactions
            wait_for("a batch in flight", lambda: committed_batch(kcluster, group) > before and open_transactions(kcluster, f"q-{group}"), 300)
        finally:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        inputs += produce(kcluster, src, 3000 + 100 * round_, 100, keys=7)
    child = subprocess.Popen(cmd, env=env, start_new_session=True)
    try:
        ends = dict(Admin(kcluster).list_offsets(src, "latest"))
        wait_for("the restarted query to catch up", lambda: {p: o for p, (o, _) in group_offsets(kcluster, group).get(src, {}).items()} == ends, 600)
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    check_exactly_once(kcluster, src, out, inputs, group)
