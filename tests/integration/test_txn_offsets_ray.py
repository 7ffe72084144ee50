"""The group side of transactions (KIP-447) on real Ray: TxnOffsetCommit and TxnOffsetMarker
through the GroupCoordinatorActor, OffsetFetch ``require_stable``, pending offsets surviving
coordinator kills; and a group Consumer's position and committed offset reaching the end of
a partition that ends with a transaction marker (lag 0), with its ``group_metadata()``.

Until the transaction coordinator's driver runs, the test sends the marker it would send."""

from __future__ import annotations

import time
import uuid

import pytest
import ray

from waiting import wait_until
from kcoord.client.admin import Admin
from kcoord.client.producer import Producer
from kcoord.client.consumer import Consumer
from kcoord.client.coordinator.coordinators import GroupCoordinators
from kcoord.client.types import ConsumerGroupMetadata, TopicPartition
from kcoord.protocol import names
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.group import OffsetCommitPartition, OffsetFetchRequest, OffsetFetchResponse
from kcoord.protocol.txn import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnOffsetMarkerRequest,
    TxnOffsetMarkerResponse,
)

pytestmark = pytest.mark.ray


def _fetch(gc: GroupCoordinators, group_id: str, require_stable: bool) -> dict[int, tuple[int, int]]:
    r = gc.call_group(group_id, "offset_fetch", OffsetFetchRequest(group_id, {"in": [0, 1]}, require_stable=require_stable), OffsetFetchResponse, 60)
    assert r.error_code == 0, r
    return {p: (v.offset, v.error_code) for p, v in r.offsets["in"].items()}


def _kill_and_wait(cluster, index: int) -> None:
    handle = ray.get_actor(names.group_coordinator(cluster.name, index), namespace=cluster.namespace)
    before = ray.get(handle.describe.remote(), timeout=30)
    ray.kill(handle, no_restart=False)

    def restarted():
        info = ray.get(handle.describe.remote(), timeout=10)
        return info if info["incarnation"] != before["incarnation"] and info["loaded"] else None

    wait_until(restarted, timeout=90, what="group coordinator restarted and loaded")


def test_txn_offsets_pending_across_kills_then_committed_by_the_marker(kcluster):
    group_id = f"txg-{uuid.uuid4().hex[:6]}"
    gc = GroupCoordinators(kcluster)
    index = gc.index_for(group_id)
    pid = 8_000_000 + uuid.uuid4().int % 100_000
    commit = TxnOffsetCommitRequest("etl-1", group_id, pid, 0, topics={"in": {0: OffsetCommitPartition(42, "m"), 1: OffsetCommitPartition(7)}})
    r = gc.call_group(group_id, "txn_offset_commit", commit, TxnOffsetCommitResponse, 60)
    assert r.topics == {"in": {0: ErrorCode.NONE, 1: ErrorCode.NONE}}, r
    unstable = {0: (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT), 1: (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)}
    assert _fetch(gc, group_id, True) == unstable
    assert _fetch(gc, group_id, False) == {0: (-1, 0), 1: (-1, 0)}

    _kill_and_wait(kcluster, index)  # pending offsets are replayed from __consumer_offsets
    assert _fetch(gc, group_id, True) == unstable
    handle = ray.get_actor(names.group_coordinator(kcluster.name, index), namespace=kcluster.namespace)
    assert ray.get(handle.describe.remote(), timeout=30)["groups"][group_id]["pending_txn"] == {pid: {"in-0": 42, "in-1": 7}}
    # a stale producer epoch is fenced; the marker of an older coordinator epoch too, later
    stale = TxnOffsetCommitRequest("etl-1", group_id, pid, 0, topics={"in": {0: OffsetCommitPartition(1)}})
    marker = gc.call(index, "txn_offset_marker", TxnOffsetMarkerRequest(pid, 1, 3, True, index, "etl-1"), TxnOffsetMarkerResponse, 60)
    assert marker.error_code == ErrorCode.NONE, marker
    assert _fetch(gc, group_id, True) == {0: (42, 0), 1: (7, 0)}
    assert gc.call_group(group_id, "txn_offset_commit", stale, TxnOffsetCommitResponse, 60).topics == {"in": {0: ErrorCode.PRODUCER_FENCED}}

    # the next transaction aborts: its offsets never show; the kill in between changes nothing
    nxt = TxnOffsetCommitRequest("etl-1", group_id, pid, 1, topics={"in": {0: OffsetCommitPartition(99)}})
    assert gc.call_group(group_id, "txn_offset_commit", nxt, TxnOffsetCommitResponse, 60).topics == {"in": {0: ErrorCode.NONE}}
    _kill_and_wait(kcluster, index)
    old = gc.call(index, "txn_offset_marker", TxnOffsetMarkerRequest(pid, 2, 2, True, index), TxnOffsetMarkerResponse, 60)
    assert old.error_code == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    abort = gc.call(index, "txn_offset_marker", TxnOffsetMarkerRequest(pid, 2, 3, False, index), TxnOffsetMarkerResponse, 60)
    assert abort.error_code == ErrorCode.NONE
    _kill_and_wait(kcluster, index)
    assert _fetch(gc, group_id, True) == {0: (42, 0), 1: (7, 0)}


