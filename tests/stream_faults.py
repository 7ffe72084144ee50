"""Kills for the streaming queries' exactly-once tests (tests/integration/test_stream_faults_ray.py
in ``make test``, tests/spark/test_stream_kill.py in ``make stream-kill``): where a query is
in its batch, and killing what it depends on there. The verdict is
tests/spark/test_stream.py's ``check_exactly_once`` (one copy)."""

from __future__ import annotations

import os
import re
import signal
import sys
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
