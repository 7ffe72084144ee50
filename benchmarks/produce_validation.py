"""Benchmark: the leader's produce path with record validation on, next to the same path off.

``Log.append_as_leader`` (frame + CRC check, stamp, write) for pre-built batches,
once with :func:`kcoord.records.validate_produce_batch` (decode the payload, check columns,
counts, codec, timestamps) and once without (``Log.validate_records = False``), in
alternating rounds on the same machine in the same run, for several batch shapes: small and
large kcoord batches, keyed, compressed (lz4, zstd, gzip) and Kafka v2 batches. Each
figure is the median over ``--repeats``; ``slowdown`` is 1 - on/off throughput from wall
time, ``slowdown_cpu`` the same from the process's CPU time (which a busy shared machine
disturbs less). Goal: at most 0.10. This is the log alone, the harshest view: a real produce
also pays the client, Ray's call and the reply, which validation does not touch.

``--end-to-end`` measures the goal itself: ``send_batch()`` of 100-byte records with
acks=all to 6 partitions at RF=3 on a 3-broker ``local_cluster``, in alternating Ray
sessions with validation on and off. "Off" is set from outside kcoord, by Ray's
``worker_process_setup_hook`` in every worker (``Log.validate_records = False``); the run
checks that every replica actor's process ran that hook. Prints JSON (and writes it to
``--out``).

    python benchmarks/produce_validation.py [--quick] [--out FILE] [--repeats N] [--end-to-end]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

from kcoord.bench import script
from kcoord.kafka.batches import build_kafka_batch
from kcoord.log import Log, LogConfig
from kcoord.records import build_batch_columns, codec_id

TS = 1_700_000_000_000


def shapes(quick: bool) -> dict[str, list[bytes]]:
    def kc(n, size, keyed=False, codec="none"):
        out = []
        for i in range(4):
            values = [os.urandom(size // 2) * 2 for _ in range(n)]
            keys = [b"key-%d" % j for j in range(n)] if keyed else None
            out.append(build_batch_columns(values, keys, timestamp_ms=TS + i, compression=codec_id(codec)))
        return out

    def kafka(n, size, codec="none"):
        return [
            build_kafka_batch([(b"key-%d" % j, os.urandom(size // 2) * 2, [], TS + i) for j in range(n)], compression=codec_id(codec))
            for i in range(4)
        ]

    out = {
        "kcoord 10 x 100 B": kc(10, 100),
        "kcoord 160 x 100 B (16 KiB)": kc(160, 100),
        "kcoord 160 x 100 B keyed": kc(160, 100, keyed=True),
        "kcoord 160 x 100 B lz4": kc(160, 100, codec="lz4"),
        "kcoord 160 x 100 B zstd": kc(160, 100, codec="zstd"),
        "kafka v2 160 x 100 B": kafka(160, 100),
    }
    if not quick:
        out["kcoord 10000 x 100 B (1 MiB)"] = kc(10000, 100)
        out["kcoord 160 x 100 B gzip"] = kc(160, 100, codec="gzip")
        out["kafka v2 160 x 100 B lz4"] = kafka(160, 100, codec="lz4")
    return out


def run(pool: list[bytes], directory: str, rounds: int, per_round: int) -> dict[bool, tuple[float, float, int]]:
    """Two logs, one validating and one not, appended to in alternating rounds of
    ``per_round`` batches (so a burst of load from elsewhere hits both alike): per mode
    (wall seconds, CPU seconds, bytes)."""
    logs = {}
    for validate in (True, False):
        path = os.path.join(directory, "on" if validate else "off")
        shutil.rmtree(path, ignore_errors=True)
        log = Log(path, LogConfig(segment_bytes=64 * 2**20), now_ms=TS)
        log.validate_records = validate
        logs[validate] = log
    spent = {True: [0.0, 0.0, 0], False: [0.0, 0.0, 0]}
    k = 0
    for r in range(rounds):
        for validate in ((True, False) if r % 2 == 0 else (False, True)):
            log = logs[validate]
            append = log.append_as_leader
            w0, c0 = time.perf_counter(), time.process_time()
            total = 0
            for i in range(per_round):
                data = pool[(k + i) % len(pool)]
                append(data, leader_epoch=0, now_ms=TS)
                total += len(data)
            acc = spent[validate]
            acc[0] += time.perf_counter() - w0
            acc[1] += time.process_time() - c0
            acc[2] += total
        k += per_round
    for log in logs.values():
        log.close()
    return {v: (a[0], a[1], a[2]) for v, a in spent.items()}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--out", default=None)
    parser.add_argument("--end-to-end", action="store_true", help="acks=all RF=3 send_batch() on a local Ray cluster, validation on vs off")
    args = parser.parse_args(argv)
    if args.end_to_end:
        return end_to_end(args)
    repeats = args.repeats or (3 if args.quick else 7)
    target = (8 if args.quick else 48) * 2**20
    tmp = tempfile.mkdtemp(prefix="kcoord-bench-validation-")
    results = {}
    try:
        for name, pool in shapes(args.quick).items():
            per_round = max(20, 2**20 // len(pool[0]))  # ~1 MiB a round
            rounds = max(4, target // (per_round * len(pool[0])))
            on, off, cpu_on, cpu_off = [], [], [], []
            for _ in range(repeats):
                got = run(pool, tmp, rounds, per_round)
                on.append(got[True][2] / got[True][0] / 1e6)
                off.append(got[False][2] / got[False][0] / 1e6)
                cpu_on.append(got[True][2] / got[True][1] / 1e6)
                cpu_off.append(got[False][2] / got[False][1] / 1e6)
            on_mbs, off_mbs = statistics.median(on), statistics.median(off)
            results[name] = {
                "batch_bytes": len(pool[0]),
                "validation_on_MBps": round(on_mbs, 1),
                "validation_off_MBps": round(off_mbs, 1),
                "slowdown": round(1 - on_mbs / off_mbs, 3),
                "validation_on_MBps_cpu": round(statistics.median(cpu_on), 1),
                "validation_off_MBps_cpu": round(statistics.median(cpu_off), 1),
                "slowdown_cpu": round(1 - statistics.median(cpu_on) / statistics.median(cpu_off), 3),
            }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report = {"benchmark": "produce_validation", "repeats": repeats, "target_bytes_per_run": target, "results": results,
              "goal": "slowdown <= 0.10"}
    script.emit(report, args.out)
    return report


MARKS = os.path.join(tempfile.gettempdir(), "kcoord-bench-validation-off")


def _validation_off() -> None:
    """Ray's worker_process_setup_hook for the "off" sessions: every worker process."""
    from kcoord.log import Log

    Log.validate_records = False
    os.makedirs(MARKS, exist_ok=True)
    open(os.path.join(MARKS, str(os.getpid())), "w").close()


