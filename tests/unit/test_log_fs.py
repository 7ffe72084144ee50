"""The file-system layer: OsFileSystem is the os module, and SimDisk (tests/sim/disk.py)
models durability and faults the way the log's crash tests rely on."""

from __future__ import annotations

import errno
import os
import random

import pytest

from kcoord.log import Log, LogConfig, LogStorageError, OsFileSystem
from kcoord.log.fs import OS_FILE_SYSTEM

from log_helpers import NOW, assert_consistent, fill, stored_batches
from sim.disk import SimDisk

W = os.O_WRONLY | os.O_CREAT
RW = os.O_RDWR | os.O_CREAT


def write_file(disk: SimDisk, path: str, data: bytes, *, sync: bool = False, flags: int = W | os.O_TRUNC) -> None:
    fd = disk.open(path, flags)
    disk.write(fd, data)
    if sync:
        disk.fsync(fd)
    disk.close(fd)


def new_disk(torn: float = 0.0, seed: int = 0) -> SimDisk:
    disk = SimDisk(random.Random(seed), torn=torn)
    disk.makedirs("/d")
    disk.fsync_dir("/")
    return disk


# -- the real file system -----------------------------------------------------------------


def test_os_file_system_is_the_os_functions_themselves():
    fs = OsFileSystem()
    assert fs.writev is os.writev and fs.pread is os.pread and fs.fsync is os.fsync
    assert fs.supports_file_hints and OS_FILE_SYSTEM.supports_file_hints


def test_os_lock_is_exclusive(tmp_path):
    first = OS_FILE_SYSTEM.lock(tmp_path / ".lock")
    assert first is not None and OS_FILE_SYSTEM.lock(tmp_path / ".lock") is None
    OS_FILE_SYSTEM.unlock(first)
    again = OS_FILE_SYSTEM.lock(tmp_path / ".lock")
    assert again is not None
    OS_FILE_SYSTEM.unlock(again)


def test_file_hints_only_on_the_real_disk(tmp_path):
    on_disk = Log(tmp_path, LogConfig(), now_ms=NOW)
    on_sim = Log("/d/log", LogConfig(), now_ms=NOW, fs=new_disk())
    for log in (on_disk, on_sim):
        fill(log, 3)
    assert on_disk.locate(0, 1 << 20) and on_disk.locate(9, 100) == []
    assert on_sim.locate(0, 1 << 20) is None and on_sim.locate(9, 100) is None
    with pytest.raises(Exception):
        on_sim.locate(10, 100)  # same range errors as read
    on_disk.close()


# -- SimDisk: durability ------------------------------------------------------------------


def test_fsync_makes_a_files_bytes_durable_and_nothing_else():
    disk = new_disk()
    write_file(disk, "/d/a", b"synced", sync=True)
    disk.fsync_dir("/d")
    fd = disk.open("/d/a", os.O_WRONLY | os.O_APPEND)
    disk.write(fd, b" and not")
    assert disk.contents("/d/a") == b"synced and not"
    disk.power_loss()
    assert disk.contents("/d/a") == b"synced"
    with pytest.raises(OSError) as err:
        disk.write(fd, b"x")  # descriptors die with the power
    assert err.value.errno == errno.EBADF


def test_names_are_durable_only_after_the_directory_is_synced():
    disk = new_disk()
    write_file(disk, "/d/new", b"data", sync=True)  # fsynced, but its name is not
    write_file(disk, "/d/old", b"old", sync=True)
    write_file(disk, "/d/gone", b"x", sync=True)
    disk.fsync_dir("/d")
    write_file(disk, "/d/old.tmp", b"new", sync=True)
    disk.replace("/d/old.tmp", "/d/old")
    disk.unlink("/d/gone")
    write_file(disk, "/d/never", b"y", sync=True)
    assert disk.listdir("/d") == ["never", "new", "old"]
    disk.power_loss()
    # "new" was synced into the directory; the rename, the unlink and "never" were not
    assert disk.listdir("/d") == ["gone", "new", "old"]
    assert disk.contents("/d/old") == b"old" and disk.contents("/d/gone") == b"x"


def test_a_directory_never_synced_into_its_parent_vanishes():
    disk = SimDisk(random.Random(0), torn=0.0)
    disk.makedirs("/a/b")
    write_file(disk, "/a/b/f", b"1", sync=True)
    disk.fsync_dir("/a/b")
    disk.power_loss()
    assert not disk.exists("/a")


