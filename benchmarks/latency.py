"""End-to-end latency at fixed offered loads (acks=all, RF=3), next to a Ray queue carrying
the same records at the same pace in the same run.

Why: throughput figures come from large batches; an application sending one record at a
time at a steady rate cares about how long a record takes to become visible to a consumer.
That is the producer's linger and batching, the leader's append, the followers' fetch
round trip that advances the high watermark (a consumer only sees records below it), and
the consumer's long-poll fetch.

Topic: 3 partitions (1 with ``--quick``), RF=3, ``min.insync.replicas=2``; producer
``linger_ms=1``. A paced producer in this process calls ``send()`` at 1k, 10k and 50k records/s (a
``--seconds``-long phase per load; each 100-byte value starts with ``time.time_ns()`` taken
just before ``send()`` and the phase number). A consumer in another process (a Ray actor on
the same machine, so the same clock) polls the topic (``poll_columns``); a record's latency
is the time its poll returned it minus the time in its value. The achieved send rate is
reported next to the offered one: on a busy 2-core machine the producer may fall behind.
``ack_latency_ms`` (every 10th record) is send() -> the producer's acknowledgement (the
high watermark passed the record): the part of the end-to-end time spent before a
consumer can be told.

Baseline ``queue``: the same pacing puts each tick's records into a
``ray.util.queue.Queue`` (``put_nowait_batch``) and a consumer actor takes them out
(``get`` then ``get_nowait_batch``): one Ray actor hop each way, no replication.
Ratios are kcoord / queue (lower is better for kcoord). Prints JSON.

    python benchmarks/latency.py [--quick] [--out FILE] [--seconds S] [--loads 1000,10000,50000]
"""

from __future__ import annotations

import itertools
import struct
import sys
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ray  # noqa: E402

from kcoord.bench import script  # noqa: E402
from kcoord.bench.stats import ratio, summary  # noqa: E402

VALUE = 100
PARTITIONS = 3
QUICK_PARTITIONS = 1  # each partition is 3 replica actors (processes): --quick starts fewer
LINGER_MS = 1
STAMP = "<qi"  # send time (ns since the epoch), phase; a format, not a Struct: actors pickle it
PAD = b"x" * (VALUE - struct.calcsize(STAMP))
TICK_S = 0.001
ACK_SAMPLE_EVERY = 10  # records whose acknowledgement time is also recorded


def stamped(phase: int) -> bytes:
    return struct.pack(STAMP, time.time_ns(), phase) + PAD


class LogReader:
    """Consumer actor: reads every partition of the topic from its end, and records the
    latency of every record of the phase it is asked for."""

    def __init__(self, cluster, topic: str) -> None:
        from kcoord.client.admin import Admin
        from kcoord.client.consumer import Consumer
        from kcoord.client.types import TopicPartition

        self.consumer = Consumer(cluster=cluster, max_poll_records=100_000)
        tps = [TopicPartition(topic, p) for p in cluster.partitions_for(topic)]
        self.consumer.assign(tps)
        ends = Admin(cluster).list_offsets(topic, "latest")
        for tp in tps:
            self.consumer.seek(tp, ends[tp.partition])

    def ready(self) -> bool:
        return True

    def consume(self, phase: int, count: int, timeout_s: float) -> list[float]:
        unpack, out = struct.Struct(STAMP).unpack_from, []
        deadline = time.monotonic() + timeout_s
        while len(out) < count and time.monotonic() < deadline:
            polled = self.consumer.poll_columns(timeout_ms=100)
            now = time.time_ns()
            for cols in polled.values():
                for v in cols.values:
                    sent, ph = unpack(v)
                    if ph == phase:
                        out.append((now - sent) / 1e6)
        return out


class QueueReader:
    """The baseline's consumer actor: blocks on the queue, then drains what is there."""

    def __init__(self, queue) -> None:
        self.queue = queue

    def ready(self) -> bool:
        return True

    def consume(self, phase: int, count: int, timeout_s: float) -> list[float]:
        from ray.util.queue import Empty

        unpack, out = struct.Struct(STAMP).unpack_from, []
        deadline = time.monotonic() + timeout_s
        while len(out) < count and time.monotonic() < deadline:
            try:
                first = self.queue.get(block=True, timeout=0.5)
            except Empty:
                continue
            rest = self.queue.get_nowait_batch(self.queue.qsize()) if self.queue.qsize() else []
            now = time.time_ns()
            for v in [first, *rest]:
                sent, ph = unpack(v)
                if ph == phase:
                    out.append((now - sent) / 1e6)
        return out


