"""kcoord's Consumer under read_committed (docs/transactions.md section 1, "Fetch"): the
batches of aborted transactions are dropped per fetched chunk, markers never returned, and
the position moves past what was skipped so the lag reaches 0."""

from __future__ import annotations

from collections import deque

import pytest

from kcoord import records as R
from kcoord.client.consumer.collector import RecordCollector
from kcoord.client.consumer.consumer import Consumer
from kcoord.client.consumer.segments import decode_chunk
from kcoord.client.consumer.subscription_state import AssignedPartition, SubscriptionState
from kcoord.client.metrics import RequestStats
from kcoord.client.types import TopicPartition
from kcoord.log import LogConfig, MemoryLog

T = 1000
TP = TopicPartition("t", 0)


def log_with_transactions(magic: int = 1) -> MemoryLog:
    """0-1 p1 (aborted), 2-3 p2 (committed), 4 plain, 5 abort p1, 6 commit p2,
    7-8 p1 again (committed), 9 commit p1."""
    log = MemoryLog(LogConfig(), now_ms=T)
    seq = {1: 0, 2: 0}

    def data(pid):
        recs = [(b"k", b"%d-%d" % (pid, seq[pid] + i)) for i in range(2)]
        if magic == 1:
            b = R.build_batch(recs, producer_id=pid, producer_epoch=0, base_sequence=seq[pid], timestamp_ms=T, transactional=True)
        else:
            from kcoord.kafka.batches import build_kafka_batch

            b = build_kafka_batch([(k, v, [], T) for k, v in recs], producer_id=pid, producer_epoch=0, base_sequence=seq[pid], transactional=True)
        seq[pid] += 2
        log.append_as_leader(b, 0, T)

    def end(pid, commit):
        log.append_control_as_leader(commit=commit, producer_id=pid, producer_epoch=0, coordinator_epoch=0, leader_epoch=0, now_ms=T)

    data(1)
    data(2)
    log.append_as_leader(R.build_batch([(b"k", b"plain")], timestamp_ms=T), 0, T)
    end(1, False)
    end(2, True)
    data(1)
    end(1, True)
    return log


def committed_values(log, fetch_offset=0):
    aborted = [(e.producer_id, e.first_offset) for e in log.txn_index.collect(fetch_offset, log.log_end_offset)]
    st = AssignedPartition(TP, position=fetch_offset, decode_from=fetch_offset, pending=deque([(log.read(fetch_offset, 1 << 20), aborted)]))
    decode_chunk(st, True)
    return [v for s in st.segments for v in s.values[s.start :]], st


@pytest.mark.parametrize("magic", [1, 2])
def test_read_committed_drops_the_aborted_transactions_batches_and_every_marker(magic):
    log = log_with_transactions(magic)
    values, st = committed_values(log)
    assert values == [b"2-0", b"2-1", b"plain", b"1-2", b"1-3"]
    assert st.decode_from == log.log_end_offset
    # read_uncommitted (no aborted list): every data record, still no marker
    st = AssignedPartition(TP, position=0, decode_from=0, pending=deque([log.read(0, 1 << 20)]))
    decode_chunk(st, True)
    assert [v for s in st.segments for v in s.values] == [b"1-0", b"1-1", b"2-0", b"2-1", b"plain", b"1-2", b"1-3"]


def test_a_chunk_starting_inside_an_aborted_transaction_still_drops_the_rest_of_it():
    log = log_with_transactions()
    values, _ = committed_values(log, fetch_offset=1)
    assert values == [b"2-0", b"2-1", b"plain", b"1-2", b"1-3"]


def test_the_position_moves_past_markers_and_dropped_batches_at_the_end():
    log = MemoryLog(LogConfig(), now_ms=T)
    log.append_as_leader(R.build_batch([(b"k", b"a")], timestamp_ms=T), 0, T)
    log.append_as_leader(R.build_batch([(b"k", b"x")], producer_id=4, producer_epoch=0, base_sequence=0, timestamp_ms=T, transactional=True), 0, T)
    log.append_control_as_leader(commit=False, producer_id=4, producer_epoch=0, coordinator_epoch=0, leader_epoch=0, now_ms=T)
    subs = SubscriptionState("earliest", lambda tps, ts: {})
    subs.assign([TP], {TP: 0})
    st = subs.state(TP)
    st.pending.append((log.read(0, 1 << 20), [(4, 1)]))
    collector = RecordCollector(subs, RequestStats("a", "b"), {"records_consumed": 0}, key_deserializer=None, value_deserializer=None, check_crcs=True)
    out = collector.collect(100, advance=True)
    assert [r.value for r in out[TP]] == [b"a"]
    assert st.position == 3 == log.log_end_offset  # lag 0: past the aborted batch and its marker
    assert collector.collect(100, advance=True) == {} and st.position == 3


def test_an_unknown_isolation_level_is_refused_before_anything_starts():
    with pytest.raises(ValueError, match="isolation_level"):
        Consumer("t", cluster=object(), isolation_level="committed")
