"""AddPartitionsToTxn, AddOffsetsToTxn and the leaders' KIP-890 verification: what starts a
transaction, idempotent retries, the order of Kafka's checks, partitions that do not exist,
and every refusal with its Kafka error code."""

from __future__ import annotations

import pytest
from txn_harness import OFFSETS_PARTITIONS, T0, Shell, began

from kcoord.group.placement import coordinator_for as group_coordinator_for
from kcoord.protocol.errors import ErrorCode as E
from kcoord.protocol.txn import AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, EndTxnRequest, TxnInitProducerIdRequest
from kcoord.txn.state import TransactionState

S = TransactionState


def test_the_first_add_starts_the_transaction_and_is_persisted_before_the_answer():
    s = Shell(auto_persist=False)
    s.request(TxnInitProducerIdRequest("t", 10_000))
    s.complete()
    pid = s.state().producer_id
    s.now += 7
    token = s.request(AddPartitionsToTxnRequest("t", pid, 0, {"out": [2, 0], "side": [1]}))
    assert s.reply(token) is None and s.state().state == S.EMPTY
    s.complete()
    r = s.reply(token)
    assert r.error_code == E.NONE and r.results == {"out": {0: 0, 2: 0}, "side": {1: 0}}
    v = s.state()
    assert v.state == S.ONGOING and v.partitions == (("out", 0), ("out", 2), ("side", 1))
    assert v.start_ms == T0 + 7 and v.start_epoch == 0
    s.assert_replay_equal()


def test_more_partitions_join_the_ongoing_transaction_and_keep_its_start():
    s = Shell()
    pid, epoch = began(s, topics={"out": [0]})
    start = s.state().start_ms
    s.now += 50
    assert s.add("t", pid, epoch, {"out": [1]}).error_code == E.NONE
    v = s.state()
    assert v.partitions == (("out", 0), ("out", 1)) and v.start_ms == start and v.last_update_ms == start + 50


def test_a_retried_add_of_partitions_already_in_is_answered_without_a_write():
    s = Shell()
    pid, epoch = began(s, topics={"out": [0, 1]})
    records = len(s.log)
    r = s.add("t", pid, epoch, {"out": [1]})
    assert r.error_code == E.NONE and r.results == {"out": {1: 0}} and len(s.log) == records


def test_add_offsets_adds_the_groups_consumer_offsets_partition():
    s = Shell()
    pid, epoch = began(s)
    assert s.add_offsets("t", pid, epoch, "my-group").error_code == E.NONE
    expected = ("__consumer_offsets", group_coordinator_for("my-group", OFFSETS_PARTITIONS))
    assert expected in s.state().partitions
    # it can start a transaction on its own too
    r = s.init("u")
    assert s.add_offsets("u", r.producer_id, r.producer_epoch, "my-group").error_code == E.NONE
    assert s.state("u").state == S.ONGOING and s.state("u").partitions == (expected,)


def test_add_offsets_with_an_empty_group_is_invalid_group_id():
    s = Shell()
    r = s.init("t")
    assert s.add_offsets("t", r.producer_id, r.producer_epoch, "").error_code == E.INVALID_GROUP_ID
    assert s.state().state == S.EMPTY