def test_a_log_directory_survives_power_loss_with_its_parents():
    """Log creates missing parents and syncs each into its parent."""
    disk = SimDisk(random.Random(0), torn=0.0)
    log = Log("/var/kcoord/t-0", LogConfig(flush_messages=1), now_ms=NOW, fs=disk)
    stored = fill(log, 3)
    disk.power_loss()
    again = Log("/var/kcoord/t-0", LogConfig(), now_ms=NOW, fs=disk)
    assert again.read(0, 1 << 20) == b"".join(stored)


def test_torn_power_loss_keeps_a_prefix_of_the_unsynced_writes():
    seen = set()
    for seed in range(40):
        disk = new_disk(torn=1.0, seed=seed)
        write_file(disk, "/d/f", b"durable|", sync=True)
        disk.fsync_dir("/d")
        fd = disk.open("/d/f", os.O_WRONLY | os.O_APPEND)
        disk.writev(fd, [b"0123456789", memoryview(b"abcdefghij")])
        disk.power_loss()
        data = disk.contents("/d/f")
        assert (b"durable|0123456789abcdefghij").startswith(data) and data.startswith(b"durable|")
        seen.add(len(data))
    assert len(seen) > 10  # cut anywhere, not only at write boundaries


def test_torn_power_loss_keeps_directory_operations_in_order():
    for seed in range(40):
        disk = new_disk(torn=1.0, seed=seed)
        for name in "abcdef":
            write_file(disk, f"/d/{name}", b"", sync=True)
        disk.power_loss()
        kept = disk.listdir("/d")
        assert kept == list("abcdef"[: len(kept)])  # a prefix of the creations


def test_truncation_without_fsync_is_undone():
    disk = new_disk()
    write_file(disk, "/d/f", b"0123456789", sync=True)
    disk.fsync_dir("/d")
    disk.truncate("/d/f", 4)
    fd = disk.open("/d/f", os.O_WRONLY)
    disk.pwrite(fd, b"XY", 4)
    assert disk.contents("/d/f") == b"0123XY"
    disk.power_loss()
    assert disk.contents("/d/f") == b"0123456789"


def test_kill_keeps_the_page_cache_and_drops_descriptors_and_locks():
    disk = new_disk()
    lock = disk.lock("/d/.lock")
    assert lock is not None and disk.lock("/d/.lock") is None
    write_file(disk, "/d/f", b"unsynced")
    fd = disk.open("/d/f", os.O_RDONLY)
    other = disk.lock("/e.lock")
    disk.kill("/d")
    assert disk.contents("/d/f") == b"unsynced"
    with pytest.raises(OSError):
        disk.pread(fd, 1, 0)
    assert disk.lock("/d/.lock") is not None and disk.lock("/e.lock") is None  # only under /d
    disk.unlock(other)


# -- SimDisk: faults ----------------------------------------------------------------------


def test_fault_rules_match_operation_and_path_and_count():
    disk = new_disk()
    rule = disk.fail("write", "/d/*.tmp", errno.ENOSPC, times=2, skip=1)
    write_file(disk, "/d/a.tmp", b"1")  # skipped
    write_file(disk, "/d/b", b"2")  # other path
    for _ in range(2):
        with pytest.raises(OSError) as err:
            write_file(disk, "/d/c.tmp", b"3")
        assert err.value.errno == errno.ENOSPC and err.value.filename == "/d/c.tmp"
    write_file(disk, "/d/c.tmp", b"4")  # spent
    assert rule.fired == 2
    forever = disk.fail("fsync", "*", errno.EIO, times=None)
    for _ in range(3):
        with pytest.raises(OSError):
            write_file(disk, "/d/x", b"", sync=True)
    assert forever.fired == 3
    disk.clear_faults()
    write_file(disk, "/d/x", b"", sync=True)
    with pytest.raises(ValueError):
        disk.fail("frobnicate")


def test_fault_hook_sees_every_operation():
    disk = new_disk()
    seen = []
    disk.fault_hook = lambda op, path: (seen.append((op, path)), errno.EIO if op == "replace" else None)[1]
    write_file(disk, "/d/a", b"1", sync=True)
    with pytest.raises(OSError) as err:
        disk.replace("/d/a", "/d/b")
    assert err.value.errno == errno.EIO and disk.exists("/d/a") and not disk.exists("/d/b")
    assert [op for op, _ in seen] == ["open", "write", "fsync", "replace"]


