"""Leader-side rules of the replica state machine, with an explicit clock."""

from __future__ import annotations

from replication_helpers import TOPIC, batch, consumer_fetch, follower_fetch, lai, make_replica, of_type, produce, replies, leader_and_isr, list_offsets, offsets_for_epoch

from kcoord import records
from kcoord.protocol.controller import AlterPartitionResponse
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.replication import ListOffsetsRequest, OffsetsForLeaderEpochRequest
from kcoord.replication.actions import SendAlterPartition
from kcoord.replication.config import ReplicationConfig


def leader(isr=(0, 1, 2), epoch=1, **cfg):
    r = make_replica(0, ReplicationConfig(**cfg))
    resp, actions = leader_and_isr(r, lai(0, epoch, isr), 0)
    assert resp.error_code == 0 and r.role == "leader"
    return r


def test_acks_1_appends_and_stamps_offset_and_epoch():
    r = leader(epoch=7)
    acts = produce(r, batch(3), "p1", now=10, acks=1)
    resp = replies(acts)["p1"]
    assert resp.error_code == 0 and resp.base_offset == 0 and resp.leader_epoch == 7
    acts = produce(r, batch(2), "p2", now=11, acks=1)
    assert replies(acts)["p2"].base_offset == 3
    h = records.read_header(r.log.read(3, 1 << 20))
    assert (h.base_offset, h.leader_epoch, h.record_count) == (3, 7, 2)
    assert r.log.log_end_offset == 5


def test_acks_all_waits_for_every_isr_member_then_hw_is_min_leo():
    r = leader()
    acts = produce(r, batch(4), "p", now=0)
    assert "p" not in replies(acts) and r.hw == 0
    # follower 1 fetches the data, then reports LEO 4 with its next fetch
    acts = follower_fetch(r, 1, 0, "f1", 1, epoch=1)
    assert len(replies(acts)["f1"].records) > 0
    acts = follower_fetch(r, 1, 4, "f1b", 2, epoch=1, max_wait_ms=500)
    assert r.hw == 0, "follower 2 has not reported: HW must not move"
    assert "p" not in replies(acts)
    acts = follower_fetch(r, 2, 4, "f2", 3, epoch=1, max_wait_ms=500)
    assert r.hw == 4
    assert replies(acts)["p"].error_code == 0 and replies(acts)["p"].base_offset == 0


def test_hw_stops_at_slowest_isr_member_and_never_goes_back():
    r = leader()
    produce(r, batch(5), "a", 0)
    produce(r, batch(5), "b", 0)
    follower_fetch(r, 1, 10, "x", 1, epoch=1, max_wait_ms=100)
    follower_fetch(r, 2, 5, "y", 1, epoch=1, max_wait_ms=100)
    assert r.hw == 5
    # follower 2 reports a lower offset (a stale request): HW must stay
    follower_fetch(r, 2, 3, "z", 2, epoch=1, max_wait_ms=100)
    assert r.hw == 5


def test_not_enough_replicas_before_append_leaves_log_untouched():
    r = leader(isr=(0,), min_insync_replicas=2)
    resp = replies(produce(r, batch(), "p", 0))["p"]
    assert resp.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
    assert "min.insync.replicas is 2" in resp.error_message
    assert r.log.log_end_offset == 0
    # acks=1 is still allowed
    assert replies(produce(r, batch(), "q", 0, acks=1))["q"].error_code == 0


def test_acks_all_times_out_when_isr_cannot_reach_offset():
    r = leader()
    produce(r, batch(), "p", now=0, timeout_ms=300)
    assert r.next_deadline(0) == 300
    assert replies(r.tick(299)) == {}
    resp = replies(r.tick(300))["p"]
    assert resp.error_code == ErrorCode.REQUEST_TIMED_OUT


