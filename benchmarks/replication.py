"""Replication benchmark: produce throughput and latency through the partition leader.

Measures acks=1 and acks=all on RF=1 and RF=3 topics with 100-byte records, next to a
baseline measured in the same run: the same batches sent to a Ray actor that only appends
the bytes to a list (the ceiling of one actor hop on this machine). Prints JSON.

    python benchmarks/replication.py [--quick] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ray  # noqa: E402

from kcoord import records  # noqa: E402
from kcoord.protocol.replication import ProduceRequest, ProduceResponse  # noqa: E402

VALUE = 100


class RawSink:
    """The baseline: receive a batch, keep it, answer."""

    def __init__(self) -> None:
        self.batches: list[bytes] = []
        self.bytes = 0

    async def produce(self, data: bytes) -> bytes:
        self.batches.append(data)
        self.bytes += len(data)
        if len(self.batches) > 64:
            self.batches.clear()
        return b"ok"

    async def ping(self) -> int:
        return 1


def make_batches(count: int, per_batch: int) -> list[bytes]:
    payload = os.urandom(VALUE)
    values = [payload] * per_batch
    return [records.build_batch_columns(values, timestamp_ms=int(time.time() * 1000)) for _ in range(count)]


async def run_stream(send, batches: list[bytes], depth: int) -> float:
    """Send all batches keeping ``depth`` requests in flight; returns seconds."""
    start = time.perf_counter()
    pending: set = set()
    for b in batches:
        pending.add(asyncio.ensure_future(send(b)))
        if len(pending) >= depth:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for d in done:
                d.result()
    if pending:
        for d in await asyncio.gather(*pending):
            pass
    return time.perf_counter() - start


async def run_latency(send, batches: list[bytes]) -> list[float]:
    out = []
    for b in batches:
        t = time.perf_counter()
        await send(b)
        out.append((time.perf_counter() - t) * 1000)
    return out


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for CI smoke runs")
    parser.add_argument("--out", help="also write the JSON here")
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args()

    per_batch = 10_000  # ~1 MiB of 100-byte records
    n_batches = 15 if args.quick else 150
    repeats = args.repeats or (1 if args.quick else 3)
    lat_n = 50 if args.quick else 400
    depth = 4

    from kcoord.cluster.deploy import deploy, teardown
    from kcoord.cluster.local import start_local_ray
    from kcoord.client.admin import Admin

    start_local_ray()
    name = f"bench-repl-{os.getpid()}"
    client = deploy(name, brokers=3, group_coordinators=0, address=None)
    admin = Admin(client)
    results: dict = {
        "benchmark": "replication",
        "record_bytes": VALUE,
        "records_per_batch": per_batch,
        "batches": n_batches,
        "in_flight": depth,
        "repeats": repeats,
        "cases": {},
    }
    try:
        admin.create_topic("rf1", partitions=1, replication_factor=1)
        admin.create_topic("rf3", partitions=1, replication_factor=3, config={"min.insync.replicas": 2})
        sink = ray.remote(RawSink).options(num_cpus=0).remote()
        ray.get(sink.ping.remote())
        batches = make_batches(n_batches, per_batch)
        small = make_batches(lat_n, 100)
        batch_bytes = len(batches[0])

        async def bench() -> None:
            async def raw_send(b: bytes):
                return await sink.produce.remote(b)

            def leader_send(topic: str, acks: int):
                p = client.partition_metadata(topic, 0, refresh=True)
                h = client.replica(topic, 0, p.leader)

                async def send(b: bytes):
                    raw = await h.produce.remote(ProduceRequest(topic, 0, b, acks=acks, timeout_ms=30000).encode())
                    resp = ProduceResponse.decode(raw)
                    if resp.error_code:
                        raise RuntimeError(f"produce failed: {resp}")
                    return resp

                return send

            cases = {"raw_actor": raw_send}
            for rf in (1, 3):
                for acks in (1, -1):
                    cases[f"rf{rf}_acks{'all' if acks == -1 else acks}"] = leader_send(f"rf{rf}", acks)
            for label, send in cases.items():
                await run_stream(send, batches[:3], depth)  # warm up
                secs = [await run_stream(send, batches, depth) for _ in range(repeats)]
                med = statistics.median(secs)
                lat = await run_latency(send, small)
                results["cases"][label] = {
                    "records_per_s": round(n_batches * per_batch / med),
                    "mb_per_s": round(n_batches * batch_bytes / med / 1e6, 1),
                    "latency_ms_p50_100rec_batches": round(pct(lat, 0.5), 2),
                    "latency_ms_p99_100rec_batches": round(pct(lat, 0.99), 2),
                    "seconds_median": round(med, 3),
                }

        asyncio.run(bench())
        base = results["cases"]["raw_actor"]["records_per_s"]
        for label, case in results["cases"].items():
            case["ratio_vs_raw_actor"] = round(case["records_per_s"] / base, 3)
        results["target"] = "acks=all RF=3 >= 0.30 of the raw-actor figure"
        results["target_met"] = results["cases"]["rf3_acksall"]["ratio_vs_raw_actor"] >= 0.30
    finally:
        teardown(name, delete_data=True, address=None)
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
