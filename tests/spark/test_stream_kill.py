"""Kills in the middle of a streaming query's batch: its driver process SIGKILLed, twice,
then a new process runs the same query; the worker of a Ray Data write task SIGKILLed while
it writes (Ray retries the task); a Spark executor's process SIGKILLed while the batch's
tasks write (Spark runs them again elsewhere, or the batch fails and the query is started
again). Afterwards a read_committed consumer of the output sees each input's result once,
in input order per key, and the group's offsets equal the input's end
(tests/stream_faults.py, test_stream's ``check_exactly_once``).

Several processes each start a Ray driver (and, for Spark, a RayDP session of their own):
minutes, so not in ``make test``: ``make stream-kill`` (KCOORD_STREAM_KILL=1). The leader
and transaction coordinator kills run in ``make test``
(tests/integration/test_stream_faults_ray.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kcoord.client.admin import Admin
from kcoord.spark.offsets import group_offsets

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from stream_faults import leaders_and_coordinator_killed_mid_batch, batch_in_flight, check_exactly_once, committed_batch, new_topic, open_of, produce, sigkill_processes, upper_blocks  # noqa: E402
from test_stream import check_numbered, numbering, upper  # noqa: E402
from waiting import wait_until  # noqa: E402

pytestmark = [
    pytest.mark.ray,
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("KCOORD_STREAM_KILL") != "1", reason="kills driver processes for minutes: make stream-kill (KCOORD_STREAM_KILL=1)"),
]


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
        before = committed_batch(kcluster, group, f"q-{group}")
        child = subprocess.Popen(cmd, env=env, start_new_session=True)
        try:
            # mid-batch: a batch after the last committed one has open (prepared or being written) transactions
            wait_until(lambda: batch_in_flight(kcluster, group, f"q-{group}", before), timeout=300, what="a batch in flight")
        finally:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        inputs += produce(kcluster, src, 3000 + 100 * round_, 100, keys=7)
    child = subprocess.Popen(cmd, env=env, start_new_session=True)
    try:
        ends = dict(Admin(kcluster).list_offsets(src, "latest"))
        wait_until(lambda: {p: o for p, (o, _) in group_offsets(kcluster, group).get(src, {}).items()} == ends, timeout=600, what="the restarted query to catch up")
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    check_exactly_once(kcluster, src, out, inputs, group)


def test_ray_data_write_workers_killed_mid_batch_write_each_input_once(kcluster, ray_session):
    from kcoord import ray_data as krd

    src, out = new_topic(kcluster, "sk-rw-in", 2), new_topic(kcluster, "sk-rw-out", 2)
    group = f"g-{src}"
    name = f"q-{group}"
    inputs = produce(kcluster, src, 0, 400, keys=7)
    q = krd.stream(kcluster, src, group_id=group, name=name, transform=upper_blocks, sink=out, trigger_interval_ms=100, starting_offsets="earliest", max_records_per_trigger=40)
    kills = []
    try:
        for _ in range(3):
            b = committed_batch(kcluster, group, name)
            # a later batch's write task running: its worker is ``ray::_write_block`` then
            wait_until(lambda: committed_batch(kcluster, group, name) > b, timeout=120, what="a batch committed")
            kills.append(wait_until(lambda: sigkill_processes("ray::_write_block"), timeout=120, interval=0.005, what="a write task running"))
        q.processAllAvailable(timeout_s=300)
        assert q.isActive and q.exception() is None  # Ray retried the killed tasks: the query never failed
    finally:
        q.stop()
    check_exactly_once(kcluster, src, out, inputs, group)
    assert open_of(kcluster, name) == []  # the killed attempts' transactions were aborted
    print(f"\nray data write workers killed: {kills}; batches 0-{committed_batch(kcluster, group, name)}, records checked {len(inputs)}")


def executor_pids() -> list[int]:
    """The pids of the RayDP executors' processes (Java Ray actors), from the GCS's actor
    table (the state API needs the dashboard, which the test Ray runs without)."""
    from ray._private import state

    return [a["Pid"] for a in state.actors(actor_state_name="ALIVE").values() if "RayDPExecutor" in a["ActorClassName"] and a["Pid"]]


def test_a_spark_executor_killed_mid_batch_writes_each_input_once(spark, kcluster):
    """Every executor SIGKILLed while a batch's tasks write: RayDP starts new ones and Spark
    runs the tasks again (new attempts, each in its own transaction), or the batch fails,
    the query stops with the error and a restart finishes it: once either way."""
    from kcoord import spark as ks

    src, out = new_topic(kcluster, "sk-ex-in", 2), new_topic(kcluster, "sk-ex-out", 2)
    group = f"g-{src}"
    name = f"q-{group}"
    inputs = produce(kcluster, src, 0, 300, keys=7)
    options = dict(group_id=group, name=name, transform=upper, sink=out, trigger_interval_ms=100, starting_offsets="earliest", max_records_per_trigger=40)
    q = ks.stream(spark, kcluster, src, **options)
    restarted = None
    try:
        pids = wait_until(executor_pids, timeout=60, what="the RayDP executors")
        wait_until(lambda: batch_in_flight(kcluster, group, name, 0, offsets=False), timeout=300, what="a batch writing")
        for pid in pids:  # every executor: whichever runs the batch's tasks loses them
            os.kill(pid, signal.SIGKILL)
        killed_in = committed_batch(kcluster, group, name) + 1
        try:
            q.processAllAvailable(timeout_s=600)
        except ks.StreamingQueryException as exc:
            restarted = repr(exc)
            q = ks.stream(spark, kcluster, src, **options)
            q.processAllAvailable(timeout_s=600)
        assert q.isActive and q.exception() is None
        new = executor_pids()
        assert new and not set(new) & set(pids)  # the batches after the kill ran on new executors
    finally:
        q.stop()
    check_exactly_once(kcluster, src, out, inputs, group)
    assert open_of(kcluster, name) == []
    print(f"\nspark executors {pids} killed in batch {killed_in}, now {new}; batches 0-{committed_batch(kcluster, group, name)}, "
          f"records checked {len(inputs)}, query {'restarted after ' + restarted if restarted else 'kept running (Spark retried the tasks)'}")


def test_a_spark_query_keeps_each_input_once_when_leaders_and_the_transaction_coordinator_die_mid_batch(spark, kcluster):
    """tests/integration/test_stream_faults_ray.py's kills on the Spark engine.

    Failed 2 of 2 runs on a loaded machine (2026-11-28, before the merges of that morning):
    18 results of input partition 0 (the batch in whose commit the transaction coordinator
    was killed) were in the sink once read uncommitted but not read committed. Passed 3 of
    3 runs after them (one output task per input partition, and two by key), on a quiet
    machine. Not diagnosed: on a failure the assertion now prints every batch's decision,
    its transactions' states and where the missing results sit in the sink (a stray open
    transaction holding the LSO, or a decided one not committed)."""
    from kcoord import spark as ks

    def upper_in_two_tasks(df, batch_id):
        # two output tasks per batch (a batch this small reads in one): a decision of several
        # prepared transactions, possibly on different transaction coordinators
        return upper(df, batch_id).repartition(2, "key")

    def start(src, **options):
        return ks.stream(spark, kcluster, src, transform=upper_in_two_tasks, **options)

    print(f"\nstream faults (spark): {leaders_and_coordinator_killed_mid_batch(kcluster, start)}")


def test_a_stateful_spark_query_keeps_exact_running_counts_when_leaders_and_the_transaction_coordinator_die_mid_batch(spark, kcluster):
    """The same kills under a stateful query (``update_state``): each input's result once, in
    input order per key, numbered with its key's running count computed from the input."""
    from kcoord import spark as ks

    def start(src, **options):
        return ks.stream(spark, kcluster, src, update_state=numbering(), state_key="key", **options)

    print(f"\nstream faults (spark, stateful): {leaders_and_coordinator_killed_mid_batch(kcluster, start, check=check_numbered)}")
