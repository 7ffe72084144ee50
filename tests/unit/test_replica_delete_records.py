"""DeleteRecords waits for the partition's low watermark (issue 32, finding 5).

Kafka answers DeleteRecords once the smallest log start offset over the live replicas
has passed the requested offset (its DelayedDeleteRecords), or REQUEST_TIMED_OUT. kcoord
counts every replica that could lead without fetching from this leader first: the
(maximal) ISR; while the ISR is below min.insync.replicas every replica, since the
controller may hold any as an eligible leader replica (KIP-966) whose log start it never
moved; and, as Kafka, every follower fetching lately. A follower joins the ISR only once it
has reported the leader's log start, so no replica that could be elected later lacks an
acknowledged deletion. (An unclean election may bring deleted records back, as it may
lose acknowledged ones.)"""

from __future__ import annotations

import random

from replication_helpers import TOPIC, batch, consumer_fetch, follower_fetch, lai, leader_and_isr, make_replica, of_type, produce, pump, replies, serve_pending

from kcoord import records
from kcoord.log import Log, LogConfig, MemoryLog
from kcoord.protocol.controller import AlterPartitionResponse
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.replication import DeleteRecordsRequest
from kcoord.replication.actions import SendAlterPartition
from kcoord.replication.config import ReplicationConfig
from sim.disk import SimDisk

LAG = 10_000  # replica.lag.time.max.ms (the default)


def cluster(isr=(0, 1, 2), processes: bool = False, **cfg):
    """Leader 0 and followers 1, 2 holding six records, all with HW 6 (``processes``: broker
    b's process is ``pb``)."""
    log = dict(flush_messages=None) if cfg.pop("lossy", False) else dict(flush_messages=1)
    reps = [
        make_replica(b, ReplicationConfig(**cfg), log=MemoryLog(LogConfig(**log)), incarnation=f"p{b}" if processes else "")
        for b in (0, 1, 2)
    ]
    for r in reps:
        leader_and_isr(r, lai(0, 1, isr))
    leader, f1, f2 = reps
    produce(leader, batch(3, tag=b"a"), "p1", 1, acks=1)
    produce(leader, batch(3, tag=b"b"), "p2", 1, acks=1)
    for now in range(2, 6):
        pump(f1, leader, now)
        pump(f2, leader, now)
    assert leader.hw == f1.hw == f2.hw == 6
    return leader, f1, f2


def delete(replica, offset: int, now: int, timeout_ms: int = 5_000, token="del"):
    actions = replica.handle(DeleteRecordsRequest(TOPIC, 0, offset, timeout_ms=timeout_ms), token, now)
    return replies(actions).get(token)


def test_an_answer_waits_until_every_isr_member_moved_its_log_start():
    """Replayed: answered when only the leader had moved; a failover to a follower that had
    not fetched since made the deleted records readable again."""
    leader, f1, f2 = cluster()
    assert delete(leader, 4, 10) is None, "the followers still hold [0, 4)"
    assert leader.log.log_start_offset == 4, "the leader stops serving them at once"
    assert "del" not in replies(pump(f1, leader, 11))  # the answer carries log start 4
    assert f1.log.log_start_offset == 4
    assert "del" not in replies(pump(f1, leader, 12)), "follower 2 has not moved yet"
    # leader 0 fails now: follower 2, elected, may serve [0, 4) -- nothing was acknowledged
    pump(f2, leader, 13)
    done = replies(pump(f2, leader, 14))["del"]
    assert done.error_code == 0 and done.low_watermark == 4
    # acknowledged: whichever ISR member is elected next, [0, 4) is gone
    leader_and_isr(f2, lai(2, 2, (2, 1)), 20)
    answer = replies(consumer_fetch(f2, 0, "c", 21))["c"]
    assert answer.error_code == ErrorCode.OFFSET_OUT_OF_RANGE and answer.log_start_offset == 4


