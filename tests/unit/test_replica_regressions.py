"""Replica-core bugs found by the deterministic simulation (tests/sim), one test each.

Each test names the seed that found it: ``python -m tests.sim.run --seed N --verbose``
replays the original run (with the fix reverted it fails again).
"""

from __future__ import annotations

import dataclasses

from replication_helpers import follower_fetch, lai, make_replica, of_type, leader_and_isr, list_offsets, offsets_for_epoch, serve_pending

from kcoord.protocol.controller import AlterPartitionResponse
from kcoord.protocol.errors import ErrorCode
from kcoord.replication.actions import SendAlterPartition
from kcoord.replication.config import ReplicationConfig


def _leader(**cfg):
    r = make_replica(0, ReplicationConfig(**cfg))
    leader_and_isr(r, lai(0, 1, (0, 1, 2)), 0)
    return r


def test_timer_does_not_spin_while_an_isr_shrink_is_in_flight():
    """Seed 1: follower 2 stopped fetching; at its lag deadline the leader proposed a
    shrink, but next_deadline() kept returning the (past) lag deadline while the
    AlterPartition was in flight, so the actor's timer loop never slept."""
    r = _leader(replica_lag_time_max_ms=1000)
    follower_fetch(r, 1, 0, "f", 900, epoch=1, max_wait_ms=0)
    (alter,) = of_type(r.tick(1001), SendAlterPartition)
    # while the shrink is in flight tick() cannot do anything about lag: no past deadline
    deadline = r.next_deadline(0)
    assert deadline is None or deadline > 1001
    assert r.tick(1500) == []
    deadline = r.next_deadline(0)
    assert deadline is None or deadline > 1500


def test_timer_does_not_spin_after_a_rejected_alter_partition():
    """Seed 1: after one rejected AlterPartition, retry_alter_at_ms stayed set forever, so
    once it had passed next_deadline() returned it on every call: a busy loop for the rest
    of the leadership."""
    r = _leader(replica_lag_time_max_ms=1000, alter_partition_backoff_ms=100)
    (alter,) = of_type(r.tick(1001), SendAlterPartition)
    r.on_alter_partition_response(alter.request, AlterPartitionResponse(ErrorCode.INVALID_UPDATE_VERSION), 1010)
    assert r.next_deadline(0) == 1110, "retry after the backoff"
    (retry,) = of_type(r.tick(1110), SendAlterPartition)
    r.on_alter_partition_response(
        retry.request, AlterPartitionResponse(leader=0, leader_epoch=1, partition_epoch=2, isr=[0]), 1120
    )
    assert r.isr == [0]
    # the shrink is done and nothing else is pending: no deadline in the past
    deadline = r.next_deadline(0)
    assert deadline is None or deadline > 1120
    assert r.tick(5000) == [] and (r.next_deadline(0) is None or r.next_deadline(0) > 5000)


def test_follower_that_left_the_isr_needs_a_fresh_fetch_to_rejoin():
    """Seed 94 (flush.ms mode): follower 1 crashed and lost its unflushed tail; the
    controller removed it from the ISR. The leader still held the log end offset 1 had
    reported before the crash, and on its next ISR evaluation proposed 1 back into the ISR
    on that stale progress, before the restarted 1 had fetched anything. A later failover
    elected 1 and everyone truncated to its shorter log: acknowledged records were lost."""
    r = _leader()
    produce_ = __import__("replication_helpers").produce
    produce_(r, __import__("replication_helpers").batch(5), "p", 0, acks=1)
    follower_fetch(r, 1, 5, "f1", 10, epoch=1, max_wait_ms=0)
    follower_fetch(r, 2, 5, "f2", 10, epoch=1, max_wait_ms=0)
    assert r.hw == 5
    # the controller saw 1 die and shrank the ISR
    leader_and_isr(r, lai(0, 1, (0, 2), partition_epoch=2), 20)
    assert r.isr == [0, 2]
    # follower 2 keeps fetching: the leader re-evaluates the ISR, but has no fetch from
    # the new incarnation of 1 yet, so it must not propose it
    acts = follower_fetch(r, 2, 5, "f2b", 30, epoch=1, max_wait_ms=0) + r.tick(40)
    assert of_type(acts, SendAlterPartition) == []
    # the restarted 1 fetches from where its log really ends: still behind the HW
    acts = follower_fetch(r, 1, 2, "f1b", 50, epoch=1, max_wait_ms=0)
    assert of_type(acts, SendAlterPartition) == []
    # once it has caught up, it may rejoin
    acts = follower_fetch(r, 1, 5, "f1c", 60, epoch=1, max_wait_ms=0)
    (alter,) = of_type(acts, SendAlterPartition)
    assert alter.request.new_isr == [0, 1, 2]


