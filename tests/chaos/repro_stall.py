"""Reproduction of issue 13 (first part): a consumer stalls after a long leader-kill run.

Not a pytest module (the regression tests are in tests/integration/test_consumer_stall_ray.py);
run it by hand, it takes ~3-6 minutes:

    PYTHONPATH=. .venv/bin/python tests/chaos/repro_stall.py [--seconds 150] [--baseline 200000]

What it does, following the report:

1. ``kcoord.local_cluster(brokers=3)``; topic ``chaos`` with 3 partitions, RF=3,
   ``min.insync.replicas=2``.
2. One thread produces with ``acks="all"`` (idempotent) in windows of 200 ``send()``s
   followed by ``get()`` on each future, for ``--seconds``, while the main thread kills the
   leader of a random partition with ``ray.kill(handle, no_restart=False)`` every 1-3 s.
3. Checks that nothing acked was lost (HW == highest acked offset + 1) and the ISRs are full.
4. A ``kcoord.Consumer`` on the same ClusterClient, assigned all three partitions from the
   earliest offset, reads to the high watermarks; the script reports how long it took, the
   longest time any fetch was in flight, and every "unanswered" retry.
5. The same consumer code reads ``--baseline`` records produced the same way to a topic
   on which nothing was killed (the undisturbed rate), in the same run.

Exit status 0 if the consumer read everything within ``--read-timeout`` seconds.
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import threading
import time

import ray

import kcoord
from kcoord.client.consumer import Consumer
from kcoord.calls import actor_state
from kcoord.client.types import TopicPartition

VALUE = b"x" * 90  # --value-bytes changes it


class FetchWaits(logging.Handler):
    """Collects the consumer's 'unanswered' warnings."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((time.monotonic(), record.getMessage()))


def instrument(consumer: Consumer) -> dict:
    """Record, per partition, the longest time a fetch was in flight (answered or given up)."""
    stats = {"max_wait": {}, "fetches": 0}
    fetcher = consumer._fetcher
    orig_on_fetch = fetcher._on_fetch
    orig_abandon = fetcher._abandon

    def on_fetch(st, ref):
        wait = time.monotonic() - st.in_flight_since
        key = st.tp.partition
        stats["max_wait"][key] = max(stats["max_wait"].get(key, 0.0), wait)
        stats["fetches"] += 1
        return orig_on_fetch(st, ref)

    def abandon(st, now, why, backoff=True):
        if st.in_flight is not None:
            wait = time.monotonic() - st.in_flight_since
            key = st.tp.partition
            stats["max_wait"][key] = max(stats["max_wait"].get(key, 0.0), wait)
        return orig_abandon(st, now, why, backoff)

    fetcher._on_fetch = on_fetch
    fetcher._abandon = abandon
    return stats


def produce(cluster, topic: str, seconds: float | None, records: int | None, acked: dict, stop: threading.Event, errors: list) -> int:
    """Windows of 200 send() then get() on each; returns the number of acked records."""
    n = 0
    seq = 0
    deadline = None if seconds is None else time.monotonic() + seconds
    with kcoord.Producer(cluster, acks="all", enable_idempotence=True) as p:
        while not stop.is_set():
            if deadline is not None and time.monotonic() >= deadline:
                break
            if records is not None and n >= records:
                break
            futs = [p.send(topic, value=b"%012d" % (seq + i) + VALUE, key=b"%d" % (seq + i)) for i in range(200)]
            seq += 200
            for f in futs:
                try:
                    meta = f.get(timeout=150)
                except Exception as exc:  # noqa: BLE001
                    errors.append(repr(exc))
                    continue
                n += 1
                if meta.offset > acked.get(meta.partition, -1):
                    acked[meta.partition] = meta.offset
    return n