def test_isr_shrinks_after_lag_time_and_hw_uses_old_isr_until_confirmed():
    r = leader(replica_lag_time_max_ms=1000)
    produce(r, batch(2), "p", 0, timeout_ms=5000)
    follower_fetch(r, 1, 2, "f1", 10, epoch=1, max_wait_ms=5000)  # 1 caught up
    # follower 2 never fetches: after the lag time, the leader proposes ISR [0, 1]
    assert of_type(r.tick(900), SendAlterPartition) == []
    acts = r.tick(1001)
    (alter,) = of_type(acts, SendAlterPartition)
    assert alter.request.new_isr == [0, 1] and alter.request.partition_epoch == 1
    assert r.hw == 0, "until the controller confirms, follower 2 still counts"
    acts = r.on_alter_partition_response(alter.request, AlterPartitionResponse(leader=0, leader_epoch=1, partition_epoch=2, isr=[0, 1]), 1002)
    assert r.isr == [0, 1] and r.metrics["isr_shrinks"] == 1
    # follower 1's parked fetch is answered at once; its LEO counts again when it refetches
    assert r.hw == 0 and set(replies(acts)) == {"f1"}
    acts = follower_fetch(r, 1, 2, "f1b", 1003, epoch=1, max_wait_ms=5000)
    assert r.hw == 2
    assert replies(acts)["p"].error_code == 0


def test_an_isr_change_does_not_advance_the_hw_on_progress_reported_before_it():
    """Sim seed 1637: follower 1 reports offset 2 and loses power (its page cache with it);
    follower 2 lags. When the controller drops 2, the leader must not count 1's old report:
    the HW would reach 2 with the records on the leader alone, while the restarted follower 1
    (empty) is still in the ISR until the controller hears of its restart."""
    r = leader(replica_lag_time_max_ms=1000, min_insync_replicas=2)
    produce(r, batch(2), "p", 0, timeout_ms=5000)
    follower_fetch(r, 1, 2, "f1", 10, epoch=1, max_wait_ms=5000)
    acts = r.tick(1001)
    (alter,) = of_type(acts, SendAlterPartition)
    acts = r.on_alter_partition_response(alter.request, AlterPartitionResponse(leader=0, leader_epoch=1, partition_epoch=2, isr=[0, 1]), 1002)
    assert r.hw == 0 and "p" not in replies(acts)
    # the restarted follower 1 fetches from an empty log: the HW stays, nothing is acked
    acts = follower_fetch(r, 1, 0, "f1-new", 1003, epoch=1, max_wait_ms=5000, incarnation="b")
    assert r.hw == 0 and "p" not in replies(acts)


def test_isr_expands_when_follower_reaches_hw():
    r = leader(isr=(0, 1))
    produce(r, batch(3), "p", 0)
    follower_fetch(r, 1, 3, "f1", 1, epoch=1, max_wait_ms=1000)
    assert r.hw == 3
    acts = follower_fetch(r, 2, 0, "f2", 2, epoch=1)
    assert of_type(acts, SendAlterPartition) == [], "follower 2 is behind the HW"
    acts = follower_fetch(r, 2, 3, "f2b", 3, epoch=1, max_wait_ms=1000)
    (alter,) = of_type(acts, SendAlterPartition)
    assert alter.request.new_isr == [0, 1, 2]
    # while the expansion is pending the HW is computed over [0, 1, 2] (maximal ISR)
    produce(r, batch(1), "q", 4)
    follower_fetch(r, 1, 4, "f1c", 5, epoch=1, max_wait_ms=1000)
    assert r.hw == 3
    r.on_alter_partition_response(alter.request, AlterPartitionResponse(leader=0, leader_epoch=1, partition_epoch=2, isr=[0, 1, 2]), 6)
    assert r.isr == [0, 1, 2] and r.metrics["isr_expands"] == 1


def test_rejected_alter_partition_is_retried_after_backoff():
    r = leader(replica_lag_time_max_ms=100, alter_partition_backoff_ms=50)
    (alter,) = of_type(r.tick(200), SendAlterPartition)
    r.on_alter_partition_response(alter.request, AlterPartitionResponse(ErrorCode.INVALID_UPDATE_VERSION), 201)
    assert of_type(r.tick(220), SendAlterPartition) == []
    assert len(of_type(r.tick(251), SendAlterPartition)) == 1


