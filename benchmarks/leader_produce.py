"""Benchmark: the leader's produce path in the replica core, next to the log append alone.

``Replica.handle(ProduceRequest)`` on a leader of an RF=1 partition (request checks, the
batch header, idempotence and parking, LogAppendTime, ``Log.append_as_leader``, the HW and
the reply) against ``Log.append_as_leader`` of the same batches on a second log (the
baseline: what the core adds on top is ``overhead``), in alternating rounds of the same
run, on real files (fsync off). Shapes: small and 16 KiB kcoord batches from an idempotent
producer (sequence numbers, as every kcoord and Kafka producer sends by default), acks=1
and acks=all, CreateTime and LogAppendTime topics (there the core also rewrites each
batch's timestamps and CRC, which the log alone does not). Each figure is the median over
``--repeats``; ``overhead`` is the core's extra wall time per request over the log's,
``overhead_us`` the same in microseconds. Prints JSON (and writes it to ``--out``).

    python benchmarks/leader_produce.py [--quick] [--out FILE] [--repeats N]
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time

from kcoord.bench import script
from kcoord.log import Log, LogConfig
from kcoord.protocol.controller import LeaderAndIsrRequest
from kcoord.protocol.replication import ProduceRequest
from kcoord.record import build_batch_columns
from kcoord.replication.config import LOG_APPEND_TIME, ReplicationConfig
from kcoord.replication.replica import Replica

TS = 1_700_000_000_000
TOPIC = "bench"


def batches(records: int, count: int) -> list[bytes]:
    """``count`` batches of ``records`` 100-byte records from one idempotent producer."""
    value = os.urandom(100)
    return [
        build_batch_columns([value] * records, timestamp_ms=TS, producer_id=1, producer_epoch=0, base_sequence=i * records)
        for i in range(count)
    ]


def leader(path: str, timestamp_type: str) -> Replica:
    log = Log(path, LogConfig(segment_bytes=64 * 2**20), now_ms=TS)
    replica = Replica(TOPIC, 0, 0, log, ReplicationConfig(message_timestamp_type=timestamp_type), TS, config_version=0)
    replica.handle(
        LeaderAndIsrRequest(controller_epoch=1, topic=TOPIC, partition=0, leader=0, leader_epoch=1, partition_epoch=1, isr=[0], replicas=[0]),
        "lai",
        TS,
    )
    assert replica.role == "leader"
    return replica


def run(pool: list[bytes], directory: str, acks: int, timestamp_type: str, rounds: int) -> tuple[float, float]:
    """Wall seconds through the core and through the log alone, the same batches in
    alternating rounds."""
    for name in ("core", "log"):
        shutil.rmtree(os.path.join(directory, name), ignore_errors=True)
    core = leader(os.path.join(directory, "core"), timestamp_type)
    log = Log(os.path.join(directory, "log"), LogConfig(segment_bytes=64 * 2**20), now_ms=TS)
    log.epoch_cache.assign(1, 0)
    requests = [ProduceRequest(TOPIC, 0, b, acks=acks, timeout_ms=30_000) for b in pool]
    per_round = -(-len(pool) // rounds)
    spent = {"core": 0.0, "log": 0.0}
    handle, append = core.handle, log.append_as_leader
    for r in range(rounds):
        chunk = range(r * per_round, min(len(pool), (r + 1) * per_round))

        def through_core() -> None:
            for i in chunk:
                out = handle(requests[i], i, TS + i)
                assert out[-1].response.error_code == 0

        def log_alone() -> None:
            for i in chunk:
                append(pool[i], 1, TS + i)

        for name, fn in (("core", through_core), ("log", log_alone)) if r % 2 == 0 else (("log", log_alone), ("core", through_core)):
            started = time.perf_counter()
            fn()
            spent[name] += time.perf_counter() - started
    assert core.state.log.log_end_offset == log.log_end_offset
    core.state.log.close()
    log.close()
    return spent["core"], spent["log"]


def main() -> dict:
    parser = script.parser(__doc__)
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args()
    started = time.perf_counter()
    repeats = args.repeats or (3 if args.quick else 7)
    count = 2_000 if args.quick else 20_000
    shapes = {"10 x 100 B": 10, "160 x 100 B (16 KiB)": 160}
    tmp = tempfile.mkdtemp(prefix="kcoord-bench-leader-")
    results = {}
    try:
        for shape, records in shapes.items():
            pool = batches(records, count)
            for acks in (1, -1):
                for timestamp_type in ("CreateTime", LOG_APPEND_TIME):
                    core, alone = [], []
                    for _ in range(repeats):
                        c, a = run(pool, tmp, acks, timestamp_type, rounds=10)
                        core.append(c)
                        alone.append(a)
                    c, a = statistics.median(core), statistics.median(alone)
                    results[f"{shape}, acks={'all' if acks == -1 else acks}, {timestamp_type}"] = {
                        "requests": count,
                        "core_requests_per_s": round(count / c),
                        "log_alone_appends_per_s": round(count / a),
                        "overhead": round(c / a - 1, 3),
                        "overhead_us": round((c - a) / count * 1e6, 2),
                    }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report = {"benchmark": "leader_produce", "repeats": repeats, "machine": script.context(), "results": results}
    script.emit(report, args.out, started)
    return report


if __name__ == "__main__":
    main()