def read_all(cluster, topic: str, hw: dict[int, int], timeout: float, label: str, diagnose, slow: bool = False, tail: float = 0.0, rate: float = 0.0) -> dict:
    handler = FetchWaits()
    log = logging.getLogger("kcoord.consumer")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    consumer = Consumer(cluster=cluster, auto_offset_reset="earliest", enable_auto_commit=False)
    consumer.assign([TopicPartition(topic, p) for p in hw])
    stats = instrument(consumer)
    total = sum(hw.values())
    got = {p: 0 for p in hw}
    last_progress = {p: time.monotonic() for p in hw}
    max_gap = {p: 0.0 for p in hw}
    t0 = time.monotonic()
    next_report = t0 + 10
    diagnosed_at = 0.0
    try:
        while sum(got.values()) < total and time.monotonic() - t0 < timeout:
            if slow or rate:  # as a new user would: poll() and look at every record
                batch = consumer.poll(timeout_ms=1000)
                n = 0
                for recs in batch.values():
                    for rec in recs:
                        int(rec.value[:12])
                    n += len(recs)
                if rate and n:
                    time.sleep(n / rate)  # the user's work on these records, at --reader-rate
            else:
                batch = consumer.poll_columns(timeout_ms=500)
            now = time.monotonic()
            for tp, cols in batch.items():
                got[tp.partition] += len(cols)
                last_progress[tp.partition] = now
            for p in hw:
                if got[p] < hw[p]:
                    max_gap[p] = max(max_gap[p], now - last_progress[p])
            if now >= next_report:
                print(f"  [{label}] {now - t0:5.0f} s: read {sum(got.values())}/{total} {got}", flush=True)
                next_report = now + 10
            stalled = [p for p in hw if got[p] < hw[p] and now - last_progress[p] > 8]
            if stalled and diagnose and now - diagnosed_at > 30:
                diagnosed_at = now
                diagnose(consumer, topic, stalled)
        elapsed = time.monotonic() - t0
        # Keep polling at the end of the log (long polls parked on the leaders) for a while:
        # a stall that sets in some time after the kills shows up here.
        tail_end = time.monotonic() + tail
        while time.monotonic() < tail_end:
            consumer.poll_columns(timeout_ms=500)
            now = time.monotonic()
            waits = {tp.partition: now - st.in_flight_since for tp, st in consumer._subscriptions.assigned.items() if st.in_flight is not None}
            stats["tail_max_wait"] = max([stats.get("tail_max_wait", 0.0)] + list(waits.values()))
            if diagnose and any(w > 8 for w in waits.values()) and now - diagnosed_at > 30:
                diagnosed_at = now
                diagnose(consumer, topic, [p for p, w in waits.items() if w > 8])
    finally:
        consumer.close()
        log.removeHandler(handler)
    read = sum(got.values())
    return {
        "label": label,
        "read": read,
        "total": total,
        "per_partition": got,
        "seconds": elapsed,
        "rate": read / elapsed if elapsed > 0 else 0.0,
        "max_fetch_wait": stats["max_wait"],
        "max_progress_gap": max_gap,
        "fetches": stats["fetches"],
        "tail_max_wait": stats.get("tail_max_wait", 0.0),
        "unanswered": [line for _, line in handler.lines if "unanswered" in line],
        "warnings": [line for _, line in handler.lines][:40],
    }


def consume_during(cluster, topic: str, stop: threading.Event, out: dict) -> None:
    """A consumer that reads while the leaders are being killed (--concurrent)."""
    consumer = Consumer(cluster=cluster, auto_offset_reset="earliest", enable_auto_commit=False)
    consumer.assign([TopicPartition(topic, p) for p in range(3)])
    stats = instrument(consumer)
    got = {p: 0 for p in range(3)}
    slow: list = []
    try:
        while not stop.is_set():
            for tp, cols in consumer.poll_columns(timeout_ms=200).items():
                got[tp.partition] += len(cols)
            now = time.monotonic()
            for tp, st in consumer._subscriptions.assigned.items():
                if st.in_flight is not None and now - st.in_flight_since > 5 and (not slow or slow[-1][1] != tp.partition or now - slow[-1][0] > 5):
                    slow.append((now, tp.partition, st.in_flight_actor, now - st.in_flight_since))
    finally:
        out.update(got=got, max_wait=stats["max_wait"], slow=slow, consumer=consumer)