def test_consumer_reads_only_below_hw_and_long_poll_completes_on_hw_advance():
    r = leader(isr=(0, 1))
    produce(r, batch(3), "p", 0)
    resp = replies(consumer_fetch(r, 0, "c", 1))["c"]
    assert resp.records == b"" and resp.high_watermark == 0
    acts = consumer_fetch(r, 0, "c2", 1, max_wait_ms=500)
    assert "c2" not in replies(acts)
    acts = follower_fetch(r, 1, 3, "f", 2, epoch=1, max_wait_ms=500)
    got = replies(acts)
    assert got["p"].error_code == 0
    assert got["c2"].high_watermark == 3
    assert [rec.offset for rec in records.iter_records(got["c2"].records)] == [0, 1, 2]


def test_follower_long_poll_is_woken_by_append_and_expires_empty():
    r = leader()
    acts = follower_fetch(r, 1, 0, "f", 0, epoch=1, max_wait_ms=500)
    assert "f" not in replies(acts)
    acts = produce(r, batch(2), "p", 10)
    assert len(replies(acts)["f"].records) > 0
    follower_fetch(r, 2, 0, "g", 20, epoch=1, max_wait_ms=500)
    # g was answered at once (data exists); park a new one at the end and let it expire
    acts = follower_fetch(r, 2, 2, "h", 20, epoch=1, max_wait_ms=500)
    assert "h" not in replies(acts)
    resp = replies(r.tick(520))["h"]
    assert resp.error_code == 0 and resp.records == b""


def test_parked_follower_fetches_due_close_together_are_answered_in_one_wake_up():
    """An idle leader answers its followers' expiring fetches together (the ones due within
    a quarter of their wait), so that the followers fetch in step and the leader wakes once
    per round; consumers' fetches wait their full time."""
    r = leader()
    follower_fetch(r, 1, 0, "f1", 0, epoch=1, max_wait_ms=2000)
    follower_fetch(r, 2, 0, "f2", 117, epoch=1, max_wait_ms=2000)  # 117 ms out of step
    consumer_fetch(r, 0, "c", 100, max_wait_ms=2000)
    assert r.next_deadline(0) == 2000
    answered = replies(r.tick(2000))
    assert set(answered) == {"f1", "f2"} and all(a.error_code == 0 and a.records == b"" for a in answered.values())
    assert r.parked_fetches() == {"followers": 0, "consumers": 1}
    assert "c" in replies(r.tick(2100)), "the consumer's fetch is answered at its own time"
    # in step from now on: both park again at once and expire in the same wake-up
    follower_fetch(r, 1, 0, "g1", 2001, epoch=1, max_wait_ms=2000)
    follower_fetch(r, 2, 0, "g2", 2002, epoch=1, max_wait_ms=2000)
    assert r.next_deadline(0) == 4001 and set(replies(r.tick(4001))) == {"g1", "g2"}
    # a fetch due later than a quarter of its wait stays parked
    follower_fetch(r, 1, 0, "h1", 5000, epoch=1, max_wait_ms=2000)
    follower_fetch(r, 2, 0, "h2", 5600, epoch=1, max_wait_ms=2000)
    assert set(replies(r.tick(7000))) == {"h1"} and set(replies(r.tick(7600))) == {"h2"}


def test_epoch_fencing_on_fetch_and_produce():
    r = leader(epoch=5)
    assert replies(follower_fetch(r, 1, 0, "a", 0, epoch=4))["a"].error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert replies(follower_fetch(r, 1, 0, "b", 0, epoch=6))["b"].error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert replies(produce(r, batch(), "c", 0, acks=1, epoch=4))["c"].error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert replies(produce(r, batch(), "d", 0, acks=1, epoch=5))["d"].error_code == 0


