"""The file log on open: reopen after a clean close, checkpoints, recovery from torn and
corrupt tails and bad indexes, and the directory lock. Tests taking ``where`` run on the
real disk and on the simulated one (tests/sim/disk.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kcoord.log import Log
from kcoord.log.checkpoint import DIRECTORY_ID, EPOCH_CHECKPOINT, HW_CHECKPOINT
from kcoord.log.fs import OsFileSystem
from kcoord.log.segment import Segment
from kcoord.protocol.errors import ErrorCode, KafkaError
from kcoord.records import HEADER_SIZE, build_batch_columns, iter_headers, read_header, stamp

from log_helpers import NOW, batch, fill, open_log, where  # noqa: F401  (where: a fixture)


# -- reopen and checkpoints ----------------------------------------------------------------


def test_reopen_after_clean_close_is_identical(where):
    log = where.open(segment_bytes=900)
    fill(log, 4, epoch=1)
    for seq in range(0, 12, 3):
        log.append_as_leader(batch(3, producer_id=77, producer_epoch=2, base_sequence=seq), leader_epoch=2)
    fill(log, 3, epoch=5)
    log.checkpoint_high_watermark(20)
    state = (log.log_start_offset, log.log_end_offset, log.high_watermark, log.epoch_cache.entries,
             log.producer_state.snapshot(), log.read(0, 1 << 20), log.segments)
    log.close()
    log.close()  # idempotent
    with pytest.raises(KafkaError):
        log.append_as_leader(batch(), leader_epoch=5)
    again = where.open()
    report = again.recovery_report
    assert report.clean_shutdown and not report.cut and not report.index_rebuilt and report.reason == ""
    assert (again.log_start_offset, again.log_end_offset, again.high_watermark, again.epoch_cache.entries,
            again.producer_state.snapshot(), again.read(0, 1 << 20)) == state[:6]
    assert [s.base_offset for s in again.segments] == [s.base_offset for s in state[6]]
    dup = again.append_as_leader(batch(3, producer_id=77, producer_epoch=2, base_sequence=9), leader_epoch=5)
    assert dup.duplicate
    for off in range(again.log_end_offset):
        assert again.read(off, 1) == log_read_one(state[5], off)
    again.close()


def log_read_one(data: bytes, offset: int) -> bytes:
    for pos, h in iter_headers(data):
        if h.base_offset <= offset <= h.last_offset:
            return data[pos : pos + h.size]
    raise AssertionError(offset)


def test_high_watermark_checkpoint(where):
    log = where.open()
    fill(log, 3)
    assert log.high_watermark == 0
    log.checkpoint_high_watermark(5)
    assert log.high_watermark == 5
    assert where.read_text(HW_CHECKPOINT).split() == ["0", "5"]
    log.checkpoint_high_watermark(50)  # clamped to the LEO
    assert log.high_watermark == 9
    log.close()
    assert where.open().high_watermark == 9


def test_epoch_checkpoint_missing_or_corrupt_is_rebuilt(where):
    log = where.open(segment_bytes=500)
    fill(log, 3, epoch=1)
    fill(log, 3, epoch=4)
    entries = log.epoch_cache.entries
    log.close()
    where.write_text(EPOCH_CHECKPOINT, "0\n7\nnot numbers\n")
    again = where.open()
    assert again.epoch_cache.entries == entries
    assert any("epoch" in n for n in again.recovery_report.notes)
    again.close()
    where.unlink(EPOCH_CHECKPOINT)
    assert where.open().epoch_cache.entries == entries


def test_offset_for_timestamp(where):
    log = where.open(segment_bytes=600)
    for i in range(8):
        log.append_as_leader(build_batch_columns([b"v"] * 3, timestamps=[100 * i, 100 * i + 10, 100 * i + 20]), leader_epoch=0)
    assert log.offset_for_timestamp(0) == (0, 0)
    assert log.offset_for_timestamp(305) == (10, 310)
    assert log.offset_for_timestamp(320) == (11, 320)
    assert log.offset_for_timestamp(321) == (12, 400)
    assert log.offset_for_timestamp(10**6) is None


class CountingFileSystem(OsFileSystem):
    """The real file system, recording every fsync (of files and directories)."""

    def __init__(self, calls: list) -> None:
        self.calls = calls

    def fsync(self, fd: int) -> None:
        self.calls.append(fd)
        os.fsync(fd)


def test_flush_policy_and_maybe_flush(tmp_path):
    calls = []
    fs = CountingFileSystem(calls)
    log = open_log(tmp_path, fs=fs, flush_messages=7)
    log.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW)  # writes the epoch checkpoint (fsyncs)
    calls.clear()
    log.append_as_leader(batch(3), leader_epoch=0, now_ms=NOW)
    assert calls == []
    log.append_as_leader(batch(3), leader_epoch=0, now_ms=NOW)  # 7 unflushed records
    assert len(calls) == 1
    log.close()
    timed = open_log(tmp_path / "t", fs=fs, flush_ms=100)
    timed.append_as_leader(batch(), leader_epoch=0, now_ms=NOW)
    timed.flush()
    calls.clear()
    timed.append_as_leader(batch(), leader_epoch=0, now_ms=NOW + 50)
    assert calls == [] and not timed.maybe_flush(NOW + 99)
    assert timed.maybe_flush(NOW + 100) and len(calls) == 1
    assert not timed.maybe_flush(NOW + 500)  # nothing new to flush
    timed.append_as_leader(batch(), leader_epoch=0, now_ms=NOW + 250)  # the last flush is 150 ms old
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
    again.append_as_leader(batch(), leader_epoch=0)
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
    base = data[pos + 7]
    data[pos + 7] = base - 2  # base offset is not covered by the CRC; it now goes back
    seg.write_bytes(bytes(data))
    again = open_log(tmp_path)
    # (A base offset corrupted upward would read as a gap, which compaction leaves too:
    # the next batch then overlaps it and the cut comes one batch later.)
    assert again.log_end_offset == base and again.recovery_report.corrupt_offset == base
    assert "discontiguous" in again.recovery_report.reason


def test_cut_in_active_segment_deletes_nothing_else_but_fixes_caches(tmp_path):
    log = open_log(tmp_path, segment_bytes=700)
    fill(log, 6, epoch=1)
    for seq in range(0, 6, 3):
        log.append_as_leader(batch(3, producer_id=3, producer_epoch=0, base_sequence=seq), leader_epoch=2)
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
    again.append_as_leader(batch(), leader_epoch=3)
    again.append_as_leader(batch(), leader_epoch=4)
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
    info = log.append_as_leader(batch(1), leader_epoch=0)
    assert read_header(log.read(0, 0)).base_offset == info.base_offset


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


def test_the_directory_id_is_kept_across_reopens_and_new_for_a_wiped_directory(where):
    """The id a replica reports so the controller can tell its directory from a wiped one:
    the same directory keeps it, an emptied one (and one whose id file is garbage) gets
    another."""
    log = where.open()
    first = log.directory_id
    assert first and where.exists(DIRECTORY_ID)
    fill(log, 2)
    log.close()
    same = where.open()
    assert same.directory_id == first
    same.close()
    for name in where.names():
        where.unlink(name)
    again = where.open()
    assert again.directory_id not in ("", first)
    again.close()
    where.write_text(DIRECTORY_ID, "\x00\x01 not an id")
    assert where.open().directory_id not in ("", first, again.directory_id)