def test_a_waiting_delete_times_out_and_a_leader_stepping_down_answers_it():
    leader, f1, f2 = cluster()
    assert delete(leader, 3, 10, timeout_ms=500) is None
    assert leader.next_deadline(0) <= 510
    timed_out = replies(leader.tick(510))["del"]
    assert timed_out.error_code == ErrorCode.REQUEST_TIMED_OUT and "low watermark" in timed_out.error_message
    assert delete(leader, 4, 600, token="again") is None
    moved = replies(leader_and_isr(leader, lai(1, 2, (1, 2)), 700)[1])
    assert moved["again"].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_below_min_isr_every_replica_counts_as_a_possible_eligible_leader():
    """KIP-966: the controller keeps replicas that left a too-small ISR as eligible leaders
    (ELR) and may elect one, with the log start it had when it left."""
    leader, f1, f2 = cluster(lossy=True, min_insync_replicas=2)
    leader_and_isr(leader, lai(0, 1, (0,), partition_epoch=2), 100)  # both followers dropped
    now = 100 + LAG + 1  # and silent since: not live either
    assert delete(leader, 4, now, timeout_ms=1000) is None
    assert replies(leader.tick(now + 1000))["del"].error_code == ErrorCode.REQUEST_TIMED_OUT


def test_with_the_isr_at_min_isr_a_silent_follower_outside_it_does_not_count_but_a_live_one_does():
    leader, f1, f2 = cluster(lossy=True, min_insync_replicas=2)
    leader_and_isr(leader, lai(0, 1, (0, 1), partition_epoch=2), 100)  # 2 dropped, silent
    now = 100 + LAG + 1
    pump(f1, leader, now)
    assert delete(leader, 4, now) is None
    pump(f1, leader, now + 1)
    done = replies(pump(f1, leader, now + 2))["del"]
    assert done.error_code == 0 and done.low_watermark == 4
    # follower 2 fetching again (live, out of the ISR) holds the low watermark, as in Kafka
    pump(f2, leader, now + 3)  # reports log start 0, learns 4
    assert delete(leader, 5, now + 4, token="d2") is None
    acts = pump(f1, leader, now + 5) + pump(f1, leader, now + 6)
    assert "d2" not in replies(acts), "follower 2 still reports 4"
    assert replies(pump(f2, leader, now + 7) + pump(f2, leader, now + 8))["d2"].low_watermark == 5


def test_a_follower_joins_the_isr_only_once_it_reported_the_leaders_log_start():
    """A follower that returns after an acknowledged deletion has the records still; let
    into the ISR at once, it could be elected before its next fetch applied the log start."""
    leader, f1, f2 = cluster()
    t = LAG + 100  # follower 2 last fetched at 5: no longer counted as fetching lately
    leader_and_isr(leader, lai(0, 1, (0, 1), partition_epoch=2), t)
    pump(f1, leader, t + 1)
    assert delete(leader, 4, t + 2) is None
    pump(f1, leader, t + 3)
    assert replies(pump(f1, leader, t + 4))["del"].error_code == 0
    # follower 2 is caught up (LEO 6 = HW) but reports log start 0
    acts = pump(f2, leader, t + 5)
    assert of_type(acts, SendAlterPartition) == []
    assert f2.log.log_start_offset == 4, "its fetch answer moved it"
    (alter,) = of_type(pump(f2, leader, t + 6), SendAlterPartition)
    assert alter.request.new_isr == [0, 1, 2]


def test_a_follower_fetch_reports_its_log_start():
    leader, f1, f2 = cluster()
    assert f1.follower_state.in_flight.replica_log_start_offset == 0
    delete(leader, 2, 10)
    pump(f1, leader, 11)
    assert f1.follower_state.in_flight.replica_log_start_offset == 2