def test_follower_converges_on_a_leader_whose_log_is_shorter_than_its_hw():
    """Seed 0 (page-cache mode): the new leader's log had lost everything (LEO 0, epoch cache
    [(6, 0)]) while a follower held 9 committed records. OffsetsForLeaderEpoch found no
    common epoch, so the follower kept its log up to its HW (9), fetched at 9, got
    OFFSET_OUT_OF_RANGE (the leader ends at 0), reconciled again with the same result, and
    so on forever: the partition never got its ISR back. The same happens after an unclean
    election of a replica with a short log. A follower must end up with the leader's log."""
    from replication_helpers import batch, produce, replies
    from kcoord.replication.actions import SendFetch, SendOffsetsForLeaderEpoch

    leader = make_replica(2)
    leader_and_isr(leader, lai(2, 6, (2,)), 0)
    assert leader.log.epoch_cache.entries == [(6, 0)] and leader.log.log_end_offset == 0
    follower = make_replica(0)
    old = make_replica(1)
    leader_and_isr(old, lai(1, 0, (1,)), 0)
    produce(old, batch(9), "p", 0, acks=1)
    follower.log.append_as_follower(old.log.read(0, 1 << 20))
    follower.log.checkpoint_high_watermark(9)
    follower = make_replica(0, log=follower.log)
    assert follower.hw == 9
    _, acts = leader_and_isr(follower, lai(2, 6, (2,)), 10)
    for step in range(10):
        (send,) = [a for a in acts if isinstance(a, (SendFetch, SendOffsetsForLeaderEpoch))]
        if isinstance(send, SendOffsetsForLeaderEpoch):
            acts = follower.on_offsets_for_leader_epoch_response(send.request, offsets_for_epoch(leader, send.request), 11 + step)
            continue
        resp = replies(leader.fetch(dataclasses.replace(send.request, max_wait_ms=0), "t", 11 + step))["t"]
        if resp.error_code == 0:
            break
        acts = follower.on_fetch_response(send.request, resp, 11 + step)
    else:
        raise AssertionError("the follower never got a successful fetch: livelock")
    assert follower.log.log_end_offset == 0 and follower.hw == 0


def _log_with(batches_by_epoch):
    """A MemoryLog holding, for each (epoch, [batch, ...]) in order, those batches written
    by a leader at that epoch."""
    from kcoord.log import LogConfig, MemoryLog

    log = MemoryLog(LogConfig(flush_messages=1))
    for epoch, batches in batches_by_epoch:
        for data in batches:
            log.append_as_leader(data, leader_epoch=epoch)
    return log


def test_follower_truncates_an_epoch_the_leader_never_had():
    """Seed 396 (fsync mode): the leader of epoch 3 wrote offsets 0-7 uncommitted; a
    preferred-leader move made an empty replica leader of epoch 4, which wrote 0-7 again;
    a replica still holding the epoch-3 batches then led epoch 5. When the old epoch-4
    leader came back as a follower it asked where epoch 4 ends, got (epoch 3, offset 8),
    found no epoch <= 3 of its own and kept its log up to 8 -- batches of an epoch the
    leader never had -- so replicas disagreed below the HW. Everything from the start of
    the follower's oldest epoch newer than the leader's answer must go."""
    from replication_helpers import batch, replies
    from kcoord.replication.actions import SendOffsetsForLeaderEpoch

    leader_log = _log_with([(3, [batch(4, b"a"), batch(4, b"b")]), (5, [batch(2, b"c")])])
    follower_log = _log_with([(4, [batch(5, b"x"), batch(3, b"y")])])
    leader = make_replica(1, log=leader_log)
    leader_and_isr(leader, lai(1, 6, (1, 0)), 0)
    follower = make_replica(0, log=follower_log)
    _, acts = leader_and_isr(follower, lai(1, 6, (1, 0)), 0)
    (ask,) = of_type(acts, SendOffsetsForLeaderEpoch)
    assert ask.request.leader_epoch == 4
    answer = offsets_for_epoch(leader, ask.request)
    assert (answer.leader_epoch, answer.end_offset) == (3, 8)
    follower.on_offsets_for_leader_epoch_response(ask.request, answer, 1)
    assert follower.log.log_end_offset == 0, "offsets 0-7 hold epoch-4 batches the leader does not have"
    # it then copies the leader's log and ends up identical
    from kcoord.protocol.replication import FetchRequest

    for now in range(2, 6):
        serve_pending(follower, leader, now)
    assert follower.log.read(0, 1 << 20) == leader.log.read(0, 1 << 20)


