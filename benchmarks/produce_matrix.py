"""Produce throughput for acks 0/1/all x RF 1/3 through the Producer, next to two
baselines measured in the same run.

Why: the produce path is what users feel first, and its cost depends on the durability they
ask for (acks) and pay for (replication factor). A figure alone says little on a shared
2-core machine, so every case is also a ratio against

* ``raw_actor``: the same ~1 MiB record batches (built beforehand, as the Producer would
  pack them) sent to plain Ray actors that only keep the bytes, one actor per partition and
  one request in flight per actor, as the Producer does: the ceiling of moving these bytes
  through Ray actor calls on this machine;
* ``queue_put_batch``: ``ray.util.queue.Queue.put_nowait_batch`` of the same 100-byte
  values in chunks of 10,000: what Ray offers out of the box for handing records to
  another process.

Cases (each a fresh Producer, 100-byte values, no keys, ``linger_ms=5``, 1 MiB batches):

* ``send``: ``send()`` per record, timed from the first send() to the end of ``flush()``
  (every record acknowledged as the acks setting defines);
* ``send_batch``: one ``send_batch(values=...)`` call, timed until it returns (every
  record acknowledged).

Each repeat measures the baselines and then every case, so load from elsewhere hits them
alike; figures are medians over repeats. MB/s counts the values' bytes. Prints JSON.

Each case writes into a topic of its own, created before it is timed and deleted after,
and the page cache is written back (``os.sync()``, untimed) before every run: no run pays for
the data of another. A repeat writes ~2.7 GB, and kept around that data slowed whatever came
later, twice over. Past ``vm.dirty_background_ratio`` the kernel's writeback competed for the
two cores (acks=all RF=3 ``send_batch`` four times into one topic: 1.58, 1.56, 1.33, 0.92M
records/s as dirty pages grew to 2 GB; 1.54-1.59M with a sync before each). And on a VM whose
memory the host backs on first touch, page cache that is kept makes every later write land on
fresh pages: with a sync before each, a topic per call but none deleted ran 1.72, 1.61, 1.38,
0.66M/s, system time 55 -> 276 ticks per call, ``copy_folio_from_iter_atomic`` from 2% to 20%
of all samples (``perf``); deleted after each call, 1.61-1.68M/s over five calls.

    python benchmarks/produce_matrix.py [--quick] [--out FILE] [--repeats R]
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ray  # noqa: E402

from kcoord.bench import script  # noqa: E402
from kcoord.bench.stats import median, ratio  # noqa: E402

VALUE = 100
ACKS = ("0", "1", "all")
RFS = (1, 3)
APIS = ("send", "send_batch")
QUEUE_CHUNK = 10_000


class RawSink:
    """The baseline actor: receive a batch, keep it, answer (what a leader does at the
    very least, without a log, an ISR or a protocol)."""

    def __init__(self) -> None:
        self.kept: list[bytes] = []

    async def produce(self, data: bytes) -> int:
        self.kept.append(data)
        if len(self.kept) > 16:
            self.kept.clear()
        return len(data)

    async def ping(self) -> int:
        return 1


def rate(records: int, seconds: float) -> dict:
    return {"records_per_s": round(records / seconds), "mb_per_s": round(records * VALUE / seconds / 1e6, 2), "seconds": round(seconds, 3)}


def summarize(records: int, runs: list[float]) -> dict:
    out = rate(records, median(runs))
    out["runs_records_per_s"] = [round(records / s) for s in runs]
    return out


def raw_batches(values: list[bytes]) -> list[bytes]:
    """The values cut into batches as the Producer cuts them (1 MiB batch_size)."""
    from kcoord import records
    from kcoord.client.producer.batch import BATCH_OVERHEAD, RECORD_OVERHEAD

    per_batch = ((1 << 20) - BATCH_OVERHEAD) // (RECORD_OVERHEAD + VALUE)
    now = int(time.time() * 1000)
    return [records.build_batch_columns(values[i : i + per_batch], timestamp_ms=now) for i in range(0, len(values), per_batch)]


def run_raw(sinks: list, batches: list[bytes]) -> float:
    """Spread the batches over the sinks round-robin, one request in flight per sink;
    returns seconds until the last answer."""

    async def one_sink(sink, mine: list[bytes]) -> None:
        for b in mine:
            await sink.produce.remote(b)

    async def all_sinks() -> float:
        start = time.perf_counter()
        await asyncio.gather(*(one_sink(s, batches[i :: len(sinks)]) for i, s in enumerate(sinks)))
        return time.perf_counter() - start

    return asyncio.run(all_sinks())


def run_queue(values: list[bytes]) -> float:
    """``put_nowait_batch`` of every value in chunks into a fresh queue; returns seconds."""
    from ray.util.queue import Queue

    q = Queue(actor_options={"num_cpus": 0})
    try:
        q.put_nowait_batch(values[:10])  # the actor is up before the timing starts
        q.get_nowait_batch(10)
        chunks = [values[i : i + QUEUE_CHUNK] for i in range(0, len(values), QUEUE_CHUNK)]
        start = time.perf_counter()
        for c in chunks:
            q.put_nowait_batch(c)
        return time.perf_counter() - start
    finally:
        q.shutdown()


def settle_page_cache() -> None:
    """Write back what earlier runs left dirty, so that no run pays for another's data."""
    os.sync()


