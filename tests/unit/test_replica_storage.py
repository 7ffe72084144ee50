"""A replica whose log fails (ENOSPC, EIO, a failed fsync) goes OFFLINE (KIP-112) -- on the
real Log over the simulated disk (tests/sim/disk.py), no mocks.

Issue 12 suspects: a storage error inside a replica's tick lost the actions decided before
it (replies already taken out of their waiter lists) and left requests in flight forever;
a failed epoch-checkpoint write while becoming leader left a LEADER without leader state.
"""

from __future__ import annotations

import errno
import random

from replication_helpers import batch, call, lai, leader_and_isr, produce, replies

from kcoord.log import Log, LogConfig
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
    assert r.role == OFFLINE and r.leader_state is None and r.next_deadline() is None
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
