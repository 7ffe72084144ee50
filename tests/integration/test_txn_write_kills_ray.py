"""A transactional write (kcoord.txn_write) whose output partitions change leader between
prepare and commit: once ``commit`` returns, every decided transaction is complete (its
markers written), so a read_committed reader sees every record at once -- as a streaming
query's ``processAllAvailable`` promises of its output."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kcoord.client.consumer import Consumer
from kcoord.client.types import TopicPartition
from kcoord.txn_write import TransactionalWrite, prepare_task, task_transactional_id

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from stream_faults import kill_leaders, new_topic  # noqa: E402

pytestmark = pytest.mark.ray


def committed_values(cluster, topic: str) -> list[bytes]:
    """What a read_committed consumer reads now, up to the last stable offsets."""
    with Consumer(cluster=cluster, isolation_level="read_committed", auto_offset_reset="earliest", enable_auto_commit=False) as c:
        tps = [TopicPartition(topic, p) for p in cluster.partitions_for(topic)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        end = c.end_offsets(tps)
        out: list[bytes] = []
        for _ in range(200):
            if all(c.position(tp) >= end[tp] for tp in tps):
                break
            for rs in c.poll(timeout_ms=200).values():
                out.extend(r.value for r in rs)
    return out


def test_a_write_is_visible_once_commit_returns_though_its_partitions_changed_leader_after_prepare(kcluster):
    out = new_topic(kcluster, "twk", 2)
    prefix = f"twk-{out[-6:]}"
    prepared, want = [], []
    for task in range(3):
        values = [f"{task}-{i}".encode() for i in range(20)]
        keys = [f"k{i % 7}".encode() for i in range(20)]
        want += values
        p, _ = prepare_task(kcluster, task_transactional_id(prefix, task, "0.0"), task, lambda producer, v=values, k=keys: producer.send_batch(out, values=v, keys=k))
        prepared.append(p)
    # The coordinator's markers go to leaders that are gone: they are re-sent after a backoff.
    kill_leaders(kcluster, [(out, 0), (out, 1)])
    tw = TransactionalWrite(kcluster, prefix, topic=out)
    tw.commit(prepared)
    got = committed_values(kcluster, out)
    states = {p.transactional_id: tw.transaction_state(p.transactional_id) for p in prepared}
    assert sorted(got) == sorted(want), (len(got), states)
    assert set(states.values()) == {"CompleteCommit"}
