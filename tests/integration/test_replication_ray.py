"""Replication on real Ray actors: acks, byte-identical replicas, ISR, HW, epochs, bad input."""

from __future__ import annotations

import os
import signal

import pytest
import ray

from waiting import wait_until
from kcoord import records
from kcoord.client.admin import Admin
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.replication import FetchRequest, FetchResponse, ProduceRequest, ProduceResponse

pytestmark = pytest.mark.ray


def leader_of(cluster, topic, partition=0):
    p = cluster.partition_metadata(topic, partition, refresh=True)
    return p, cluster.replica(topic, partition, p.leader, fresh=True)


def wait_for_full_isr(cluster, topic, partition=0):
    """A new partition's ISR can be short for a moment on a loaded machine
    (NOT_ENOUGH_REPLICAS, retriable: the Producer retries it, a raw produce does not); seen
    once in CI, 2 s after creation. Tests about what follows creation start from a full ISR."""
    wait_until(lambda: len(cluster.partition_metadata(topic, partition, refresh=True).isr) == 3, what="a full ISR")


def produce_raw(handle, topic, data, acks=-1, epoch=-1, timeout_ms=10_000, partition=0) -> ProduceResponse:
    req = ProduceRequest(topic, partition, data, acks=acks, timeout_ms=timeout_ms, current_leader_epoch=epoch)
    return ProduceResponse.decode(ray.get(handle.produce.remote(req.encode()), timeout=60))


def fetch_raw(handle, topic, offset, epoch=-1, replica_id=-1, max_wait_ms=0) -> FetchResponse:
    req = FetchRequest(topic, 0, offset, max_wait_ms=max_wait_ms, replica_id=replica_id, current_leader_epoch=epoch)
    return FetchResponse.decode(ray.get(handle.fetch.remote(req.encode()), timeout=60))


def test_acks_all_rf3_bytes_identical_on_every_replica(kcluster, topic_name):
    admin = Admin(kcluster)
    admin.create_topic(topic_name, partitions=1, replication_factor=3, config={"min.insync.replicas": 2})
    wait_for_full_isr(kcluster, topic_name)  # this test is about the bytes
    p, leader = leader_of(kcluster, topic_name)
    acked = []
    for i in range(20):
        batch = records.build_batch_columns([b"rec-%d-%d" % (i, j) for j in range(50)], keys=[b"k%d" % j for j in range(50)])
        resp = produce_raw(leader, topic_name, batch)
        assert resp.error_code == 0, resp
        acked.append(resp.base_offset)
    assert acked == [i * 50 for i in range(20)]
    resp = fetch_raw(leader, topic_name, 0)
    assert resp.high_watermark == 1000
    got = list(records.iter_records(resp.records))
    assert [r.offset for r in got] == list(range(1000))
    assert got[123].value == b"rec-2-23" and got[123].key == b"k23"

    def all_replicas_have_everything():
        logs = [ray.get(kcluster.replica(topic_name, 0, b, fresh=True).read_log.remote(0)) for b in p.replicas]
        return all(len(list(records.iter_headers(x))) == 20 for x in logs) and logs

    logs = wait_until(all_replicas_have_everything, what="followers to catch up")
    assert logs[0] == logs[1] == logs[2], "replicas must hold identical bytes"


def test_leader_killed_new_leader_from_isr_fences_stale_epoch(kcluster, topic_name):
    Admin(kcluster).create_topic(topic_name, partitions=1, replication_factor=3, config={"min.insync.replicas": 2})
    wait_for_full_isr(kcluster, topic_name)
    p, leader = leader_of(kcluster, topic_name)
    batch = records.build_batch_columns([b"x%d" % i for i in range(5)])
    assert produce_raw(leader, topic_name, batch, epoch=p.leader_epoch).error_code == 0
    assert produce_raw(leader, topic_name, batch, acks=1, epoch=p.leader_epoch + 1).error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
    ray.kill(leader, no_restart=False)  # Ray restarts it; the controller must not wait for that

    def new_leader():
        md = kcluster.partition_metadata(topic_name, 0, refresh=True)
        # by epoch, not broker: a fast restart may already have had leadership moved home
        return md if md.leader >= 0 and md.leader_epoch > p.leader_epoch else None

    md = wait_until(new_leader, timeout=20, what="a new leader")
    assert md.leader in p.isr
    new = kcluster.replica(topic_name, 0, md.leader, fresh=True)
    wait_until(lambda: ray.get(new.describe.remote())["role"] == "leader", timeout=10, what="new leader to take over")
    # the acked batch survived (visible once the new ISR has fetched at the new epoch);
    # a request carrying the old epoch is fenced
    wait_until(lambda: ray.get(new.describe.remote())["high_watermark"] >= 5, timeout=10, what="new leader's HW")
    assert [r.value for r in records.iter_records(fetch_raw(new, topic_name, 0, epoch=md.leader_epoch).records)][:5] == [b"x%d" % i for i in range(5)]
    follower = [b for b in md.replicas if b != md.leader][0]
    stale = fetch_raw(new, topic_name, 0, epoch=p.leader_epoch, replica_id=follower)
    assert stale.error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert produce_raw(new, topic_name, batch, epoch=p.leader_epoch).error_code == ErrorCode.FENCED_LEADER_EPOCH
    # The old leader comes back at the new epoch (a follower, or the leader again once the
    # preferred-leader move has run) and refuses a write stamped with its old epoch.
    def old_leader_back():
        info = ray.get(kcluster.replica(topic_name, 0, p.leader, fresh=True).describe.remote(), timeout=30)
        return info["role"] in ("follower", "leader") and info["leader_epoch"] > p.leader_epoch and info

    wait_until(old_leader_back, timeout=120, what="old leader to rejoin at the new epoch")
    old = kcluster.replica(topic_name, 0, p.leader, fresh=True)
    refused = produce_raw(old, topic_name, batch, epoch=p.leader_epoch).error_code
    assert refused in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH)


