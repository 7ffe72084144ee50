"""Markers and completion: every partition's marker re-sent with backoff until written, a
stale coordinator stopping, deleted partitions dropped only once the topics confirm it, the
COMPLETE_* record retried, stale outcomes ignored; a restarted coordinator resuming the markers
of decided transactions; close() answering everything pending."""

from __future__ import annotations

import pytest
from txn_harness import FAST, TIMEOUT, Shell, began

from kcoord.protocol.errors import ErrorCode as E
from kcoord.protocol.txn import AddPartitionsToTxnRequest, EndTxnRequest, TxnInitProducerIdRequest
from kcoord.txn.state import TransactionState

S = TransactionState


def test_a_failed_marker_is_resent_with_growing_backoff_until_written():
    s = Shell(auto_markers=False)
    pid, epoch = began(s, topics={"out": [0]})
    s.end("t", pid, epoch)
    delays = []
    for _ in range(6):
        assert s.ack_markers(E.NOT_LEADER_OR_FOLLOWER) == 1
        sent_before = len(s.sent)
        deadline = s.core.next_deadline(s.now)
        delays.append(deadline - s.now)
        s.advance(deadline - s.now - 1)
        assert len(s.sent) == sent_before  # not before its time
        s.advance(1)
        assert len(s.sent) == sent_before + 1
    assert delays == [100, 200, 400, 800, 1000, 1000]  # doubling up to marker_max_backoff_ms
    assert s.state().state == S.PREPARE_COMMIT
    s.ack_markers()
    assert s.state().state == S.COMPLETE_COMMIT
    assert s.core.stats.marker_retries == 6 and s.core.stats.markers_sent == 7


@pytest.mark.parametrize("code", [E.REQUEST_TIMED_OUT, E.LEADER_NOT_AVAILABLE, E.NOT_ENOUGH_REPLICAS, E.COORDINATOR_LOAD_IN_PROGRESS, E.UNKNOWN_SERVER_ERROR])
def test_any_other_failure_is_retried(code):
    s = Shell(auto_markers=False)
    pid, epoch = began(s, topics={"out": [1]})
    s.add_offsets("t", pid, epoch)
    s.end("t", pid, epoch, commit=False)
    s.ack_markers(code)
    s.advance(FAST.marker_retry_backoff_ms)
    assert len(s.markers) == 2
    s.ack_markers()
    assert s.state().state == S.COMPLETE_ABORT


@pytest.mark.parametrize("code", [E.TRANSACTION_COORDINATOR_FENCED, E.INVALID_PRODUCER_EPOCH])
def test_a_leader_that_saw_a_newer_coordinator_stops_this_one(code):
    s = Shell(auto_markers=False)
    pid, epoch = began(s, topics={"out": [0, 1]})
    s.end("t", pid, epoch)
    first, second = s.markers
    s.markers = [second]
    s.run(s.core.on_marker_written(first.marker_id, code, s.now))
    assert s.core.pending_markers("t") == set() and s.core.stats.markers_fenced == 1
    # the other marker's answer is ignored, nothing is re-sent, nothing completes here
    s.ack_markers()
    s.advance(10 * FAST.marker_max_backoff_ms)
    assert s.state().state == S.PREPARE_COMMIT and len(s.sent) == 2 and s.core.next_deadline(s.now) is None
    # requests wait for the newer coordinator to finish it
    assert s.init("t").error_code == E.CONCURRENT_TRANSACTIONS


def test_a_deleted_partition_is_dropped_once_the_topics_confirm_it():
    s = Shell(auto_markers=False, auto_metadata=False)
    pid, epoch = began(s, topics={"out": [0], "side": [1]})
    s.end("t", pid, epoch)
    refreshes = s.refreshes
    s.ack_markers(topic="out")
    s.ack_markers(E.UNKNOWN_TOPIC_OR_PARTITION)  # the driver found "side" missing
    assert s.refreshes == refreshes + 1
    # the topics read now still have it: keep trying
    s.run(s.core.on_metadata(s.topics, s.now))
    s.advance(FAST.marker_retry_backoff_ms)
    assert s.core.pending_markers("t") == {("side", 1)}
    s.ack_markers(E.UNKNOWN_TOPIC_OR_PARTITION)
    del s.topics["side"]
    s.run(s.core.on_metadata(s.topics, s.now))
    assert s.core.pending_markers("t") == set() and s.state().state == S.COMPLETE_COMMIT
    assert s.core.stats.markers_dropped == 1
    s.advance(10 * FAST.marker_max_backoff_ms)
    assert len(s.markers) == 0  # the retry timer is gone too


def test_a_partition_missing_from_the_topics_without_a_failed_marker_still_gets_its_marker():
    s = Shell(auto_markers=False)
    pid, epoch = began(s, topics={"side": [1]})
    s.end("t", pid, epoch)
    del s.topics["side"]
    s.run(s.core.on_metadata(s.topics, s.now))  # no marker failed: not evidence enough
    assert s.core.pending_markers("t") == {("side", 1)}