def test_a_follower_outside_the_isr_that_stops_fetching_stops_holding_it_back():
    leader, f1, f2 = cluster()
    leader_and_isr(leader, lai(0, 1, (0, 1), partition_epoch=2), 100)
    (alter,) = of_type(pump(f2, leader, 200), SendAlterPartition)  # fetching: live until 200 + LAG
    pump(f1, leader, 200)
    # the controller does not take follower 2 back (the leader proposed it, so it counted)
    leader.on_alter_partition_response(alter.request, AlterPartitionResponse(ErrorCode.INELIGIBLE_REPLICA, "not now"), 250)
    assert delete(leader, 4, 300, timeout_ms=60_000) is None
    pump(f1, leader, 301)
    assert "del" not in replies(pump(f1, leader, 302)), "follower 2 (live) still reports 0"
    assert of_type(leader.tick(350), SendAlterPartition) == [], "follower 2 reports an old log start"
    assert leader.leading.next_deadline() == 200 + LAG + 1, "when follower 2 stops counting as live"
    assert replies(leader.tick(200 + LAG)) == {}
    done = replies(leader.tick(200 + LAG + 1))["del"]
    assert done.error_code == 0 and done.low_watermark == 4
    assert leader.leading.next_deadline() > 200 + LAG + 1


def test_a_parked_fetch_whose_offset_was_deleted_is_answered_out_of_range():
    """A consumer's long poll parked at offset 2 while DeleteRecords moved the log start to
    4: the produce that wakes it is acknowledged, and the fetch is answered
    OFFSET_OUT_OF_RANGE with the new log start (it raised inside the wake-up, and the
    produce got UNKNOWN_SERVER_ERROR)."""
    from kcoord.protocol.replication import FetchRequest

    leader, f1, f2 = cluster()
    parked = leader.fetch(FetchRequest(TOPIC, 0, 2, min_bytes=1 << 20, max_wait_ms=5_000), "c", 10)
    assert "c" not in replies(parked), "fewer bytes than min_bytes: parked"
    delete(leader, 4, 11)
    assert leader.log.log_start_offset == 4
    woken = replies(produce(leader, batch(3, tag=b"c"), "p3", 12, acks=1))
    assert woken["p3"].error_code == ErrorCode.NONE
    answer = woken.get("c") or replies(leader.tick(5_010))["c"]
    assert answer.error_code == ErrorCode.OFFSET_OUT_OF_RANGE and answer.log_start_offset == 4


def test_an_older_process_of_an_isr_member_does_not_stand_in_for_the_admitted_one():
    """Sim seed 21425: broker 2's old process, cut off from the controller but running
    (a twin), learned the new log start and reported it; the leader took that for broker 2
    and acknowledged the deletion while broker 2's current process, the ISR member, still
    held [0, 4). Elected next, it served them. Only the admitted process's log start counts
    for an ISR member (as only its log end counts for the HW)."""
    leader, f1, f2 = cluster(processes=True)  # p2 is broker 2's admitted process (the first heard)
    assert delete(leader, 4, 10) is None
    follower_fetch(leader, 1, 6, "f1", 11, epoch=1, incarnation="p1", log_start=4)
    acts = follower_fetch(leader, 2, 6, "ghost", 12, epoch=1, incarnation="p2-old", log_start=4)
    acts += follower_fetch(leader, 2, 6, "ghost", 13, epoch=1, incarnation="p2-old", log_start=4)
    assert "del" not in replies(acts), "broker 2's admitted process still holds [0, 4)"
    done = replies(follower_fetch(leader, 2, 6, "f2", 14, epoch=1, incarnation="p2", log_start=4))["del"]
    assert done.error_code == 0 and done.low_watermark == 4