def test_bad_input_errors():
    r = leader()
    follower = make_replica(1)
    leader_and_isr(follower, lai(0, 1, (0, 1, 2)), 0)
    assert replies(produce(follower, batch(), "x", 0))["x"].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    good = batch(3)
    bad = bytearray(good)
    bad[-1] ^= 0xFF
    resp = replies(produce(r, bytes(bad), "y", 0, acks=1))["y"]
    assert resp.error_code == ErrorCode.CORRUPT_MESSAGE and r.log.log_end_offset == 0
    assert replies(produce(r, b"garbage", "g", 0, acks=1))["g"].error_code == ErrorCode.CORRUPT_MESSAGE
    assert replies(produce(r, good, "z", 0, acks=5))["z"].error_code == ErrorCode.INVALID_REQUIRED_ACKS
    assert replies(consumer_fetch(r, 42, "o", 0))["o"].error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert r.log.log_end_offset == 0


def test_message_too_large_is_refused():
    from kcoord.log import LogConfig, MemoryLog

    r = make_replica(0, log=MemoryLog(LogConfig(max_batch_bytes=2000)))
    leader_and_isr(r, lai(0, 1, (0,)), 0)
    big = records.build_batch_columns([b"x" * 5000])
    resp = replies(produce(r, big, "p", 0, acks=1))["p"]
    assert resp.error_code == ErrorCode.MESSAGE_TOO_LARGE and r.log.log_end_offset == 0


def test_leadership_change_fails_pending_requests():
    r = leader()
    produce(r, batch(), "p", 0)
    consumer_fetch(r, 0, "c", 0, max_wait_ms=1000)
    _, acts = leader_and_isr(r, lai(1, 2, (1, 2)), 5)
    got = replies(acts)
    assert got["p"].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert got["c"].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert r.role == "follower"


def test_not_enough_replicas_after_append_when_isr_shrinks_below_min():
    r = leader(min_insync_replicas=2, replica_lag_time_max_ms=100)
    produce(r, batch(), "p", 0)
    # controller removes both followers (they died) before they replicated
    _, acts = leader_and_isr(r, lai(0, 1, (0,), partition_epoch=2), 10)
    assert replies(acts)["p"].error_code == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND


def test_stale_controller_and_leader_epochs_are_refused():
    r = leader(epoch=3)
    resp, _ = leader_and_isr(r, lai(1, 2, (1,)), 1)
    assert resp.error_code == ErrorCode.FENCED_LEADER_EPOCH and r.role == "leader"
    resp, _ = leader_and_isr(r, lai(1, 4, (1,), controller_epoch=0), 1)
    assert resp.error_code == ErrorCode.STALE_CONTROLLER_EPOCH and r.role == "leader"
    resp, _ = leader_and_isr(r, lai(0, 3, (0, 1, 2)), 1)
    assert resp.error_code == 0, "same epoch again is idempotent"


def test_idempotent_duplicate_returns_original_offset_and_does_not_append():
    r = leader(isr=(0,))
    b = batch(3, producer_id=7, producer_epoch=0, base_sequence=0)
    first = replies(produce(r, b, "a", 0))["a"]
    again = replies(produce(r, b, "b", 1))["b"]
    assert first.error_code == 0 and again.error_code == 0
    assert again.duplicate and again.base_offset == first.base_offset == 0
    assert r.log.log_end_offset == 3
    gap = batch(2, producer_id=7, producer_epoch=0, base_sequence=10)
    assert replies(produce(r, gap, "c", 2)) == {}, "a batch ahead of its predecessors waits for them"
    expired = replies(r.tick(2 + r.config.out_of_order_wait_ms))
    assert expired["c"].error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, "the gap never filled"
    assert r.log.log_end_offset == 3