def test_a_stale_marker_outcome_is_ignored():
    s = Shell(auto_markers=False)
    pid, epoch = began(s, topics={"out": [0]})
    s.end("t", pid, epoch)
    (m,) = s.markers
    s.ack_markers(E.REQUEST_TIMED_OUT)
    s.advance(FAST.marker_retry_backoff_ms)
    # the first attempt's answer shows up again (a duplicate): ignored, the new one stands
    s.run(s.core.on_marker_written(m.marker_id, E.NONE, s.now))
    s.run(s.core.on_marker_written(424242, E.NONE, s.now))
    assert s.core.pending_markers("t") == {("out", 0)}
    s.ack_markers()
    assert s.state().state == S.COMPLETE_COMMIT


def test_markers_carry_the_coordinator_epoch_which_may_move_up_only():
    s = Shell(auto_markers=False)
    pid, epoch = began(s, topics={"out": [0]})
    s.core.coordinator_epoch = 9
    s.end("t", pid, epoch)
    assert s.markers[0].request.coordinator_epoch == 9
    with pytest.raises(ValueError):
        s.core.coordinator_epoch = 8


def test_a_failed_completion_record_is_tried_again():
    s = Shell()
    pid, epoch = began(s, topics={"out": [0]})
    s.auto_persist = False
    token = s.request(EndTxnRequest("t", pid, epoch, True, bump_epoch=True))
    s.complete()  # the decision
    assert s.reply(token).error_code == E.NONE
    s.complete(error=E.NOT_ENOUGH_REPLICAS)  # the completion
    assert s.state().state == S.PREPARE_COMMIT and s.core.stats.persist_failures == 1
    s.advance(FAST.append_retry_backoff_ms - 1)
    assert not s.appends
    s.advance(1)
    assert len(s.appends) == 1
    s.complete()
    assert s.state().state == S.COMPLETE_COMMIT and len([m for m in s.sent]) == 1  # no marker re-sent
    s.assert_replay_equal()


# -- load ------------------------------------------------------------------------------------


def test_a_restarted_coordinator_resumes_the_markers_of_a_decided_transaction():
    s = Shell(auto_markers=False)
    pid, epoch = began(s, topics={"out": [0, 1]})
    s.add_offsets("t", pid, epoch)
    s.end("t", pid, epoch, commit=True)
    s.ack_markers(topic="out")  # the group coordinator's marker is not in when it dies
    fresh = s.restart(advance_ms=5)
    assert fresh.core.snapshot() == s.core.snapshot()
    assert fresh.state().state == S.PREPARE_COMMIT
    # every partition is marked again (markers are idempotent), at the new coordinator epoch
    assert {(getattr(m.request, "topic", "__consumer_offsets"), m.request.partition) for m in fresh.markers} == {
        ("out", 0), ("out", 1), ("__consumer_offsets", fresh.markers[0].request.partition)
    }
    assert {m.request.coordinator_epoch for m in fresh.markers} == {s.core.coordinator_epoch + 1}
    assert all(m.request.commit and m.request.producer_epoch == epoch + 1 for m in fresh.markers)
    fresh.ack_markers()
    assert fresh.state().state == S.COMPLETE_COMMIT
    fresh.assert_replay_equal()


def test_a_restarted_coordinator_keeps_timing_ongoing_transactions_and_new_ids_work():
    s = Shell()
    pid, epoch = began(s)
    s.now += TIMEOUT // 2
    fresh = s.restart()
    assert fresh.state().state == S.ONGOING
    fresh.advance(TIMEOUT // 2)
    assert fresh.state().state == S.ONGOING
    fresh.advance(1)
    assert fresh.state().state == S.COMPLETE_ABORT and fresh.state().producer_epoch == epoch + 1
    assert fresh.init("new").producer_id not in (pid, -1)


def test_load_refuses_to_run_on_a_serving_coordinator():
    s = Shell()
    s.init("t")
    with pytest.raises(RuntimeError):
        s.core.load([], s.now)


# -- close -----------------------------------------------------------------------------------


def test_close_answers_every_waiting_request_and_serves_no_more():
    s = Shell(auto_persist=False, auto_markers=False)
    s.auto_persist = True
    pid, epoch = began(s, topics={"out": [0]})
    r = s.init("u")
    s.auto_persist = False
    t_end = s.request(EndTxnRequest("t", pid, epoch, True, bump_epoch=True))
    t_add = s.request(AddPartitionsToTxnRequest("u", r.producer_id, r.producer_epoch, {"out": [1]}))
    t_init = s.request(TxnInitProducerIdRequest("v", TIMEOUT))
    s.run(s.core.close(s.now, E.NOT_COORDINATOR))
    assert s.reply(t_end).error_code == E.NOT_COORDINATOR
    assert s.reply(t_add).results == {"out": {1: E.NOT_COORDINATOR}}
    assert s.reply(t_init).error_code == E.NOT_COORDINATOR
    assert s.core.closed and s.core.next_deadline(s.now) is None and s.core.snapshot() == {}
    assert s.init("t").error_code == E.NOT_COORDINATOR
    # late outcomes change nothing
    s.complete()
    s.run(s.core.close(s.now))
    assert s.core.snapshot() == {}
