"""Storage upkeep on a replica's timer (issue 14): retention deletes expired segments on
leader and follower (never the active segment, never above the HW), followers learn the
leader's log start offset from fetch answers, a fetch below it is OFFSET_OUT_OF_RANGE, the
cleaner runs on compacted topics of logs that compact -- on the real Log over the simulated
disk and on the in-memory log, sans-I/O."""

from __future__ import annotations

import dataclasses
import random

from replication_helpers import batch, call, consumer_fetch, lai, leader_and_isr, produce, replies, serve_pending

from kcoord import records
from kcoord.log import Log, LogConfig, MemoryLog
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.replication import FetchRequest
from kcoord.replication.config import ReplicationConfig
from kcoord.replication.replica import Replica
from sim.disk import SimDisk

TOPIC = "t"
CHECK = 1_000  # log.retention.check.interval.ms in these tests
# batch() stamps records at 1000 ms: with retention.ms=10s, every segment is expired at 20s
EXPIRED = 20_000


def replica(broker: int, disk: SimDisk | None = None, now: int = 0, **log_cfg) -> Replica:
    cfg = LogConfig(**{"segment_bytes": 150, "retention_ms": 10_000, **log_cfg})
    log = Log(f"/m/broker-{broker}/t-0", cfg, now_ms=now, fs=disk or SimDisk(random.Random(broker)))
    return Replica(TOPIC, 0, broker, log, ReplicationConfig(log_retention_check_interval_ms=CHECK, log_cleaner_backoff_ms=CHECK), now, config_version=0)


def leader_with(n_batches: int, isr=(0, 1), **log_cfg) -> Replica:
    r = replica(0, **log_cfg)
    leader_and_isr(r, lai(0, 1, isr, replicas=isr))
    for i in range(n_batches):
        produce(r, batch(2, tag=b"b%d-" % i), f"p{i}", 10, acks=1)
    return r


def test_each_batch_has_its_own_segment_here():
    r = leader_with(4)
    assert r.log.log_end_offset == 8
    assert [s.base_offset for s in r.log.segments] == [0, 2, 4, 6]


def test_the_leader_timer_deletes_expired_segments_only_below_the_hw_and_never_the_active_one():
    r = leader_with(4)
    assert r.hw == 0  # follower 1 has fetched nothing yet
    r.tick(EXPIRED)
    assert r.log.log_start_offset == 0 and len(r.log.segments) == 4, "nothing below the HW to delete"
    replies(r.fetch(FetchRequest(TOPIC, 0, 4, replica_id=1, current_leader_epoch=1), "f", EXPIRED))
    assert r.hw == 4
    r.tick(EXPIRED + 1)
    assert r.log.log_start_offset == 0, "the timer runs once per log.retention.check.interval.ms"
    r.tick(EXPIRED + CHECK)
    assert r.log.log_start_offset == 4, "segments [0,2) and [2,4) lie below the HW and are expired"
    assert [s.base_offset for s in r.log.segments] == [4, 6]
    replies(r.fetch(FetchRequest(TOPIC, 0, 8, replica_id=1, current_leader_epoch=1), "f2", EXPIRED + CHECK))
    assert r.hw == 8
    r.tick(EXPIRED + 2 * CHECK)
    # segment.ms has not passed: the active segment [6, 8) stays, and so does everything in it
    assert [s.base_offset for s in r.log.segments] == [6] and r.log.log_start_offset == 6
    assert r.status().log_start_offset == 6


def test_segment_ms_rolls_the_idle_active_segment_so_retention_can_take_it():
    r = leader_with(2, segment_ms=5_000)
    replies(r.fetch(FetchRequest(TOPIC, 0, 4, replica_id=1, current_leader_epoch=1), "f", 100))
    assert r.hw == 4
    r.tick(EXPIRED)
    assert r.log.log_start_offset == 4 and r.log.log_end_offset == 4, "rolled, then deleted: the log is empty at its end"
    produce(r, batch(1), "later", EXPIRED + 1, acks=1)
    assert r.log.log_end_offset == 5