def test_restarted_replica_without_fsync_refuses_its_first_leadership():
    """Seed 650 (page-cache mode): a follower crashed, losing everything unflushed, and
    restarted between two heartbeats; the leader was failed over before the controller had
    heard from the new process, the controller elected it, and the other replica truncated
    to its empty log. A fresh process on a log with history cannot know what it lost: it
    refuses the first leadership offered (the controller then elects knowingly)."""
    from kcoord.log import LogConfig, MemoryLog
    from replication_helpers import batch, produce

    log = MemoryLog(LogConfig())  # no flush policy: page cache only
    r = make_replica(0, log=log)
    leader_and_isr(r, lai(0, 4, (0,)), 0)
    produce(r, batch(5), "p", 0, acks=1)
    r.tick(2000)  # HW checkpointed
    restarted = make_replica(0, log=log.crash(), now=3000)
    assert restarted.log.log_end_offset == 0, "everything was unflushed"
    resp, acts = leader_and_isr(restarted, lai(0, 7, (0, 2)), 3001)
    assert resp.error_code == ErrorCode.FENCED_LEADER_EPOCH and acts == [] and restarted.role == "none"
    resp, _ = leader_and_isr(restarted, lai(0, 8, (0, 2)), 3002)
    assert resp.error_code == 0 and restarted.role == "leader", "the controller knew and chose it anyway"
    # a brand-new replica, or one whose every append is fsynced (by a config known current:
    # test_config_versions has one Ray restarted on its creation-time config), leads at once
    fresh = make_replica(1, log=MemoryLog(LogConfig()))
    assert leader_and_isr(fresh, lai(1, 0, (1,)), 0)[0].error_code == 0
    durable = MemoryLog(LogConfig(flush_messages=1))
    d = make_replica(2, log=durable)
    leader_and_isr(d, lai(2, 4, (2,)), 0)
    produce(d, batch(2), "q", 0, acks=1)
    again = make_replica(2, log=durable.crash(), now=10)
    assert leader_and_isr(again, lai(2, 9, (2,)), 11)[0].error_code == 0


def test_restarted_follower_refuses_leadership_until_caught_up():
    """The same, when the restarted process was first told to follow (e.g. a re-send after a
    controller restart): until it has caught up with a leader's HW it is not a safe leader."""
    from kcoord.log import LogConfig, MemoryLog
    from replication_helpers import batch, produce, replies
    from kcoord.protocol.replication import FetchRequest

    log = MemoryLog(LogConfig())
    r = make_replica(0, log=log)
    leader_and_isr(r, lai(0, 4, (0,)), 0)
    produce(r, batch(5), "p", 0, acks=1)
    r.tick(2000)
    restarted = make_replica(0, log=log.crash(), now=3000)
    assert leader_and_isr(restarted, lai(1, 5, (1, 0)), 3001)[0].error_code == 0
    assert leader_and_isr(restarted, lai(0, 6, (0,)), 3002)[0].error_code == ErrorCode.FENCED_LEADER_EPOCH
    # caught up with a leader, it may lead again
    leader = make_replica(1)
    leader_and_isr(leader, lai(1, 7, (1, 0)), 3003)
    produce(leader, batch(3), "q", 3003, acks=1)
    leader_and_isr(restarted, lai(1, 7, (1, 0)), 3003)
    for now in range(3004, 3010):
        serve_pending(restarted, leader, now)
    assert restarted.log.log_end_offset == 3 and restarted.hw == 3
    assert leader_and_isr(restarted, lai(0, 8, (0, 1)), 3010)[0].error_code == 0