def test_batches_a_pipelining_producer_sent_are_appended_in_sequence_order_whatever_order_they_arrive_in():
    """Ray does not keep the order of calls to an actor: a producer with several requests in
    flight may see them arrive out of order. The leader holds an early batch until the ones
    before it arrive, then appends all in sequence order."""
    r = leader(isr=(0,))
    b0 = batch(2, b"a", producer_id=7, producer_epoch=0, base_sequence=0)
    b1 = batch(3, b"b", producer_id=7, producer_epoch=0, base_sequence=2)
    b2 = batch(1, b"c", producer_id=7, producer_epoch=0, base_sequence=5)
    assert replies(produce(r, b2, "r2", 0, acks=1)) == {}
    assert replies(produce(r, b1, "r1", 1, acks=1)) == {}
    out = replies(produce(r, b0, "r0", 2, acks=1))
    assert [out[t].base_offset for t in ("r0", "r1", "r2")] == [0, 2, 5]
    assert all(out[t].error_code == 0 for t in out)
    values = [rec.value for rec in records.iter_records(r.log.read(0, 1 << 20))]
    assert values == [b"a0", b"a1", b"b0", b"b1", b"b2", b"c0"]


def test_a_leader_stepping_down_answers_the_batches_it_held():
    r = leader(isr=(0,))
    early = batch(1, producer_id=7, producer_epoch=0, base_sequence=4)
    assert replies(produce(r, early, "e", 0)) == {}
    _, actions = leader_and_isr(r, lai(1, 2, (1, 0)), 1)
    assert replies(actions)["e"].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_list_offsets_and_offsets_for_leader_epoch():
    r = leader(isr=(0,), epoch=2)
    produce(r, records.build_batch_columns([b"a", b"b"], timestamps=[100, 200]), "p", 0)
    assert list_offsets(r, ListOffsetsRequest(TOPIC, 0, -2)).offset == 0
    assert list_offsets(r, ListOffsetsRequest(TOPIC, 0, -1)).offset == 2
    found = list_offsets(r, ListOffsetsRequest(TOPIC, 0, 150))
    assert (found.offset, found.timestamp) == (1, 200)
    assert list_offsets(r, ListOffsetsRequest(TOPIC, 0, 999)).offset == -1
    resp = offsets_for_epoch(r, OffsetsForLeaderEpochRequest(TOPIC, 0, 2))
    assert (resp.leader_epoch, resp.end_offset) == (2, 2)


def test_hw_stands_still_below_min_isr_on_page_cache_topics():
    """Chaos run (seed 475425): a consumer read records below the HW of a leader whose ISR
    was itself alone; it died, a replica of the ELR led without them, and the offsets were
    reused. KIP-966: below min.insync.replicas the HW does not move (flush.messages != 1)."""
    from kcoord.log import LogConfig, MemoryLog

    r = make_replica(0, ReplicationConfig(min_insync_replicas=2), log=MemoryLog(LogConfig(flush_messages=None)))
    leader_and_isr(r, lai(0, 1, (0,)), 0)
    assert r.role == "leader"
    produce(r, batch(4), "p", now=0, acks=1)
    assert r.hw == 0, "the ISR is below min.insync.replicas: nothing becomes visible"
    acts = consumer_fetch(r, 0, "c", 1)
    assert replies(acts)["c"].records == b""


def test_a_pending_isr_expansion_does_not_open_the_min_isr_gate():
    """Sim seed 131426: a leader alone in its committed ISR (page-cache topic, min.insync
    .replicas 2) proposed adding a caught-up follower and counted it at once (the maximal
    ISR, KIP-497): the HW moved while the controller, which never got the proposal, still
    had ISR [leader] and an ELR without those records, and elected from that ELR; readers
    had read offsets that the new leader then reused. The gate counts the committed ISR."""
    from kcoord.log import LogConfig, MemoryLog

    r = make_replica(0, ReplicationConfig(min_insync_replicas=2), log=MemoryLog(LogConfig(flush_messages=None)))
    leader_and_isr(r, lai(0, 1, (0,), replicas=(0, 1), partition_epoch=3), 0)
    produce(r, batch(4), "p", now=0, acks=1)
    acts = follower_fetch(r, 1, 4, "f", 1, epoch=1)
    assert of_type(acts, SendAlterPartition), "the caught-up follower is proposed for the ISR"
    assert r.leading.isr.maximal_isr() == [0, 1]
    follower_fetch(r, 1, 4, "f1", 2, epoch=1)  # the follower asks again, the proposal unanswered
    r.tick(2)
    assert r.hw == 0, "not before the controller has the follower in the ISR"
    leader_and_isr(r, lai(0, 1, (0, 1), replicas=(0, 1), partition_epoch=4), 2)
    follower_fetch(r, 1, 4, "f2", 3, epoch=1)
    assert r.hw == 4