def _session(validate: bool, values: list[bytes], partitions: int) -> float:
    """records/s of one send_batch() of ``values`` in a fresh Ray session."""
    import ray

    import kcoord
    from kcoord.client.admin import Admin
    from kcoord.cluster.local import start_local_ray

    shutil.rmtree(MARKS, ignore_errors=True)
    start_local_ray(num_cpus=2, **({} if validate else {"runtime_env": {"worker_process_setup_hook": _validation_off}}))
    try:
        with kcoord.local_cluster(brokers=3, group_coordinators=0) as cluster:
            admin = Admin(cluster)
            admin.create_topic("v", partitions=partitions, replication_factor=3, config={"min.insync.replicas": 2})
            admin.wait_for_leaders("v")
            with kcoord.Producer(cluster, acks="all", linger_ms=5) as p:
                p.send_batch("v", values=values[:10_000], timeout=120)  # metadata, producer id, warm-up
                started = time.perf_counter()
                written = p.send_batch("v", values=values, timeout=600)
                seconds = time.perf_counter() - started
            if sum(w.count for w in written.values()) != len(values):
                raise RuntimeError("send_batch did not write every record")
            if not validate:  # the hook ran in every replica's process
                pids = {ray.get(cluster.replica("v", pm.partition, b).describe.remote(), timeout=60)["pid"]
                        for pm in cluster.topic("v").partitions for b in pm.replicas}
                marked = {int(n) for n in os.listdir(MARKS)}
                if not pids <= marked:
                    raise RuntimeError(f"replica processes {sorted(pids - marked)} did not turn validation off")
        return len(values) / seconds
    finally:
        ray.shutdown()


def end_to_end(args) -> dict:
    repeats = args.repeats or (1 if args.quick else 3)
    records = 200_000 if args.quick else 1_000_000
    pool = [os.urandom(100) for _ in range(4096)]
    values = [pool[i % len(pool)] for i in range(records)]
    on: list[float] = []
    off: list[float] = []
    for r in range(repeats):
        for validate in ((True, False) if r % 2 == 0 else (False, True)):
            (on if validate else off).append(_session(validate, values, 6))
    on_rps, off_rps = statistics.median(on), statistics.median(off)
    report = {
        "benchmark": "produce_validation",
        "end_to_end": True,
        "records": records,
        "value_bytes": 100,
        "partitions": 6,
        "acks": "all",
        "replication_factor": 3,
        "repeats": repeats,
        "validation_on_records_per_s": [round(x) for x in on],
        "validation_off_records_per_s": [round(x) for x in off],
        "slowdown": round(1 - on_rps / off_rps, 3),
        "context": script.context(),
        "goal": "slowdown <= 0.10",
    }
    script.emit(report, args.out)
    return report


if __name__ == "__main__":
    main()