def run_case(cluster, admin, topic: str, rf: int, partitions: int, acks: str, api: str, values: list[bytes]) -> float:
    """One case with a fresh Producer into a fresh ``topic`` (deleted afterwards); metadata
    and producer id are fetched and the page cache settled before timing."""
    from kcoord.client.producer import Producer

    admin.create_topic(topic, partitions=partitions, replication_factor=rf, config={"min.insync.replicas": min(rf, 2)})
    admin.wait_for_leaders(topic)
    p = Producer(cluster, acks=acks, linger_ms=5)
    try:
        p.send(topic, values[0]).get(60)
        p.flush(timeout=60)
        settle_page_cache()
        start = time.perf_counter()
        if api == "send":
            send = p.send
            for v in values:
                send(topic, v)
            p.flush(timeout=600)
        else:
            written = p.send_batch(topic, values=values, timeout=600)
            got = sum(w.count for w in written.values())
            if got != len(values):
                raise RuntimeError(f"send_batch wrote {got} of {len(values)} records")
        return time.perf_counter() - start
    finally:
        p.close()
        admin.delete_topic(topic)


def main() -> None:
    parser = script.parser(__doc__)
    parser.add_argument("--repeats", type=int, default=None, help="runs per case (median reported; default 3, 1 with --quick)")
    parser.add_argument("--partitions", type=int, default=None, help="partitions per topic (default 6, 2 with --quick)")
    args = parser.parse_args()
    started = time.perf_counter()
    repeats = args.repeats or (1 if args.quick else 3)
    partitions = args.partitions or (2 if args.quick else 6)
    n_send = 50_000 if args.quick else 300_000
    n_batch = 300_000 if args.quick else 2_000_000

    import kcoord
    from kcoord.client.admin import Admin

    pool = [os.urandom(VALUE) for _ in range(4096)]
    values = [pool[i % len(pool)] for i in range(n_batch)]
    results: dict = {
        "benchmark": "produce_matrix",
        "quick": args.quick,
        "value_bytes": VALUE,
        "partitions": partitions,
        "records_send": n_send,
        "records_send_batch": n_batch,
        "repeats": repeats,
        "linger_ms": 5,
        "batch_size": 1 << 20,
        "queue_chunk": QUEUE_CHUNK,
        "context": script.context(),
    }
    with kcoord.local_cluster(brokers=3, group_coordinators=0) as cluster:
        admin = Admin(cluster)
        results["setup_seconds"] = round(time.perf_counter() - started, 1)
        sinks = [ray.remote(RawSink).options(num_cpus=0).remote() for _ in range(partitions)]
        ray.get([s.ping.remote() for s in sinks])
        batches = raw_batches(values)
        run_raw(sinks, batches[: len(sinks)])  # warm-up

        raw_runs: list[float] = []
        queue_runs: list[float] = []
        runs: dict[tuple[str, int, str], list[float]] = {(a, rf, api): [] for a in ACKS for rf in RFS for api in APIS}
        for repeat in range(repeats):
            settle_page_cache()
            raw_runs.append(run_raw(sinks, batches))
            settle_page_cache()
            queue_runs.append(run_queue(values))
            for (acks, rf, api), secs in runs.items():
                topic = f"rf{rf}-acks{acks}-{api}-{repeat}"
                secs.append(run_case(cluster, admin, topic, rf, partitions, acks, api, values[:n_send] if api == "send" else values))
            print(f"repeat {len(raw_runs)}/{repeats} done", file=sys.stderr, flush=True)

        baselines = {"raw_actor": summarize(n_batch, raw_runs), "queue_put_batch": summarize(n_batch, queue_runs)}
        results["baselines"] = baselines
        cases = []
        for (acks, rf, api), secs in runs.items():
            case = {"acks": acks, "rf": rf, "api": api, **summarize(n_send if api == "send" else n_batch, secs)}
            case["ratio_vs_raw_actor"] = ratio(case["records_per_s"], baselines["raw_actor"]["records_per_s"])
            case["ratio_vs_queue_put_batch"] = ratio(case["records_per_s"], baselines["queue_put_batch"]["records_per_s"])
            cases.append(case)
        results["cases"] = cases
    script.emit(results, args.out, started)


if __name__ == "__main__":
    main()
