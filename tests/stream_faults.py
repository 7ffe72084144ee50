"""Kills for the streaming queries' exactly-once tests (tests/integration/test_stream_faults_ray.py
in ``make test``, tests/spark/test_stream_kill.py in ``make stream-kill``): where a query is
in its batch, and killing what it depends on there. The verdict is
tests/spark/test_stream.py's ``check_exactly_once`` (one copy)."""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from pathlib import Path

import ray

from kcoord.client.coordinator.txn_coordinators import TransactionCoordinators
from kcoord.protocol import names
from kcoord.spark.offsets import group_offsets
from kcoord.streaming import protocol as P
from kcoord.streaming.driver import OFFSETS_TASK
from kcoord.txn_write import TransactionalWrite
from waiting import wait_until

sys.path.insert(0, str(Path(__file__).resolve().parent / "spark"))
from test_stream import check_exactly_once, new_topic, produce  # noqa: E402,F401  (re-exported)


def committed_batch(cluster, group: str, name: str) -> int:
    """The last batch query ``name`` committed (from the group's offsets' metadata), -1 if none."""
    try:
        found = group_offsets(cluster, group)
    except Exception:  # noqa: BLE001 - no group yet
        return -1
    return P.last_batch(name, {(t, p): om for t, parts in found.items() for p, om in parts.items()})


def open_of(cluster, name: str, offsets: bool | None = None) -> list[str]:
    """The query's open transactions (prepared or being written): only its batches' offsets
    transactions with ``offsets=True`` (so every output task prepared: between prepare and
    commit), only output tasks' with ``False``."""
    task = {True: str(OFFSETS_TASK), False: r"(?!%d/)\d+" % OFFSETS_TASK, None: r"\d+"}[offsets]
    ids = re.compile(re.escape(name) + r"/\d+/" + task + r"/.*")
    return TransactionalWrite(cluster, f"{name}/0", batch=True).open_transactions(ids)


def batch_in_flight(cluster, group: str, name: str, after: int, offsets: bool | None = None):
    """A batch after ``after`` is in flight: a later batch than ``after`` committed (the query
    runs) and some transaction of the query is open now. Returns the open ids."""
    return committed_batch(cluster, group, name) > after and open_of(cluster, name, offsets)


def kill_leaders(cluster, partitions: list[tuple[str, int]], timeout: float = 60.0) -> list[tuple[str, int, int, int]]:
    """``ray.kill`` the leader replica of each (topic, partition) at once (Ray restarts them)
    and wait for a leader of a later epoch of each; returns (topic, partition, the killed
    leader's broker, the new leader epoch) per partition."""
    before = {tp: cluster.partition_metadata(*tp, refresh=True) for tp in partitions}
    for (topic, partition), md in before.items():
        ray.kill(cluster.replica(topic, partition, md.leader, fresh=True), no_restart=False)
    out = []
    for (topic, partition), md in before.items():
        new = wait_until(
            lambda: (m := cluster.partition_metadata(topic, partition, refresh=True)).leader_epoch > md.leader_epoch and m.leader >= 0 and m,
            timeout=timeout, what=f"a new leader of {topic}-{partition}",
        )
        out.append((topic, partition, md.leader, new.leader_epoch))
    return out


def kill_transaction_coordinator(cluster, transactional_id: str, timeout: float = 60.0) -> int:
    """``ray.kill`` the transaction coordinator owning ``transactional_id`` (Ray restarts it;
    the new incarnation reloads ``__transaction_state``) and wait until it answers as a new
    incarnation; returns its index."""
    index = TransactionCoordinators(cluster).index_for(transactional_id)
    actor = ray.get_actor(names.transaction_coordinator(cluster.name, index), namespace=cluster.namespace)
    before = ray.get(actor.describe.remote(), timeout=30)["incarnation"]
    ray.kill(actor, no_restart=False)
    wait_until(lambda: ray.get(actor.describe.remote(), timeout=10)["incarnation"] != before, timeout=timeout, what=f"transaction coordinator {index} back")
    return index


def sigkill_processes(title: str) -> list[int]:
    """SIGKILL this machine's processes whose command line starts with ``title`` (a Ray worker
    shows ``ray::<function>`` while it runs a task); returns their pids."""
    killed = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cmd.startswith(title):
            try:
                os.kill(int(pid), signal.SIGKILL)
                killed.append(int(pid))
            except ProcessLookupError:
                pass
    return killed


def upper_blocks(ds, batch_id):
    """A Ray Data query's transform: key, and the value upper-cased (test_stream's ``upper``)."""
    import pyarrow.compute as pc

    return ds.map_batches(lambda t: t.select(["key", "value"]).set_column(1, "value", pc.utf8_upper(t["value"].cast("string"))), batch_format="pyarrow")


