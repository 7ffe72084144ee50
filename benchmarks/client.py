"""Client benchmark: one producer process with send() and with send_batch(), and a consumer,
against a 3-broker cluster (acks=all, RF=3, min.insync.replicas=2, 6 partitions (2 with
--quick), 100-byte values), next to ray.util.queue.Queue moving the same values with put_nowait_batch /
get_nowait_batch, measured in the same run. Prints JSON: medians over repeats, ratios.

    python benchmarks/client.py [--quick] [--out FILE] [--records N] [--repeats R]

``send`` is timed from the first send() to the end of flush() (every record acknowledged);
``send_call`` is the send() loop alone (the cost to the caller). ``send_batch`` is one call
with the columns (default 1 MiB batches, and again with ``batch_size=4 MiB``). ``consume``
reads back what send_batch wrote with a fresh Consumer (prefetching; poll() with the
default max_poll_records=500, ConsumerRecord tuples); ``consume_columns`` reads it again
with poll_columns() (no per-record objects). The queue figures use chunks of
``--queue-chunk`` values per call. ``cpu_during_one_send_batch`` (not with --quick) splits
the CPU time of one extra send_batch run between the driver, the leaders, the followers,
Ray's daemons and everything else on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ray  # noqa: E402

VALUE = 100
PARTITIONS = 6
QUICK_PARTITIONS = 2  # each partition is 3 replica actors (processes): --quick starts fewer


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def rate(n: int, seconds: float) -> dict:
    return {"records_per_s": round(n / seconds), "mb_per_s": round(n * VALUE / seconds / 1e6, 1), "seconds": round(seconds, 3)}


def summarize(n: int, runs: list[float]) -> dict:
    med = median(runs)
    out = rate(n, med)
    out["runs_records_per_s"] = [round(n / s) for s in runs]
    return out


def bench_send(cluster, topic: str, values: list[bytes], linger_ms: int) -> tuple[float, float]:
    from kcoord.client.producer import Producer

    p = Producer(cluster, acks="all", linger_ms=linger_ms)
    try:
        p.send(topic, values[0]).get(60)  # metadata and producer id outside the timing
        send = p.send
        start = time.perf_counter()
        for v in values:
            send(topic, v)
        called = time.perf_counter() - start
        p.flush(timeout=600)
        total = time.perf_counter() - start
    finally:
        p.close()
    return called, total


def bench_send_batch(cluster, topic: str, values: list[bytes], batch_size: int | None = None) -> float:
    from kcoord.client.producer import Producer

    p = Producer(cluster, acks="all")
    try:
        p.send(topic, values[0]).get(60)
        start = time.perf_counter()
        result = p.send_batch(topic, values=values, timeout=600, batch_size=batch_size)
        took = time.perf_counter() - start
        assert sum(w.count for w in result.values()) == len(values)
    finally:
        p.close()
    return took


def bench_consume(cluster, topic: str, starts: dict, count: int, columns: bool = False) -> float:
    """Read ``count`` records from ``starts`` over every partition of ``topic``."""
    from kcoord.client.consumer import Consumer
    from kcoord.client.types import TopicPartition

    c = Consumer(cluster=cluster)  # default max_poll_records (500)
    tps = [TopicPartition(topic, p) for p in sorted(starts)]
    c.assign(tps)
    for tp in tps:
        c.seek(tp, starts[tp.partition])
    got = 0
    start = time.perf_counter()
    poll = c.poll_columns if columns else c.poll
    while got < count:
        for recs in poll(timeout_ms=5000).values():
            got += len(recs)
        if time.perf_counter() - start > 600:
            raise RuntimeError(f"consumer read {got} of {count} records in 600 s")
    took = time.perf_counter() - start
    c.close()
    return took


def replica_roles(cluster, topic: str) -> dict[int, str]:
    """{pid: "leader" | "follower"} of the topic's replica actors."""
    roles = {}
    md = cluster.topic(topic, refresh=True)
    for pm in md.partitions:
        for b in pm.replicas:
            info = ray.get(cluster.replica(topic, pm.partition, b).describe.remote(), timeout=60)
            roles[info["pid"]] = "leaders" if b == pm.leader else "followers"
    return roles


def cpu_breakdown(roles: dict[int, str], fn) -> dict:
    """CPU seconds spent by the driver, the topic's leaders and followers, and Ray's own
    daemons while ``fn()`` runs: where a bulk write's cost goes."""
    import psutil

    def snap() -> dict[int, tuple[float, str]]:
        out = {}
        for proc in psutil.process_iter(["pid", "name"]):
            try:
                t = proc.cpu_times()
                out[proc.pid] = (t.user + t.system, proc.info["name"] or "")
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        return out

    before = snap()
    start = time.perf_counter()
    fn()
    wall = time.perf_counter() - start
    after = snap()
    kinds: dict[str, float] = {}
    for pid, (cpu, name) in after.items():
        if pid not in before:
            continue
        if pid == os.getpid():
            kind = "driver"
        elif pid in roles:
            kind = roles[pid]
        elif "raylet" in name or "gcs_server" in name:
            kind = "ray_daemons"
        else:
            kind = "everything_else"
        kinds[kind] = kinds.get(kind, 0.0) + max(0.0, cpu - before[pid][0])
    return {"wall_seconds": round(wall, 3), "cpu_seconds": {k: round(v, 2) for k, v in sorted(kinds.items())}}


