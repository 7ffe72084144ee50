"""MemoryLog: same behaviour as the file log, plus an explicit crash model."""

from __future__ import annotations

import pytest

from kcoord.log import Log, LogConfig, MemoryLog, OffsetOutOfRange
from kcoord.protocol.errors import ErrorCode, KafkaError
from kcoord.records import build_batch_columns, iter_headers, stamp


def batch(n: int = 2, **kw) -> bytes:
    return build_batch_columns([b"m" * 20] * n, timestamp_ms=5_000, **kw)


def test_unflushed_batches_are_lost_on_crash():
    log = MemoryLog(LogConfig(), now_ms=0)
    log.append_as_leader(batch(), leader_epoch=1)
    log.append_as_leader(batch(), leader_epoch=1)
    assert log.flushed_offset == 0
    log.flush()
    assert log.flushed_offset == 4
    log.append_as_leader(batch(), leader_epoch=2)
    assert log.flushed_offset == 4 and log.log_end_offset == 6
    after = log.crash()
    assert (after.log_start_offset, after.log_end_offset, after.flushed_offset) == (0, 4, 4)
    assert after.read(0, 1 << 20) == log.read(0, 1 << 20, max_offset=4)
    # epoch 2 was persisted in the cache; its batch is gone but it still starts at the LEO
    assert log.epoch_cache.entries == [(1, 0), (2, 4)]
    assert after.epoch_cache.entries == [(1, 0), (2, 4)]
    log.append_as_leader(batch(), leader_epoch=3)  # epoch 3 starts at 6, past the LEO after a crash
    assert log.crash().epoch_cache.entries == [(1, 0), (2, 4)]


def test_flush_messages_policy_decides_what_survives():
    log = MemoryLog(LogConfig(flush_messages=5), now_ms=0)
    for _ in range(3):
        log.append_as_leader(batch(2), leader_epoch=0)  # flushes when 5+ records are unflushed
    assert log.flushed_offset == 6
    log.append_as_leader(batch(2), leader_epoch=0)
    assert log.crash().log_end_offset == 6
    every = MemoryLog(LogConfig(flush_messages=1))
    every.append_as_leader(batch(), leader_epoch=0)
    assert every.crash().log_end_offset == 2


def test_flush_ms_policy():
    log = MemoryLog(LogConfig(flush_ms=100), now_ms=0)
    log.append_as_leader(batch(), leader_epoch=0, now_ms=50)
    assert log.flushed_offset == 0
    assert not log.maybe_flush(99)
    assert log.maybe_flush(100) and log.flushed_offset == 2
    log.append_as_leader(batch(), leader_epoch=0, now_ms=260)  # the last flush is 160 ms old
    assert log.flushed_offset == 4


def test_crash_restores_hw_checkpoint_clamped_to_kept_data():
    log = MemoryLog(LogConfig(flush_messages=1))
    log.append_as_leader(batch(), leader_epoch=0)
    log.checkpoint_high_watermark(2)
    log.append_as_leader(batch(), leader_epoch=0)
    assert log.high_watermark == 2
    assert log.crash().high_watermark == 2
    lossy = MemoryLog(LogConfig())
    lossy.append_as_leader(batch(), leader_epoch=0)
    lossy.checkpoint_high_watermark(2)
    assert lossy.crash().high_watermark == 0  # the data the HW covered was never flushed


def test_crash_rebuilds_producer_state_from_kept_batches():
    log = MemoryLog(LogConfig())
    log.append_as_leader(batch(2, producer_id=4, producer_epoch=0, base_sequence=0), leader_epoch=0)
    log.flush()
    lost = batch(2, producer_id=4, producer_epoch=0, base_sequence=2)
    log.append_as_leader(lost, leader_epoch=0)
    assert log.append_as_leader(lost, leader_epoch=0).duplicate
    after = log.crash()
    assert after.producer_state.get(4).last_seq == 1
    retry = after.append_as_leader(lost, leader_epoch=0)  # the producer's retry is now new again
    assert not retry.duplicate and retry.base_offset == 2


def test_truncation_is_durable_and_caches_follow():
    log = MemoryLog(LogConfig())
    for epoch in (1, 1, 2, 3):
        log.append_as_leader(batch(3), leader_epoch=epoch)
    log.checkpoint_high_watermark(12)
    log.truncate_to(7)
    assert (log.log_end_offset, log.high_watermark, log.flushed_offset) == (6, 6, 6)
    assert log.epoch_cache.entries == [(1, 0)]
    after = log.crash()
    assert after.log_end_offset == 6 and after.epoch_cache.entries == [(1, 0)] and after.high_watermark == 6


