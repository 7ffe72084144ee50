"""The partition leader's side of transactions (docs/transactions.md section 1): read_committed
fetches stop at the last stable offset and carry the aborted transactions in range,
ListOffsets answers the LSO, WriteTxnMarker appends markers acked like acks=all, and a new
leader shows no LSO until its HW is trusted."""

from __future__ import annotations

from replication_helpers import TOPIC, call, follower_fetch, lai, leader_and_isr, make_replica, replies, serve_pending

from kcoord import records as R
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.replication import LATEST_TIMESTAMP, READ_COMMITTED, FetchRequest, ListOffsetsRequest, ProduceRequest
from kcoord.protocol.txn import WriteTxnMarkerRequest, WriteTxnMarkerResponse
from kcoord.replication.config import ReplicationConfig

T = 1000
# The log's side alone: these tests write transactional batches with no transaction
# coordinator, so the leaders do not verify them (KIP-890 has its own tests,
# test_txn_verification.py).
UNVERIFIED = {"transaction_partition_verification": False}


def sole_leader(epoch=1):
    r = make_replica(0, ReplicationConfig(min_insync_replicas=1, **UNVERIFIED))
    resp, _ = leader_and_isr(r, lai(0, epoch, (0,), replicas=(0,)), 0)
    assert resp.error_code == 0
    return r


def txn(pid, seq, n=2, epoch=0, key=b"k"):
    return R.build_batch([(key, b"%d-%d" % (pid, seq + i)) for i in range(n)], producer_id=pid, producer_epoch=epoch, base_sequence=seq, timestamp_ms=T, transactional=True)


def produce(r, data, now=0):
    resp, _ = call(r, ProduceRequest(TOPIC, 0, data, acks=-1), now)
    assert resp is not None and resp.error_code == 0, resp
    return resp.base_offset


def marker(r, pid, commit, epoch=0, coordinator_epoch=0, now=0, **kw):
    return call(r, WriteTxnMarkerRequest(pid, epoch, coordinator_epoch, commit, TOPIC, 0, **kw), now)


def fetch(r, offset, committed=True, now=0):
    resp, _ = call(r, FetchRequest(TOPIC, 0, offset, max_wait_ms=0, isolation_level=READ_COMMITTED if committed else 0), now)
    return resp


def offsets(resp):
    return [rec.offset for rec in R.iter_records(resp.records)]


def test_read_committed_stops_at_the_lso_and_read_uncommitted_at_the_hw():
    r = sole_leader()
    produce(r, R.build_batch([(b"a", b"plain")], timestamp_ms=T))  # 0
    produce(r, txn(7, 0))  # 1-2, open
    produce(r, R.build_batch([(b"a", b"after")], timestamp_ms=T))  # 3
    committed = fetch(r, 0)
    assert committed.last_stable_offset == 1 and committed.high_watermark == 4
    assert offsets(committed) == [0]
    assert offsets(fetch(r, 0, committed=False)) == [0, 1, 2, 3]
    assert fetch(r, 1).records == b""  # nothing stable at the LSO yet
    m, _ = marker(r, 7, commit=True)
    assert m.error_code == 0 and m.offset == 4 and m.leader_epoch == 1
    after = fetch(r, 1)
    assert after.last_stable_offset == 5 and offsets(after) == [1, 2, 3]  # the marker is no record
    assert after.aborted_transactions == []


def test_aborted_transactions_in_range_are_returned_with_their_first_offsets():
    r = sole_leader()
    produce(r, txn(1, 0))  # 0-1
    produce(r, txn(2, 0))  # 2-3
    marker(r, 1, commit=False)  # 4
    produce(r, txn(1, 2))  # 5-6, a new transaction of 1
    marker(r, 2, commit=True)  # 7
    marker(r, 1, commit=False)  # 8
    resp = fetch(r, 0)
    assert resp.last_stable_offset == 9
    assert sorted(map(tuple, resp.aborted_transactions)) == [(1, 0), (1, 5)]
    assert sorted(map(tuple, fetch(r, 5).aborted_transactions)) == [(1, 5)]
    assert fetch(r, 9).aborted_transactions is None  # nothing returned, nothing to say


def test_list_offsets_latest_answers_the_lso_in_read_committed():
    r = sole_leader()
    produce(r, R.build_batch([(b"a", b"x")], timestamp_ms=T))
    produce(r, txn(3, 0))
    latest = call(r, ListOffsetsRequest(TOPIC, 0, LATEST_TIMESTAMP))[0]
    committed = call(r, ListOffsetsRequest(TOPIC, 0, LATEST_TIMESTAMP, isolation_level=READ_COMMITTED))[0]
    assert (latest.offset, committed.offset) == (3, 1)
    by_time = call(r, ListOffsetsRequest(TOPIC, 0, T, isolation_level=READ_COMMITTED))[0]
    assert by_time.offset == 0
    bad = call(r, ListOffsetsRequest(TOPIC, 0, LATEST_TIMESTAMP, isolation_level=2))[0]
    assert bad.error_code == ErrorCode.INVALID_REQUEST