@pytest.mark.parametrize("offsets", [False, True], ids=["AddPartitions", "AddOffsets"])
def test_producer_checks_in_kafkas_order(offsets):
    s = Shell(auto_markers=False)

    def add(tid, pid, epoch, **kw):
        return s.add_offsets(tid, pid, epoch, **kw) if offsets else s.add(tid, pid, epoch, **kw)

    assert add("nobody", 1, 0).error_code == E.INVALID_PRODUCER_ID_MAPPING
    r = s.init("t")
    pid, epoch = r.producer_id, r.producer_epoch
    assert add("t", pid + 1, epoch).error_code == E.INVALID_PRODUCER_ID_MAPPING
    assert add("t", pid, epoch + 1).error_code == E.PRODUCER_FENCED
    s.init("t")
    assert add("t", pid, epoch).error_code == E.PRODUCER_FENCED
    assert add("t", pid, epoch, wire_version=1).error_code == E.INVALID_PRODUCER_EPOCH  # v0-1 clients
    assert add("t", pid, epoch, wire_version=2).error_code == E.PRODUCER_FENCED
    # while a transaction completes: CONCURRENT_TRANSACTIONS before any id check (the
    # producer may already hold the identity the completion moves it to, KAFKA-18660)
    epoch += 1
    assert add("t", pid, epoch).error_code == E.NONE
    assert s.end("t", pid, epoch, commit=True).error_code == E.NONE
    assert add("t", pid, epoch + 1).error_code == E.CONCURRENT_TRANSACTIONS
    assert add("t", pid + 5, 0).error_code == E.CONCURRENT_TRANSACTIONS
    s.ack_markers()
    assert add("t", pid, epoch + 1).error_code == E.NONE


def test_a_transition_in_flight_answers_concurrent_transactions():
    s = Shell()
    r = s.init("t")
    s.auto_persist = False
    t1 = s.request(AddPartitionsToTxnRequest("t", r.producer_id, r.producer_epoch, {"out": [0]}))
    t2 = s.request(AddPartitionsToTxnRequest("t", r.producer_id, r.producer_epoch, {"out": [1]}))
    t3 = s.request(AddOffsetsToTxnRequest("t", r.producer_id, r.producer_epoch, "g"))
    assert s.reply(t2).error_code == E.CONCURRENT_TRANSACTIONS and s.reply(t3).error_code == E.CONCURRENT_TRANSACTIONS
    s.complete()
    assert s.reply(t1).error_code == E.NONE and s.state().partitions == (("out", 0),)


def test_partitions_that_do_not_exist_are_refused_and_nothing_is_added():
    s = Shell()
    r = s.init("t")
    refreshes = s.refreshes
    a = s.add("t", r.producer_id, r.producer_epoch, {"out": [0, 4], "nope": [0]})
    assert a.error_code == E.UNKNOWN_TOPIC_OR_PARTITION and "nope-0" in a.error_message and "out-4" in a.error_message
    assert a.results == {"out": {0: E.OPERATION_NOT_ATTEMPTED, 4: E.UNKNOWN_TOPIC_OR_PARTITION}, "nope": {0: E.UNKNOWN_TOPIC_OR_PARTITION}}
    assert s.state().state == S.EMPTY
    assert s.refreshes == refreshes + 1  # maybe it was created a moment ago: look again
    s.topics["nope"] = 1
    s.now += 1_000
    s.run(s.core.on_metadata(s.topics, s.now))
    assert s.add("t", r.producer_id, r.producer_epoch, {"nope": [0]}).error_code == E.NONE


def test_internal_topics_cannot_be_added_as_partitions():
    s = Shell()
    r = s.init("t")
    a = s.add("t", r.producer_id, r.producer_epoch, {"__consumer_offsets": [0], "__transaction_state": [0], "out": [1]})
    assert a.results == {
        "__consumer_offsets": {0: E.INVALID_TOPIC_EXCEPTION},
        "__transaction_state": {0: E.INVALID_TOPIC_EXCEPTION},
        "out": {1: E.OPERATION_NOT_ATTEMPTED},
    }
    assert s.state().state == S.EMPTY


def test_before_the_topics_are_known_adds_wait_retriably():
    s2 = Shell(auto_metadata=False, topics_known=False)
    r = s2.init("t")
    refreshes = s2.refreshes
    a = s2.add("t", r.producer_id, r.producer_epoch)
    assert a.error_code == E.COORDINATOR_LOAD_IN_PROGRESS and s2.refreshes == refreshes + 1
    # asked at most once per backoff
    s2.add("t", r.producer_id, r.producer_epoch)
    assert s2.refreshes == refreshes + 1
    s2.run(s2.core.on_metadata({"out": 1}, s2.now))
    assert s2.add("t", r.producer_id, r.producer_epoch).error_code == E.NONE


