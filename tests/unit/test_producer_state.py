"""ProducerStateManager: idempotent-producer sequence and epoch rules."""

from __future__ import annotations

import pytest

from kcoord.log import ProducerCheck, ProducerStateManager
from kcoord.log.producer_state import CACHED_BATCHES
from kcoord.protocol.errors import ErrorCode, KafkaError
from kcoord.records import build_batch_columns, read_header, stamp


def header(pid: int, epoch: int, seq: int, n: int = 1, offset: int = 0):
    data = build_batch_columns([b"v"] * n, timestamp_ms=0, producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    return read_header(stamp(data, offset, 0))


class Producer:
    """Appends batches of one producer at increasing offsets, as the log would."""

    def __init__(self, state: ProducerStateManager, pid: int = 1, epoch: int = 0) -> None:
        self.state, self.pid, self.epoch = state, pid, epoch
        self.seq = 0
        self.offset = 0

    def next(self, n: int = 2):
        h = header(self.pid, self.epoch, self.seq, n, self.offset)
        return h

    def append(self, n: int = 2):
        h = self.next(n)
        assert self.state.check(h).ok
        self.state.update(h)
        self.seq += n
        self.offset += n
        return h


def test_non_idempotent_batches_are_always_ok_and_not_tracked():
    s = ProducerStateManager()
    for h in (header(-1, -1, -1), header(-1, 0, 5), header(3, 0, -1)):
        assert s.check(h) == ProducerCheck() and s.check(h).ok
        s.update(h)
    assert len(s) == 0


def test_unknown_producer_must_start_at_sequence_zero():
    s = ProducerStateManager()
    assert s.check(header(7, 0, 0)).ok
    bad = s.check(header(7, 0, 3))
    assert bad.error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and not bad.ok
    with pytest.raises(KafkaError) as err:
        bad.raise_for_error()
    assert err.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_next_sequence_is_ok_and_gaps_are_out_of_order():
    s = ProducerStateManager()
    p = Producer(s)
    p.append(3)  # seq 0..2
    assert s.check(header(1, 0, 3, 2)).ok
    assert s.check(header(1, 0, 5, 1)).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert s.check(header(1, 0, 2, 2)).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER  # overlaps


def test_cached_duplicate_reports_the_original_offset():
    s = ProducerStateManager()
    p = Producer(s)
    hs = [p.append(2) for _ in range(4)]
    for h in hs:
        again = header(1, 0, h.base_sequence, 2, offset=999)
        verdict = s.check(again)
        assert verdict.duplicate and verdict.duplicate_base_offset == h.base_offset and verdict.error is None


def test_only_a_cached_batch_is_a_duplicate_anything_else_behind_is_out_of_order():
    """Kafka's rule (ProducerStateEntry.findDuplicateBatch, ProducerAppendInfo.checkSequence):
    a batch is a duplicate only when its first and last sequence match one of the last five
    batches the producer wrote; any other sequence that is not the next one is
    OUT_OF_ORDER_SEQUENCE_NUMBER. Taking everything at or below the last sequence for a
    duplicate acknowledged batches that were never written (issue 32, finding 6)."""
    s = ProducerStateManager()
    p = Producer(s)
    hs = [p.append(1) for _ in range(CACHED_BATCHES + 3)]
    entry = s.get(1)
    assert len(entry.batches) == CACHED_BATCHES
    assert entry.batches[0].first_seq == 3
    older = s.check(header(1, 0, hs[0].base_sequence, 1))
    assert older.error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and not older.duplicate
    verdict = s.check(header(1, 0, hs[-1].base_sequence, 1))
    assert verdict.duplicate and verdict.duplicate_base_offset == hs[-1].base_offset


def test_a_batch_inside_a_cached_one_but_not_equal_to_it_is_out_of_order():
    s = ProducerStateManager()
    p = Producer(s)
    p.append(4)  # seq 0..3
    for first, n in ((0, 1), (1, 2), (2, 2), (0, 3), (3, 1)):
        verdict = s.check(header(1, 0, first, n))
        assert verdict.error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and not verdict.duplicate, (first, n)
    assert s.check(header(1, 0, 0, 4)).duplicate


def test_a_duplicate_must_match_the_epoch_too():
    s = ProducerStateManager()
    Producer(s, epoch=2).append(2)
    assert s.check(header(1, 2, 0, 2)).duplicate
    assert s.check(header(1, 3, 0, 2)).ok  # a new epoch starting at 0: new, not a duplicate
    assert s.check(header(1, 1, 0, 2)).error == ErrorCode.INVALID_PRODUCER_EPOCH


def test_lower_epoch_is_fenced():
    s = ProducerStateManager()
    Producer(s, epoch=3).append()
    verdict = s.check(header(1, 2, 0))
    assert verdict.error == ErrorCode.INVALID_PRODUCER_EPOCH
    assert s.check(header(1, 2, 2)).error == ErrorCode.INVALID_PRODUCER_EPOCH


def test_higher_epoch_must_restart_at_zero():
    s = ProducerStateManager()
    Producer(s, epoch=0).append(4)
    assert s.check(header(1, 1, 0)).ok
    assert s.check(header(1, 1, 4)).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    s.update(header(1, 1, 0, 2, offset=10))
    entry = s.get(1)
    assert entry.epoch == 1 and len(entry.batches) == 1  # the old epoch's batches are forgotten
    assert s.check(header(1, 1, 2)).ok
    assert s.check(header(1, 0, 4)).error == ErrorCode.INVALID_PRODUCER_EPOCH


def test_producers_are_independent():
    s = ProducerStateManager()
    Producer(s, pid=1).append(5)
    assert s.check(header(2, 0, 0)).ok
    assert s.check(header(2, 0, 5)).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_rebuild_snapshot_and_load_agree():
    s = ProducerStateManager()
    hs = []
    for pid in (1, 2):
        p = Producer(s, pid=pid)
        p.offset = pid * 100
        hs += [p.append(n) for n in (1, 2, 3, 1, 1, 2, 1)]
    rebuilt = ProducerStateManager()
    rebuilt.rebuild(hs)
    assert rebuilt == s
    snap = s.snapshot()
    assert snap[1]["epoch"] == 0 and len(snap[1]["batches"]) == CACHED_BATCHES
    loaded = ProducerStateManager()
    loaded.load({str(k): v for k, v in snap.items()})  # keys may come back as anything int-like
    assert loaded == s and loaded.get(2).last_seq == 10
    rebuilt.rebuild(hs[:3])
    assert rebuilt.get(1).last_seq == 5 and 2 not in rebuilt
    rebuilt.clear()
    assert len(rebuilt) == 0


def test_the_state_below_an_offset_plus_the_replay_from_it_is_the_whole_state():
    """What a follower starting over at the leader's log start takes (sim seed 9377)."""
    s = ProducerStateManager()
    gone, straddling, later = Producer(s, pid=1), Producer(s, pid=2), Producer(s, pid=3)
    hs = []
    for p, offset in ((gone, 0), (straddling, 10), (later, 30)):
        p.offset = offset
        hs += [p.append(2) for _ in range(4)]  # pid 1: 0-7, pid 2: 10-17, pid 3: 30-37
    below = s.snapshot_below(14)
    assert sorted(below) == [1, 2], "a producer whose batches all lie at or past the offset comes with the replay"
    assert [b[2] for b in below[2]["batches"]] == [10, 12]
    restored = ProducerStateManager()
    restored.load(below)
    restored.replay([h for h in hs if h.base_offset >= 14])
    assert restored == s
    assert restored.check(header(1, 0, 6, 2)).duplicate, "a retry of the gone producer's last batch is still a duplicate"