def test_a_consumer_fetch_below_the_log_start_is_offset_out_of_range_and_says_where_it_starts():
    r = leader_with(4)
    replies(r.fetch(FetchRequest(TOPIC, 0, 8, replica_id=1, current_leader_epoch=1), "f", EXPIRED))
    r.tick(EXPIRED + CHECK)
    assert r.log.log_start_offset == 6
    answer = replies(consumer_fetch(r, 1, "c", EXPIRED + CHECK))["c"]
    assert answer.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert answer.log_start_offset == 6
    ok = replies(consumer_fetch(r, 6, "c2", EXPIRED + CHECK))["c2"]
    assert ok.error_code == ErrorCode.NONE and ok.records
    assert next(records.iter_records(ok.records, from_offset=6)).offset == 6


def test_followers_learn_the_log_start_from_fetch_answers_and_run_retention_themselves():
    leader = leader_with(4)
    follower = replica(1, retention_ms=-1)  # its own retention would never delete
    leader_and_isr(follower, lai(0, 1, (0, 1), replicas=(0, 1)))
    for now in range(20, 30):
        serve_pending(follower, leader, now)
    assert follower.log.log_end_offset == 8 and follower.hw == 8 and leader.hw == 8
    leader.tick(EXPIRED)
    assert leader.log.log_start_offset == 6
    assert follower.log.log_start_offset == 0
    serve_pending(follower, leader, EXPIRED)
    assert follower.log.log_start_offset == 6, "learnt from the fetch answer"
    assert [s.base_offset for s in follower.log.segments] == [6]


def test_a_follower_never_moves_its_log_start_past_its_own_hw():
    leader = leader_with(4)
    follower = replica(1, retention_ms=-1)
    leader_and_isr(follower, lai(0, 1, (0, 1), replicas=(0, 1)))
    while follower.log.log_end_offset < 8:
        serve_pending(follower, leader, 50)
    follower.hw = 2  # it holds everything but has heard of a HW of only 2 (say)
    req = follower.follower_state.in_flight
    answer = call(leader, dataclasses.replace(req, max_wait_ms=0))[0]
    # an answer whose HW is still 2 but whose log start is 6 (a DeleteRecords)
    follower.on_fetch_response(req, dataclasses.replace(answer, high_watermark=2, log_start_offset=6), 60)
    assert follower.log.log_start_offset == 2 == follower.hw


def test_the_follower_timer_deletes_its_own_expired_segments_below_its_hw():
    leader = leader_with(4, retention_ms=-1)
    follower = replica(1)
    leader_and_isr(follower, lai(0, 1, (0, 1), replicas=(0, 1)))
    for now in range(20, 30):
        serve_pending(follower, leader, now)
    assert follower.hw == 8
    follower.tick(EXPIRED)
    assert follower.log.log_start_offset == 6 and [s.base_offset for s in follower.log.segments] == [6]
    assert leader.log.log_start_offset == 0


def test_a_follower_that_fell_below_the_leaders_log_start_starts_over_there():
    leader = leader_with(4)
    replies(leader.fetch(FetchRequest(TOPIC, 0, 8, replica_id=1, current_leader_epoch=1), "f", 50))
    leader.tick(EXPIRED)
    assert leader.log.log_start_offset == 6
    late = replica(2)
    leader_and_isr(leader, lai(0, 2, (0, 1), replicas=(0, 1, 2)))
    leader_and_isr(late, lai(0, 2, (0, 1), replicas=(0, 1, 2)))
    for now in range(EXPIRED, EXPIRED + 10):
        if late.follower_state.in_flight is not None:
            serve_pending(late, leader, now)
    assert late.log.log_start_offset == 6 and late.log.log_end_offset == 8


