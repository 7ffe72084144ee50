"""I/O errors under the real Log (Kafka's KIP-112 behaviour), injected through SimDisk.

For each place the log writes -- segment appends (leader and replicated), rolls, the HW,
leader-epoch and recovery-point checkpoints, producer snapshots, fsyncs, renames,
truncation, retention, close, reads, open -- an ENOSPC or EIO there must make the call
raise LogStorageError (KAFKA_STORAGE_ERROR, with the errno), leave the log offline (every
later call raises the same), and the directory must reopen -- after a process restart or a
power loss -- as a consistent log holding everything that was durable before the fault.
"""

from __future__ import annotations

import errno
import random
import zlib
from dataclasses import dataclass
from typing import Callable

import pytest

from kcoord.log import Log, LogConfig, LogStorageError
from kcoord.log.checkpoint import EPOCH_CHECKPOINT, HW_CHECKPOINT, read_epochs
from kcoord.protocol.errors import ErrorCode, KafkaError
from kcoord.records import iter_headers, stamp

from log_helpers import NOW, assert_consistent, batch, fill, stored_batches
from sim.disk import SimDisk

DIR = "/n1/t-0"


def config(**kw) -> LogConfig:
    kw.setdefault("segment_bytes", 1000)
    return LogConfig(index_interval_bytes=64, **kw)


def durable_log(disk: SimDisk, **kw) -> tuple[Log, list[bytes]]:
    """A log whose first 6 batches (offsets 0..17, epoch 1, HW 9) are durable, plus two
    more (18..23) that are not."""
    log = Log(DIR, config(**kw), now_ms=NOW, fs=disk)
    stored = fill(log, 6, epoch=1)
    log.checkpoint_high_watermark(9)
    log.flush()
    stored += fill(log, 2, epoch=1)
    return log, stored


def assert_offline(log: Log, err: int) -> None:
    """Every operation now raises the storage error (and reads nothing from the disk)."""
    assert log.offline and log.offline_error.errno == err and log.offline_error.code == ErrorCode.KAFKA_STORAGE_ERROR
    calls: list[Callable[[], object]] = [
        lambda: log.append_as_leader(batch(), leader_epoch=5, now_ms=NOW),
        lambda: log.append_as_follower(stamp(batch(), log.log_end_offset, 5), now_ms=NOW),
        lambda: log.read(0, 100),
        lambda: log.locate(0, 100),
        lambda: log.offset_for_timestamp(0),
        lambda: log.flush(),
        lambda: log.maybe_flush(NOW),
        lambda: log.truncate_to(3),
        lambda: log.truncate_fully_and_start_at(1000),
        lambda: log.apply_retention(NOW),
        lambda: log.checkpoint_high_watermark(1),
        lambda: log.epoch_cache.assign(9, log.log_end_offset),
        lambda: log.segments,
    ]
    for call in calls:
        with pytest.raises(LogStorageError) as exc:
            call()
        assert exc.value.code == ErrorCode.KAFKA_STORAGE_ERROR and exc.value.errno == err
        assert exc.value.message == log.offline_error.message
    assert log.epoch_cache.latest_epoch < 9


@dataclass
class Case:
    op: str  # the SimDisk operation that fails
    pattern: str  # on which paths
    action: Callable[[Log], object]  # the Log call that hits it
    setup: Callable[[Log], object] = lambda log: None  # before the fault is armed
    floor: int = 18  # durable batches below this must survive (the action may remove those above)
    start_may_move: bool = False  # the action removes data from the front
    config: dict | None = None


def record_appends(log: Log, appended: dict[int, bytes]) -> None:
    """Note every batch the action tries to append ({base offset: bytes as stored})."""
    as_leader, as_follower = log.append_as_leader, log.append_as_follower

    def append_as_leader(data, leader_epoch, *args, **kw):
        appended[log.log_end_offset] = stamp(data, log.log_end_offset, leader_epoch)
        return as_leader(data, leader_epoch, *args, **kw)

    def append_as_follower(data, *args, **kw):
        for position, h in iter_headers(data):
            appended[h.base_offset] = bytes(data[position : position + h.size])
        return as_follower(data, *args, **kw)

    log.append_as_leader = append_as_leader
    log.append_as_follower = append_as_follower


def roll(log: Log) -> None:
    """Append until the active segment rolls."""
    segments = len(log._segments)
    while len(log._segments) == segments:
        fill(log, 1, epoch=1)