def leaders_and_coordinator_killed_mid_batch(cluster, start, check=check_exactly_once) -> str:
    """Run a query (``start(source, **options)`` starts it on some engine), kill the leaders
    of an input and of an output partition while a batch's tasks read and write, then the
    transaction coordinator of a later batch whose output is prepared (its offsets
    transaction is open: between prepare and commit). The query must keep running and catch
    up; then ``check`` (the exactly-once check; a stateful query's adds the running counts).
    Returns what happened, for the test's output."""
    src, out = new_topic(cluster, "rf-in", 2), new_topic(cluster, "rf-out", 2)
    group = f"g-{src}"
    name = f"q-{group}"
    inputs = produce(cluster, src, 0, 80, keys=7)
    q = start(src, group_id=group, name=name, sink=out, trigger_interval_ms=100, starting_offsets="earliest", max_records_per_trigger=40)
    kills = []
    started = time.monotonic()
    try:
        wait_until(lambda: batch_in_flight(cluster, group, name, -1, offsets=False), timeout=300, what="a batch writing")
        kills.append(("leaders", round(time.monotonic() - started, 1), kill_leaders(cluster, [(src, 0), (out, 0)])))
        inputs += produce(cluster, src, 80, 80, keys=7)  # through the new leader; batches for the next kill
        b = committed_batch(cluster, group, name)
        ids = wait_until(lambda: batch_in_flight(cluster, group, name, b, offsets=True), timeout=300, what="a batch between prepare and commit")
        kills.append(("transaction coordinator", round(time.monotonic() - started, 1), kill_transaction_coordinator(cluster, ids[0]), ids[0]))
        q.processAllAvailable(timeout_s=300)
        assert q.isActive and q.exception() is None, kills
        after = committed_batch(cluster, group, name)
        assert after > b, (after, b, kills)  # batches committed after the last kill
        caught_up = round(time.monotonic() - started, 1)
    finally:
        q.stop()
    assert q.exception() is None
    try:
        check(cluster, src, out, inputs, group)
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}\nafter {kills}: {explain_difference(cluster, src, out)}\n{explain_decisions(cluster, name, committed_batch(cluster, group, name))}"
        ) from exc
    assert open_of(cluster, name) == []  # the killed batches' dead attempts were aborted
    return f"kills {kills}, batches 0-{after}, caught up at {caught_up} s, records checked {len(inputs)}"


def records(cluster, topic: str, isolation_level: str) -> list[tuple[int, int, bytes, bytes]]:
    """Every record of ``topic`` as (partition, offset, key, value)."""
    from kcoord.client.consumer import Consumer
    from kcoord.client.types import TopicPartition

    with Consumer(cluster=cluster, isolation_level=isolation_level, auto_offset_reset="earliest", enable_auto_commit=False) as c:
        tps = [TopicPartition(topic, p) for p in cluster.partitions_for(topic)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        end = c.end_offsets(tps)
        out = []
        deadline = time.monotonic() + 60
        while not all(c.position(tp) >= end[tp] for tp in tps) and time.monotonic() < deadline:
            for tp, rs in c.poll(timeout_ms=200).items():
                out.extend((tp.partition, r.offset, r.key, r.value) for r in rs)
    return out


def explain_difference(cluster, source: str, sink: str) -> str:
    """Where the output differs from the input: the missing and extra results with their input
    partition and offset, and whether a missing one is in the sink read uncommitted."""
    from collections import Counter

    src = records(cluster, source, "read_uncommitted")
    committed = Counter((k, v) for _, _, k, v in records(cluster, sink, "read_committed"))
    uncommitted = Counter((k, v) for _, _, k, v in records(cluster, sink, "read_uncommitted"))
    want = Counter((k, v.upper()) for _, _, k, v in src)
    where = {(k, v.upper()): (p, o) for p, o, k, v in src}
    missing = sorted((where[kv], kv, uncommitted[kv]) for kv in want - committed)
    sink_uncommitted = [(p, o, k, v) for p, o, k, v in records(cluster, sink, "read_uncommitted") if (k, v) in set(want - committed)]
    return (
        f"missing (input partition, offset), result, copies in the sink read uncommitted: {missing}; extra: {sorted(committed - want)}; "
        f"the missing in the sink (partition, offset): {[(p, o) for p, o, _, _ in sink_uncommitted]}"
    )


def explain_decisions(cluster, name: str, batches: int) -> str:
    """Each batch's decision: its transactions, what they wrote, and their state now."""
    out = []
    for b in range(batches + 1):
        tw = TransactionalWrite(cluster, f"{name}/{b}", batch=True, isolation_level="read_committed")
        d = tw.last_decision()
        if d is None:
            out.append(f"batch {b}: no decision")
            continue
        out.append(f"batch {b} {d.state}: " + ", ".join(f"{t.transactional_id} {t.producer_id}:{t.epoch} wrote {t.written} now {tw.transaction_state(t.transactional_id)!r}" for t in d.tasks))
    return "\n".join(out)