def paced(rate: int, seconds: float, emit: Callable[[int], None]) -> tuple[int, float]:
    """Call ``emit(k)`` so that ``rate * seconds`` records go out at ``rate`` per second,
    in ticks of about 1 ms; returns (records, seconds taken). If ``emit`` cannot keep up,
    the phase takes longer and the achieved rate is lower than offered."""
    total = max(1, int(rate * seconds))
    sent = 0
    start = time.perf_counter()
    while sent < total:
        elapsed = time.perf_counter() - start
        due = min(total, int(elapsed * rate) + 1)
        if due > sent:
            emit(due - sent)
            sent = due
        else:
            time.sleep(min(TICK_S, sent / rate - elapsed))
    return sent, time.perf_counter() - start


def run_phase(reader, phase: int, rate: int, seconds: float, emit: Callable[[int], None], finish: Callable[[], None]) -> dict:
    count = max(1, int(rate * seconds))
    pending = reader.consume.remote(phase, count, timeout_s=seconds * 4 + 60)
    sent, took = paced(rate, seconds, emit)
    finish()
    latencies = ray.get(pending)
    return {
        "offered_records_per_s": rate,
        "achieved_records_per_s": round(sent / took),
        "sent": sent,
        "received": len(latencies),
        "latency_ms": summary(latencies),
    }


def main() -> None:
    parser = script.parser(__doc__)
    parser.add_argument("--seconds", type=float, default=None, help="length of each load phase (default 10, 1.5 with --quick)")
    parser.add_argument("--loads", default="1000,10000,50000", help="offered loads, records/s")
    parser.add_argument("--linger-ms", type=int, default=LINGER_MS, help=f"the producer's linger_ms (default {LINGER_MS})")
    args = parser.parse_args()
    started = time.perf_counter()
    seconds = args.seconds or (1.5 if args.quick else 10.0)
    loads = [int(x) for x in args.loads.split(",") if x]
    partitions = QUICK_PARTITIONS if args.quick else PARTITIONS

    import kcoord
    from kcoord.client.admin import Admin
    from kcoord.client.producer import Producer
    from ray.util.queue import Queue

    results: dict = {
        "benchmark": "latency",
        "quick": args.quick,
        "acks": "all",
        "replication_factor": 3,
        "min_insync_replicas": 2,
        "partitions": partitions,
        "value_bytes": VALUE,
        "linger_ms": args.linger_ms,
        "seconds_per_load": seconds,
        "context": script.context(),
    }
    with kcoord.local_cluster(brokers=3, group_coordinators=0) as cluster:
        topic = "latency"
        Admin(cluster).create_topic(topic, partitions=partitions, replication_factor=3, config={"min.insync.replicas": 2})
        reader = ray.remote(LogReader).options(num_cpus=0).remote(cluster, topic)
        queue = Queue(actor_options={"num_cpus": 0})
        queue_reader = ray.remote(QueueReader).options(num_cpus=0).remote(queue)
        ray.get([reader.ready.remote(), queue_reader.ready.remote()])
        producer = Producer(cluster, acks="all", linger_ms=args.linger_ms)
        results["setup_seconds"] = round(time.perf_counter() - started, 1)
        phase = 0
        try:
            producer.send(topic, stamped(-1)).get(60)

            acks: list[float] = []
            counter = itertools.count()

            def acked(sent_ns: int, _meta) -> None:
                acks.append((time.time_ns() - sent_ns) / 1e6)

            def kcoord_emit(k: int) -> None:
                send = producer.send
                for _ in range(k):
                    value = stamped(phase)
                    future = send(topic, value)
                    if next(counter) % ACK_SAMPLE_EVERY == 0:
                        future.add_callback(acked, struct.unpack_from(STAMP, value)[0])

            def queue_emit(k: int) -> None:
                queue.put_nowait_batch([stamped(phase) for _ in range(k)])

            # Warm-up (not reported): the first records pay for connections and JIT-less
            # first calls in every process on the path.
            phase = 1
            run_phase(reader, phase, 1000, min(1.0, seconds), kcoord_emit, lambda: producer.flush(60))
            run_phase(queue_reader, phase, 1000, min(1.0, seconds), queue_emit, lambda: None)
            out = []
            for rate in loads:
                phase += 1
                acks.clear()
                row = run_phase(reader, phase, rate, seconds, kcoord_emit, lambda: producer.flush(60))
                row["ack_latency_ms"] = summary(acks)
                phase += 1
                row["baseline_queue"] = run_phase(queue_reader, phase, rate, seconds, queue_emit, lambda: None)
                lat, base = row["latency_ms"], row["baseline_queue"]["latency_ms"]
                row["ratios_vs_queue"] = {q: ratio(lat.get(q), base.get(q)) for q in ("p50", "p99", "p999")}
                out.append(row)
                print(f"{rate} rec/s offered: p50 {lat.get('p50')} ms p99 {lat.get('p99')} ms", file=sys.stderr, flush=True)
            results["loads"] = out
        finally:
            producer.close()
            queue.shutdown()
    script.emit(results, args.out, started)


if __name__ == "__main__":
    main()
