"""The chaos suite's clients, each run as its own process the way users run them:

    python -m tests.chaos.clients producer --cluster NAME --address ADDR --topic T --id p0 --out DIR
    python -m tests.chaos.clients member   --cluster NAME --address ADDR --topic T --group G --id c0-1 --out DIR
    python -m tests.chaos.clients reader   --cluster NAME --address ADDR --topic T --out FILE

They use only kcoord's public client API (``kcoord.connect``, ``Producer``, ``Consumer``)
and append their history to ``DIR`` (format in :mod:`tests.chaos.history`). SIGTERM asks a
producer or member to stop cleanly (flush, leave the group); the nemesis may SIGKILL a
member at any time, and the run starts a new incarnation in its place.

* producer: acks="all", idempotent (the default); values ``"<id>:<seq>|<padding>"`` sent at
  ``--rate`` records/s with keys spreading them over the partitions. Every send is an
  ``invoke``; each record ends ``ok`` (partition, offset, ack time) or ``info`` (failed or
  never answered: it may or may not be in the log).
* member: a consumer-group member with enable_auto_commit=False that, after each poll,
  "processes" the records (writes them to its history) and commits exactly what it
  processed, logging the commit's outcome (ok, fail = rejected, info = unknown).
* reader: reads a topic from the earliest offset to the high watermarks, as fast as it
  can (the catch-up measurement), ``--repeat`` times with a fresh consumer each (the median
  rate is reported), then writes what the first read got.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time

import kcoord

from .history import History, value_of

PAD = b"|" + b"x" * 80  # values of ~90 bytes, like small events


def short(value: bytes) -> str:
    """The record's identity in a history: the value up to the padding."""
    return value.split(b"|", 1)[0].decode()


def _stop_on_sigterm() -> threading.Event:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    return stop


def _connect(args):
    return kcoord.connect(args.cluster, address=args.address, namespace=args.namespace)


# ----------------------------------------------------------------------------------------
# producer
# ----------------------------------------------------------------------------------------
def run_producer(args) -> int:
    hist = History(os.path.join(args.out, f"producer-{args.id}.jsonl"))
    cluster = _connect(args)
    stop = _stop_on_sigterm()  # after connecting: ray.init installs a SIGTERM handler of its own
    producer = kcoord.Producer(
        cluster,
        acks="all",
        linger_ms=5,
        request_timeout_ms=args.request_timeout_ms,
        delivery_timeout_ms=args.delivery_timeout_ms,
    )
    hist.write("start", pid=os.getpid(), producer=args.id, idempotent=producer.enable_idempotence)
    lock = threading.Lock()
    oks: list[list] = []
    infos: list[list] = []
    pending: dict[int, object] = {}

    def on_ok(seq: int, meta) -> None:
        with lock:
            oks.append([seq, meta.partition, meta.offset, time.time()])
            pending.pop(seq, None)

    def on_err(seq: int, exc) -> None:
        with lock:
            infos.append([seq, f"{type(exc).__name__}: {exc}"[:200]])
            pending.pop(seq, None)

    def drain_outcomes() -> None:
        with lock:
            ok, info = oks[:], infos[:]
            oks.clear()
            infos.clear()
        if ok:
            hist.write("ok", acks=ok)
        if info:
            hist.write("info", seqs=info)

    seq = 0
    tick = 0.1
    per_tick = max(1, round(args.rate * tick))
    next_tick = time.monotonic()
    try:
        while not stop.is_set():
            with lock:
                backlog = len(pending)
            if backlog < args.max_outstanding:
                lo = seq
                hist.write("invoke", lo=lo, hi=lo + per_tick)
                for s in range(lo, lo + per_tick):
                    try:
                        fut = producer.send(args.topic, value=value_of(args.id, s).encode() + PAD, key=b"k%d" % (s % 97))
                    except Exception as exc:  # noqa: BLE001 - buffer full for max_block_ms...
                        on_err(s, exc)
                        continue
                    with lock:
                        pending[s] = fut
                    fut.add_callback(on_ok, s).add_errback(on_err, s)
                seq = lo + per_tick
            drain_outcomes()
            next_tick += tick
            stop.wait(max(0.0, next_tick - time.monotonic()))
            if next_tick < time.monotonic() - 1:
                next_tick = time.monotonic()  # fell behind (paused by a loaded machine): no burst
        try:
            producer.flush(timeout=args.flush_timeout)  # what is left then is "info": unknown
        except Exception as exc:  # noqa: BLE001
            hist.write("error", where="flush", error=repr(exc)[:300])
    finally:
        try:
            producer.close(timeout=30)
        except Exception:  # noqa: BLE001
            pass
        drain_outcomes()
        with lock:
            left = sorted(pending)
        if left:
            hist.write("info", seqs=[[s, "unresolved at exit"] for s in left])
        hist.write("end", sent=seq)
        hist.close()
    return 0


# ----------------------------------------------------------------------------------------
# consumer-group member
# ----------------------------------------------------------------------------------------
def group_state(consumer) -> tuple[int | None, str | None]:
    """(generation, member id) of a group consumer. The public Consumer API has no accessor
    (kafka-python has none either), so this reads the group member's properties and returns
    (None, None) if the client's layout no longer has them: the checker then relies on the
    observer's describe_group snapshots for the one-owner check."""
    member = getattr(consumer, "_group", None)
    gen = getattr(member, "generation", None)
    mid = getattr(member, "member_id", None)
    return (gen if isinstance(gen, int) else None), (mid if isinstance(mid, str) else None)


