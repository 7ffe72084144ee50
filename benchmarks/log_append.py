"""Benchmark: kcoord.log append/read throughput next to plain file I/O of the same bytes.

For 100-byte records in ~16 KiB and ~1 MiB batches, with fsync off (flush.messages unset)
and on (flush.messages=1), this measures in one run:

* log append (leader path: validate + CRC check + stamp + write), MB/s and records/s;
* a plain ``file.write`` of the same batch bytes (plus ``fsync`` per write when fsync is on);
* log read (``Log.read`` in 1 MiB fetches, the consumer path) next to plain ``file.read``
  of 1 MiB chunks of the same file size, both from the page cache;
* with fsync off, also the follower append path (several batches per call, CRC checked).

Batches are pre-built with build_batch_columns (and, for the follower, pre-stamped and
grouped into 1 MiB fetches) so only log cost is timed. Each repeat writes the same batches
through the log and to the plain file in ``--rounds`` alternating rounds (and reads both
back fetch by fetch, alternating), so a burst of load from elsewhere hits both alike; each
figure is the median over ``--repeats`` repeats.
Ratios are log / plain throughput from wall time; ``*_ratio_cpu`` repeats them from the
process's CPU time, which a busy shared machine disturbs less. Prints JSON (and writes it
to ``--out``). Target: log append >= 50% of plain write, fsync off.

    python benchmarks/log_append.py [--quick] [--out FILE] [--repeats N] [--rounds N] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from kcoord.log import Log, LogConfig
from kcoord.records import HEADER_SIZE, build_batch_columns, stamp

RECORD_BYTES = 100
PER_RECORD = RECORD_BYTES + 2  # msgpack bin8 framing of a 100-byte value
MiB = 2**20
FETCH_BYTES = 1 * MiB
POOL = 8  # distinct pre-built batches, cycled


def make_batches(batch_bytes: int) -> tuple[list[bytes], int]:
    n = max(1, (batch_bytes - HEADER_SIZE - 16) // PER_RECORD)
    pool = []
    for i in range(POOL):
        values = [os.urandom(RECORD_BYTES) for _ in range(n)]
        pool.append(build_batch_columns(values, timestamp_ms=1_700_000_000_000 + i))
    return pool, n


class Clock:
    """Accumulated wall and CPU time (user + system of this process, so the kernel's
    copying into the page cache counts) over the rounds of one repeat."""

    def __init__(self) -> None:
        self.wall = 0.0
        self.cpu = 0.0

    def run(self, fn: Callable[[], None]) -> None:
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        self.wall += time.perf_counter() - wall
        self.cpu += time.process_time() - cpu


def follower_chunks(pool: list[bytes], first: int, count: int, records_per_batch: int) -> list[bytes]:
    """Batches ``first .. first+count`` as a leader would have stamped them, grouped into
    fetch-sized chunks: what a follower appends."""
    chunks, current, size = [], [], 0
    for i in range(first, first + count):
        batch = stamp(pool[i % len(pool)], i * records_per_batch, 0)
        if current and size + len(batch) > FETCH_BYTES:
            chunks.append(b"".join(current))
            current, size = [], 0
        current.append(batch)
        size += len(batch)
    if current:
        chunks.append(b"".join(current))
    return chunks


def one_repeat(root: Path, pool: list[bytes], records_per_batch: int, count: int, fsync: bool, rounds: int) -> dict[str, Clock]:
    """Write ``count`` batches through the log and to a plain file (and, fsync off,
    through a follower log) in interleaved rounds, so that whatever else the machine is
    doing hits all of them alike; then read both back the same way."""
    config = LogConfig(segment_bytes=64 * MiB, flush_messages=1 if fsync else None)
    clocks = {k: Clock() for k in ("log_append", "plain_write", "follower", "log_read", "plain_read")}
    log = Log(root / "log", config)
    follower = Log(root / "follower", config) if not fsync else None
    # As a replica does when it becomes leader: record the epoch first (a checkpoint write
    # with two fsyncs, once per leadership, not part of steady-state append cost).
    for each in (log, follower):
        if each is not None:
            each.epoch_cache.assign(0, 0)
    plain = open(root / "plain", "wb")
    append, write, flush, fileno, n = log.append_as_leader, plain.write, plain.flush, plain.fileno(), len(pool)
    per_round = -(-count // rounds)
    for r, first in enumerate(range(0, count, per_round)):
        last = min(count, first + per_round)

        def log_round() -> None:
            for i in range(first, last):
                append(pool[i % n], leader_epoch=0)

        def plain_round() -> None:
            for i in range(first, last):
                write(pool[i % n])
                if fsync:
                    flush()
                    os.fsync(fileno)

        steps = [("log_append", log_round), ("plain_write", plain_round)]
        if follower is not None:
            chunks = follower_chunks(pool, first, last - first, records_per_batch)

            def follower_round() -> None:
                for c in chunks:
                    follower.append_as_follower(c)

            steps.append(("follower", follower_round))
        for name, fn in steps if r % 2 == 0 else reversed(steps):
            clocks[name].run(fn)
    plain.close()
    if follower is not None:
        assert follower.log_end_offset == log.log_end_offset
        follower.close()

    # Read both back in 1 MiB fetches, alternating log and plain fetch by fetch.
    batch_size = len(pool[0])
    total = 0
    with open(root / "plain", "rb") as f:
        offset, end, read = log.log_start_offset, log.log_end_offset, log.read
        while offset < end:
            def log_fetch() -> None:
                nonlocal offset, total
                data = read(offset, FETCH_BYTES)
                total += len(data)
                # equal batches: the next offset follows from the length (a consumer
                # would decode the records instead)
                offset += len(data) // batch_size * records_per_batch

            clocks["log_read"].run(log_fetch)
            clocks["plain_read"].run(lambda: f.read(FETCH_BYTES))
    assert total == count * batch_size, (total, count * batch_size)
    log.close()
    return clocks


def bench_case(root: Path, batch_bytes: int, fsync: bool, total_bytes: int, repeats: int, rounds: int) -> dict:
    pool, records_per_batch = make_batches(batch_bytes)
    size = len(pool[0])
    count = max(1, total_bytes // size)
    nbytes = count * size
    nrecords = count * records_per_batch
    runs: list[dict[str, Clock]] = []
    for r in range(repeats):
        where = root / f"run{r}"
        where.mkdir()
        runs.append(one_repeat(where, pool, records_per_batch, count, fsync, rounds))
        shutil.rmtree(where, ignore_errors=True)

    out: dict = {
        "batch_bytes": size,
        "records_per_batch": records_per_batch,
        "fsync": fsync,
        "batches": count,
        "bytes": nbytes,
        "repeats": repeats,
    }
    keys = ["log_append", "plain_write", "log_read", "plain_read"] + ([] if fsync else ["follower"])
    wall = {k: statistics.median(run[k].wall for run in runs) for k in keys}
    cpu = {k: statistics.median(run[k].cpu for run in runs) for k in keys}
    for key in keys:
        name = "follower_append" if key == "follower" else key
        out[f"{name}_mb_s"] = round(nbytes / wall[key] / 1e6, 1)
        out[f"{name}_records_s"] = round(nrecords / wall[key])
    out["append_ratio"] = round(wall["plain_write"] / wall["log_append"], 3)
    out["read_ratio"] = round(wall["plain_read"] / wall["log_read"], 3)
    if not fsync:
        out["follower_append_ratio"] = round(wall["plain_write"] / wall["follower"], 3)
    # The same ratios from CPU time: on a busy machine wall time also measures the
    # neighbours, CPU time only what the code costs.
    out["append_ratio_cpu"] = round(cpu["plain_write"] / cpu["log_append"], 3)
    out["read_ratio_cpu"] = round(cpu["plain_read"] / cpu["log_read"], 3)
    if not fsync:
        out["follower_append_ratio_cpu"] = round(cpu["plain_write"] / cpu["follower"], 3)
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, finishes in seconds")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    parser.add_argument("--repeats", type=int, help="runs per figure (median reported)")
    parser.add_argument("--dir", type=Path, help="where to put the temporary files (default: system temp)")
    parser.add_argument("--rounds", type=int, default=16, help="interleaved log/plain rounds per repeat")
    args = parser.parse_args(argv)
    repeats = args.repeats or (3 if args.quick else 5)
    # bytes per run: (fsync off, fsync on) for each batch size
    volumes = {
        16 * 1024: (16 * MiB, 2 * MiB) if args.quick else (128 * MiB, 16 * MiB),
        1 * MiB: (32 * MiB, 8 * MiB) if args.quick else (256 * MiB, 64 * MiB),
    }
    started = time.perf_counter()
    results = []
    with tempfile.TemporaryDirectory(prefix="kcoord-bench-", dir=args.dir) as tmp:
        root = Path(tmp)
        for fsync in (False, True):
            for batch_bytes, (off, on) in volumes.items():
                results.append(bench_case(root, batch_bytes, fsync, on if fsync else off, repeats, args.rounds))
    off = [r for r in results if not r["fsync"]]
    report = {
        "benchmark": "log_append",
        "record_bytes": RECORD_BYTES,
        "fetch_bytes": FETCH_BYTES,
        "quick": args.quick,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "seconds": round(time.perf_counter() - started, 1),
        "results": results,
        "load_average": list(os.getloadavg()),
        "target": "log append >= 50% of plain write with fsync off (append_ratio, wall time)",
        "target_met": all(r["append_ratio"] >= 0.5 for r in off),
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return report


if __name__ == "__main__":
    main(sys.argv[1:])