def test_isr_expansion_with_unknown_outcome_still_counts():
    """Seed 1901 (flush.ms mode, but any mode): the leader proposed adding follower 2 to
    the ISR; the controller applied it, but the answer was lost (the leader was cut off).
    On the timeout the leader dropped the proposal and computed the HW over the old ISR
    again, acknowledging records follower 2 did not have; the controller, whose ISR held 2,
    later elected it and those acknowledged records were lost. Until it learns the outcome,
    the leader must keep counting every member it asked for (KIP-497's maximal ISR)."""
    from replication_helpers import batch, produce, replies

    r = make_replica(0, ReplicationConfig(min_insync_replicas=2))
    leader_and_isr(r, lai(0, 1, (0, 1)), 0)
    produce(r, batch(2), "a", 0, acks=1)
    follower_fetch(r, 1, 2, "f1", 1, epoch=1, max_wait_ms=0)
    (alter,) = of_type(follower_fetch(r, 2, 2, "f2", 2, epoch=1, max_wait_ms=0), SendAlterPartition)
    assert alter.request.new_isr == [0, 1, 2]
    r.on_alter_partition_response(alter.request, None, 1000)  # timed out: applied or not?
    acts = produce(r, batch(1), "p", 1001)
    acts += follower_fetch(r, 1, 3, "f1b", 1002, epoch=1, max_wait_ms=0)
    assert r.hw == 2, "follower 2 may be in the ISR: without it the HW must not move"
    assert "p" not in replies(acts)
    acts = follower_fetch(r, 2, 3, "f2b", 1003, epoch=1, max_wait_ms=0)
    assert r.hw == 3 and replies(acts)["p"].error_code == 0
    # the truth arrives (the controller re-sends the partition state): adopted
    leader_and_isr(r, lai(0, 1, (0, 1, 2), partition_epoch=2), 1004)
    assert r.isr == [0, 1, 2] and r.leader_state.maximal_isr() == [0, 1, 2]


def test_alter_partition_answer_is_matched_to_its_own_proposal():
    """Issue 12 suspect: an AlterPartition answer was matched to whatever proposal was in
    flight. A LeaderAndIsr at the same leader epoch dropped proposal P1, the leader sent P2,
    and P1's (stale) answer was taken for P2: P2 no longer counted for the HW, the
    controller then applied P2 (ISR {0, 1}) and its answer was ignored, so the leader
    computed the HW over {0} while the controller would elect 1 from {0, 1}."""
    from kcoord.protocol.controller import AlterPartitionResponse
    from kcoord.replication.actions import SendAlterPartition

    r = make_replica(0)
    leader_and_isr(r, lai(0, 1, (0, 2), replicas=(0, 1, 2), partition_epoch=1))
    (p1,) = of_type(follower_fetch(r, 1, 0, "f1", 1, epoch=1), SendAlterPartition)
    assert p1.request.new_isr == [0, 1, 2]
    # the controller removes dead broker 2 (same leader epoch, newer partition epoch)
    leader_and_isr(r, lai(0, 1, (0,), replicas=(0, 1, 2), partition_epoch=2), 2)
    (p2,) = of_type(follower_fetch(r, 1, 0, "f2", 3, epoch=1), SendAlterPartition)
    assert p2.request.new_isr == [0, 1] and p2.request.partition_epoch == 2
    stale = AlterPartitionResponse(ErrorCode.INVALID_UPDATE_VERSION, "stale", leader=0, leader_epoch=1, partition_epoch=2, isr=[0])
    r.on_alter_partition_response(p1.request, stale, 4)
    assert r.leader_state.alter_request is p2.request, "P1's answer must not end the wait for P2"
    assert 1 in r.leader_state.maximal_isr(), "P2's addition counts for the HW until its answer"
    applied = AlterPartitionResponse(leader=0, leader_epoch=1, partition_epoch=3, isr=[0, 1])
    r.on_alter_partition_response(p2.request, applied, 5)
    assert r.isr == [0, 1] and r.partition_epoch == 3 and r.leader_state.alter_request is None