def run_member(args) -> int:
    hist = History(os.path.join(args.out, f"member-{args.id}.jsonl"))
    cluster = _connect(args)
    stop = _stop_on_sigterm()  # after connecting: ray.init installs a SIGTERM handler of its own
    consumer = kcoord.Consumer(
        cluster=cluster,
        group_id=args.group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=args.heartbeat_interval_ms,
        max_poll_records=1000,
    )
    hist.write("start", pid=os.getpid(), member_name=args.id)

    def on_assign(partitions) -> None:
        gen, mid = group_state(consumer)
        hist.write("assign", gen=gen, member=mid, partitions=sorted(tp.partition for tp in partitions if tp.topic == args.topic))

    def on_revoke(partitions) -> None:
        gen, mid = group_state(consumer)
        hist.write("revoke", gen=gen, member=mid, partitions=sorted(tp.partition for tp in partitions if tp.topic == args.topic))

    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke)
    errors = 0
    try:
        while not stop.is_set():
            try:
                batch = consumer.poll(timeout_ms=300)
            except Exception as exc:  # noqa: BLE001 - coordinator moves, fenced generations: carry on
                errors += 1
                hist.write("error", where="poll", error=repr(exc)[:300])
                stop.wait(0.1)
                continue
            batch = {tp: recs for tp, recs in batch.items() if recs}
            if not batch:
                continue
            gen, mid = group_state(consumer)
            recs = {str(tp.partition): [[r.offset, short(r.value)] for r in rs] for tp, rs in batch.items()}
            hw = {str(tp.partition): consumer.highwater(tp) for tp in batch}
            hist.write("poll", gen=gen, member=mid, recs=recs, hw=hw)  # processed
            offsets = {tp: kcoord.OffsetAndMetadata(rs[-1].offset + 1) for tp, rs in batch.items()}
            plain = {str(tp.partition): om.offset for tp, om in offsets.items()}
            hist.write("commit", phase="invoke", gen=gen, member=mid, offsets=plain)
            try:
                consumer.commit(offsets)
                result, error = "ok", None
            except kcoord.KafkaError as exc:
                # CommitFailedError: the generation is over, the commit was refused. Anything
                # else (a timeout...) may or may not have landed.
                result = "fail" if type(exc).__name__ == "CommitFailedError" else "info"
                error = repr(exc)[:300]
            except Exception as exc:  # noqa: BLE001
                result, error = "info", repr(exc)[:300]
            hist.write("commit", phase=result, gen=gen, member=mid, offsets=plain, error=error)
    finally:
        try:
            consumer.close()
        except Exception as exc:  # noqa: BLE001
            hist.write("error", where="close", error=repr(exc)[:300])
        hist.write("end", errors=errors)
        hist.close()
    return 0


# ----------------------------------------------------------------------------------------
# reader (catch-up)
# ----------------------------------------------------------------------------------------
def run_reader(args) -> int:
    """Reads the topic ``--repeat`` times, each with a fresh consumer (the rate is noisy on a
    shared machine: the median counts); what the first read got goes to ``--out``."""
    cluster = _connect(args)
    tps = [kcoord.TopicPartition(args.topic, p) for p in cluster.partitions_for(args.topic)]
    rates: list[float] = []
    reads: list[int] = []
    first: list = []
    total = 0
    for i in range(max(1, args.repeat)):
        consumer = kcoord.Consumer(cluster=cluster, auto_offset_reset="earliest", enable_auto_commit=False)
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)
        total = sum(ends.values())
        got: list = []
        t0 = time.monotonic()
        deadline = t0 + args.timeout
        try:
            while time.monotonic() < deadline and any(consumer.position(tp) < ends[tp] for tp in tps):
                for tp, recs in consumer.poll(timeout_ms=500, max_records=5000).items():
                    got.extend((tp.partition, r.offset, r.value) for r in recs if r.offset < ends[tp])
            seconds = time.monotonic() - t0
        finally:
            consumer.close()
        rates.append(len(got) / seconds if seconds > 0 else 0.0)
        reads.append(len(got))
        if i == 0:
            first = got
    if args.out:
        with open(args.out, "w") as f:
            for p, o, v in first:
                f.write(json.dumps([p, o, short(v)]) + "\n")
    median = sorted(rates)[len(rates) // 2]
    result = {"topic": args.topic, "records": len(first), "expected": total, "seconds": len(first) / median if median else 0.0,
              "rate": median, "rates": [round(r) for r in rates]}
    print(json.dumps(result), flush=True)
    return 0 if all(n == total for n in reads) else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.chaos.clients")
    ap.add_argument("role", choices=["producer", "member", "reader"])
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--address", required=True)
    ap.add_argument("--namespace", default="kcoord")
    ap.add_argument("--topic", required=True)
    ap.add_argument("--id", default="0")
    ap.add_argument("--out", default="")
    ap.add_argument("--group", default="chaos-group")
    ap.add_argument("--rate", type=float, default=100.0)
    ap.add_argument("--max-outstanding", type=int, default=5000)
    ap.add_argument("--request-timeout-ms", type=int, default=5000)
    ap.add_argument("--delivery-timeout-ms", type=int, default=120_000)
    ap.add_argument("--session-timeout-ms", type=int, default=4000)
    ap.add_argument("--heartbeat-interval-ms", type=int, default=400)
    ap.add_argument("--flush-timeout", type=float, default=60.0, help="producer: seconds to wait for outstanding sends when asked to stop")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--repeat", type=int, default=1, help="reader: read this many times; the median rate is reported")
    args = ap.parse_args(argv)
    return {"producer": run_producer, "member": run_member, "reader": run_reader}[args.role](args)


if __name__ == "__main__":
    sys.exit(main())