def test_an_empty_add_is_invalid_request():
    s = Shell()
    r = s.init("t")
    a = s.add("t", r.producer_id, r.producer_epoch, {})
    assert a.error_code == E.INVALID_REQUEST
    a = s.add("t", r.producer_id, r.producer_epoch, {"out": []})
    assert a.error_code == E.INVALID_REQUEST


def test_a_failed_add_answers_a_coordinator_error_and_adds_nothing():
    s = Shell()
    pid, epoch = began(s, topics={"out": [0]})
    s.auto_persist = False
    token = s.request(AddPartitionsToTxnRequest("t", pid, epoch, {"out": [1]}))
    s.complete(error=E.NOT_LEADER_OR_FOLLOWER)
    r = s.reply(token)
    assert r.error_code == E.NOT_COORDINATOR and r.results == {"out": {1: E.NOT_COORDINATOR}}
    assert s.state().partitions == (("out", 0),)
    token = s.request(AddOffsetsToTxnRequest("t", pid, epoch, "g"))
    s.complete(error=E.REQUEST_TIMED_OUT)
    assert s.reply(token).error_code == E.COORDINATOR_NOT_AVAILABLE
    s.assert_replay_equal()


# -- KIP-890 part 1: a leader asks before a transaction's first write lands -----------------


def _verify(s: Shell, tid: str, pid: int, epoch: int, topics: dict[str, list[int]]):
    return s.ask(AddPartitionsToTxnRequest(tid, pid, epoch, topics, verify_only=True))


def test_verify_only_answers_per_partition_and_writes_nothing():
    s = Shell(auto_markers=False)
    pid, epoch = began(s, topics={"out": [0]})
    records = len(s.log)
    v = _verify(s, "t", pid, epoch, {"out": [0, 1]})
    assert v.results == {"out": {0: E.NONE, 1: E.TRANSACTION_ABORTABLE}} and v.error_code == E.TRANSACTION_ABORTABLE
    assert _verify(s, "t", pid, epoch, {"out": [0]}).error_code == E.NONE
    assert len(s.log) == records and s.state().partitions == (("out", 0),)
    # wrong identity
    assert _verify(s, "t", pid + 1, epoch, {"out": [0]}).error_code == E.INVALID_PRODUCER_ID_MAPPING
    assert _verify(s, "t", pid, epoch - 1 if epoch else epoch + 1, {"out": [0]}).error_code == E.PRODUCER_FENCED
    assert _verify(s, "nobody", pid, epoch, {"out": [0]}).error_code == E.INVALID_PRODUCER_ID_MAPPING
    # being completed: the leader waits
    assert s.ask(EndTxnRequest("t", pid, epoch, True, bump_epoch=True)).error_code == E.NONE
    assert _verify(s, "t", pid, epoch, {"out": [0]}).error_code == E.PRODUCER_FENCED  # the epoch moved on
    assert _verify(s, "t", pid, epoch + 1, {"out": [0]}).error_code == E.CONCURRENT_TRANSACTIONS
    s.ack_markers()
    # completed: a late write of the ended transaction is not in any transaction
    assert _verify(s, "t", pid, epoch + 1, {"out": [0]}).results == {"out": {0: E.TRANSACTION_ABORTABLE}}


def test_verify_only_reads_acknowledged_state_only():
    s = Shell()
    r = s.init("t")
    s.auto_persist = False
    s.request(AddPartitionsToTxnRequest("t", r.producer_id, r.producer_epoch, {"out": [0]}))
    # not answered to the producer yet, so no write of it can be legitimate yet
    assert _verify(s, "t", r.producer_id, r.producer_epoch, {"out": [0]}).error_code == E.TRANSACTION_ABORTABLE
    s.complete()
    assert _verify(s, "t", r.producer_id, r.producer_epoch, {"out": [0]}).error_code == E.NONE
