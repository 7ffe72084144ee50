"""``kcoord status`` / ``kcoord topics describe`` tables: offline replicas and offline logs
are shown (pure functions over a status snapshot, no Ray)."""

from __future__ import annotations

import io

from rich.console import Console

from kcoord.cli.cluster_cmds import _status_tables, partition_row


def part(**kw) -> dict:
    p = {"partition": 0, "leader": 1, "leader_epoch": 2, "replicas": [0, 1, 2], "isr": [1, 2], "offline_replicas": [0],
         "high_watermark": 7, "log_end_offset": 9}
    p.update(kw)
    return p


def render(snap: dict) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=200)
    for table in _status_tables(snap, internal=False):
        console.print(table)
    return buf.getvalue()


def test_partition_row_names_the_offline_replicas():
    state = partition_row("t", part())[-1]
    assert "under-replicated" in state and "offline replicas 0" in state
    assert "offline replicas" not in partition_row("t", part(isr=[0, 1, 2], offline_replicas=[]))[-1]
    assert partition_row("t", {k: v for k, v in part(isr=[0, 1, 2]).items() if k != "offline_replicas"})[-1] == "[green]ok[/]"


def snapshot(**metrics) -> dict:
    """A one-partition cluster's status snapshot with these controller metrics."""
    return {
        "cluster": {"cluster": "c", "controller_epoch": 3, "brokers": [0, 1, 2], "metrics": {"partitions": 1, **metrics}},
        "coordinators": {"controller": {"name": "c/controller", "epoch": 3}, "groups": []},
        "topics": {"t": {"internal": False, "partitions": [part()]}},
    }


def test_status_counts_offline_logs():
    snap = snapshot(under_replicated_partitions=1, offline_log_replicas=1)
    text = render(snap)
    assert "offline logs" in text and "1 (I/O errors; restart those replicas)" in text
    assert "(offline replicas 0)" in text
    snap["cluster"]["metrics"]["offline_log_replicas"] = 0
    assert "restart those replicas" not in render(snap)


def test_status_counts_replicas_back_from_a_wiped_disk():
    snap = snapshot(offline_partitions=1, replaced_directory_replicas=1)
    assert "wiped disks" in render(snap) and "1 (replicas back with an empty log directory" in render(snap)
    snap["cluster"]["metrics"]["replaced_directory_replicas"] = 0
    assert "empty log directory" not in render(snap)