def test_every_process_of_a_live_follower_outside_the_isr_counts():
    """Outside the ISR no process is admitted: any process fetching lately may be the one
    the controller elects later (as an eligible leader replica), so the smallest log start
    among them counts; a process silent for replica.lag.time.max.ms counts no more."""
    leader, f1, f2 = cluster(processes=True, min_insync_replicas=2)
    leader_and_isr(leader, lai(0, 1, (0, 1), partition_epoch=2), 100)
    follower_fetch(leader, 1, 6, "f1", 101, epoch=1, incarnation="p1")
    (alter,) = of_type(follower_fetch(leader, 2, 6, "f2", 101, epoch=1, incarnation="p2"), SendAlterPartition)  # log start 0
    leader.on_alter_partition_response(alter.request, AlterPartitionResponse(ErrorCode.INELIGIBLE_REPLICA, "not now"), 105)
    assert delete(leader, 4, 110, timeout_ms=60_000) is None
    follower_fetch(leader, 1, 6, "f1", 111, epoch=1, incarnation="p1", log_start=4)
    acts = follower_fetch(leader, 2, 6, "g", 112, epoch=1, incarnation="p2-new", log_start=4)
    acts += follower_fetch(leader, 2, 6, "g", 113, epoch=1, incarnation="p2-new", log_start=4)
    assert "del" not in replies(acts), "process p2 fetched lately and reported log start 0"
    assert 101 + LAG + 1 in leader.leading.deletion.next_deadlines(), "when p2 stops counting"
    acts = follower_fetch(leader, 2, 6, "g", 101 + LAG, epoch=1, incarnation="p2-new", log_start=4)
    assert "del" not in replies(acts)
    done = replies(leader.tick(101 + LAG + 1))["del"]
    assert done.error_code == 0 and done.low_watermark == 4


def test_a_follower_whose_log_ends_inside_the_batch_at_the_leaders_log_start_starts_over():
    """Sim seed 90283: a follower holding records of an epoch the leader's lineage dropped
    asked where that epoch ends; the leader, its epochs clipped at a DeleteRecords' log start
    inside a batch, answered with that log start. The follower cut there and fetched the batch
    holding it, which starts below the follower's log end: the append failed, it reconciled
    again, got the same answer, and never rejoined. Its log cannot match the leader's below
    that batch, so the leader sends it to start over at its log start (with the producers
    below it) and the follower takes the batch whole, as an empty one does."""
    on_disk = lambda b: Log(f"/m/broker-{b}/t-0", LogConfig(flush_messages=1), now_ms=0, fs=SimDisk(random.Random(b)))  # noqa: E731
    for make_log in (lambda b: MemoryLog(LogConfig(flush_messages=1)), on_disk):
        leader = make_replica(0, log=make_log(0))
        leader_and_isr(leader, lai(0, 2, (0,), replicas=(0, 1)))
        produce(leader, batch(3, tag=b"a"), "a", 1, acks=1)  # offsets 0-2, epoch 2
        idem = batch(3, tag=b"b", producer_id=8, producer_epoch=0, base_sequence=0)
        produce(leader, idem, "b", 1, acks=1)  # offsets 3-5
        delete(leader, 4, 2)  # answered later or not: the leader's log start moves now
        assert leader.log.log_start_offset == 4
        stale = make_replica(1, log=make_log(1))  # what an older leader of epoch 1 wrote it
        stale.log.append_as_follower(records.stamp(batch(4, tag=b"x"), 0, 1), now_ms=1)  # 0-3
        stale.log.append_as_follower(records.stamp(batch(2, tag=b"y"), 4, 1), now_ms=1)  # 4-5
        leader_and_isr(stale, lai(0, 2, (0,), replicas=(0, 1)), 3)
        for now in range(3, 13):
            if stale.follower_state.in_flight is not None:
                serve_pending(stale, leader, now)
        assert stale.log.log_end_offset == 6, "it fetched the leader's batch"
        assert stale.log.log_start_offset == 4
        assert stale.log.read(4, 1 << 20) == leader.log.read(4, 1 << 20)
        entry = stale.log.producer_state.get(8)
        assert entry is not None and entry.last_seq == 2
