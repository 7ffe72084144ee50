"""Child process for the crash-recovery test: appends to a log until it is killed.

Usage: python log_crash_child.py DIRECTORY FIRST_INDEX

Every append is fsynced (flush.messages=1) before its offsets are printed, so each line
on stdout is an acknowledged, durable batch. The parent kills this process with SIGKILL
at an arbitrary moment and checks all printed batches survived.
"""

from __future__ import annotations

import sys

from kcoord.log import Log, LogConfig
from kcoord.records import build_batch_columns

CONFIG = LogConfig(segment_bytes=64 * 1024, flush_messages=1, index_interval_bytes=1024)


def epoch_of(i: int) -> int:
    return i // 100


def make_batch(i: int) -> bytes:
    """Batch number ``i``; deterministic, so the parent can rebuild it to compare bytes."""
    n = 1 + i % 7
    values = [(f"batch {i} record {k} ".encode() * (1 + (i * 7 + k) % 13)) for k in range(n)]
    keys = [f"k{k}".encode() if (i + k) % 3 else None for k in range(n)]
    return build_batch_columns(
        values,
        keys,
        timestamp_ms=1_700_000_000_000 + i,
        producer_id=42,
        producer_epoch=0,
        base_sequence=sequence_of(i),
    )


def sequence_of(i: int) -> int:
    """Records in batches 0..i-1: batch i's base sequence as an idempotent producer numbers it."""
    r = i % 7
    return i + 21 * (i // 7) + r * (r - 1) // 2


def main() -> None:
    directory, first = sys.argv[1], int(sys.argv[2])
    log = Log(directory, CONFIG)
    i = first
    while True:
        info = log.append_as_leader(make_batch(i), leader_epoch=epoch_of(i))
        sys.stdout.write(f"{i} {info.base_offset} {info.last_offset}\n")
        sys.stdout.flush()
        i += 1


if __name__ == "__main__":
    main()