def test_truncate_fully_and_start_at():
    log = MemoryLog(LogConfig(flush_messages=1))
    log.append_as_leader(batch(), leader_epoch=0)
    log.truncate_fully_and_start_at(40)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark, log.size_bytes) == (40, 40, 40, 0)
    with pytest.raises(OffsetOutOfRange):
        log.read(0, 10)
    log.append_as_leader(batch(), leader_epoch=2)
    after = log.crash()
    assert (after.log_start_offset, after.log_end_offset) == (40, 42)
    assert after.epoch_cache.entries == [(2, 40)]


def test_same_results_as_the_file_log(tmp_path):
    cfg = LogConfig(segment_bytes=400, index_interval_bytes=64)
    file_log, mem = Log(tmp_path, cfg, now_ms=0), MemoryLog(cfg, now_ms=0)
    for i in range(30):
        data = batch(1 + i % 4, producer_id=1, producer_epoch=0, base_sequence=sum(1 + j % 4 for j in range(i)))
        for log in (file_log, mem):
            log.append_as_leader(data, leader_epoch=i // 10, now_ms=i)
    follower_data = stamp(batch(3), 73, 3) + stamp(batch(1), 76, 3)
    for log in (file_log, mem):
        log.append_as_follower(follower_data)
    for offset in range(0, 77, 3):
        for max_bytes in (0, 100, 500, 5000):
            for max_offset in (None, offset + 1, offset + 7, 77):
                assert file_log.read(offset, max_bytes, max_offset) == mem.read(offset, max_bytes, max_offset)
    for log in (file_log, mem):
        log.truncate_to(33)
    assert file_log.read(0, 1 << 20) == mem.read(0, 1 << 20)
    assert file_log.epoch_cache == mem.epoch_cache
    assert file_log.producer_state == mem.producer_state
    assert file_log.size_bytes == mem.size_bytes
    hs = [h for _, h in iter_headers(mem.read(0, 1 << 20), check_crc=True)]
    assert hs[-1].next_offset == mem.log_end_offset
    file_log.close()


def test_errors_match_the_file_log():
    log = MemoryLog(LogConfig(max_batch_bytes=100))
    with pytest.raises(KafkaError) as err:
        log.append_as_leader(batch(10), leader_epoch=0)
    assert err.value.code == ErrorCode.MESSAGE_TOO_LARGE
    log.append_as_leader(batch(1), leader_epoch=0)
    with pytest.raises(KafkaError) as err:
        log.append_as_follower(stamp(batch(1), 0, 0))  # before the LEO (a gap after it is allowed)
    assert err.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    log.close()
    log.close()
    with pytest.raises(KafkaError):
        log.append_as_leader(batch(1), leader_epoch=0)
    assert log.crash().log_end_offset == 1  # close flushed


def test_rolled_segments_become_durable_at_the_next_maybe_flush():
    size = len(batch())
    log = MemoryLog(LogConfig(segment_bytes=size * 3))
    for _ in range(4):
        log.append_as_leader(batch(), leader_epoch=0)
    assert [(s.base_offset, s.next_offset) for s in log.segments] == [(0, 6), (6, 8)]
    assert log.flushed_offset == 0  # not on the append path
    assert log.crash().log_end_offset == 0
    assert log.maybe_flush(0)  # the replica's timer: seals what was rolled
    assert log.flushed_offset == 6 and log.crash().log_end_offset == 6
    assert not log.maybe_flush(0)


def test_retention_deletes_whole_virtual_segments():
    size = len(batch())
    log = MemoryLog(LogConfig(segment_bytes=size * 2, retention_bytes=size * 3))
    for _ in range(7):
        log.append_as_leader(batch(), leader_epoch=0)
    assert [s.base_offset for s in log.segments] == [0, 4, 8, 12]
    assert log.apply_retention(0, high_watermark=4) == 1  # the HW pins the second segment
    assert log.apply_retention(0) == 1
    assert (log.log_start_offset, log.size_bytes) == (8, 3 * size)
    assert log.read(8, 1 << 20) == b"".join(log.read(o, 1) for o in (8, 10, 12))
    assert log.crash().log_start_offset == 8