def test_hw_moves_with_the_isr_alone_when_every_append_is_fsynced():
    from kcoord.log import LogConfig, MemoryLog

    r = make_replica(0, ReplicationConfig(min_insync_replicas=2), log=MemoryLog(LogConfig(flush_messages=1)))
    leader_and_isr(r, lai(0, 1, (0,)), 0)
    produce(r, batch(4), "p", now=0, acks=1)
    assert r.hw == 4, "durable topics keep the classic rule (no ELR to protect)"


def test_a_restarted_followers_old_progress_is_forgotten():
    """KIP-903: progress measured on one process of a follower says nothing of the next."""
    from kcoord.replication.isr import FollowerProgress

    p = FollowerProgress(1)
    p.on_fetch(10, 10, now_ms=5, incarnation="a")
    assert p.last_caught_up_ms == 5 and p.incarnation == "a"
    p.on_fetch(0, 10, now_ms=6, incarnation="b")
    assert (p.log_end_offset, p.last_caught_up_ms, p.incarnation) == (0, -1, "b")


def test_isr_proposal_names_the_processes_it_judged():
    r = leader(isr=(0, 1))
    produce(r, batch(2), "p", now=0, acks=1)
    r.leading.isr.followers[1].incarnation = "f1"
    acts = follower_fetch(r, 2, 2, "f2", 1, epoch=1)
    alters = of_type(acts, SendAlterPartition)
    assert alters, "follower 2 caught up: the leader proposes it"
    assert alters[-1].request.new_isr == [0, 1, 2]
    assert alters[-1].request.incarnations == {1: "f1"}, "only processes the leader has heard from"


def test_a_leader_vouches_for_the_followers_fetching_from_it():
    from kcoord.protocol.controller import HeartbeatRequest
    from kcoord.protocol.replication import FetchRequest

    r = leader()
    assert r.status(0).followers_heard == {}, "nobody fetched yet: nothing to vouch for"
    req = FetchRequest("t", 0, 0, max_wait_ms=500, replica_id=1, current_leader_epoch=1,
                       replica_incarnation="f1", replica_storage="boot/node", replica_partition_epoch=1,
                       replica_directory_id="dir-f1")
    assert "f" not in replies(r.fetch(req, "f", 100))  # parked
    follower_fetch(r, 2, 0, "g", 100, epoch=1, incarnation="f2")  # answered at once
    heartbeat = replies(r.handle(HeartbeatRequest(controller_epoch=1), "hb", 400))["hb"]
    assert heartbeat.followers_heard == {
        1: (0, 0, "f1", "boot/node", 1, "dir-f1"),  # parked: as alive as an answer now
        2: (300, 0, "f2", "", -1, ""),  # answered at 100, not back since
    }
    r.tick(600)  # the parked fetch expires and is answered: no longer parked
    assert r.status(700).followers_heard[1][0] == 600
    assert r.status().followers_heard == {}, "only a heartbeat (with a time) carries vouches"
    # a new process of follower 1: the old one's parked fetch proves nothing of it
    follower_fetch(r, 1, 0, "h", 800, epoch=1, max_wait_ms=500, incarnation="f1b")
    assert r.status(900).followers_heard[1][:3] == (0, 0, "f1b")


def test_a_follower_fetch_carries_its_storage_and_partition_epoch():
    from kcoord.replication.actions import SendFetch

    f = make_replica(1)
    f.state.storage = "boot/node"
    _, acts = leader_and_isr(f, lai(0, 1, (0, 1, 2), partition_epoch=4), 0)
    fetches = of_type(acts, SendFetch) or of_type(f.tick(1), SendFetch)
    req = fetches[0].request
    assert (req.replica_storage, req.replica_partition_epoch) == ("boot/node", 4)