CASES = {
    "leader append": Case("write", "*.log", lambda log: log.append_as_leader(batch(), leader_epoch=1, now_ms=NOW)),
    "replicated append": Case("write", "*.log", lambda log: log.append_as_follower(stamp(batch(), 24, 1) + stamp(batch(), 27, 1), now_ms=NOW)),
    "new epoch's checkpoint on append": Case("write", f"*/{EPOCH_CHECKPOINT}.tmp", lambda log: log.append_as_leader(batch(), leader_epoch=2, now_ms=NOW)),
    "new epoch's checkpoint on becoming leader": Case("write", f"*/{EPOCH_CHECKPOINT}.tmp", lambda log: log.epoch_cache.assign(2, log.log_end_offset)),
    "producer snapshot at a roll": Case("write", "*.producer-snapshot.tmp", roll),
    "new segment at a roll": Case("open", "*.log", roll),
    "directory fsync at a roll": Case("fsync_dir", DIR, roll),
    "HW checkpoint write": Case("write", f"*/{HW_CHECKPOINT}.tmp", lambda log: log.checkpoint_high_watermark(20)),
    "HW checkpoint fsync": Case("fsync", f"*/{HW_CHECKPOINT}.tmp", lambda log: log.checkpoint_high_watermark(20)),
    "HW checkpoint rename": Case("replace", f"*/{HW_CHECKPOINT}.tmp", lambda log: log.checkpoint_high_watermark(20)),
    "recovery point checkpoint": Case("write", "*/recovery-point-checkpoint.tmp", lambda log: log.maybe_flush(NOW), setup=roll),
    "segment fsync on flush": Case("fsync", "*.log", lambda log: log.flush()),
    "segment fsync on a flush.messages=1 append": Case("fsync", "*.log", lambda log: log.append_as_leader(batch(), leader_epoch=1, now_ms=NOW), config={"flush_messages": 1}),
    "truncation": Case("truncate", "*.log", lambda log: log.truncate_to(5), floor=3),
    "retention": Case("unlink", "*.log", lambda log: log.apply_retention(NOW), setup=roll, start_may_move=True,
                      config={"segment_bytes": 400, "retention_bytes": 600}),
    # either a prefix of the old log or the new empty one
    "full truncation": Case("unlink", "*.log", lambda log: log.truncate_fully_and_start_at(100), floor=0, start_may_move=True),
    "producer snapshot at close": Case("write", "*.producer-snapshot.tmp", lambda log: log.close()),
    "read": Case("read", "*.log", lambda log: log.read(0, 1 << 20)),
    "index write at a roll": Case("write", "*.index", roll),
    "index fsync when a rolled segment is synced": Case("fsync", "*.index", lambda log: log.maybe_flush(NOW), setup=roll),
    "roll by segment.ms": Case("open", "*.log", lambda log: log.maybe_roll(NOW + 60_000), config={"segment_ms": 1000}),
    "log start offset checkpoint": Case("write", "*/log-start-offset-checkpoint.tmp", lambda log: log.advance_log_start_offset(6),
                                        start_may_move=True),
    "segment delete below a new log start": Case("unlink", "*.log", lambda log: log.advance_log_start_offset(log.segments[1].base_offset),
                                                 setup=roll, start_may_move=True, config={"segment_bytes": 400}),
}


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EIO], ids=["ENOSPC", "EIO"])
@pytest.mark.parametrize("restart", ["process restart", "power loss"])
@pytest.mark.parametrize("name", list(CASES))
def test_io_error_takes_the_log_offline_and_reopening_recovers(name, restart, err):
    case = CASES[name]
    disk = SimDisk(random.Random(zlib.crc32(f"{name} {restart} {err}".encode())), torn=0.5)
    log, stored = durable_log(disk, **(case.config or {}))
    case.setup(log)
    durable = [(b, data) for b, data in stored_batches(log) if b < 18]
    appended = dict(stored_batches(log))
    record_appends(log, appended)
    rule = disk.fail(case.op, case.pattern, err)
    with pytest.raises(LogStorageError) as exc:
        case.action(log)
    del log.append_as_leader, log.append_as_follower  # stop recording
    assert rule.fired == 1, "the fault was not hit"
    assert exc.value.code == ErrorCode.KAFKA_STORAGE_ERROR and exc.value.errno == err
    assert isinstance(exc.value, KafkaError) and exc.value.retriable
    # the cache never runs ahead of its checkpoint (a failed write changed neither)
    assert log.epoch_cache.entries == read_epochs(disk, f"{DIR}/{EPOCH_CHECKPOINT}")
    assert_offline(log, err)
    log.close()  # lets go of files and lock, writes nothing, does not raise
    assert log.closed and disk.open_descriptors == 0

    if restart == "power loss":
        disk.power_loss()
    else:
        disk.kill()
    again = Log(DIR, config(**(case.config or {})), now_ms=NOW, fs=disk)
    assert_consistent(again)
    got = stored_batches(again)
    assert all(appended.get(b) == data for b, data in got), "a batch that was never appended"
    start, leo = again.log_start_offset, again.log_end_offset
    for b, data in durable:
        if start <= b < case.floor:
            assert (b, data) in got, f"durable batch {b} lost"
    if not case.start_may_move:
        assert start == 0
    assert leo >= case.floor or start > case.floor
    assert again.checkpointed_high_watermark in (9, 20)
    # the reopened log works
    again.append_as_leader(batch(), leader_epoch=max(1, again.epoch_cache.latest_epoch), now_ms=NOW)
    again.close()