def bench_queue(values: list[bytes], chunk: int) -> tuple[float, float]:
    """ray.util.queue.Queue: put everything in chunks, then get everything in chunks."""
    from ray.util.queue import Queue

    q = Queue(actor_options={"num_cpus": 0})
    try:
        q.put_nowait_batch(values[:chunk])
        q.get_nowait_batch(chunk)
        chunks = [values[i : i + chunk] for i in range(0, len(values), chunk)]
        start = time.perf_counter()
        for c in chunks:
            q.put_nowait_batch(c)
        put = time.perf_counter() - start
        start = time.perf_counter()
        got = 0
        for c in chunks:
            got += len(q.get_nowait_batch(len(c)))
        get = time.perf_counter() - start
        assert got == len(values)
    finally:
        q.shutdown()
    return put, get


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (< 60 s)")
    parser.add_argument("--out", help="also write the JSON here")
    parser.add_argument("--records", type=int, default=None, help="records per run (send_batch/consume/queue)")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--queue-chunk", type=int, default=10_000)
    parser.add_argument("--linger-ms", type=int, default=5)
    args = parser.parse_args()
    n = args.records or (100_000 if args.quick else 1_000_000)
    n_send = n // 2 if args.quick else n
    repeats = args.repeats or (1 if args.quick else 3)
    partitions = QUICK_PARTITIONS if args.quick else PARTITIONS

    from kcoord.cluster.deploy import deploy, teardown
    from kcoord.cluster.local import start_local_ray
    from kcoord.client.admin import Admin

    wall = time.perf_counter()
    start_local_ray()
    name = f"bench-client-{uuid.uuid4().hex[:6]}"
    cluster = deploy(name, brokers=3, group_coordinators=0, address=None)
    setup = {"ray_and_cluster_s": round(time.perf_counter() - wall, 1)}
    pool = [os.urandom(VALUE) for _ in range(4096)]
    values = [pool[i % len(pool)] for i in range(n)]
    send_values = values[:n_send]
    results: dict = {
        "benchmark": "client",
        "value_bytes": VALUE,
        "partitions": partitions,
        "replication_factor": 3,
        "acks": "all",
        "records_send": n_send,
        "records_batch": n,
        "repeats": repeats,
        "queue_chunk": args.queue_chunk,
        "cpus": os.cpu_count(),
        "load_average_at_start": [round(x, 1) for x in os.getloadavg()],
        "cases": {},
    }
    try:
        admin = Admin(cluster)
        topic = "bench"
        t0 = time.perf_counter()
        admin.create_topic(topic, partitions=partitions, replication_factor=3, config={"min.insync.replicas": 2})
        setup["create_topic_s"] = round(time.perf_counter() - t0, 1)
        results["setup"] = setup
        send_runs, call_runs, batch_runs, batch4_runs, consume_runs, columns_runs, put_runs, get_runs = [], [], [], [], [], [], [], []
        for _ in range(repeats):
            called, total = bench_send(cluster, topic, send_values, args.linger_ms)
            call_runs.append(called)
            send_runs.append(total)
            starts = admin.list_offsets(topic, "latest")
            batch_runs.append(bench_send_batch(cluster, topic, values))
            batch4_runs.append(bench_send_batch(cluster, topic, values, batch_size=4 << 20))
            consume_runs.append(bench_consume(cluster, topic, starts, n))
            columns_runs.append(bench_consume(cluster, topic, starts, n, columns=True))
            put, get = bench_queue(values, args.queue_chunk)
            put_runs.append(put)
            get_runs.append(get)
        if not args.quick:
            roles = replica_roles(cluster, topic)
            results["cpu_during_one_send_batch"] = cpu_breakdown(roles, lambda: bench_send_batch(cluster, topic, values))
        cases = results["cases"]
        cases["send"] = summarize(n_send, send_runs)
        cases["send_call"] = summarize(n_send, call_runs)
        cases["send_batch"] = summarize(n, batch_runs)
        cases["send_batch_4MiB_batches"] = summarize(n, batch4_runs)
        cases["consume"] = summarize(n, consume_runs)
        cases["consume_columns"] = summarize(n, columns_runs)
        cases["queue_put_batch"] = summarize(n, put_runs)
        cases["queue_get_batch"] = summarize(n, get_runs)
        cases["queue_put_then_get"] = summarize(n, [p + g for p, g in zip(put_runs, get_runs)])
        put_rate = cases["queue_put_batch"]["records_per_s"]
        get_rate = cases["queue_get_batch"]["records_per_s"]
        results["ratios"] = {
            "send_vs_queue_put": round(cases["send"]["records_per_s"] / put_rate, 2),
            "send_batch_vs_queue_put": round(cases["send_batch"]["records_per_s"] / put_rate, 2),
            "send_batch_4MiB_vs_queue_put": round(cases["send_batch_4MiB_batches"]["records_per_s"] / put_rate, 2),
            "consume_vs_queue_get": round(cases["consume"]["records_per_s"] / get_rate, 2),
            "consume_columns_vs_queue_get": round(cases["consume_columns"]["records_per_s"] / get_rate, 2),
        }
        targets = {
            "send_records_per_s": (cases["send"]["records_per_s"], 300_000),
            "send_batch_records_per_s": (cases["send_batch"]["records_per_s"], 1_000_000),
            "consume_records_per_s": (cases["consume"]["records_per_s"], 1_000_000),
        }
        results["targets"] = {k: {"measured": v, "target": t, "met": v >= t} for k, (v, t) in targets.items()}
        results["targets"]["ratios_at_least_3x"] = {k: v >= 3 for k, v in results["ratios"].items()}
    finally:
        teardown(name, delete_data=True, address=None)
    results["wall_seconds"] = round(time.perf_counter() - wall, 1)
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
