"""Producer state of transactions (docs/transactions.md section 1, "Producer state"): the
ongoing transaction's first offset, a marker ends it, aborted transactions recorded, stale
coordinator epochs refused, snapshots, followers replaying the same."""

from __future__ import annotations

import pytest

from kcoord import records as R
from kcoord.log import LogConfig, MemoryLog, ProducerStateManager
from kcoord.log.producer_state import CompletedTxn
from kcoord.protocol.errors import ErrorCode, KafkaError
from kcoord.record.control import ControlRecord, ControlType

T = 1_700_000_000_000
COMMIT = ControlRecord(ControlType.COMMIT, 5)
ABORT = ControlRecord(ControlType.ABORT, 5)


def data(pid=1, epoch=0, seq=0, n=2, txn=True, offset=0):
    return R.read_header(R.stamp(R.build_batch_columns([b"v"] * n, timestamp_ms=T, producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=txn), offset, 0))


def marker(pid=1, epoch=0, offset=0, commit=True, coordinator_epoch=5):
    b = R.build_control_batch(commit=commit, producer_id=pid, producer_epoch=epoch, coordinator_epoch=coordinator_epoch, timestamp_ms=T, magic=1, base_offset=offset)
    return R.read_header(b), R.read_control(b)


def test_a_transactional_batch_starts_a_transaction_at_its_base_offset_and_a_marker_ends_it():
    s = ProducerStateManager()
    s.update(data(offset=10))
    s.update(data(seq=2, offset=12))
    assert s.ongoing_transactions() == {1: 10} and s.first_unstable_offset() == 10
    h, c = marker(offset=14, commit=False)
    done = s.update(h, c)
    assert done == CompletedTxn(1, 10, 14, True)
    assert s.ongoing_transactions() == {} and s.get(1).txn_first_offset == -1 and s.get(1).coordinator_epoch == 5
    # not stable until the marker is below the high watermark
    assert s.first_unstable_offset() == 10
    s.on_high_watermark(14)
    assert s.first_unstable_offset() == 10
    s.on_high_watermark(15)
    assert s.first_unstable_offset() is None


def test_a_marker_with_no_transaction_ongoing_completes_an_empty_one_at_its_own_offset():
    s = ProducerStateManager()
    h, c = marker(offset=3, commit=False)
    assert s.update(h, c) == CompletedTxn(1, 3, 3, True)


def test_a_marker_from_an_older_coordinator_epoch_is_fenced_and_an_older_producer_epoch_refused():
    s = ProducerStateManager()
    s.update(data(offset=0))
    h, c = marker(offset=2, coordinator_epoch=7)
    s.update(h, c)
    assert s.check_marker(1, 0, 6).error == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert s.check_marker(1, 0, 7).ok and s.check_marker(1, 0, 8).ok
    s.update(*marker(epoch=3, offset=3, coordinator_epoch=7))
    assert s.check_marker(1, 2, 7).error == ErrorCode.INVALID_PRODUCER_EPOCH
    assert s.check_marker(99, 0, 0).ok  # unknown producer: written all the same


def test_a_marker_at_a_newer_epoch_moves_the_producer_to_it_at_sequence_zero():
    s = ProducerStateManager()
    s.update(data(offset=0))
    s.update(*marker(epoch=1, offset=2))  # KIP-890 part 2: the marker carries epoch + 1
    assert s.get(1).epoch == 1
    assert s.check(data(epoch=1, seq=0, offset=3)).ok
    assert s.check(data(epoch=0, seq=2, offset=3)).error == ErrorCode.INVALID_PRODUCER_EPOCH


def test_a_non_transactional_batch_during_a_transaction_is_invalid_txn_state():
    s = ProducerStateManager()
    s.update(data(offset=0))
    verdict = s.check(data(seq=2, txn=False, offset=2))
    assert verdict.error == ErrorCode.INVALID_TXN_STATE
    assert s.check(data(seq=2, txn=True, offset=2)).ok


def test_a_new_epoch_during_a_transaction_keeps_it_ongoing_until_its_marker():
    s = ProducerStateManager()
    s.update(data(offset=4))
    s.update(data(epoch=1, seq=0, offset=6))
    assert s.ongoing_transactions() == {1: 4}


def test_snapshots_persist_ongoing_transactions_and_coordinator_epochs():
    s = ProducerStateManager()
    s.update(data(pid=1, offset=0))
    s.update(data(pid=2, offset=2))
    s.update(*marker(pid=2, offset=4, coordinator_epoch=9))
    t = ProducerStateManager()
    t.load(s.snapshot())
    assert t == s and t.ongoing_transactions() == {1: 0} and t.get(2).coordinator_epoch == 9
    assert t.check_marker(2, 0, 8).error == ErrorCode.TRANSACTION_COORDINATOR_FENCED


def test_a_snapshot_from_before_transactions_loads_as_none_ongoing():
    t = ProducerStateManager()
    t.load({7: {"epoch": 2, "batches": [[0, 1, 0, 1]]}})
    assert t.ongoing_transactions() == {} and t.get(7).txn_first_offset == -1 and t.get(7).coordinator_epoch == -1
    assert t.first_unstable_offset() is None


def test_a_replayed_marker_needs_its_record():
    s = ProducerStateManager()
    h, c = marker(offset=0)
    with pytest.raises(ValueError):
        s.replay([h])
    done = []
    s.replay([h], lambda _h: c, done.append)
    assert done == [CompletedTxn(1, 0, 0, False)]


def txn_batch(pid, seq, n=2, epoch=0):
    return R.build_batch([(b"k", b"v")] * n, producer_id=pid, producer_epoch=epoch, base_sequence=seq, timestamp_ms=T, transactional=True)


def test_a_follower_replays_the_leaders_batches_into_the_same_state():
    leader = MemoryLog(LogConfig(), now_ms=T)
    leader.append_as_leader(txn_batch(1, 0), 0, T)
    leader.append_as_leader(txn_batch(2, 0), 0, T)
    leader.append_control_as_leader(commit=False, producer_id=1, producer_epoch=0, coordinator_epoch=3, leader_epoch=0, now_ms=T)
    leader.append_as_leader(txn_batch(1, 2), 0, T)
    follower = MemoryLog(LogConfig(), now_ms=T)
    follower.append_as_follower(leader.read(0, 1 << 20), T)
    assert follower.producer_state == leader.producer_state
    assert follower.producer_state.ongoing_transactions() == {1: 5, 2: 2}
    assert follower.txn_index.entries() == leader.txn_index.entries()


def test_the_leader_refuses_a_fenced_marker_and_writes_nothing():
    log = MemoryLog(LogConfig(), now_ms=T)
    log.append_as_leader(txn_batch(1, 0), 0, T)
    log.append_control_as_leader(commit=True, producer_id=1, producer_epoch=0, coordinator_epoch=4, leader_epoch=0, now_ms=T)
    with pytest.raises(KafkaError) as err:
        log.append_control_as_leader(commit=True, producer_id=1, producer_epoch=0, coordinator_epoch=3, leader_epoch=0, now_ms=T)
    assert err.value.code == ErrorCode.TRANSACTION_COORDINATOR_FENCED and log.log_end_offset == 3
    info = log.append_control_as_leader(commit=True, producer_id=1, producer_epoch=0, coordinator_epoch=4, leader_epoch=0, now_ms=T)
    assert info.base_offset == 3 and log.log_end_offset == 4  # a retried marker is written