def test_a_bad_isolation_level_is_refused():
    r = sole_leader()
    resp, _ = call(r, FetchRequest(TOPIC, 0, 0, isolation_level=7))
    assert resp.error_code == ErrorCode.INVALID_REQUEST and "isolation_level" in resp.error_message


def test_a_marker_is_acked_only_once_replicated_and_a_fenced_one_is_refused():
    r = make_replica(0, ReplicationConfig(min_insync_replicas=2, **UNVERIFIED))
    leader_and_isr(r, lai(0, 1, (0, 1), replicas=(0, 1)), 0)
    r.handle(ProduceRequest(TOPIC, 0, txn(5, 0), acks=1), "p", 0)
    token = "m"
    actions = r.handle(WriteTxnMarkerRequest(5, 0, 3, False, TOPIC, 0, timeout_ms=100), token, 1)
    assert token not in replies(actions)  # not below the HW yet
    actions = follower_fetch(r, 1, 3, "f", 2, epoch=1)
    answer = replies(actions)[token]
    assert isinstance(answer, WriteTxnMarkerResponse) and answer.error_code == 0 and answer.offset == 2
    fenced, _ = marker(r, 5, commit=False, coordinator_epoch=2, now=3)
    assert fenced.error_code == ErrorCode.TRANSACTION_COORDINATOR_FENCED and r.log.log_end_offset == 3
    # a marker not replicated in time times out as a WriteTxnMarkerResponse
    r.handle(WriteTxnMarkerRequest(5, 0, 3, True, TOPIC, 0, timeout_ms=10), "late", 4)
    timed_out = replies(r.tick(100) or r.state.take())
    assert isinstance(timed_out.get("late"), WriteTxnMarkerResponse) and timed_out["late"].error_code == ErrorCode.REQUEST_TIMED_OUT


def test_markers_are_refused_for_other_partitions_internal_topics_and_non_leaders():
    r = sole_leader()
    other, _ = call(r, WriteTxnMarkerRequest(1, 0, 0, True, "other", 0))
    assert other.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    follower = make_replica(1, ReplicationConfig(**UNVERIFIED))
    leader_and_isr(follower, lai(0, 1, (0, 1)), 0)
    not_leader, _ = call(follower, WriteTxnMarkerRequest(1, 0, 0, True, TOPIC, 0))
    assert isinstance(not_leader, WriteTxnMarkerResponse) and not_leader.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    no_producer, _ = call(r, WriteTxnMarkerRequest(-1, 0, 0, True, TOPIC, 0))
    assert no_producer.error_code == ErrorCode.INVALID_REQUEST


def _follower_with_open_transaction(until_hw: bool):
    cfg = ReplicationConfig(min_insync_replicas=1, **UNVERIFIED)
    old = make_replica(0, cfg)
    leader_and_isr(old, lai(0, 1, (0, 1)), 0)
    new = make_replica(1, cfg)
    leader_and_isr(new, lai(0, 1, (0, 1)), 0)
    old.handle(ProduceRequest(TOPIC, 0, txn(9, 0), acks=1), "p", 0)
    for now in range(1, 10):
        if new.log.log_end_offset == 2 and new.hw == 2:
            break
        if new.follower_state.in_flight is None:
            new.tick(now)
        if new.follower_state.in_flight is not None:
            serve_pending(new, old, now)
    assert new.log.log_end_offset == 2 and new.log.producer_state.ongoing_transactions() == {9: 0}
    if not until_hw:
        new.hw = 0  # its HW lags the old leader's (the answer that would move it was lost)
    leader_and_isr(new, lai(1, 2, (1, 0)), 10)
    return new


def test_a_follower_that_becomes_leader_knows_the_lso_at_once():
    new = _follower_with_open_transaction(until_hw=True)
    resp = fetch(new, 0, now=11)
    assert resp.error_code == 0 and resp.high_watermark == 2 and resp.last_stable_offset == 0 and resp.records == b""


def test_a_new_leader_shows_no_lso_until_its_hw_is_trusted():
    new = _follower_with_open_transaction(until_hw=False)
    assert new.hw < 2
    resp = fetch(new, 0, now=11)
    assert resp.error_code == ErrorCode.OFFSET_NOT_AVAILABLE and resp.last_stable_offset == -1
    latest = call(new, ListOffsetsRequest(TOPIC, 0, LATEST_TIMESTAMP, isolation_level=READ_COMMITTED), 11)[0]
    assert latest.error_code == ErrorCode.OFFSET_NOT_AVAILABLE


def test_describe_producers_shows_the_ongoing_transaction_and_the_coordinator_epoch():
    from kcoord.protocol.replication import DescribeProducersRequest

    r = sole_leader()
    produce(r, txn(4, 0))  # 0-1
    marker(r, 4, commit=True, coordinator_epoch=6)  # 2
    produce(r, txn(4, 2))  # 3-4, a new transaction
    (p,) = call(r, DescribeProducersRequest(TOPIC, 0))[0].producers
    assert (p.producer_id, p.producer_epoch, p.last_sequence, p.last_offset) == (4, 0, 3, 4)
    assert (p.coordinator_epoch, p.current_txn_start_offset) == (6, 3)
    assert p.last_timestamp == T  # its last batch's max timestamp (Kafka's lastTimestamp)
