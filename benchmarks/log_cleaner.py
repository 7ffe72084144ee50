"""Benchmark: the log cleaner's throughput (MB/s of segments cleaned) against reading and
decoding the same segments, in the same run.

Builds one compacted partition on disk (``kcoord.log.Log``, ``cleanup.policy=compact``):
``--records`` keyed records over ``--keys`` keys, in batches of ``--batch`` records, rolled
into segments of ``--segment-mib``. Then, per repeat, on a fresh copy of that directory:

- ``read``: every sealed segment read through ``Log.read`` (what a follower or a consumer
  catching up costs per byte, the I/O floor);
- ``read_decode``: the same bytes, each batch also decoded to its columns
  (``kcoord.records.decode_batch``): what the cleaner must do at least, since it needs
  every key;
- ``clean``: one forced cleaner pass (``Log.clean(..., force=True)``): map the dirty keys,
  decode, keep the last record per key, rebuild batches, replace each segment crash-safely
  (write, fsync, rename).

Each figure is the median MB/s of the sealed segments' bytes over ``--repeats``; the ratios
``clean / read`` and ``clean / read_decode`` say what cleaning costs beyond reading what it
cleans. Prints JSON (and writes it to ``--out``).

    python benchmarks/log_cleaner.py [--quick] [--out FILE] [--repeats N]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from kcoord.bench import script
from kcoord.log import Log, LogConfig
from kcoord.records import build_batch_columns, decode_batch, iter_headers

T0 = 1_700_000_000_000
MiB = 2**20


def build(root: Path, records: int, keys: int, batch: int, value_bytes: int, segment_bytes: int) -> dict:
    """The partition on disk; returns its shape. Keys cycle, so each key is overwritten
    ``records / keys`` times and the cleaner keeps about ``keys`` records."""
    log = Log(root, LogConfig(segment_bytes=segment_bytes, cleanup_policy="compact"), now_ms=T0)
    value = os.urandom(value_bytes)
    for lo in range(0, records, batch):
        n = min(batch, records - lo)
        ks = [b"key-%d" % ((lo + i) % keys) for i in range(n)]
        log.append_as_leader(build_batch_columns([value] * n, ks, timestamp_ms=T0 + lo), leader_epoch=0, now_ms=T0 + lo)
    log.checkpoint_high_watermark(log.log_end_offset)
    shape = {"segments": len(log.segments), "log_bytes": log.size_bytes, "log_end_offset": log.log_end_offset}
    log.close()
    return shape


def open_log(root: Path, segment_bytes: int) -> Log:
    return Log(root, LogConfig(segment_bytes=segment_bytes, cleanup_policy="compact"), now_ms=T0)


def sealed(log: Log) -> tuple[int, int]:
    """(first offset of the active segment, bytes of the sealed segments)."""
    segs = log.segments
    return segs[-1].base_offset, sum(s.size_bytes for s in segs[:-1])


def read_all(log: Log, end: int, decode: bool) -> int:
    offset, total = 0, 0
    while offset < end:
        raw = log.read(offset, 4 * MiB, max_offset=end)
        if not raw:
            break
        total += len(raw)
        last_next = offset
        for pos, header in iter_headers(raw):
            if decode:
                decode_batch(raw, pos, check_crc=True)  # as the cleaner decodes
            last_next = header.next_offset
        offset = last_next
    return total


def one_round(master: Path, work: Path, segment_bytes: int) -> dict:
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(master, work)
    out: dict = {}
    log = open_log(work, segment_bytes)
    try:
        end, nbytes = sealed(log)
        for name, decode in (("read", False), ("read_decode", True)):
            t = time.perf_counter()
            got = read_all(log, end, decode)
            out[name] = nbytes / MiB / (time.perf_counter() - t)
            assert got >= nbytes * 0.99, (name, got, nbytes)
        t = time.perf_counter()
        result = log.clean(T0 + 10**9, force=True)
        out["clean"] = result.bytes_read / MiB / (time.perf_counter() - t)
        out["clean_result"] = {
            "segments_cleaned": result.segments_cleaned,
            "bytes_read": result.bytes_read,
            "bytes_written": result.bytes_written,
            "records_read": result.records_read,
            "records_removed": result.records_removed,
            "keys": result.keys,
        }
    finally:
        log.close()
    return out


def main(argv: list[str]) -> dict:
    parser = argparse.ArgumentParser(prog="python benchmarks/log_cleaner.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smaller partition and fewer repeats (a smoke run)")
    parser.add_argument("--out", type=Path, help="also write the JSON report here")
    parser.add_argument("--repeats", type=int, help="rounds per figure (default 5, 3 with --quick)")
    parser.add_argument("--records", type=int, help="records in the partition (default 2,000,000; 200,000 with --quick)")
    parser.add_argument("--keys", type=int, default=10_000, help="distinct keys (what survives cleaning)")
    parser.add_argument("--batch", type=int, default=100, help="records per batch")
    parser.add_argument("--value-bytes", type=int, default=100, help="bytes per value")
    parser.add_argument("--segment-mib", type=float, default=16.0, help="segment.bytes of the partition, MiB")
    parser.add_argument("--dir", type=Path, help="where to put the log (default: system temp)")
    args = parser.parse_args(argv)
    repeats = args.repeats or (3 if args.quick else 5)
    records = args.records or (200_000 if args.quick else 2_000_000)
    for name, value in (("repeats", repeats), ("records", records), ("keys", args.keys), ("batch", args.batch)):
        if value < 1:
            parser.error(f"--{name} must be >= 1, got {value}")
    segment_bytes = int(args.segment_mib * MiB)
    if segment_bytes < 4096:
        parser.error("--segment-mib must be at least 4 KiB")
    started = time.perf_counter()
    rounds = []
    with tempfile.TemporaryDirectory(prefix="kcoord-bench-", dir=args.dir) as tmp:
        master, work = Path(tmp) / "master", Path(tmp) / "work"
        shape = build(master, records, args.keys, args.batch, args.value_bytes, segment_bytes)
        for _ in range(repeats):
            rounds.append(one_round(master, work, segment_bytes))
    med = {k: statistics.median(r[k] for r in rounds) for k in ("read", "read_decode", "clean")}
    report = {
        "benchmark": "log_cleaner",
        "quick": args.quick,
        "records": records,
        "keys": args.keys,
        "batch": args.batch,
        "value_bytes": args.value_bytes,
        "segment_bytes": segment_bytes,
        "partition": shape,
        "repeats": repeats,
        "read_mb_s": round(med["read"], 1),
        "read_decode_mb_s": round(med["read_decode"], 1),
        "clean_mb_s": round(med["clean"], 1),
        "clean_vs_read": round(med["clean"] / med["read"], 3),
        "clean_vs_read_decode": round(med["clean"] / med["read_decode"], 3),
        "last_pass": rounds[-1]["clean_result"],
        "python": platform.python_version(),
        "context": script.context(),
    }
    script.emit(report, args.out, started)
    return report


if __name__ == "__main__":
    main(sys.argv[1:])
