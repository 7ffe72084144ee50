"""Kafka wire benchmark: confluent-kafka (librdkafka) through kcoord's Kafka listener against
kcoord's own Producer/Consumer, same cluster, same run (acks=all, RF=3,
min.insync.replicas=2, 100-byte values), and end-to-end latency through the listener at a
paced 10k records/s. Prints JSON.

    python -m benchmarks.kafka_wire [--quick] [--produce-only] [--out FILE] [--records N]

``produce``: confluent Producer (idempotent, linger.ms=5, librdkafka's default 5 requests in
flight per connection) from the first produce() to the end of flush(); ``produce_in_flight_1``:
the same with max.in.flight.requests.per.connection=1 (see docs/kafka-wire.md); ``kcoord_send``: kcoord.Producer.send() per record + flush(), same values, kcoord's
defaults (queued batches merged into requests of up to 4 MiB per partition);
``kcoord_send_1mib``: the same with max_request_size=1 MiB, like with like: librdkafka
sends at most ~1 MB per partition per request (message.max.bytes 1,000,000,
batch.num.messages 10,000). Ratios are given against both.
``consume``: a confluent Consumer assigned every partition from offset 0 reading what
confluent wrote (Kafka batches, passed through); ``consume_converted``: the same consumer
reading what kcoord's Producer wrote (kcoord batches converted to Kafka's v2 on the way);
both with ``fetch.queue.backoff.ms=10`` (see QUEUE_BACKOFF_MS); ``consume_librdkafka_defaults``:
``consume`` again with librdkafka's default of 1,000 ms; ``consume_client_ceiling``: the
same consumer timed only after librdkafka has fetched every record into its local queue
(the Python client's own cost, no broker on the timed path); ``consume_kcat``: kcat
(librdkafka in C, no Python per record) reading what confluent wrote: the consume goal's
measure, since the confluent Python consumer's own ceiling is below it; ``kcoord_consume``:
kcoord.Consumer reading what kcoord wrote (the consumers are timed from their first record
on, after connecting). ``e2e``: produce at 10k/s for a few seconds with a consumer calling
``poll()`` in another process; latency = receive time - send time in the value; ``acked_*``: send time to the
producer's delivery report (every 10th record).
The produce and consume cases share two topics (confluent's and kcoord's, each written by
both of its cases); the e2e cases run after those are deleted, on a third.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kcoord.bench.stats import percentile

VALUE = 100


def rate(n: int, seconds: float) -> dict:
    return {"records_per_s": round(n / seconds), "mb_per_s": round(n * VALUE / seconds / 1e6, 2), "seconds": round(seconds, 3)}


def confluent_produce(bootstrap: str, topic: str, values: list[bytes], in_flight: int = 5) -> float:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5, "batch.size": 1 << 20, "queue.buffering.max.messages": 1_000_000, "max.in.flight.requests.per.connection": in_flight})
    p.produce(topic, values[0])
    p.flush(60)  # metadata and producer id outside the timing
    errors = []

    def cb(err, _msg):
        if err:
            errors.append(err)

    t = time.perf_counter()
    produce, poll = p.produce, p.poll
    for v in values:
        while True:
            try:
                produce(topic, v, on_delivery=cb)
                break
            except BufferError:
                poll(0.01)
    p.flush(300)
    dt = time.perf_counter() - t
    if errors:
        raise RuntimeError(f"{len(errors)} delivery errors, first {errors[0]}")
    return dt


def kcoord_send(cluster, topic: str, values: list[bytes], max_request_size: int | None = None) -> float:
    from kcoord.client.producer import Producer

    p = Producer(cluster, acks="all", linger_ms=5, **({} if max_request_size is None else {"max_request_size": max_request_size}))
    try:
        p.send(topic, values[0]).get(60)
        t = time.perf_counter()
        send = p.send
        for v in values:
            send(topic, v)
        p.flush()
        return time.perf_counter() - t
    finally:
        p.close()


# librdkafka stops fetching a partition while its local queue holds more than
# queued.min.messages (100,000) and then waits fetch.queue.backoff.ms (default 1,000 ms)
# before it looks again; its documentation says to lower it when an application sees ~1 s
# gaps. A backlog of 100-byte records fills that queue in one fetch, so with the default
# the timed phase mostly waits on the client's own backoff (seen with debug=fetch:
# "Fetch backoff for 1000ms: Local: Queue full").
QUEUE_BACKOFF_MS = 10


def consumer_config(bootstrap: str, **extra: object) -> dict:
    """The consume cases' confluent Consumer settings: a fresh group, no commits, large fetches."""
    return {"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False, "fetch.max.bytes": 50 << 20, "max.partition.fetch.bytes": 8 << 20, **extra}


def confluent_consume(bootstrap: str, topic: str, partitions: int, starts: dict[int, int], n: int, queue_backoff_ms: int | None = QUEUE_BACKOFF_MS) -> float:
    from confluent_kafka import Consumer, TopicPartition

    conf = consumer_config(bootstrap)
    if queue_backoff_ms is not None:
        conf["fetch.queue.backoff.ms"] = queue_backoff_ms
    c = Consumer(conf)
    c.assign([TopicPartition(topic, p, starts.get(p, 0)) for p in range(partitions)])
    # connections, metadata and the first fetch outside the timing (as kcoord's consumer)
    got = 0
    while got == 0:
        got = sum(1 for m in c.consume(1, 10.0) if not m.error())
    t = time.perf_counter()
    deadline = t + 300
    while got < n and time.perf_counter() < deadline:
        msgs = c.consume(10000, 1.0)
        got += sum(1 for m in msgs if not m.error())
    dt = time.perf_counter() - t
    c.close()
    if got < n:
        raise RuntimeError(f"consumed {got} of {n}")
    return dt


def confluent_consume_local(bootstrap: str, topic: str, partitions: int, starts: dict[int, int], n: int) -> tuple[int, float]:
    """The confluent Consumer's own ceiling on this machine: the same ``consume()`` loop, timed
    only once librdkafka holds every record in its local queues (known from its statistics,
    ``fetchq_cnt``), so no broker is on the timed path. Returns (records timed, seconds):
    the few records that ``poll()`` hands out while it serves the statistics are not timed."""
    from confluent_kafka import Consumer, TopicPartition

    queued = [0]

    def stats(js: str) -> None:
        parts = json.loads(js).get("topics", {}).get(topic, {}).get("partitions", {})
        queued[0] = sum(p.get("fetchq_cnt", 0) for k, p in parts.items() if k != "-1")

    c = Consumer(consumer_config(bootstrap, **{"queued.min.messages": 10_000_000, "queued.max.messages.kbytes": 2_000_000, "statistics.interval.ms": 50, "stats_cb": stats}))
    c.assign([TopicPartition(topic, p, starts.get(p, 0)) for p in range(partitions)])
    got = 0
    deadline = time.monotonic() + 120
    while queued[0] < n - got:  # poll() serves the statistics callback
        if time.monotonic() > deadline:
            raise RuntimeError(f"librdkafka queued {queued[0]} of {n - got} records in 120 s")
        m = c.poll(0.05)
        if m is not None and not m.error():
            got += 1
    timed = n - got
    t = time.perf_counter()
    deadline = t + 300
    while got < n and time.perf_counter() < deadline:
        got += sum(1 for m in c.consume(10000, 1.0) if not m.error())
    dt = time.perf_counter() - t
    c.close()
    if got < n:
        raise RuntimeError(f"consumed {got} of {n}")
    return timed, dt


def kcoord_consume(cluster, topic: str, starts: dict[int, int], n: int) -> float:
    from kcoord.client.consumer import Consumer

    c = Consumer(topic, cluster=cluster, auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        c.poll(timeout_ms=0)
        for tp in c.assignment():
            c.seek(tp, starts.get(tp.partition, 0))
        got = 0
        t = time.perf_counter()
        deadline = t + 300
        while got < n and time.perf_counter() < deadline:
            for recs in c.poll(timeout_ms=1000).values():
                got += len(recs)
        dt = time.perf_counter() - t
        if got < n:
            raise RuntimeError(f"consumed {got} of {n}")
        return dt
    finally:
        c.close()


# kcat (librdkafka in C, no Python) pauses fetching while its local queue holds
# queued.min.messages (100,000 by default) and, with Debian's librdkafka 2.0, has no
# fetch.queue.backoff.ms to shorten the pause: a larger queue instead.
KCAT_QUEUE = 1_000_000


def kcat_consume(bootstrap: str, topic: str, n: int) -> float | None:
    """kcat reading the first ``n`` records of a topic through the listener: a consumer with
    no Python per record, so what the listener's fetch path serves rather than the Python
    client's per-message cost. kcat prints a newline per record; timed, like the other
    consume cases, from its first output to the ``n``-th line (connecting and metadata
    before; kcat's stdout buffer holds back the first few thousand lines, ~2% of the
    default 300k). None without kcat."""
    import shutil
    import subprocess

    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    if kcat is None:
        return None
    args = [kcat, "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-c", str(n), "-e", "-q", "-f", "\\n", "-X", f"queued.min.messages={KCAT_QUEUE}"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    got, t = 0, None
    try:
        while got < n:
            chunk = os.read(proc.stdout.fileno(), 1 << 16)
            if not chunk:
                break
            if t is None:
                t = time.perf_counter()
            got += chunk.count(b"\n")
        dt = time.perf_counter() - t if t is not None else 0.0
        err = proc.communicate(timeout=60)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
    if proc.returncode != 0 or got != n:
        raise RuntimeError(f"kcat read {got} of {n} records (exit {proc.returncode}): {err.decode(errors='replace')[-300:]}")
    return dt


def _e2e_reader(bootstrap: str, topic: str, partitions: int, total: int, seconds: float, ready, out) -> None:
    """The e2e consumer, in a process of its own (as latency.py's consumer): in the
    producer's process its per-record poll() would share one GIL with the paced send loop."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"e2e-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    c.assign([TopicPartition(topic, p, -1) for p in range(partitions)])  # OFFSET_END
    c.consume(1, 2.0)  # connected, end offsets resolved: the producer may start
    ready.set()
    lat: list[float] = []
    deadline = time.time() + seconds + 60
    while len(lat) < total and time.time() < deadline:
        # poll(), not consume(1000, t): librdkafka's consume() waits until it has all 1000
        # messages or t passed, which at 10k records/s holds each record ~50 ms
        m = c.poll(0.2)
        if m is not None and not m.error() and len(m.value()) == VALUE:  # not the warm-up record
            lat.append(time.time() - struct.unpack_from(">d", m.value())[0])
    c.close()
    out.send(lat)


def e2e(bootstrap: str, topic: str, partitions: int, per_s: int, seconds: float, in_flight: int = 5) -> dict:
    import multiprocessing

    from confluent_kafka import Producer

    total = int(per_s * seconds)
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    receive, send = ctx.Pipe(duplex=False)
    reader = ctx.Process(target=_e2e_reader, args=(bootstrap, topic, partitions, total, seconds, ready, send), daemon=True)
    reader.start()
    if not ready.wait(60):
        reader.kill()
        raise RuntimeError("the e2e consumer did not connect within 60 s")
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5, "max.in.flight.requests.per.connection": in_flight})
    p.produce(topic, b"warm-up")
    p.flush(60)  # connection, metadata and producer id outside the timing, as in the produce cases
    pad = b"x" * (VALUE - 8)
    acked: list[float] = []  # send -> delivery report, every 10th record

    def on_delivery(err, msg) -> None:
        if not err:
            acked.append(time.time() - struct.unpack_from(">d", msg.value())[0])

    start = time.time()
    for i in range(total):
        due = start + i / per_s
        now = time.time()
        if due > now:
            time.sleep(due - now)
        p.produce(topic, struct.pack(">d", time.time()) + pad, on_delivery=on_delivery if i % 10 == 0 else None)
        p.poll(0)
    p.flush(60)
    lat = receive.recv() if receive.poll(seconds + 120) else []
    reader.join(30)
    if not lat:
        return {"records": 0}

    def q(xs: list[float], f: float) -> float | None:
        return round(percentile(xs, f) * 1000, 1) if xs else None

    return {"records": len(lat), "target_per_s": per_s, "p50_ms": q(lat, 0.5), "p99_ms": q(lat, 0.99), "max_ms": round(max(lat) * 1000, 1), "mean_ms": round(statistics.mean(lat) * 1000, 1), "acked_p50_ms": q(acked, 0.5), "acked_p99_ms": q(acked, 0.99)}


def listener_stats(cluster_name: str) -> list[dict]:
    import ray

    from kcoord.cluster.listeners import listener_actor_names

    out = []
    for actor in listener_actor_names(cluster_name):
        try:
            out.append(ray.get(ray.get_actor(actor, namespace="kcoord").stats.remote(), timeout=30))
        except Exception as exc:  # noqa: BLE001 - figures only
            out.append({"error": repr(exc)})
    return out


def settle(cluster, topics: list[str], partitions: int) -> None:
    """Write one record to every partition (acks=all) so every replica actor has started and
    joined the ISR, then let the worker-process start-up storm pass before timing."""
    from kcoord.client.producer import Producer

    p = Producer(cluster, acks="all")
    try:
        for t in topics:
            for part in range(partitions):
                p.send(t, b"settle", partition=part).get(120)
    finally:
        p.close()
    time.sleep(5)


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--quick", action="store_true", help="50k records, 2 partitions, 3 s e2e (default: 300k, 6 partitions, 10 s)")
    parser.add_argument("--out", help="also write the JSON here")
    parser.add_argument("--records", type=int, default=None, help="records per produce/consume case")
    parser.add_argument("--produce-only", action="store_true", help="only the produce cases and their ratios (no consume, no e2e)")
    args = parser.parse_args()
    n = args.records or (50_000 if args.quick else 300_000)
    partitions = 2 if args.quick else 6
    e2e_seconds = 3.0 if args.quick else 10.0

    from kcoord.cluster.deploy import deploy, teardown
    from kcoord.cluster.local import start_local_ray

    from kcoord.client.admin import Admin

    wall = time.perf_counter()
    start_local_ray()
    name = f"bench-kw-{uuid.uuid4().hex[:6]}"
    cluster = deploy(name, brokers=3, group_coordinators=0, address=None, kafka_port=0, kafka_local=True)
    bootstrap = cluster.bootstrap_servers
    results: dict = {
        "benchmark": "kafka_wire",
        "value_bytes": VALUE,
        "partitions": partitions,
        "replication_factor": 3,
        "acks": "all",
        "records": n,
        "cpus": os.cpu_count(),
        "load_average_at_start": [round(x, 1) for x in os.getloadavg()],
        "cases": {},
    }
    try:
        admin = Admin(cluster)
        cfg = {"min.insync.replicas": 2}
        # Two topics at a time (12 RF=3 partitions with the default 6: what the capacity
        # benchmark finds a 2-core node holds healthily); more, idle, would take CPU from
        # every case, and most from the cases whose client polls while it waits.
        admin.create_topic("kafka", partitions=partitions, replication_factor=3, config=cfg)
        admin.create_topic("kcoord", partitions=partitions, replication_factor=3, config=cfg)
        settle(cluster, ["kafka", "kcoord"], partitions)
        pool = [os.urandom(VALUE) for _ in range(4096)]
        values = [pool[i % len(pool)] for i in range(n)]
        cases = results["cases"]
        kstarts = admin.list_offsets("kafka", "latest")
        cases["produce"] = rate(n, confluent_produce(bootstrap, "kafka", values))
        cases["produce_in_flight_1"] = rate(n, confluent_produce(bootstrap, "kafka", values, in_flight=1))
        ostarts = admin.list_offsets("kcoord", "latest")
        cases["kcoord_send"] = rate(n, kcoord_send(cluster, "kcoord", values))
        cases["kcoord_send_1mib"] = rate(n, kcoord_send(cluster, "kcoord", values, max_request_size=1 << 20))
        if not args.produce_only:
            cases["consume"] = rate(n, confluent_consume(bootstrap, "kafka", partitions, kstarts, n))
            cases["consume_converted"] = rate(n, confluent_consume(bootstrap, "kcoord", partitions, ostarts, n))
            cases["consume_librdkafka_defaults"] = rate(n, confluent_consume(bootstrap, "kafka", partitions, kstarts, n, queue_backoff_ms=None))
            cases["consume_client_ceiling"] = rate(*confluent_consume_local(bootstrap, "kafka", partitions, kstarts, n))
            cases["kcoord_consume"] = rate(n, kcoord_consume(cluster, "kcoord", ostarts, n))
            kcat_s = kcat_consume(bootstrap, "kafka", n)
            cases["consume_kcat"] = rate(n, kcat_s) if kcat_s is not None else {"skipped": "kcat is not installed (Debian: apt-get install -y kcat)"}
            admin.delete_topics(["kafka", "kcoord"])
            admin.create_topic("e2e", partitions=partitions, replication_factor=3, config=cfg)
            settle(cluster, ["e2e"], partitions)
            results["e2e"] = e2e(bootstrap, "e2e", partitions, 10_000, e2e_seconds)
            results["e2e_in_flight_1"] = e2e(bootstrap, "e2e", partitions, 10_000, e2e_seconds, in_flight=1)
        results["listeners"] = listener_stats(name)
        ratios = results["ratios"] = {}
        for kafka_case in ("produce", "produce_in_flight_1"):
            for base in ("kcoord_send", "kcoord_send_1mib"):
                ratios[f"{kafka_case}_vs_{base}"] = round(cases[kafka_case]["records_per_s"] / cases[base]["records_per_s"], 2)
        if not args.produce_only:
            ratios["consume_vs_kcoord_consume"] = round(cases["consume"]["records_per_s"] / cases["kcoord_consume"]["records_per_s"], 2)
            ratios["consume_converted_vs_kcoord_consume"] = round(cases["consume_converted"]["records_per_s"] / cases["kcoord_consume"]["records_per_s"], 2)
            ratios["consume_vs_client_ceiling"] = round(cases["consume"]["records_per_s"] / cases["consume_client_ceiling"]["records_per_s"], 2)
            ratios["client_ceiling_vs_kcoord_consume"] = round(cases["consume_client_ceiling"]["records_per_s"] / cases["kcoord_consume"]["records_per_s"], 2)
            if "records_per_s" in cases["consume_kcat"]:
                ratios["consume_kcat_vs_kcoord_consume"] = round(cases["consume_kcat"]["records_per_s"] / cases["kcoord_consume"]["records_per_s"], 2)
            ratios["consume_librdkafka_defaults_vs_kcoord_consume"] = round(cases["consume_librdkafka_defaults"]["records_per_s"] / cases["kcoord_consume"]["records_per_s"], 2)
        # The confluent Python consumer is reported against its own ceiling, which is below
        # the 0.7x goal whatever the broker does (docs/kafka-wire.md); kcat is the consume
        # goal's measure.
        untargeted = ("consume_vs_kcoord_consume", "consume_converted_vs_kcoord_consume", "consume_librdkafka_defaults_vs_kcoord_consume", "consume_vs_client_ceiling", "client_ceiling_vs_kcoord_consume")
        results["targets"] = {k: {"measured": v, "target": 0.7, "met": v >= 0.7} for k, v in ratios.items() if k not in untargeted}
    finally:
        teardown(name, delete_data=True, address=None)
    results["wall_seconds"] = round(time.perf_counter() - wall, 1)
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