def test_an_idle_replica_wakes_only_for_the_retention_check():
    r = replica(0)
    leader_and_isr(r, lai(0, 1, (0,), replicas=(0,)))
    r.tick(5)
    assert r.next_deadline(0) == CHECK, "nothing else to do: the next wake-up is the retention check"
    r.tick(CHECK)
    assert r.next_deadline(0) == 2 * CHECK


def test_the_cleaner_runs_on_the_timer_for_compacted_topics_only():
    r = leader_with(0, isr=(0,), cleanup_policy="compact", segment_bytes=200)
    for i in range(6):
        data = records.build_batch_columns([b"v%d" % i], keys=[b"k"], timestamp_ms=1000)
        produce(r, data, f"k{i}", 10, acks=1)
    assert r.hw == 6 and len(r.log.segments) > 2
    before = r.log.size_bytes
    assert r.next_deadline(0) <= CHECK
    r.tick(CHECK)
    assert r.last_clean is not None and r.last_clean.records_removed > 0
    assert r.log.size_bytes < before
    plain = leader_with(1, isr=(0,))
    plain.tick(CHECK)
    assert plain.last_clean is None


def test_a_log_that_does_not_compact_says_so_and_is_not_woken_for_the_cleaner():
    log = MemoryLog(LogConfig(cleanup_policy="compact"))
    assert not log.supports_compaction and log.clean(0) is None
    r = Replica(TOPIC, 0, 0, log, ReplicationConfig(log_retention_check_interval_ms=10_000, log_cleaner_backoff_ms=10), 0, config_version=0)
    leader_and_isr(r, lai(0, 1, (0,), replicas=(0,)))
    r.tick(1)
    assert r.next_deadline(0) == 10_000


def test_update_config_brings_the_next_check_forward():
    r = leader_with(2, retention_ms=-1)
    replies(r.fetch(FetchRequest(TOPIC, 0, 4, replica_id=1, current_leader_epoch=1), "f", 100))
    r.tick(EXPIRED)
    assert r.log.log_start_offset == 0
    r.update_config(LogConfig(segment_bytes=150, retention_ms=10_000), ReplicationConfig(log_retention_check_interval_ms=50), EXPIRED)
    assert r.next_deadline(0) <= EXPIRED + 50
    r.tick(EXPIRED + 50)
    assert r.log.log_start_offset == 2


def test_a_follower_that_starts_over_at_the_leaders_log_start_keeps_the_producers_below_it():
    """Sim seed 9377: retention took every batch of an idempotent producer; a follower that
    fell below the leader's log start started over there empty, forgot the producer, and,
    elected, appended a retried batch (its answer lost) a second time. Like Kafka's
    tiered-storage followers, it takes the leader's producer state below the log start with
    the answer that sends it there, and keeps it across a restart."""
    disk = SimDisk(random.Random(7))
    leader = replica(0)
    leader_and_isr(leader, lai(0, 1, (0, 1), replicas=(0, 1, 2)))
    idem = [batch(2, tag=b"i%d-" % s, producer_id=7, producer_epoch=0, base_sequence=2 * s) for s in range(3)]
    for s, data in enumerate(idem):
        produce(leader, data, f"i{s}", 10, acks=1)
    produce(leader, batch(2, tag=b"plain-"), "plain", 10, acks=1)  # offsets 6-7, no producer
    replies(leader.fetch(FetchRequest(TOPIC, 0, 8, replica_id=1, current_leader_epoch=1), "f", 50))
    leader.tick(EXPIRED)
    assert leader.log.log_start_offset == 6 and leader.log.producer_state.get(7) is not None  # KIP-360
    late = replica(2, disk=disk, now=EXPIRED)
    leader_and_isr(late, lai(0, 1, (0, 1), replicas=(0, 1, 2)))
    for now in range(EXPIRED, EXPIRED + 10):
        if late.follower_state.in_flight is not None:
            serve_pending(late, leader, now)
    assert late.log.log_start_offset == 6 and late.log.log_end_offset == 8
    entry = late.log.producer_state.get(7)
    assert entry is not None and entry.last_seq == 5, "the producer whose batches retention took is still known"
    leader_and_isr(late, lai(2, 2, (2,), replicas=(0, 1, 2)), EXPIRED + 20)
    answer = replies(produce(late, idem[2], "retry", EXPIRED + 30, acks=1))["retry"]
    assert answer.error_code == ErrorCode.NONE and answer.duplicate and answer.base_offset == 4
    assert late.log.log_end_offset == 8, "the retried batch is not appended again"
    late.log.close()
    reopened = replica(2, disk=disk, now=EXPIRED + 40)
    kept = reopened.log.producer_state.get(7)
    assert kept is not None and kept.last_seq == 5, "kept in a producer snapshot at the new log start"