def test_reconciliation_that_truncates_nothing_still_drops_newer_epochs():
    """Issue 12 suspect: a follower whose truncation point is its log end returned early and
    kept an epoch it had opened as leader without writing in it; Kafka always truncates the
    epoch cache from the end. Its cache must match its log after reconciliation."""
    from kcoord.replication.actions import SendOffsetsForLeaderEpoch

    from replication_helpers import batch, produce

    old = make_replica(0)
    leader_and_isr(old, lai(0, 1, (0, 1)))
    produce(old, batch(3), "p", 0, acks=1)
    leader = make_replica(1)
    leader.log.append_as_follower(old.log.read(0, 1 << 20))
    # broker 0 leads epoch 2 without writing, then follows broker 1 at epoch 3
    leader_and_isr(old, lai(0, 2, (0, 1)), 1)
    assert [tuple(e) for e in old.log.epoch_cache.entries] == [(1, 0), (2, 3)]
    leader_and_isr(leader, lai(1, 3, (1, 0)), 2)
    _, acts = leader_and_isr(old, lai(1, 3, (1, 0)), 2)
    (ask,) = of_type(acts, SendOffsetsForLeaderEpoch)
    answer = offsets_for_epoch(leader, ask.request)
    assert (answer.leader_epoch, answer.end_offset) == (1, 3)
    old.on_offsets_for_leader_epoch_response(ask.request, answer, 3)
    assert old.log.log_end_offset == 3
    assert [tuple(e) for e in old.log.epoch_cache.entries] == [(1, 0)], "epoch 2 holds no record of the leader's log"


def test_a_new_leader_does_not_show_consumers_a_high_watermark_older_than_its_predecessors():
    """A follower learns the HW one fetch late, so when it becomes leader its HW can be below
    what the old leader already showed consumers. Until its HW reaches the start of its
    epoch, consumer fetches wait (and time out with OFFSET_NOT_AVAILABLE) and ListOffsets
    latest says OFFSET_NOT_AVAILABLE: the HW a consumer sees never goes backwards."""
    from kcoord.protocol.replication import ListOffsetsRequest

    from replication_helpers import batch, consumer_fetch, follower_fetch, produce, replies, serve_pending

    old, new = make_replica(0), make_replica(1)
    leader_and_isr(old, lai(0, 1, (0, 1), replicas=(0, 1)))
    produce(old, batch(3), "p", 0)
    leader_and_isr(new, lai(0, 1, (0, 1), replicas=(0, 1)))
    serve_pending(new, old, 1)  # copies 3 records
    # its next fetch reports LEO 3, the old leader's HW becomes 3; the answer is lost
    pending = new.follower_state.in_flight
    old.fetch(dataclasses.replace(pending, max_wait_ms=0), "lost", 2)
    assert old.hw == 3 and new.hw < 3
    leader_and_isr(new, lai(1, 2, (1, 0), replicas=(0, 1)), 3)
    assert new.hw < 3
    assert list_offsets(new, ListOffsetsRequest("t", 0, -1)).error_code == ErrorCode.OFFSET_NOT_AVAILABLE
    assert list_offsets(new, ListOffsetsRequest("t", 0, -2)).offset == 0, "earliest needs no HW"
    parked = consumer_fetch(new, 0, "c", 4, max_wait_ms=100)
    assert replies(parked) == {}, "a consumer fetch waits for the HW"
    expired = replies(new.tick(104))
    assert expired["c"].error_code == ErrorCode.OFFSET_NOT_AVAILABLE
    # broker 0 follows and reports LEO 3: the HW reaches the epoch start; consumers see 3
    parked = consumer_fetch(new, 0, "c2", 105, max_wait_ms=1000)
    assert replies(parked) == {}
    woken = replies(follower_fetch(new, 0, 3, "f", 106, epoch=2))
    assert new.hw == 3 and woken["c2"].error_code == 0 and woken["c2"].high_watermark == 3


def test_a_refusal_carrying_a_newer_state_of_our_leadership_is_adopted():
    """Seed 23 of the cluster simulation (duplicated messages): an AlterPartition was
    delivered twice; the first copy was applied (ISR {0, 1, 2}), the second refused as stale,
    and the refusal arrived first. The leader dropped the proposal from its maximal ISR while
    the controller held it: the HW was computed over fewer replicas than the controller would
    elect from. An answer that carries a newer partition epoch of our own leadership is the
    controller's truth, error or not."""
    from kcoord.protocol.controller import AlterPartitionResponse
    from kcoord.replication.actions import SendAlterPartition

    r = make_replica(0)
    leader_and_isr(r, lai(0, 2, (0, 2), replicas=(0, 1, 2), partition_epoch=8))
    (p,) = of_type(follower_fetch(r, 1, 0, "f", 1, epoch=2), SendAlterPartition)
    assert p.request.new_isr == [0, 1, 2]
    refused = AlterPartitionResponse(ErrorCode.INVALID_UPDATE_VERSION, "stale", leader=0, leader_epoch=2, partition_epoch=9, isr=[0, 1, 2])
    r.on_alter_partition_response(p.request, refused, 2)
    assert r.isr == [0, 1, 2] and r.partition_epoch == 9
    assert set(r.leader_state.maximal_isr()) == {0, 1, 2}