def test_a_group_consumer_reaches_lag_zero_past_markers_and_reports_its_group_metadata(kcluster):
    topic = f"txn-lag-{uuid.uuid4().hex[:6]}"
    group_id = f"lag-{uuid.uuid4().hex[:6]}"
    admin = Admin(kcluster)
    admin.create_topic(topic, partitions=1, replication_factor=1)
    tp = TopicPartition(topic, 0)
    try:
        producer = Producer(kcluster, transactional_id=f"lag-{uuid.uuid4().hex[:6]}", acks="all")
        try:
            producer.init_transactions()
            producer.begin_transaction()
            producer.send(topic, value=b"t-1", partition=0)
            producer.send(topic, value=b"t-2", partition=0)
            producer.commit_transaction()
        finally:
            producer.close()
        end = 3  # t-1, t-2, and the log ends with the COMMIT marker the coordinator writes
        with Consumer(topic, cluster=kcluster, group_id=group_id, auto_offset_reset="earliest", isolation_level="read_committed", enable_auto_commit=False) as c:
            assert c.group_metadata() == ConsumerGroupMetadata(group_id, -1, "", None)  # not joined yet
            got: list[bytes] = []
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and (len(got) < 2 or c.position(tp) < end):
                for recs in c.poll(timeout_ms=200).values():
                    got.extend(r.value for r in recs)
            assert got == [b"t-1", b"t-2"] and c.position(tp) == end
            c.commit()
            assert c.committed(tp) == end == c.end_offsets([tp])[tp]  # lag 0
            meta = c.group_metadata()
            assert meta.group_id == group_id and meta.generation_id >= 1 and meta.member_id and meta.group_instance_id is None
        with Consumer(topic, cluster=kcluster, auto_offset_reset="earliest") as plain:
            assert plain.group_metadata() == ConsumerGroupMetadata(None)
    finally:
        admin.delete_topic(topic)


def test_a_members_committed_offsets_wait_for_a_pending_transactional_commit(kcluster):
    """KIP-447: a member that takes a partition over fetches its committed offset with
    ``require_stable``, so while a transaction's offsets for it await their marker it waits
    instead of starting from the offset they are about to replace (which would process the
    transaction's input again: duplicates; found by the chaos run, seed 839016)."""
    import threading

    topic = f"txn-stable-{uuid.uuid4().hex[:6]}"
    group_id = f"stable-{uuid.uuid4().hex[:6]}"
    admin = Admin(kcluster)
    admin.create_topic(topic, partitions=1, replication_factor=1)
    tp = TopicPartition(topic, 0)
    try:
        with Producer(kcluster, acks="all") as plain:
            for i in range(5):
                plain.send(topic, value=b"in-%d" % i, partition=0).get(timeout=30)
        with Consumer(topic, cluster=kcluster, group_id=group_id, auto_offset_reset="earliest", isolation_level="read_committed", enable_auto_commit=False) as c:
            wait_until(lambda: c.poll(timeout_ms=200) is not None and c.group_metadata().generation_id >= 1, timeout=60, what="the consumer joined")
            producer = Producer(kcluster, transactional_id=f"stable-{uuid.uuid4().hex[:6]}", acks="all")
            try:
                producer.init_transactions()
                producer.begin_transaction()
                producer.send(topic, value=b"out", partition=0)
                producer.send_offsets_to_transaction({tp: 5}, c.group_metadata())  # pending until the marker
                answer: list = []
                fetch = threading.Thread(target=lambda: answer.append(c.committed(tp)))
                fetch.start()
                fetch.join(timeout=1.0)
                assert fetch.is_alive() and answer == [], f"committed() answered {answer} while the transaction's offset was pending"
                producer.commit_transaction()
            finally:
                producer.close()
            fetch.join(timeout=60)
            assert answer == [5]
    finally:
        admin.delete_topic(topic)