def test_a_follower_started_over_inside_a_batch_keeps_the_producers_it_was_given():
    """The same, where the leader's log start lies inside a batch (a DeleteRecords): the
    empty follower takes that whole batch, restarting at its base, and must not drop the
    producer state it started over with."""
    for log in (Log("/m/broker-2/t-0", LogConfig(), now_ms=0, fs=SimDisk(random.Random(3))), MemoryLog(LogConfig())):
        log.truncate_fully_and_start_at(5, producers={7: {"epoch": 0, "batches": [[0, 1, 0, 1]]}})
        straddling = records.stamp(batch(3, producer_id=8, producer_epoch=0, base_sequence=0), 4, 1)  # offsets 4-6
        log.append_as_follower(straddling, now_ms=10)
        assert log.log_start_offset == 5 and log.log_end_offset == 7
        assert log.producer_state.get(7) is not None and log.producer_state.get(7).last_seq == 1, type(log).__name__
        assert log.producer_state.get(8).last_seq == 2


def test_a_follower_below_a_removed_tombstone_starts_over_instead_of_keeping_the_deleted_value():
    """A follower holding a key's old value fetches again only after the leader's cleaner
    removed the tombstone that deleted it (and the value): fetching on, it would keep the
    value for good, a log the leader does not hold. The leader sends it back to its log
    start to fetch everything again."""
    cfg = {"cleanup_policy": "compact", "segment_bytes": 200, "delete_retention_ms": 100, "retention_ms": -1}
    keyed = lambda k, v: records.build_batch_columns([v], keys=[k], timestamp_ms=1000)  # noqa: E731
    leader, earlier = replica(0, **cfg), replica(0, disk=SimDisk(random.Random(9)), **cfg)
    for r in (leader, earlier):  # the same log; the follower heard only the earlier copy
        leader_and_isr(r, lai(0, 1, (0,), replicas=(0, 2)))
        produce(r, keyed(b"a", b"old"), "a", 10, acks=1)  # offset 0
    late = replica(2, **cfg)
    leader_and_isr(late, lai(0, 1, (0,), replicas=(0, 2)), 10)
    for now in range(10, 20):
        if late.follower_state.in_flight is not None:
            serve_pending(late, earlier, now)
    assert late.log.log_end_offset == 1  # it holds a = old
    produce(leader, keyed(b"a", None), "delete", 20, acks=1)  # offset 1
    for i in range(6):
        produce(leader, keyed(b"k%d" % i, b"v"), f"k{i}", 20, acks=1)
    leader.tick(5 * CHECK)  # the cleaner: a's value goes; its tombstone is first passed now
    assert leader.last_clean is not None and leader.last_clean.tombstones_removed == 0
    leader.tick(6 * CHECK)  # ... and has expired by the next pass, due though the log is clean
    assert leader.last_clean.tombstones_removed == 1
    assert leader.log.tombstone_horizon == 2
    for now in range(6 * CHECK, 6 * CHECK + 20):
        if late.follower_state.in_flight is not None:
            serve_pending(late, leader, now)
    kept = {r.key: r.value for r in records.iter_records(late.log.read(late.log.log_start_offset, 1 << 20))}
    assert b"a" not in kept, "the deleted value stayed on the follower"
    assert late.log.log_end_offset == leader.log.log_end_offset
