"""A replica whose log fails (ENOSPC, EIO, a failed fsync) goes OFFLINE (KIP-112) -- on the
real Log over the simulated disk (tests/sim/disk.py), no mocks.

Issue 12 suspects: a storage error inside a replica's tick lost the actions decided before
it (replies already taken out of their waiter lists) and left requests in flight forever;
a failed epoch-checkpoint write while becoming leader left a LEADER without leader state.
"""

from __future__ import annotations

import errno
import random

import pytest

from replication_helpers import batch, call, lai, leader_and_isr, produce, replies

from kcoord.log import Log, LogConfig, LogStorageError
from kcoord.protocol.controller import HeartbeatRequest
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.replication import FetchRequest, ProduceRequest
from kcoord.replication.config import ReplicationConfig
from kcoord.replication.replica import LEADER, OFFLINE, Replica
from sim.disk import SimDisk

TOPIC = "t"


def replica_on(disk: SimDisk, broker: int = 0, **cfg) -> Replica:
    log = Log(f"/m/broker-{broker}/t-0", LogConfig(), now_ms=0, fs=disk)
    return Replica(TOPIC, 0, broker, log, ReplicationConfig(**cfg), 0, incarnation="i1")


def test_a_failed_checkpoint_in_tick_keeps_the_decided_replies_and_goes_offline():
    disk = SimDisk(random.Random(1))
    r = replica_on(disk, hw_checkpoint_interval_ms=10)
    leader_and_isr(r, lai(0, 1, (0, 1)))
    produce(r, batch(2), "p1", 1, acks=-1, timeout_ms=50)  # waits for follower 1
    produce(r, batch(2), "p2", 40, acks=-1, timeout_ms=1000)
    r.hw = 1  # a HW not yet checkpointed: tick wants to write it
    disk.fail("write", "*/high-watermark-checkpoint*", errno.ENOSPC)
    out = replies(r.tick(100))
    assert out["p1"].error_code == ErrorCode.REQUEST_TIMED_OUT, "decided before the failure, still returned"
    assert out["p2"].error_code == ErrorCode.KAFKA_STORAGE_ERROR, "a waiter left over is failed, not forgotten"
    assert r.role == OFFLINE and r.leader_state is None and r.next_deadline(0) is None
    status = call(r, HeartbeatRequest())[0]
    assert status.error_code == ErrorCode.KAFKA_STORAGE_ERROR and status.role == "offline"
    fetch = call(r, FetchRequest(TOPIC, 0, 0))[0]
    assert fetch.error_code == ErrorCode.KAFKA_STORAGE_ERROR


def test_becoming_leader_with_a_failing_epoch_checkpoint_is_offline_not_a_leader_without_state():
    disk = SimDisk(random.Random(2))
    r = replica_on(disk)
    disk.fail("*", "*/leader-epoch-checkpoint*", errno.EIO)
    response, _ = leader_and_isr(r, lai(0, 1, (0, 1)))
    assert response is not None and response.error_code == ErrorCode.KAFKA_STORAGE_ERROR
    assert r.role == OFFLINE and r.leader_state is None
    assert r.role != LEADER
    answer = call(r, ProduceRequest(TOPIC, 0, batch(1), acks=1))[0]
    assert answer.error_code == ErrorCode.KAFKA_STORAGE_ERROR


def test_a_follower_whose_append_fails_stops_fetching_and_says_so():
    disk = SimDisk(random.Random(3))
    leader = replica_on(SimDisk(random.Random(4)), broker=0)
    leader_and_isr(leader, lai(0, 1, (0, 1)))
    produce(leader, batch(3), "p", 0, acks=1)
    follower = replica_on(disk, broker=1)
    leader_and_isr(follower, lai(0, 1, (0, 1)))
    disk.fail("write", "*.log", errno.EIO)
    req = follower.follower_state.in_flight
    data = call(leader, FetchRequest(TOPIC, 0, req.fetch_offset, replica_id=1, current_leader_epoch=1, max_wait_ms=0))[0]
    assert data.records
    actions = follower.on_fetch_response(req, data, 5)
    assert actions == [] and follower.role == OFFLINE and follower.follower_state is None
    assert follower.tick(10_000) == []


# -- every write a replica makes on its own takes it OFFLINE, and its heartbeat says so ----


def keyed(i: int) -> bytes:
    from kcoord.records import build_batch

    return build_batch([(b"k%d" % (i % 3), b"v" * 60)], timestamp_ms=0)


def sole_leader(disk: SimDisk, log_config: LogConfig, **cfg) -> Replica:
    """The only replica of its partition, leading: acks=1 appends move its HW at once."""
    log = Log("/m/broker-0/t-0", log_config, now_ms=0, fs=disk)
    r = Replica(TOPIC, 0, 0, log, ReplicationConfig(**cfg), 0, incarnation="i1", config_version=0)
    leader_and_isr(r, lai(0, 1, (0,), replicas=(0,)))
    return r


def fill_segments(r: Replica, count: int, now: int = 0) -> None:
    for i in range(count):
        answer = call(r, ProduceRequest(TOPIC, 0, keyed(i), acks=1), now)[0]
        assert answer.error_code == ErrorCode.NONE, answer


