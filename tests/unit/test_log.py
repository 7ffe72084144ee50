"""The file log: append/read, rolls, retention, truncation, reopen, corruption on open."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kcoord.log import Log, LogConfig, OffsetOutOfRange
from kcoord.log.checkpoint import EPOCH_CHECKPOINT, HW_CHECKPOINT
from kcoord.log.segment import Segment
from kcoord.protocol.errors import ErrorCode, KafkaError
from kcoord.records import (
    HEADER_SIZE,
    CorruptRecordError,
    build_batch_columns,
    decode_batch,
    iter_headers,
    read_header,
    stamp,
)

NOW = 1_000_000


def batch(n: int = 3, size: int = 40, *, ts: int = NOW, tag: int = 0, **kw) -> bytes:
    """n records of ``size`` bytes; ``tag`` makes batches distinguishable."""
    return build_batch_columns([bytes([tag % 256]) * size] * n, timestamp_ms=ts, **kw)


def open_log(path: Path, now: int = NOW, **cfg) -> Log:
    cfg.setdefault("index_interval_bytes", 256)
    return Log(path, LogConfig(**cfg), now_ms=now)


def headers(data: bytes):
    return [h for _, h in iter_headers(data, check_crc=True)]


def fill(log: Log, count: int, *, epoch: int = 0, n: int = 3, now: int = NOW) -> list[bytes]:
    """Append ``count`` batches on the leader path; return them as stored (stamped)."""
    out = []
    for i in range(count):
        data = batch(n, tag=len(out) + log.log_end_offset)
        info = log.append(data, leader_epoch=epoch, now_ms=now)
        out.append(stamp(data, info.base_offset, epoch))
    return out


# -- append / read -------------------------------------------------------------------------


def test_leader_append_stamps_offsets_and_epochs(tmp_path):
    log = open_log(tmp_path)
    infos = [log.append(batch(n), leader_epoch=e, now_ms=NOW) for n, e in [(3, 0), (1, 0), (5, 2)]]
    assert [(i.base_offset, i.last_offset, i.record_count) for i in infos] == [(0, 2, 3), (3, 3, 1), (4, 8, 5)]
    assert all(not i.duplicate and i.log_append_time == NOW for i in infos)
    assert log.log_end_offset == 9
    data = log.read(0, 1 << 20)
    assert [(h.base_offset, h.leader_epoch, h.record_count) for h in headers(data)] == [(0, 0, 3), (3, 0, 1), (4, 2, 5)]
    assert log.epoch_cache.entries == [(0, 0), (2, 4)]
    # the record payload is untouched and still decodes
    assert [r.offset for r in decode_batch(data, 0).records()] == [0, 1, 2]


def test_read_returns_the_batch_containing_the_offset(tmp_path):
    log = open_log(tmp_path)
    stored = fill(log, 5)  # offsets 0..14, 3 per batch
    assert log.read(4, 1 << 20) == b"".join(stored[1:])
    assert log.read(3, 1 << 20) == b"".join(stored[1:])
    assert log.read(14, 1 << 20) == stored[4]
    assert log.read(15, 1 << 20) == b""  # LEO


def test_read_max_bytes_and_at_least_one_batch(tmp_path):
    log = open_log(tmp_path)
    stored = fill(log, 4)
    size = len(stored[0])
    assert log.read(0, size) == stored[0]
    assert log.read(0, size * 2 - 1) == stored[0]
    assert log.read(0, size * 2) == stored[0] + stored[1]
    assert log.read(0, 1) == stored[0]  # bigger than max_bytes, but the first batch always comes
    assert log.read(0, 0) == stored[0]
    assert log.read(3, 10) == stored[1]


def test_read_max_offset(tmp_path):
    log = open_log(tmp_path)
    stored = fill(log, 4)  # batches end at 2, 5, 8, 11
    assert log.read(0, 1 << 20, max_offset=6) == stored[0] + stored[1]
    assert log.read(0, 1 << 20, max_offset=5) == stored[0]  # batch 3..5 reaches offset 5
    assert log.read(0, 1 << 20, max_offset=2) == b""  # first batch not entirely below
    assert log.read(6, 1 << 20, max_offset=6) == b""
    assert log.read(0, 1, max_offset=3) == stored[0]
    assert log.read(0, 1 << 20, max_offset=100) == b"".join(stored)


def test_offset_out_of_range(tmp_path):
    log = open_log(tmp_path)
    fill(log, 2)
    with pytest.raises(OffsetOutOfRange) as err:
        log.read(7, 100)
    assert err.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert "[0, 6]" in str(err.value)
    assert isinstance(err.value, KafkaError)
    log.truncate_fully_and_start_at(50)
    with pytest.raises(OffsetOutOfRange):
        log.read(49, 100)
    assert log.read(50, 100) == b""


def test_roll_by_size_and_read_across_segments(tmp_path):
    log = open_log(tmp_path, segment_bytes=1000)
    stored = fill(log, 20)
    segs = log.segments
    assert len(segs) == 4  # 192-byte batches, 5 to a segment
    assert all(s.size_bytes <= 1000 for s in segs)
    assert [s.base_offset for s in segs[1:]] == [s.next_offset for s in segs[:-1]]
    assert log.read(0, 1 << 20) == b"".join(stored)
    for i, want in enumerate(stored):  # every batch from its own offsets, across boundaries
        for off in range(3 * i, 3 * i + 3):
            assert log.read(off, 1) == want
    assert log.size_bytes == sum(len(s) for s in stored)
    # reading continues into the next segment while max_bytes allows
    two = log.read(segs[1].base_offset - 3, 2 * len(stored[0]))
    assert headers(two)[1].base_offset == segs[1].base_offset


def test_roll_by_time(tmp_path):
    log = open_log(tmp_path, segment_ms=100)
    log.append(batch(), leader_epoch=0, now_ms=NOW)
    log.append(batch(), leader_epoch=0, now_ms=NOW + 99)
    assert len(log.segments) == 1
    log.append(batch(), leader_epoch=0, now_ms=NOW + 100)
    assert [s.base_offset for s in log.segments] == [0, 6]
    assert log.segments[1].created_ms == NOW + 100
    log.append(batch(), leader_epoch=0, now_ms=NOW + 150)
    assert len(log.segments) == 2


def test_message_too_large(tmp_path):
    log = open_log(tmp_path, max_batch_bytes=500)
    with pytest.raises(KafkaError) as err:
        log.append(batch(20), leader_epoch=0)
    assert err.value.code == ErrorCode.MESSAGE_TOO_LARGE
    assert log.log_end_offset == 0 and log.size_bytes == 0


def test_corrupt_crc_is_refused_and_nothing_appended(tmp_path):
    log = open_log(tmp_path)
    fill(log, 1)
    bad = bytearray(batch())
    bad[HEADER_SIZE + 3] ^= 0xFF
    with pytest.raises(CorruptRecordError) as err:
        log.append(bytes(bad), leader_epoch=0)
    assert err.value.code == ErrorCode.CORRUPT_MESSAGE
    follower_data = stamp(batch(), 3, 0) + stamp(bytes(bad), 6, 0)
    with pytest.raises(CorruptRecordError):
        log.append(follower_data)
    assert log.log_end_offset == 3
    assert len(headers(log.read(0, 1 << 20))) == 1


def test_leader_append_takes_exactly_one_batch(tmp_path):
    log = open_log(tmp_path)
    with pytest.raises(KafkaError) as err:
        log.append(batch() + batch(), leader_epoch=0)
    assert err.value.code == ErrorCode.INVALID_RECORD
    with pytest.raises(CorruptRecordError):
        log.append(batch()[:-1], leader_epoch=0)


def test_leader_append_with_stale_epoch_is_fenced(tmp_path):
    log = open_log(tmp_path)
    log.append(batch(), leader_epoch=3)
    with pytest.raises(KafkaError) as err:
        log.append(batch(), leader_epoch=2)
    assert err.value.code == ErrorCode.FENCED_LEADER_EPOCH
    assert log.log_end_offset == 3


def test_follower_append_keeps_bytes_and_checks_contiguity(tmp_path):
    leader = open_log(tmp_path / "leader", segment_bytes=700)
    stored = fill(leader, 6, epoch=4)
    follower = open_log(tmp_path / "follower", segment_bytes=700)
    chunk = leader.read(0, 3 * len(stored[0]))
    info = follower.append(chunk)
    assert (info.base_offset, info.last_offset, info.record_count, info.size_bytes) == (0, 8, 9, len(chunk))
    with pytest.raises(KafkaError) as err:  # not at our LEO
        follower.append(stored[4])
    assert err.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    with pytest.raises(KafkaError) as err:  # a gap between batches
        follower.append(stored[3] + stored[5])
    assert err.value.code == ErrorCode.INVALID_RECORD
    with pytest.raises(CorruptRecordError):  # torn
        follower.append(stored[3] + stored[4][:-5])
    with pytest.raises(KafkaError):
        follower.append(b"")
    assert follower.log_end_offset == 9
    follower.append(b"".join(stored[3:]))  # splits across segments as needed
    assert follower.read(0, 1 << 20) == leader.read(0, 1 << 20)
    assert all(s.size_bytes <= 700 for s in follower.segments)
    assert follower.epoch_cache.entries == [(4, 0)]


def test_follower_append_can_skip_crc(tmp_path):
    log = open_log(tmp_path)
    bad = bytearray(stamp(batch(), 0, 1))
    bad[HEADER_SIZE] ^= 1
    with pytest.raises(CorruptRecordError):
        log.append(bytes(bad))
    log.append(bytes(bad), verify_crc=False)
    assert log.log_end_offset == 3


# -- idempotence on the leader path --------------------------------------------------------


def test_duplicate_batch_is_not_appended_again(tmp_path):
    log = open_log(tmp_path)
    first = batch(2, producer_id=9, producer_epoch=0, base_sequence=0)
    second = batch(2, producer_id=9, producer_epoch=0, base_sequence=2)
    assert log.append(first, leader_epoch=0).base_offset == 0
    assert log.append(second, leader_epoch=0).base_offset == 2
    dup = log.append(first, leader_epoch=0)
    assert dup.duplicate and (dup.base_offset, dup.last_offset) == (0, 1)
    assert log.log_end_offset == 4
    with pytest.raises(KafkaError) as err:
        log.append(batch(2, producer_id=9, producer_epoch=0, base_sequence=7), leader_epoch=0)
    assert err.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    log.append(batch(1, producer_id=9, producer_epoch=1, base_sequence=0), leader_epoch=0)
    with pytest.raises(KafkaError) as err:
        log.append(batch(1, producer_id=9, producer_epoch=0, base_sequence=4), leader_epoch=0)
    assert err.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert log.log_end_offset == 5


# -- retention -----------------------------------------------------------------------------


def test_retention_by_size(tmp_path):
    log = open_log(tmp_path, segment_bytes=1000, retention_bytes=2500)
    stored = fill(log, 20)
    before = log.segments
    deleted = log.apply_retention(NOW)
    assert deleted > 0
    after = log.segments
    assert after == before[deleted:]
    assert log.size_bytes >= 2500 and log.size_bytes - after[0].size_bytes < 2500
    assert log.log_start_offset == after[0].base_offset
    with pytest.raises(OffsetOutOfRange):
        log.read(0, 100)
    i = log.log_start_offset // 3
    assert log.read(log.log_start_offset, 1 << 20) == b"".join(stored[i:])
    assert not (tmp_path / f"{0:020d}.log").exists()


def test_retention_by_time_and_high_watermark(tmp_path):
    log = open_log(tmp_path, segment_bytes=700, retention_ms=1000)
    for i in range(12):
        log.append(batch(ts=NOW + 100 * i), leader_epoch=0, now_ms=NOW + 100 * i)
    segs = log.segments
    assert len(segs) >= 4
    assert log.apply_retention(NOW + 1000) == 0  # nothing older than 1000 ms yet
    cutoff = NOW + 2000
    # segments whose newest record is older than cutoff - 1000 can go, but the HW pins them
    expired = [s for s in segs[:-1] if cutoff - s.max_timestamp > 1000]
    assert len(expired) >= 2
    hw = expired[0].next_offset
    assert log.apply_retention(cutoff, high_watermark=hw) == 1
    assert log.log_start_offset == hw
    assert log.apply_retention(cutoff) == len(expired) - 1
    assert log.log_start_offset == expired[-1].next_offset
    # the active segment is never deleted, even when everything is expired
    log.apply_retention(NOW + 10**9)
    assert len(log.segments) == 1 and log.log_end_offset == 36


def test_retention_advances_epoch_cache_start(tmp_path):
    log = open_log(tmp_path, segment_bytes=700, retention_bytes=0)
    fill(log, 4, epoch=1)
    fill(log, 4, epoch=2)
    assert [s.base_offset for s in log.segments] == [0, 9, 18]  # 3 batches of 3 per segment
    assert log.epoch_cache.entries == [(1, 0), (2, 12)]
    assert log.apply_retention(NOW) == 2
    assert log.log_start_offset == 18
    assert log.epoch_cache.entries == [(2, 18)]  # epoch 1 is gone, epoch 2 clipped
    log.close()
    assert open_log(tmp_path).epoch_cache.entries == [(2, 18)]


# -- truncation ----------------------------------------------------------------------------


def test_truncate_mid_segment(tmp_path):
    log = open_log(tmp_path)
    stored = fill(log, 5)
    log.checkpoint_high_watermark(15)
    log.truncate_to(7)  # inside batch 6..8: that batch goes entirely
    assert log.log_end_offset == 6
    assert log.high_watermark == 6
    assert log.read(0, 1 << 20) == b"".join(stored[:2])
    assert log.size_bytes == sum(len(s) for s in stored[:2])
    log.truncate_to(100)  # no-op beyond LEO
    assert log.log_end_offset == 6
    fill(log, 1)
    assert log.log_end_offset == 9


def test_truncate_at_and_across_segment_boundaries(tmp_path):
    log = open_log(tmp_path, segment_bytes=1000)
    stored = fill(log, 20)
    segs = log.segments
    boundary = segs[2].base_offset
    log.truncate_to(boundary)
    assert log.log_end_offset == boundary
    assert [s.base_offset for s in log.segments] == [s.base_offset for s in segs[:3]]
    assert log.segments[-1].size_bytes == 0
    assert log.read(0, 1 << 20) == b"".join(stored[: boundary // 3])
    log.truncate_to(4)  # across segments, mid batch
    assert log.log_end_offset == 3
    assert len(log.segments) == 1
    assert sorted(p.name for p in tmp_path.glob("*.log")) == [f"{0:020d}.log"]
    fill(log, 3)
    assert log.log_end_offset == 12
    log.truncate_to(0)
    assert log.log_end_offset == 0 and log.size_bytes == 0


def test_truncation_fixes_epoch_cache_and_producer_state(tmp_path):
    log = open_log(tmp_path, segment_bytes=600)
    for seq in range(0, 10, 2):
        log.append(batch(2, producer_id=5, producer_epoch=0, base_sequence=seq), leader_epoch=1)
    for seq in range(10, 14, 2):
        log.append(batch(2, producer_id=5, producer_epoch=0, base_sequence=seq), leader_epoch=3)
    assert log.epoch_cache.entries == [(1, 0), (3, 10)]
    log.truncate_to(9)
    assert log.epoch_cache.entries == [(1, 0)]
    assert log.log_end_offset == 8
    entry = log.producer_state.get(5)
    assert entry.last_seq == 7 and entry.batches[-1].last_offset == 7
    # the producer's retry of sequence 8..9 is now new, not a duplicate
    info = log.append(batch(2, producer_id=5, producer_epoch=0, base_sequence=8), leader_epoch=4)
    assert not info.duplicate and info.base_offset == 8


def test_truncate_fully_and_start_at(tmp_path):
    log = open_log(tmp_path, segment_bytes=800)
    fill(log, 10, epoch=2)
    log.checkpoint_high_watermark(20)
    log.truncate_fully_and_start_at(1000)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (1000, 1000, 1000)
    assert log.size_bytes == 0 and log.epoch_cache.entries == [] and len(log.producer_state) == 0
    assert log.read(1000, 10) == b""
    stored = fill(log, 2, epoch=3)
    assert log.read(1000, 1 << 20) == b"".join(stored)
    assert log.epoch_cache.entries == [(3, 1000)]
    log.close()
    log = open_log(tmp_path)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (1000, 1006, 1000)
    log.truncate_fully_and_start_at(0)
    assert log.log_end_offset == 0


# -- reopen and checkpoints ----------------------------------------------------------------


def test_reopen_after_clean_close_is_identical(tmp_path):
    log = open_log(tmp_path, segment_bytes=900)
    fill(log, 4, epoch=1)
    for seq in range(0, 12, 3):
        log.append(batch(3, producer_id=77, producer_epoch=2, base_sequence=seq), leader_epoch=2)
    fill(log, 3, epoch=5)
    log.checkpoint_high_watermark(20)
    state = (log.log_start_offset, log.log_end_offset, log.high_watermark, log.epoch_cache.entries,
             log.producer_state.snapshot(), log.read(0, 1 << 20), log.segments)
    log.close()
    log.close()  # idempotent
    with pytest.raises(KafkaError):
        log.append(batch(), leader_epoch=5)
    again = open_log(tmp_path)
    report = again.recovery_report
    assert report.clean_shutdown and not report.cut and not report.index_rebuilt and report.reason == ""
    assert (again.log_start_offset, again.log_end_offset, again.high_watermark, again.epoch_cache.entries,
            again.producer_state.snapshot(), again.read(0, 1 << 20)) == state[:6]
    assert [s.base_offset for s in again.segments] == [s.base_offset for s in state[6]]
    dup = again.append(batch(3, producer_id=77, producer_epoch=2, base_sequence=9), leader_epoch=5)
    assert dup.duplicate
    for off in range(again.log_end_offset):
        assert again.read(off, 1) == log_read_one(state[5], off)
    again.close()


def log_read_one(data: bytes, offset: int) -> bytes:
    for pos, h in iter_headers(data):
        if h.base_offset <= offset <= h.last_offset:
            return data[pos : pos + h.size]
    raise AssertionError(offset)


def test_high_watermark_checkpoint(tmp_path):
    log = open_log(tmp_path)
    fill(log, 3)
    assert log.high_watermark == 0
    log.checkpoint_high_watermark(5)
    assert log.high_watermark == 5
    assert (tmp_path / HW_CHECKPOINT).read_text().split() == ["0", "5"]
    log.checkpoint_high_watermark(50)  # clamped to the LEO
    assert log.high_watermark == 9
    log.close()
    assert open_log(tmp_path).high_watermark == 9


def test_epoch_checkpoint_missing_or_corrupt_is_rebuilt(tmp_path):
    log = open_log(tmp_path, segment_bytes=500)
    fill(log, 3, epoch=1)
    fill(log, 3, epoch=4)
    entries = log.epoch_cache.entries
    log.close()
    (tmp_path / EPOCH_CHECKPOINT).write_text("0\n7\nnot numbers\n")
    again = open_log(tmp_path)
    assert again.epoch_cache.entries == entries
    assert any("epoch" in n for n in again.recovery_report.notes)
    again.close()
    os.unlink(tmp_path / EPOCH_CHECKPOINT)
    assert open_log(tmp_path).epoch_cache.entries == entries


def test_offset_for_timestamp(tmp_path):
    log = open_log(tmp_path, segment_bytes=600)
    for i in range(8):
        log.append(build_batch_columns([b"v"] * 3, timestamps=[100 * i, 100 * i + 10, 100 * i + 20]), leader_epoch=0)
    assert log.offset_for_timestamp(0) == (0, 0)
    assert log.offset_for_timestamp(305) == (10, 310)
    assert log.offset_for_timestamp(320) == (11, 320)
    assert log.offset_for_timestamp(321) == (12, 400)
    assert log.offset_for_timestamp(10**6) is None


def test_flush_policy_and_maybe_flush(tmp_path, monkeypatch):
    calls = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd))[1])
    log = open_log(tmp_path, flush_messages=7)
    log.append(batch(1), leader_epoch=0, now_ms=NOW)  # writes the epoch checkpoint (fsyncs)
    calls.clear()
    log.append(batch(3), leader_epoch=0, now_ms=NOW)
    assert calls == []
    log.append(batch(3), leader_epoch=0, now_ms=NOW)  # 7 unflushed records
    assert len(calls) == 1
    log.close()
    timed = open_log(tmp_path / "t", flush_ms=100)
    timed.append(batch(), leader_epoch=0, now_ms=NOW)
    timed.flush()
    calls.clear()
    timed.append(batch(), leader_epoch=0, now_ms=NOW + 50)
    assert calls == [] and not timed.maybe_flush(NOW + 99)
    assert timed.maybe_flush(NOW + 100) and len(calls) == 1
    assert not timed.maybe_flush(NOW + 500)  # nothing new to flush
    timed.append(batch(), leader_epoch=0, now_ms=NOW + 250)  # the last flush is 150 ms old
    assert len(calls) == 2


# -- recovery from damage ------------------------------------------------------------------


def active_segment(path: Path) -> Path:
    return sorted(path.glob("*.log"))[-1]


def test_flipped_bytes_in_a_middle_batch_cut_it_and_the_rest(tmp_path):
    log = open_log(tmp_path, segment_bytes=1000)
    stored = fill(log, 14)  # 5 + 5 + 4 batches
    seg_base = log.segments[-1].base_offset
    log.close()
    seg = active_segment(tmp_path)
    data = bytearray(seg.read_bytes())
    positions = [p for p, _ in iter_headers(bytes(data))]
    victim = 2  # third batch of the active segment
    data[positions[victim] + HEADER_SIZE + 5] ^= 0x55
    data[positions[victim] + HEADER_SIZE + 6] ^= 0x55
    seg.write_bytes(bytes(data))
    again = open_log(tmp_path)
    report = again.recovery_report
    bad_offset = seg_base + 3 * victim
    assert report.cut and report.corrupt_offset == bad_offset
    assert report.corrupt_position == positions[victim] and report.corrupt_segment == seg_base
    assert str(bad_offset) in report.reason and "CRC" in report.reason
    assert report.truncated_bytes == len(data) - positions[victim]
    assert again.log_end_offset == bad_offset
    assert again.read(0, 1 << 20) == b"".join(stored[: bad_offset // 3])
    again.append(batch(), leader_epoch=0)
    again.close()
    assert not open_log(tmp_path).recovery_report.cut


def test_torn_write_with_garbage_is_cut(tmp_path):
    log = open_log(tmp_path, segment_bytes=1500)
    stored = fill(log, 10)
    leo_before = log.log_end_offset
    log.close()
    seg = active_segment(tmp_path)
    size = seg.stat().st_size
    with open(seg, "r+b") as f:  # the last batch was half written, then junk followed
        f.truncate(size - 30)
        f.seek(0, 2)
        f.write(os.urandom(77))
    os.unlink(tmp_path / ".kcoord-clean-shutdown")
    again = open_log(tmp_path)
    report = again.recovery_report
    assert report.cut and not report.clean_shutdown
    assert again.log_end_offset == leo_before - 3 == report.corrupt_offset
    assert report.truncated_bytes == len(stored[-1]) - 30 + 77
    assert again.read(0, 1 << 20) == b"".join(stored[:-1])
    assert seg.stat().st_size == size - len(stored[-1])


def test_torn_header_is_cut(tmp_path):
    log = open_log(tmp_path)
    stored = fill(log, 3)
    log.close()
    seg = active_segment(tmp_path)
    with open(seg, "ab") as f:
        f.write(stamp(batch(), 9, 0)[:7])  # not even a length prefix
    again = open_log(tmp_path)
    assert again.recovery_report.truncated_bytes == 7
    assert again.recovery_report.corrupt_offset == 9
    assert again.log_end_offset == 9 and again.read(0, 1 << 20) == b"".join(stored)


def test_corrupt_base_offset_outside_crc_is_caught_by_contiguity(tmp_path):
    log = open_log(tmp_path)
    fill(log, 4)
    log.close()
    seg = active_segment(tmp_path)
    data = bytearray(seg.read_bytes())
    pos = [p for p, _ in iter_headers(bytes(data))][2]
    data[pos + 7] ^= 0x01  # base offset is not covered by the CRC
    seg.write_bytes(bytes(data))
    again = open_log(tmp_path)
    assert again.log_end_offset == 6 and again.recovery_report.corrupt_offset == 6
    assert "discontiguous" in again.recovery_report.reason


def test_cut_in_active_segment_deletes_nothing_else_but_fixes_caches(tmp_path):
    log = open_log(tmp_path, segment_bytes=700)
    fill(log, 6, epoch=1)
    for seq in range(0, 6, 3):
        log.append(batch(3, producer_id=3, producer_epoch=0, base_sequence=seq), leader_epoch=2)
    log.checkpoint_high_watermark(log.log_end_offset)
    leo = log.log_end_offset
    log.close()
    seg = active_segment(tmp_path)
    data = seg.read_bytes()
    last = [p for p, _ in iter_headers(data)][-1]
    seg.write_bytes(data[: last + 20])
    again = open_log(tmp_path)
    assert again.log_end_offset == leo - 3
    assert again.high_watermark == leo - 3
    assert again.producer_state.get(3).last_seq == 2
    assert again.epoch_cache.entries == [(1, 0), (2, 18)]
    # a cut batch that was the first of its epoch: the epoch still starts at the new LEO
    again.append(batch(), leader_epoch=3)
    again.append(batch(), leader_epoch=4)
    assert again.epoch_cache.entries == [(1, 0), (2, 18), (3, 21), (4, 24)]
    again.close()
    seg = active_segment(tmp_path)
    data = seg.read_bytes()
    second_last = [p for p, _ in iter_headers(data)][-2]
    with open(seg, "r+b") as f:  # tear epoch 3's batch: epoch 4's entry is past the LEO now
        f.truncate(second_last + 10)
    third = open_log(tmp_path)
    assert third.log_end_offset == 21 and third.epoch_cache.entries == [(1, 0), (2, 18), (3, 21)]


def test_epoch_recorded_at_the_leo_survives_reopen(tmp_path):
    log = open_log(tmp_path)
    fill(log, 2, epoch=1)
    log.epoch_cache.assign(2, log.log_end_offset)  # a new leader records its epoch first
    log.close()
    again = open_log(tmp_path)
    assert again.epoch_cache.entries == [(1, 0), (2, 6)]
    assert again.epoch_cache.end_offset_for(1, again.log_end_offset) == (1, 6)


def crash(log: Log) -> None:
    """Leave ``log`` as a killed process would: files as written, no shutdown marker."""
    for seg in log._segments:
        seg.close()
    log._lock.release()


def test_rolled_segments_are_synced_off_the_append_path(tmp_path, monkeypatch):
    log = open_log(tmp_path, segment_bytes=1000)
    synced = []
    real = Segment.flush
    monkeypatch.setattr(Segment, "flush", lambda seg, **kw: (synced.append(seg.base_offset), real(seg, **kw))[1])
    fill(log, 15)  # three rolls
    assert [s.base_offset for s in log.segments] == [0, 15, 30]
    assert synced == []  # no segment was fsynced while appending
    assert log.maybe_flush(NOW)
    assert synced == [0, 15]
    assert (tmp_path / "recovery-point-checkpoint").read_text().split() == ["0", "30"]
    assert not log.maybe_flush(NOW)


def test_unsynced_rolled_segments_are_verified_after_a_crash(tmp_path):
    log = open_log(tmp_path, segment_bytes=1000)
    stored = fill(log, 14)  # segments of 5, 5, 4 batches; none synced yet
    crash(log)
    middle = sorted(tmp_path.glob("*.log"))[1]
    data = bytearray(middle.read_bytes())
    data[-5] ^= 0xFF  # last batch of the middle segment
    middle.write_bytes(bytes(data))
    again = open_log(tmp_path, segment_bytes=1000)
    report = again.recovery_report
    assert report.segments_scanned == 2 and report.corrupt_offset == 27  # 0 and 15; 30 goes unread
    assert report.deleted_segments == [30]
    assert again.log_end_offset == 27 and again.read(0, 1 << 20) == b"".join(stored[:9])
    # recovery synced what it kept: after another crash only the active segment is scanned
    crash(again)
    assert open_log(tmp_path).recovery_report.segments_scanned == 1


def test_missing_or_corrupt_index_is_rebuilt(tmp_path):
    log = open_log(tmp_path, segment_bytes=1000, index_interval_bytes=100)
    stored = fill(log, 30)
    assert len(log.segments) >= 3
    full = log.read(0, 1 << 20)
    log.close()
    indexes = sorted(tmp_path.glob("*.index"))
    good = [p.read_bytes() for p in indexes]
    os.unlink(indexes[0])  # missing (an older segment)
    indexes[1].write_bytes(good[1][:-3])  # wrong size
    indexes[-1].write_bytes(good[-1][8:] + good[-1][:8])  # consistent size, wrong order (active)
    again = open_log(tmp_path, index_interval_bytes=100)
    report = again.recovery_report
    assert report.index_rebuilt and not report.cut
    assert set(report.rebuilt_indexes) == {int(indexes[i].stem) for i in (0, 1, -1)}
    assert [p.read_bytes() for p in sorted(tmp_path.glob("*.index"))] == good
    assert again.read(0, 1 << 20) == full
    for i, want in enumerate(stored):
        assert again.read(3 * i + 1, 1) == want
    # an index that passes the cheap checks but points at the wrong bytes
    again.close()
    last_rel = int.from_bytes(good[0][-8:-4], "big")
    indexes[0].write_bytes(good[0][:-8] + (last_rel + 1).to_bytes(4, "big") + good[0][-4:])
    third = open_log(tmp_path, index_interval_bytes=100)
    assert int(indexes[0].stem) in third.recovery_report.rebuilt_indexes
    assert third.read(0, 1 << 20) == full


def test_stray_files_are_cleaned_up(tmp_path):
    log = open_log(tmp_path)
    fill(log, 2)
    log.close()
    (tmp_path / "leader-epoch-checkpoint.tmp").write_text("junk")
    (tmp_path / f"{999:020d}.index").write_bytes(b"")
    again = open_log(tmp_path)
    assert not (tmp_path / "leader-epoch-checkpoint.tmp").exists()
    assert not (tmp_path / f"{999:020d}.index").exists()
    assert again.log_end_offset == 6


def test_a_directory_is_open_in_one_log_at_a_time(tmp_path):
    log = open_log(tmp_path)
    with pytest.raises(KafkaError) as err:
        open_log(tmp_path)
    assert err.value.code == ErrorCode.KAFKA_STORAGE_ERROR and "already open" in str(err.value)
    log.close()
    with open_log(tmp_path) as again:
        assert again.log_end_offset == 0


def test_empty_directory_and_header_only_reads(tmp_path):
    log = open_log(tmp_path / "new" / "dir")
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark, log.size_bytes) == (0, 0, 0, 0)
    assert log.read(0, 100) == b""
    assert log.offset_for_timestamp(0) is None
    info = log.append(batch(1), leader_epoch=0)
    assert read_header(log.read(0, 0)).base_offset == info.base_offset


# -- config --------------------------------------------------------------------------------


def test_config_from_topic_config():
    cfg = LogConfig.from_topic_config(
        {"segment.bytes": "1048576", "retention.ms": -1, "flush.messages": "1", "flush.ms": "", "cleanup.policy": "delete"}
    )
    assert cfg.segment_bytes == 1 << 20 and cfg.retention_ms == -1 and cfg.flush_messages == 1 and cfg.flush_ms is None
    assert LogConfig.from_topic_config({"flush.messages": str(2**63 - 1)}).flush_messages is None
    assert LogConfig.from_topic_config({}) == LogConfig()
    assert LogConfig.from_topic_config(cfg.to_topic_config()) == cfg


@pytest.mark.parametrize(
    "key,value",
    [("segment.bytes", "abc"), ("segment.bytes", "0"), ("segment.bytes", str(2**31)), ("retention.ms", "-2"),
     ("max.message.bytes", True), ("flush.messages", "0"), ("index.interval.bytes", 1.5), ("segment.ms", "")],
)
def test_config_bad_values_name_the_key(key, value):
    with pytest.raises(KafkaError) as err:
        LogConfig.from_topic_config({key: value})
    assert err.value.code == ErrorCode.INVALID_CONFIG and key in str(err.value)


def test_opening_waits_for_a_lock_holder_that_goes_away(tmp_path):
    """A replica restarted by Ray may open its directory while the old process is still
    exiting: with ``lock_wait_s`` the open succeeds once the lock is dropped."""
    import subprocess
    import sys

    holder = subprocess.Popen(
        [sys.executable, "-c", (
            "import fcntl, os, sys, time\n"
            f"fd = os.open({str(tmp_path / '.lock')!r}, os.O_RDWR | os.O_CREAT)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\n"
            "print('locked', flush=True)\n"
            "sys.stdin.readline()\n"
        )],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(KafkaError) as err:
            Log(tmp_path, lock_wait_s=0.2)
        assert err.value.code == ErrorCode.KAFKA_STORAGE_ERROR and "after waiting 0.2 s" in str(err.value)
        holder.stdin.write("exit\n")
        holder.stdin.flush()  # the holder exits while the next open is waiting
        with Log(tmp_path, lock_wait_s=30) as log:
            assert log.log_end_offset == 0
    finally:
        holder.kill()
        holder.wait()
