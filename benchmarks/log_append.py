"""Benchmark: kcoord.log append/read throughput next to plain file I/O of the same bytes.

For 100-byte records in ~16 KiB and ~1 MiB batches, with fsync off (flush.messages unset)
and on (flush.messages=1), this measures in one run:

* log append (leader path: validate + CRC check + stamp + write), MB/s and records/s;
* a plain ``file.write`` of the same batch bytes (plus ``fsync`` per write when fsync is on);
* log read (``Log.read`` in 1 MiB fetches, the consumer path) next to plain ``file.read``
  of 1 MiB chunks of the same file size, both from the page cache;
* with fsync off, also the follower append path (several batches per call, CRC checked).

Batches are pre-built with build_batch_columns so only log cost is timed. Each figure is
the median over ``--repeats`` runs, log and plain interleaved so both see the same machine.
Ratios are log / plain throughput from wall time; ``*_ratio_cpu`` repeats them from the
process's CPU time, which a busy shared machine disturbs less. Prints JSON (and writes it
to ``--out``). Target: log append >= 50% of plain write, fsync off.

    python benchmarks/log_append.py [--quick] [--out FILE] [--repeats N] [--dir DIR]
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

from kcoord.log import Log, LogConfig
from kcoord.records import HEADER_SIZE, batches_info, build_batch_columns

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


def timed(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process incl. the kernel's copying)."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def log_append(directory: Path, pool: list[bytes], count: int, fsync: bool) -> tuple[float, float]:
    config = LogConfig(segment_bytes=64 * MiB, flush_messages=1 if fsync else None)
    log = Log(directory, config)
    append = log.append
    n = len(pool)

    def run() -> None:
        for i in range(count):
            append(pool[i % n], leader_epoch=0)

    secs = timed(run)
    log.close()
    return secs


def follower_append(directory: Path, source: Path) -> tuple[float, float]:
    """Replicate ``source`` into a fresh log the way a follower does: 1 MiB fetches,
    appended as they come (several batches per append, CRCs checked)."""
    leader = Log(source, LogConfig(segment_bytes=64 * MiB))
    chunks = []
    offset = leader.log_start_offset
    while offset < leader.log_end_offset:
        data = leader.read(offset, FETCH_BYTES)
        chunks.append(data)
        offset = batches_info(data)[1]
    leader.close()
    log = Log(directory, LogConfig(segment_bytes=64 * MiB))
    append = log.append

    def run() -> None:
        for c in chunks:
            append(c)

    secs = timed(run)
    log.close()
    return secs


def log_read(directory: Path, batch_size: int, records_per_batch: int) -> tuple[tuple[float, float], int]:
    """Consume the whole log in 1 MiB fetches, as a consumer would."""
    log = Log(directory, LogConfig(segment_bytes=64 * MiB))
    total = 0

    def run() -> None:
        nonlocal total
        offset, end, read = log.log_start_offset, log.log_end_offset, log.read
        while offset < end:
            data = read(offset, FETCH_BYTES)
            total += len(data)
            # all batches here have the same size and record count, so the next offset
            # follows from the length (a real consumer decodes the records instead)
            offset += len(data) // batch_size * records_per_batch

    secs = timed(run)
    log.close()
    return secs, total


def plain_write(path: Path, pool: list[bytes], count: int, fsync: bool) -> tuple[float, float]:
    n = len(pool)
    with open(path, "wb") as f:
        write, flush, fileno = f.write, f.flush, f.fileno()

        def run() -> None:
            for i in range(count):
                write(pool[i % n])
                if fsync:
                    flush()
                    os.fsync(fileno)

        return timed(run)


def plain_read(path: Path) -> tuple[float, float]:
    with open(path, "rb") as f:
        read = f.read

        def run() -> None:
            while read(FETCH_BYTES):
                pass

        return timed(run)


def bench_case(root: Path, batch_bytes: int, fsync: bool, total_bytes: int, repeats: int) -> dict:
    pool, records_per_batch = make_batches(batch_bytes)
    size = len(pool[0])
    count = max(1, total_bytes // size)
    nbytes = count * size
    nrecords = count * records_per_batch
    samples: dict[str, list[tuple[float, float]]] = {
        k: [] for k in ("log_append", "plain_write", "log_read", "plain_read", "follower")
    }
    for r in range(repeats):
        log_dir, plain_file, follower_dir = root / f"log{r}", root / f"plain{r}", root / f"follower{r}"
        order = [0, 1] if r % 2 == 0 else [1, 0]
        for which in order:
            if which == 0:
                samples["log_append"].append(log_append(log_dir, pool, count, fsync))
            else:
                samples["plain_write"].append(plain_write(plain_file, pool, count, fsync))
        secs, read_bytes = log_read(log_dir, size, records_per_batch)
        assert read_bytes == nbytes, (read_bytes, nbytes)
        samples["log_read"].append(secs)
        samples["plain_read"].append(plain_read(plain_file))
        if not fsync:
            samples["follower"].append(follower_append(follower_dir, log_dir))
        for p in (log_dir, follower_dir):
            shutil.rmtree(p, ignore_errors=True)
        plain_file.unlink(missing_ok=True)

    out: dict = {
        "batch_bytes": size,
        "records_per_batch": records_per_batch,
        "fsync": fsync,
        "batches": count,
        "bytes": nbytes,
        "repeats": repeats,
    }
    wall = {k: statistics.median(w for w, _ in v) for k, v in samples.items() if v}
    cpu = {k: statistics.median(c for _, c in v) for k, v in samples.items() if v}
    for key in ("log_append", "plain_write", "log_read", "plain_read", "follower"):
        if key not in wall:
            continue
        name = "follower_append" if key == "follower" else key
        out[f"{name}_mb_s"] = round(nbytes / wall[key] / 1e6, 1)
        out[f"{name}_records_s"] = round(nrecords / wall[key])
    out["append_ratio"] = round(wall["plain_write"] / wall["log_append"], 3)
    out["read_ratio"] = round(wall["plain_read"] / wall["log_read"], 3)
    if "follower" in wall:
        out["follower_append_ratio"] = round(wall["plain_write"] / wall["follower"], 3)
    # The same ratios from CPU time (user + system of this process): on a busy machine
    # wall time also measures the neighbours, CPU time only what the code costs.
    out["append_ratio_cpu"] = round(cpu["plain_write"] / cpu["log_append"], 3)
    out["read_ratio_cpu"] = round(cpu["plain_read"] / cpu["log_read"], 3)
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, finishes in seconds")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    parser.add_argument("--repeats", type=int, help="runs per figure (median reported)")
    parser.add_argument("--dir", type=Path, help="where to put the temporary files (default: system temp)")
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
                results.append(bench_case(root, batch_bytes, fsync, on if fsync else off, repeats))
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