def test_isr_shrinks_when_follower_paused_hw_stops_then_expands(kcluster, topic_name):
    admin = Admin(kcluster)
    # 5 s of lag allowed (the controller's 3 s session timeout may remove the paused follower
    # first): a loaded machine still sees it in the ISR right after the pause (CI once took
    # over 1.5 s for the three writes below)
    admin.create_topic(topic_name, partitions=1, replication_factor=3, config={"replica.lag.time.max.ms": 5000})
    p, leader = leader_of(kcluster, topic_name)
    slow = p.replicas[-1] if p.replicas[-1] != p.leader else p.replicas[1]
    slow_handle = kcluster.replica(topic_name, 0, slow, fresh=True)
    pid = ray.get(slow_handle.describe.remote())["pid"]
    batch = records.build_batch_columns([b"v%d" % i for i in range(10)])
    assert produce_raw(leader, topic_name, batch).error_code == 0
    os.kill(pid, signal.SIGSTOP)
    try:
        # acks=1 writes land on the leader, but the HW cannot pass the paused ISR member. The
        # leader's describe() is one snapshot, so "still in the ISR" and "HW held at 10" are
        # checked together; the first snapshot must still hold it (far inside the lag time).
        held = 0
        for _ in range(3):
            assert produce_raw(leader, topic_name, batch, acks=1).error_code == 0
            info = ray.get(leader.describe.remote())
            if slow in info["isr"]:
                assert info["high_watermark"] == 10, info
                held += 1
        assert held >= 1, "the paused follower left the ISR before the lag time"
        assert info["log_end_offset"] == 40
        # after replica.lag.time.max.ms (or the controller's session timeout) it leaves the ISR
        wait_until(lambda: slow not in ray.get(leader.describe.remote())["isr"], timeout=20, what="ISR shrink")
        wait_until(lambda: ray.get(leader.describe.remote())["high_watermark"] == 40, timeout=10, what="HW to advance without the paused follower")
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_until(lambda: slow in ray.get(leader.describe.remote())["isr"], timeout=30, what="ISR expand after resume")
    md = kcluster.partition_metadata(topic_name, 0, refresh=True)
    assert slow in md.isr


def test_bad_input_gets_kafka_errors_and_actor_stays_healthy(kcluster, topic_name):
    Admin(kcluster).create_topic(topic_name, partitions=1, replication_factor=3, config={"max.message.bytes": 10_000})
    p, leader = leader_of(kcluster, topic_name)
    follower = kcluster.replica(topic_name, 0, [b for b in p.replicas if b != p.leader][0], fresh=True)
    good = records.build_batch_columns([b"ok"])
    assert produce_raw(follower, topic_name, good).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    big = records.build_batch_columns([os.urandom(20_000)])
    assert produce_raw(leader, topic_name, big).error_code == ErrorCode.MESSAGE_TOO_LARGE
    corrupt = bytearray(good)
    corrupt[-1] ^= 0x55
    assert produce_raw(leader, topic_name, bytes(corrupt)).error_code == ErrorCode.CORRUPT_MESSAGE
    assert fetch_raw(leader, topic_name, 999).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    for garbage in (b"\xc1\xc1\xc1", b"", b"\x93\x01\x02"):
        raw = ray.get(leader.produce.remote(garbage))
        assert ProduceResponse.decode(raw).error_code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_REQUEST)
        raw = ray.get(leader.fetch.remote(garbage))
        assert FetchResponse.decode(raw).error_code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_REQUEST)
    # nothing bad was appended, and the actor still serves
    assert ray.get(leader.describe.remote())["log_end_offset"] == 0
    resp = produce_raw(leader, topic_name, good)
    assert resp.error_code == 0 and resp.base_offset == 0


def test_replicas_run_at_the_clients_priority_not_rays_worker_niceness(kcluster, topic_name):
    """Ray starts workers at nice 15; a busy client (librdkafka polling with five requests
    in flight) then took the CPU from the replicas until they missed heartbeats. The Ray
    that kcoord starts runs them at nice 0 (LOCAL_RAY_ENV)."""
    Admin(kcluster).create_topic(topic_name, partitions=1, replication_factor=1)
    _, leader = leader_of(kcluster, topic_name)
    pid = ray.get(leader.describe.remote())["pid"]
    assert os.getpriority(os.PRIO_PROCESS, pid) == os.getpriority(os.PRIO_PROCESS, 0) == 0