UPKEEP_CASES = {
    # (the failing operation and path, the log config, replication config, how time moves)
    "segment.ms roll": ("open", "*.log", LogConfig(segment_ms=1000), {"log_retention_check_interval_ms": 500}),
    "retention delete": ("unlink", "*.log", LogConfig(segment_bytes=400, retention_bytes=500), {"log_retention_check_interval_ms": 500}),
    "flush.ms fsync": ("fsync", "*.log", LogConfig(flush_ms=100), {}),
    # (the cleaned segments come out empty here: their temporary files are created and
    # fsynced but never written to)
    "cleaner rewrite": ("open", "*.cleaned.tmp", LogConfig(segment_bytes=400, cleanup_policy="compact", min_cleanable_dirty_ratio=0.0),
                        {"log_cleaner_backoff_ms": 500}),
    "cleaner fsync": ("fsync", "*.cleaned.tmp", LogConfig(segment_bytes=400, cleanup_policy="compact", min_cleanable_dirty_ratio=0.0),
                      {"log_cleaner_backoff_ms": 500}),
    "cleaner rename": ("replace", "*.cleaned.tmp", LogConfig(segment_bytes=400, cleanup_policy="compact", min_cleanable_dirty_ratio=0.0),
                       {"log_cleaner_backoff_ms": 500}),
}


@pytest.mark.parametrize("name", list(UPKEEP_CASES))
@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EIO], ids=["ENOSPC", "EIO"])
def test_an_io_error_in_the_replicas_own_upkeep_takes_it_offline(name, err):
    op, pattern, log_config, cfg = UPKEEP_CASES[name]
    disk = SimDisk(random.Random(5))
    r = sole_leader(disk, log_config, **cfg)
    fill_segments(r, 20)
    leo = r.log.log_end_offset
    rule = disk.fail(op, pattern, err)
    now = 0
    while r.role is LEADER and now < 120_000:  # the replica's own timers, nothing else
        now = max(now + 1, r.next_deadline(0) or now + 1)
        r.tick(now)
    assert rule.fired == 1, f"{name}: the fault was never hit"
    assert r.role is OFFLINE and r.log.offline and r.next_deadline(0) is None
    assert r.log.offline_error.errno == err and str(disk.rules) == "[]"
    beat = call(r, HeartbeatRequest(), now)[0]
    assert beat.error_code == ErrorCode.KAFKA_STORAGE_ERROR and beat.role == "offline"
    assert "broker 0 failed" in beat.error_message and "failed: [Errno" in beat.error_message
    assert (beat.log_start_offset, beat.log_end_offset) == (-1, -1), "an offline log reports no offsets"
    produced = call(r, ProduceRequest(TOPIC, 0, keyed(99), acks=1), now)[0]
    assert produced.error_code == ErrorCode.KAFKA_STORAGE_ERROR
    r.close(now)
    again = Log("/m/broker-0/t-0", log_config, now_ms=now, fs=disk)  # the restart's reopen
    assert again.log_end_offset == leo, "nothing acknowledged is lost"


def test_a_producer_snapshot_failing_at_a_roll_fails_the_produce_and_the_replica():
    disk = SimDisk(random.Random(6))
    r = sole_leader(disk, LogConfig(segment_bytes=400))
    fill_segments(r, 3)
    disk.fail("write", "*.producer-snapshot.tmp", errno.ENOSPC)
    answers = [call(r, ProduceRequest(TOPIC, 0, keyed(i), acks=1), 1)[0] for i in range(10)]
    failed = [a for a in answers if a.error_code != ErrorCode.NONE]
    assert failed and all(a.error_code == ErrorCode.KAFKA_STORAGE_ERROR for a in failed)
    assert r.role is OFFLINE
    assert call(r, HeartbeatRequest(), 2)[0].error_code == ErrorCode.KAFKA_STORAGE_ERROR


def test_a_log_that_failed_outside_the_core_is_never_reported_healthy():
    """The actor shell reads the log itself (read_log, for tests and tools): an EIO there
    takes the log offline without the core seeing it. The next heartbeat must say so."""
    disk = SimDisk(random.Random(7))
    r = sole_leader(disk, LogConfig())
    fill_segments(r, 3)
    disk.fail("read", "*.log", errno.EIO)
    with pytest.raises(LogStorageError):
        r.log.read(0, 1 << 20)
    beat = call(r, HeartbeatRequest(), 1)[0]
    assert beat.error_code == ErrorCode.KAFKA_STORAGE_ERROR and beat.role == "offline"
    assert r.role is OFFLINE and r.next_deadline(0) is None


def test_a_failed_fsync_changes_the_storage_lineage_a_restarted_replica_reports():
    """Sim seed 114477: a failed fsync dropped a leader's unsynced pages while the
    controller was down; restarted on the same machine it reported the same lineage, was
    trusted from the ELR without those records and overwrote a committed offset."""
    disk = SimDisk(random.Random(3), fsync_error_drops=True)
    directory = "/m/broker-0/t-0"
    log = Log(directory, LogConfig(), now_ms=0, fs=disk)
    first = Replica(TOPIC, 0, 0, log, ReplicationConfig(), 0, incarnation="i1", storage="m#0")
    assert first.state.storage == "m#0" and log.storage_generation == 0
    log.append_as_leader(batch(3), leader_epoch=0)
    disk.fail("fsync", f"{directory}/*", errno.EIO)
    with pytest.raises(LogStorageError):
        log.flush()
    assert log.offline and log.storage_generation == 1
    disk.kill(under=directory)  # the process dies; the page cache (minus what EIO dropped) stays
    disk.clear_faults()
    reopened = Log(directory, LogConfig(), now_ms=0, fs=disk)
    second = Replica(TOPIC, 0, 0, reopened, ReplicationConfig(), 0, incarnation="i2", storage="m#0")
    assert reopened.storage_generation == 1
    assert second.state.storage == "m#0~1", "same machine, but an I/O error may have emptied part of its page cache"
    reopened.close()
    # a clean restart afterwards keeps the (new) lineage: nothing more was lost
    third = Replica(TOPIC, 0, 0, Log(directory, LogConfig(), now_ms=0, fs=disk), ReplicationConfig(), 0, incarnation="i3", storage="m#0")
    assert third.state.storage == "m#0~1"