def test_follower_of_an_unclean_leader_sharing_no_epoch_truncates_everything_it_had():
    """Seed 4 of the cluster simulation: after an unclean election the new leader's log
    (epoch 6 from offset 0) shared no epoch with a follower's (epochs 0..4). The leader
    answered "unknown epoch" and the follower kept everything up to its HW, so offsets
    0..32 held different batches on the two replicas forever. The leader now answers as
    Kafka does (KIP-279): an epoch older than its oldest ends where that one starts."""
    from replication_helpers import batch

    leader = make_replica(2, log=_log_with([(6, [batch(3, b"new"), batch(2, b"new")])]))
    leader_and_isr(leader, lai(2, 7, (2, 0)), 0)
    follower_log = _log_with([(0, [batch(4, b"old")]), (4, [batch(5, b"old"), batch(3, b"old")])])
    follower_log.checkpoint_high_watermark(12)
    follower = make_replica(0, log=follower_log)
    assert follower.hw == 12
    leader_and_isr(follower, lai(2, 7, (2, 0)), 1)
    for now in range(2, 12):
        serve_pending(follower, leader, now)
    assert follower.log.read(0, 1 << 20) == leader.log.read(0, 1 << 20), "the follower ends up with the leader's log"


def test_a_role_addressed_to_the_previous_process_is_refused():
    """Seed 68272 (KIP-380): the controller made broker 0 leader at epoch 3 just after its
    machine lost power; Ray delivered the call to the next process, on another node with an
    empty disk, which led epoch 3, and a follower truncated 69 committed records to match.
    The controller names the process it means; another one refuses and changes nothing."""
    from kcoord.log import LogConfig, MemoryLog
    from kcoord.replication.replica import Replica

    fresh = Replica("t", 0, 0, MemoryLog(LogConfig(flush_messages=1)), ReplicationConfig(), 0, incarnation="p2")
    meant_for_p1 = dataclasses.replace(lai(0, 3, (0, 1, 2)), incarnation="p1")
    response, actions = leader_and_isr(fresh, meant_for_p1, 0)
    assert response.error_code == ErrorCode.STALE_BROKER_EPOCH and "p1" in response.error_message
    assert actions == [] and fresh.role == "none" and fresh.leader_epoch < 3
    response, _ = leader_and_isr(fresh, dataclasses.replace(lai(0, 4, (0, 1, 2)), incarnation="p2"), 0)
    assert response.error_code == 0 and fresh.role == "leader" and fresh.leader_epoch == 4
    # a controller that never heard any process of it names none: accepted, as before
    other = Replica("t", 0, 1, MemoryLog(LogConfig(flush_messages=1)), ReplicationConfig(), 0, incarnation="q1")
    response, _ = leader_and_isr(other, lai(0, 4, (0, 1, 2)), 0)
    assert response.error_code == 0 and other.role == "follower"


def test_a_replica_asked_to_lead_from_a_directory_it_no_longer_has_refuses(tmp_path):
    """The controller names the log directory it last heard a replica report. A replica
    whose directory was wiped since (a new id) refuses to lead on that record -- its followers
    would truncate to its empty log -- and its answer names the directory it has; followers
    are not checked (they catch up), and a matching or unknown directory leads."""
    from dataclasses import replace

    from kcoord.log import Log, LogConfig

    r = make_replica(0, log=Log(tmp_path / "t-0", LogConfig(flush_messages=1), now_ms=0, new_directory_id=lambda: "new"))
    resp, actions = leader_and_isr(r, replace(lai(0, 4, (0, 1)), directory_id="old"), 0)
    assert (resp.error_code, resp.directory_id, r.role) == (ErrorCode.FENCED_LEADER_EPOCH, "new", "none") and actions == []
    assert leader_and_isr(r, replace(lai(1, 4, (1, 0)), directory_id="old"), 1)[0].error_code == 0 and r.role == "follower"
    assert leader_and_isr(r, replace(lai(0, 5, (0, 1)), directory_id="new"), 2)[0].error_code == 0 and r.role == "leader"
    assert leader_and_isr(r, lai(0, 6, (0, 1)), 3)[0].error_code == 0, "the controller has no record: nothing to check"