def test_full_disk_writes_what_fits_then_fails():
    disk = new_disk()
    disk.capacity = 10
    fd = disk.open("/d/f", W)
    assert disk.write(fd, b"0123456") == 7
    assert disk.writev(fd, [b"abc", b"def"]) == 3  # short
    with pytest.raises(OSError) as err:
        disk.write(fd, b"z")
    assert err.value.errno == errno.ENOSPC and disk.contents("/d/f") == b"0123456abc"
    disk.ftruncate(fd, 2)
    assert disk.pwrite(fd, b"ok", 2) == 2 and disk.used == 4


def test_failed_fsync_keeps_the_data_unsynced():
    disk = new_disk()
    write_file(disk, "/d/f", b"a", sync=True)
    disk.fsync_dir("/d")
    fd = disk.open("/d/f", os.O_WRONLY | os.O_APPEND)
    disk.write(fd, b"b")
    disk.fail("fsync", "/d/f")
    with pytest.raises(OSError):
        disk.fsync(fd)
    assert disk.contents("/d/f") == b"ab"
    disk.power_loss()
    assert disk.contents("/d/f") == b"a"


# -- the log on SimDisk -------------------------------------------------------------------


def test_the_log_on_simdisk_is_deterministic():
    """Same seed, same operations: byte-identical disks and the same recovery."""

    def run() -> tuple:
        disk = SimDisk(random.Random(7), torn=0.5)
        log = Log("/n/t", LogConfig(segment_bytes=500, index_interval_bytes=64), now_ms=NOW, fs=disk, new_directory_id=lambda: "d1")
        fill(log, 10, epoch=1)
        log.flush()
        fill(log, 5, epoch=2)
        disk.power_loss()
        again = Log("/n/t", LogConfig(segment_bytes=500), now_ms=NOW, fs=disk)
        return [(p, disk.contents(p)) for p in disk.files()], stored_batches(again), again.recovery_report

    assert run() == run()


def test_a_log_left_open_by_a_dead_process_reopens_after_kill():
    disk = SimDisk(random.Random(0))
    log = Log("/n/t", LogConfig(), now_ms=NOW, fs=disk)
    stored = fill(log, 4)
    with pytest.raises(Exception) as err:
        Log("/n/t", LogConfig(), now_ms=NOW, fs=disk)
    assert "already open" in str(err.value)
    disk.kill("/n/t")  # the process that held it died; the page cache stays
    again = Log("/n/t", LogConfig(), now_ms=NOW, fs=disk)
    assert again.read(0, 1 << 20) == b"".join(stored)
    assert_consistent(again)
    with pytest.raises(LogStorageError):  # the dead process's log object is offline now
        fill(log, 1)


def test_a_new_directory_id_survives_a_power_loss_right_after_the_open():
    """Written and fsynced (file and name) before anything else: a crash never makes a
    directory that holds data look new."""
    disk = SimDisk(random.Random(3), torn=0.5)
    log = Log("/n/t", LogConfig(), now_ms=NOW, fs=disk, new_directory_id=lambda: "first")
    fill(log, 3, epoch=1)
    disk.power_loss()
    again = Log("/n/t", LogConfig(), now_ms=NOW, fs=disk, new_directory_id=lambda: "second")
    assert again.directory_id == "first"


def test_simdisk_wipe_is_for_good():
    """The simulation's ``wipe`` fault: a directory gone with its disk stays gone through a
    power loss (no pending directory operation brings it back), and a log opened there
    starts empty under a new directory id."""
    disk = SimDisk(random.Random(5), torn=1.0)
    log = Log("/m/b/t-0", LogConfig(), now_ms=NOW, fs=disk, new_directory_id=lambda: "old")
    fill(log, 4, epoch=1)
    log.flush()
    disk.makedirs("/m/b/t-0/unsynced")
    disk.kill(under="/m/b/t-0")
    disk.wipe("/m/b/t-0")
    assert not disk.exists("/m/b/t-0") and disk.used == 0
    disk.power_loss()
    assert not disk.exists("/m/b/t-0")
    again = Log("/m/b/t-0", LogConfig(), now_ms=NOW, fs=disk, new_directory_id=lambda: "new")
    assert (again.directory_id, again.log_end_offset) == ("new", 0)
