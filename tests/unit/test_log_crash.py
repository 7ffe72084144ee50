"""Crash recovery with a real process: SIGKILL a writer mid-append, reopen, check acks.

The child (log_crash_child.py) appends with flush.messages=1 and prints each append's
offsets only after it returned, i.e. after the fsync. Whatever it printed must survive
byte for byte; whatever it was writing when killed may be cut, but the tail must be clean.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kcoord.log import Log
from kcoord.records import iter_headers, stamp

CHILD = Path(__file__).with_name("log_crash_child.py")
_spec = importlib.util.spec_from_file_location("log_crash_child", CHILD)
child = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(child)

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")


def run_until_killed(directory: Path, first: int, acks_wanted: int) -> list[tuple[int, int, int]]:
    """Start the child, read ``acks_wanted`` acknowledgements, SIGKILL it, return the acks."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), str(directory), str(first)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    acks = []
    try:
        assert proc.stdout is not None
        while len(acks) < acks_wanted:
            line = proc.stdout.readline()
            if not line:
                raise AssertionError(f"child exited early: {proc.wait()} {proc.stderr.read().decode()}")
            acks.append(tuple(map(int, line.split())))
    finally:
        proc.send_signal(signal.SIGKILL)  # most likely in the middle of the next append
        proc.wait()
        # The child ran on while we read: every whole line it managed to write is an ack too.
        rest = proc.stdout.read()
        proc.stdout.close()
        proc.stderr.close()
    for line in rest.split(b"\n")[:-1]:  # a last line without its newline was cut by the kill
        acks.append(tuple(map(int, line.split())))
    assert proc.returncode == -signal.SIGKILL
    return acks


def check_acked(log: Log, acks: list[tuple[int, int, int]]) -> None:
    for i, base, last in acks:
        want = stamp(child.make_batch(i), base, child.epoch_of(i))
        assert log.read(base, 1) == want, f"acked batch {i} at offset {base} differs after the crash"
        assert log.read(last, 1) == want
    assert log.log_end_offset >= acks[-1][2] + 1


def test_sigkill_mid_append_loses_no_acknowledged_batch(tmp_path):
    all_acks: list[tuple[int, int, int]] = []
    for round_ in range(3):  # crash, recover, carry on writing, crash again
        first = all_acks[-1][0] + 1 if all_acks else 0
        acks = run_until_killed(tmp_path, first, 150)
        all_acks.extend(acks)
        log = Log(tmp_path, child.CONFIG)
        report = log.recovery_report
        assert not report.clean_shutdown
        check_acked(log, all_acks)
        # at most the one unacknowledged batch in flight may follow the last ack
        assert log.log_end_offset - (all_acks[-1][2] + 1) <= 7
        # the tail is clean: every batch is whole and valid, offsets contiguous
        data = log.read(log.log_start_offset, 1 << 30)
        hs = [h for _, h in iter_headers(data, check_crc=True)]
        assert hs[0].base_offset == 0 and hs[-1].next_offset == log.log_end_offset
        assert all(a.next_offset == b.base_offset for a, b in zip(hs, hs[1:]))
        # the epoch cache and producer state agree with what survived
        assert log.epoch_cache.latest_epoch == hs[-1].leader_epoch
        assert log.producer_state.get(42).batches[-1].last_offset == hs[-1].last_offset
        if log.log_end_offset > all_acks[-1][2] + 1:  # the in-flight batch made it: drop it so
            log.truncate_to(all_acks[-1][2] + 1)  # the next child's sequence numbers follow on
        log.close()
        again = Log(tmp_path, child.CONFIG)
        assert again.recovery_report.clean_shutdown and not again.recovery_report.cut
        again.close()
    assert len(Log(tmp_path, child.CONFIG).segments) > 1  # the run crossed segment rolls


def test_torn_write_after_crash_is_cut_and_reported(tmp_path):
    acks = run_until_killed(tmp_path, 0, 60)
    log = Log(tmp_path, child.CONFIG)
    log.truncate_to(acks[-1][2] + 1)
    leo = log.log_end_offset
    last = log.read(acks[-1][1], 1)
    log.close()
    seg = sorted(tmp_path.glob("*.log"))[-1]
    size = seg.stat().st_size
    with open(seg, "r+b") as f:  # the last batch half written, then garbage after it
        f.truncate(size - len(last) // 2)
        f.seek(0, os.SEEK_END)
        f.write(b"\xde\xad\xbe\xef" * 50)
    log = Log(tmp_path, child.CONFIG)
    report = log.recovery_report
    assert report.cut and report.corrupt_offset == acks[-1][1]
    assert report.truncated_bytes == len(last) - len(last) // 2 + 200
    assert log.log_end_offset == leo - (acks[-1][2] - acks[-1][1] + 1)
    check_acked(log, acks[:-1])
    log.close()
    assert not Log(tmp_path, child.CONFIG).recovery_report.cut