def diagnose(cluster):
    def run(consumer: Consumer, topic: str, stalled: list[int]) -> None:
        print(f"  !! stalled partitions {stalled}; diagnosing", flush=True)
        for p in stalled:
            st = consumer._subscriptions.assigned[TopicPartition(topic, p)]
            md = cluster.partition_metadata(topic, p, refresh=True)
            name = cluster.replica_name(topic, p, md.leader)
            cached = cluster._handles.get(st.in_flight_actor) if st.in_flight_actor else None
            try:
                fresh = ray.get_actor(name, namespace=cluster.namespace)
            except ValueError:
                fresh = None
            print(
                f"    p{p}: position={st.position} fetch_offset={st.fetch_offset} in_flight={st.in_flight is not None} "
                f"for {time.monotonic() - st.in_flight_since:.1f}s to {st.in_flight_actor}; metadata leader={md.leader} "
                f"epoch={md.leader_epoch} isr={md.isr}; pending={len(st.pending)} segments={len(st.segments)} "
                f"backoff={st.backoff_until - time.monotonic():.1f} error={st.error} no_hint={st.no_hint}",
                flush=True,
            )
            if cached is not None:
                print(f"    cached handle {cached._actor_id.hex()} state={actor_state(cached)}", flush=True)
            if fresh is not None:
                print(f"    fresh handle  {fresh._actor_id.hex()} state={actor_state(fresh)}", flush=True)
                try:
                    d = ray.get(fresh.describe.remote(), timeout=10)
                    print(
                        f"    describe: role={d['role']} epoch={d['leader_epoch']} hw={d['high_watermark']} leo={d['log_end_offset']} "
                        f"parked={d['parked_fetches']} pid={d['pid']} incarnation={d['incarnation']} fetch_requests={d['metrics'].get('fetch_requests')}",
                        flush=True,
                    )
                except Exception as exc:  # noqa: BLE001
                    print(f"    describe failed: {exc!r}", flush=True)

    return run


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=150)
    ap.add_argument("--baseline", type=int, default=200_000)
    ap.add_argument("--read-timeout", type=float, default=300)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--no-diagnose", action="store_true")
    ap.add_argument("--slow", action="store_true", help="read with poll() and look at every record")
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--concurrent", action="store_true", help="also consume while the leaders are killed")
    ap.add_argument("--kill-every", type=float, nargs=2, default=(1.0, 3.0))
    ap.add_argument("--reader-rate", type=float, default=0.0, help="records/s the reading user handles (poll() + work)")
    ap.add_argument("--tail", type=float, default=0.0, help="keep polling at the log end this long")
    args = ap.parse_args()
    global VALUE
    VALUE = b"x" * max(0, args.value_bytes - 12)
    rng = random.Random(args.seed)
    print(f"seed {args.seed}", flush=True)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")

    with kcoord.local_cluster(brokers=3) as cluster:
        admin = kcoord.Admin(cluster)
        topic, base_topic = "chaos", "calm"
        for t in (topic, base_topic):
            admin.create_topic(t, partitions=3, replication_factor=3, config={"min.insync.replicas": 2})
            admin.wait_for_leaders(t)

        # -- the undisturbed baseline is produced first, with the same producer code -----
        t0 = time.monotonic()
        base_acked: dict[int, int] = {}
        base_n = produce(cluster, base_topic, None, args.baseline, base_acked, threading.Event(), [])
        print(f"baseline: {base_n} records acked in {time.monotonic() - t0:.1f} s", flush=True)

        # -- chaos produce --------------------------------------------------------------
        acked: dict[int, int] = {}
        errors: list = []
        stop = threading.Event()
        result: dict = {}
        th = threading.Thread(target=lambda: result.update(n=produce(cluster, topic, args.seconds, None, acked, stop, errors)), daemon=True)
        t0 = time.monotonic()
        th.start()
        cstop = threading.Event()
        cres: dict = {}
        cth = threading.Thread(target=consume_during, args=(cluster, topic, cstop, cres), daemon=True)
        if args.concurrent:
            cth.start()
        kills = 0
        while th.is_alive() and time.monotonic() - t0 < args.seconds:
            time.sleep(rng.uniform(*args.kill_every))  # the killer's pacing, not synchronisation
            p = rng.randrange(3)
            try:
                md = cluster.partition_metadata(topic, p, refresh=True)
                if md.leader < 0:
                    continue
                h = ray.get_actor(cluster.replica_name(topic, p, md.leader), namespace=cluster.namespace)
                ray.kill(h, no_restart=False)
                kills += 1
            except Exception as exc:  # noqa: BLE001
                print(f"kill failed: {exc!r}", flush=True)
        th.join()
        produce_s = time.monotonic() - t0
        if args.concurrent:
            cstop.set()
            cth.join()
            print(f"concurrent consumer: read {cres.get('got')}; longest fetch waits {cres.get('max_wait')}; fetches in flight > 5 s: {cres.get('slow')}", flush=True)
            cres["consumer"].close()
        n = result.get("n", 0)
        print(f"chaos: {n} records acked in {produce_s:.1f} s with {kills} leader kills; {len(errors)} send errors {errors[:3]}", flush=True)

        # -- nothing acked lost, ISRs full ---------------------------------------------------
        def settled():
            d = admin.describe_topic(topic)
            return d if all(len(p["isr"]) == 3 and p["high_watermark"] >= 0 for p in d["partitions"]) else None

        deadline = time.monotonic() + 120
        d = settled()
        while d is None and time.monotonic() < deadline:
            time.sleep(0.5)
            d = settled()
        if d is None:
            d = admin.describe_topic(topic)
            print(f"ISRs not full after 120 s: {d['partitions']}")
        hw = {p["partition"]: p["high_watermark"] for p in d["partitions"]}
        for p in d["partitions"]:
            print(f"  p{p['partition']}: leader {p['leader']} epoch {p['leader_epoch']} isr {p['isr']} hw {p['high_watermark']} highest acked {acked.get(p['partition'], -1)}")
        lost = {p: (hw[p], acked.get(p, -1)) for p in hw if hw[p] < acked.get(p, -1) + 1}
        print(f"lost acked records: {lost or 'none'}", flush=True)

        # -- the consumer ---------------------------------------------------------------------
        diag = None if args.no_diagnose else diagnose(cluster)
        chaos_read = read_all(cluster, topic, hw, args.read_timeout, "chaos", diag, args.slow, args.tail, args.reader_rate)
        base_hw = {p: admin.list_offsets(base_topic)[p] for p in range(3)}
        base_read = read_all(cluster, base_topic, base_hw, args.read_timeout, "baseline", diag, args.slow, 0.0, args.reader_rate)

    for r in (chaos_read, base_read):
        print(
            f"{r['label']}: read {r['read']}/{r['total']} in {r['seconds']:.1f} s = {r['rate']:.0f} records/s; "
            f"{r['fetches']} fetches; longest fetch wait per partition "
            + ", ".join(f"p{p}={w:.2f}s" for p, w in sorted(r["max_fetch_wait"].items()))
            + "; longest gap without progress "
            + ", ".join(f"p{p}={w:.2f}s" for p, w in sorted(r["max_progress_gap"].items()))
        )
        print(f"  per partition {r['per_partition']}; {len(r['unanswered'])} 'unanswered' retries; longest fetch wait at the log end {r['tail_max_wait']:.2f}s")
        for line in r["warnings"][:15]:
            print(f"   log: {line}")
    ok = chaos_read["read"] == chaos_read["total"] and base_read["read"] == base_read["total"] and not lost
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
