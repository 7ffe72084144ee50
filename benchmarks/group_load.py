"""Benchmark: a group coordinator's load of its ``__consumer_offsets`` partition, the whole
history against the same partition after the log cleaner compacted it.

Builds one partition on disk (kcoord.log.Log, ``cleanup.policy=compact``) holding
``--commits`` offset commits (1 million; 50 000 with ``--quick``) over a fixed set of live
keys: ``--groups`` groups (100) x ``--partitions`` partitions (10), each commit a batch of one
group's partitions as a coordinator writes it, plus a group metadata record per group every
100 commits. Then it times the coordinator's load -- fetch-sized reads from the log start
(``CoordinatorTimeouts.fetch_max_bytes``), ``kcoord.group.loading`` (what the driver does
with each fetch and before replay) and ``GroupCoordinatorState.load`` -- over the whole
history, runs the cleaner to the end, checks that the cleaned partition loads to the same
offsets, and times the load again. Same run, same process; each figure is the median over
``--repeats`` loads, wall and CPU time (a busy shared machine disturbs CPU time less). No Ray: the load path is the driver's minus the Fetch calls to the
partition leader.

The cleaner never touches the active segment, so what a load replays after cleaning is the
live keys plus the active segment: the partition uses ``__consumer_offsets``' own
segment.bytes (``OFFSETS_SEGMENT_BYTES``; 1 MiB with ``--quick`` so that its smaller
history spans segments too). ``production_segment_bound_cpu_s`` converts the measured load
rate into the CPU time of replaying one whole uncleaned segment of that production size.
Prints JSON (and writes it to ``--out``). Ratios: uncompacted / compacted load time, wall and CPU.

    python benchmarks/group_load.py [--quick] [--out FILE] [--repeats N] [--commits N] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from kcoord.bench import script
from kcoord.group import GroupConfig, GroupCoordinatorState
from kcoord.group.coordinator_driver import CoordinatorTimeouts
from kcoord.group.loading import take_in, well_formed
from kcoord.group.records import (
    OFFSETS_SEGMENT_BYTES,
    GroupKey,
    GroupValue,
    OffsetKey,
    OffsetValue,
    coordinator_epoch_record,
    group_record,
    offset_record,
)
from kcoord.log import Log, LogConfig
from kcoord.records import build_batch_columns

T0 = 1_700_000_000_000
MiB = 2**20
PRODUCER_ID = 0
GROUP_RECORD_EVERY = 100  # commits of a group between two of its group metadata records


def build(root: Path, commits: int, groups: int, partitions: int, segment_bytes: int) -> tuple[Log, dict, float]:
    """The partition: ``commits`` offset commits, round robin over the groups; returns the
    log, the last offset committed per (group, partition), and the build time."""
    started = time.perf_counter()
    log = Log(root, LogConfig(segment_bytes=segment_bytes, cleanup_policy="compact"), now_ms=T0)
    seq = 0

    def append(records: list, ts: int) -> None:
        nonlocal seq
        batch = build_batch_columns(
            [v for _, v in records], [k for k, _ in records], timestamp_ms=ts, producer_id=PRODUCER_ID, producer_epoch=0, base_sequence=seq
        )
        seq += len(records)
        log.append_as_leader(batch, leader_epoch=0, now_ms=ts)

    append([coordinator_epoch_record(0, 0)], T0)
    last: dict[tuple[str, int], int] = {}
    n = 0
    round_no = 0
    while n < commits:
        ts = T0 + round_no
        for g in range(groups):
            if n >= commits:
                break
            group = f"group-{g:04d}"
            take = min(partitions, commits - n)
            offset = round_no * 1000 + g
            records = [offset_record(OffsetKey(group, "events", p), OffsetValue(offset, "", 0, ts)) for p in range(take)]
            if round_no % GROUP_RECORD_EVERY == 0:
                records.append(group_record(GroupKey(group), GroupValue("consumer", round_no // GROUP_RECORD_EVERY + 1, "range", None, ts, [])))
            append(records, ts)
            for p in range(take):
                last[(group, p)] = offset
            n += take
        round_no += 1
    log.checkpoint_high_watermark(log.log_end_offset)
    return log, last, time.perf_counter() - started


def load(log: Log) -> tuple[GroupCoordinatorState, int, float, float]:
    """What a starting coordinator does with its partition: read it fetch by fetch from the
    log start, keep the well-formed records and replay them. (core, records, wall s, CPU s)"""
    started, cpu = time.perf_counter(), time.process_time()
    fetch_bytes = CoordinatorTimeouts().fetch_max_bytes
    offset = log.log_start_offset
    loaded: list = []
    while offset < log.log_end_offset:
        records, offset, _ = take_in(log.read(offset, fetch_bytes), offset, PRODUCER_ID)
        loaded.extend(records)

    def malformed(exc: Exception) -> None:
        raise exc

    good = well_formed(loaded, malformed)
    core = GroupCoordinatorState(GroupConfig(), 0, 1)
    core.load(good, T0)
    return core, len(good), time.perf_counter() - started, time.process_time() - cpu


def committed(core: GroupCoordinatorState) -> dict[tuple[str, int], int]:
    return {(g, p): o.offset for g in core.group_ids() for (_, p), o in core.committed_offsets(g).items()}


def timed_loads(log: Log, repeats: int, expected: dict) -> dict:
    seconds, cpu_seconds = [], []
    records = 0
    for _ in range(repeats):
        core, records, wall, cpu = load(log)
        if committed(core) != expected:
            raise AssertionError("the load did not rebuild the last committed offsets")
        seconds.append(wall)
        cpu_seconds.append(cpu)
    median, median_cpu = statistics.median(seconds), statistics.median(cpu_seconds)
    return {
        "records": records,
        "log_bytes": log.size_bytes,
        "segments": len(log.segments),
        "load_s": round(median, 3),
        "load_cpu_s": round(median_cpu, 3),
        "load_s_all": [round(s, 3) for s in seconds],
        "records_per_cpu_s": round(records / median_cpu) if median_cpu else None,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="50 000 commits instead of 1 million, finishes in seconds")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    parser.add_argument("--repeats", type=int, default=3, help="loads per figure (median reported)")
    parser.add_argument("--commits", type=int, help="offset commits in the history (default 1000000, 100000 with --quick)")
    parser.add_argument("--groups", type=int, default=100, help="groups committing (live keys: groups x partitions)")
    parser.add_argument("--partitions", type=int, default=10, help="partitions each group commits")
    parser.add_argument(
        "--segment-mib", type=float, help="segment.bytes of the benchmark's partition, MiB (default: __consumer_offsets' own, 1 with --quick)"
    )
    parser.add_argument("--dir", type=Path, help="where to put the log (default: system temp)")
    args = parser.parse_args(argv)
    commits = args.commits or (50_000 if args.quick else 1_000_000)
    for name in ("repeats", "commits", "groups", "partitions"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name} must be >= 1, got {value}")
    segment_bytes = int(args.segment_mib * MiB) if args.segment_mib is not None else (MiB if args.quick else OFFSETS_SEGMENT_BYTES)
    if segment_bytes < 4096:
        parser.error("--segment-mib must be at least 4 KiB")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kcoord-bench-", dir=args.dir) as tmp:
        log, last, build_s = build(Path(tmp), commits, args.groups, args.partitions, segment_bytes)
        full = timed_loads(log, args.repeats, last)
        clean_started = time.perf_counter()
        passes = removed = 0
        while True:
            r = log.clean(T0 + 10**9)
            if not r.segments_cleaned:
                break
            passes += 1
            removed += r.records_removed
        clean_s = time.perf_counter() - clean_started
        compacted = timed_loads(log, args.repeats, last)
        log.close()
    ratio = full["load_s"] / compacted["load_s"] if compacted["load_s"] else None
    ratio_cpu = full["load_cpu_s"] / compacted["load_cpu_s"] if compacted["load_cpu_s"] else None
    bytes_per_record = full["log_bytes"] / full["records"]
    report = {
        "benchmark": "group_load",
        "quick": args.quick,
        "commits": commits,
        "live_keys": len(last),
        "groups": args.groups,
        "partitions_per_group": args.partitions,
        "segment_bytes": segment_bytes,
        "build_s": round(build_s, 1),
        "uncompacted": full,
        "cleaner": {"passes": passes, "records_removed": removed, "seconds": round(clean_s, 2)},
        "compacted": compacted,
        "load_ratio": round(ratio, 1) if ratio else None,
        "load_ratio_cpu": round(ratio_cpu, 1) if ratio_cpu else None,
        "bytes_per_record": round(bytes_per_record, 1),
        "production_segment_bytes": OFFSETS_SEGMENT_BYTES,
        "production_segment_bound_cpu_s": (
            round(OFFSETS_SEGMENT_BYTES / bytes_per_record / full["records_per_cpu_s"], 1) if full["records_per_cpu_s"] else None
        ),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average": list(os.getloadavg()),
        "seconds": round(time.perf_counter() - started, 1),
        "target": "the compacted load replays about the live keys plus the active segment, not the history",
        "target_met": compacted["records"] <= len(last) * 2 + int(segment_bytes / bytes_per_record),
    }
    script.emit(report, args.out)
    return report


if __name__ == "__main__":
    main(sys.argv[1:])