def test_a_leader_and_isr_answer_names_the_log_directory_and_storage(tmp_path):
    """The controller may hear nothing else from a leader it elected (sim seed 8536)."""
    from kcoord.log import Log, LogConfig
    from kcoord.replication.replica import Replica

    r = Replica(TOPIC, 0, 0, Log(tmp_path, LogConfig(flush_messages=1)), ReplicationConfig(), 0, storage="boot/node")
    resp, _ = leader_and_isr(r, lai(0, 1, [0, 1, 2]), 0)
    assert resp.error_code == 0 and resp.directory_id == r.log.directory_id and resp.directory_id
    assert resp.storage == "boot/node"
    again, _ = leader_and_isr(r, lai(0, 1, [0, 1, 2]), 1)  # the same epoch again: still named
    assert again.error_code == 0 and again.directory_id == r.log.directory_id


def test_describe_producers_answers_each_producers_epoch_last_sequence_and_the_hw():
    """Kafka's DescribeProducers (KIP-664): what a retried bulk writer asks once a leader
    answers OUT_OF_ORDER_SEQUENCE_NUMBER for a batch behind its last five."""
    from replication_helpers import call

    from kcoord.protocol.replication import DescribeProducersRequest

    r = leader(isr=(0,))
    for seq in range(0, 14, 2):
        produce(r, batch(2, producer_id=7, producer_epoch=1, base_sequence=seq), f"p{seq}", now=1)
    produce(r, batch(1, producer_id=8, producer_epoch=0, base_sequence=0), "q", now=1)
    resp, _ = call(r, DescribeProducersRequest(TOPIC, 0, [7, 9]))
    assert resp.error_code == 0 and resp.high_watermark == 15
    assert [(p.producer_id, p.producer_epoch, p.last_sequence, p.last_offset) for p in resp.producers] == [(7, 1, 13, 13)]
    everyone, _ = call(r, DescribeProducersRequest(TOPIC, 0))
    assert [p.producer_id for p in everyone.producers] == [7, 8]
    stale, _ = call(r, DescribeProducersRequest(TOPIC, 0, current_leader_epoch=0))
    assert stale.error_code == ErrorCode.FENCED_LEADER_EPOCH
    # a batch behind the last five is refused as out of order (not taken for a duplicate)
    acts = produce(r, batch(2, producer_id=7, producer_epoch=1, base_sequence=0), "old", now=2)
    assert replies(acts)["old"].error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_only_the_internal_request_writes_an_internal_topic():
    """Issue 32, finding 9: a client's Produce to ``__consumer_offsets`` (or
    ``__transaction_state``) is refused with INVALID_TOPIC_EXCEPTION; coordinators write
    through InternalProduceRequest, which is for internal topics only."""
    from replication_helpers import call

    from kcoord.log import LogConfig, MemoryLog
    from kcoord.protocol import names
    from kcoord.protocol.controller import LeaderAndIsrRequest
    from kcoord.protocol.replication import InternalProduceRequest, ProduceRequest
    from kcoord.replication.replica import Replica

    for topic in sorted(names.INTERNAL_TOPICS):
        r = Replica(topic, 0, 0, MemoryLog(LogConfig()), now_ms=0)
        call(r, LeaderAndIsrRequest(1, topic, 0, leader=0, leader_epoch=1, partition_epoch=1, isr=[0], replicas=[0]))
        refused, _ = call(r, ProduceRequest(topic, 0, batch(2), acks=1))
        assert refused.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION and topic in refused.error_message
        assert r.log.log_end_offset == 0
        written, _ = call(r, InternalProduceRequest(topic, 0, batch(2), acks=1))
        assert written.error_code == 0 and r.log.log_end_offset == 2
    r = leader(isr=(0,))
    wrong, _ = call(r, InternalProduceRequest(TOPIC, 0, batch(2), acks=1))
    assert wrong.error_code == ErrorCode.INVALID_REQUEST and r.log.log_end_offset == 0