def test_a_failed_fsync_leaves_the_data_not_durable():
    disk = SimDisk(random.Random(0), torn=0.0)
    log, stored = durable_log(disk)
    disk.fail("fsync", "*.log", errno.EIO)
    with pytest.raises(LogStorageError):
        log.flush()
    disk.power_loss()
    again = Log(DIR, config(), now_ms=NOW, fs=disk)
    assert again.log_end_offset == 18 and again.read(0, 1 << 20) == b"".join(stored[:6])


def test_fsync_error_that_drops_the_dirty_pages():
    """As Linux may after EIO: the unsynced writes are gone from the page cache too, so
    even a restart without a power loss finds only what was durable."""
    disk = SimDisk(random.Random(0), torn=0.0, fsync_error_drops=True)
    log, stored = durable_log(disk)
    disk.fail("fsync", "*.log", errno.EIO)
    with pytest.raises(LogStorageError):
        log.flush()
    log.close()
    again = Log(DIR, config(), now_ms=NOW, fs=disk)
    assert again.log_end_offset == 18 and again.read(0, 1 << 20) == b"".join(stored[:6])
    assert_consistent(again)


def test_flush_messages_1_loses_no_acknowledged_append_when_the_disk_fills():
    disk = SimDisk(random.Random(0), torn=1.0)
    log = Log(DIR, config(flush_messages=1, segment_bytes=600), now_ms=NOW, fs=disk)
    acked = []
    disk.capacity = disk.used + 3000
    with pytest.raises(LogStorageError) as exc:
        while True:
            acked += fill(log, 1, epoch=1)
    assert exc.value.errno == errno.ENOSPC and len(acked) >= 5
    disk.power_loss()
    disk.capacity = None
    again = Log(DIR, config(flush_messages=1, segment_bytes=600), now_ms=NOW, fs=disk)
    assert again.read(0, 1 << 20)[: len(b"".join(acked))] == b"".join(acked)
    assert_consistent(again)


def test_a_full_disk_leaves_no_partial_batch():
    """A write that fits only in part (Linux writes what fits, then ENOSPC) is undone."""
    disk = SimDisk(random.Random(0), torn=0.0)
    log, stored = durable_log(disk)
    segment = f"{DIR}/{log.segments[-1].base_offset:020d}.log"
    size = len(disk.contents(segment))
    disk.capacity = disk.used + 50  # room for part of the next batch
    with pytest.raises(LogStorageError) as exc:
        log.append_as_leader(batch(n=3, size=60), leader_epoch=1, now_ms=NOW)
    assert exc.value.errno == errno.ENOSPC
    assert len(disk.contents(segment)) == size
    log.close()
    disk.capacity = None
    disk.kill()
    again = Log(DIR, config(), now_ms=NOW, fs=disk)
    assert not again.recovery_report.cut and again.read(0, 1 << 20) == b"".join(stored)


@pytest.mark.parametrize("op,pattern", [("read", f"*/{EPOCH_CHECKPOINT}"), ("read", "*0.log"), ("read", "*.index"),
                                        ("stat", "*.log"), ("listdir", DIR), ("unlink", "*/.kcoord-clean-shutdown")])
def test_an_io_error_while_opening_raises_the_storage_error_and_releases_everything(op, pattern):
    disk = SimDisk(random.Random(0))
    log, _ = durable_log(disk)
    log.close()
    rule = disk.fail(op, pattern, errno.EIO)
    with pytest.raises(LogStorageError) as exc:
        Log(DIR, config(), now_ms=NOW, fs=disk)
    assert rule.fired == 1
    assert exc.value.errno == errno.EIO and "open failed" in exc.value.message
    assert disk.open_descriptors == 0
    again = Log(DIR, config(), now_ms=NOW, fs=disk)  # not locked, nothing lost
    assert again.log_end_offset == 24
    assert_consistent(again)


def test_storage_error_pickles_with_its_errno():
    import pickle

    err = pickle.loads(pickle.dumps(LogStorageError("log /x: append failed", errno.ENOSPC)))
    assert (err.code, err.errno, err.message, err.errno_name) == (ErrorCode.KAFKA_STORAGE_ERROR, errno.ENOSPC, "log /x: append failed", "ENOSPC")
