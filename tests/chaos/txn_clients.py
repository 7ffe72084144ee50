"""The chaos suite's transactional workload (issue 34), each client its own process:

    python -m tests.chaos.txn_clients ctp    --cluster NAME --address ADDR --topic chaos --out-topic chaos-txn-out --id t0-0 --out DIR
    python -m tests.chaos.txn_clients reader --cluster NAME --address ADDR --out-topic chaos-txn-out --id r0 --out DIR

* ctp: consume-transform-produce, exactly once. A group member of ``--group`` reading
  ``--topic`` read_committed, and a transactional Producer (``transactional_id`` =
  ``--txn-id``, the same for every incarnation of one worker, so a new incarnation fences a
  killed one's zombie transaction) that writes, for every input record, one output record
  ``"<txn>|<partition>:<offset>|<input value>"`` to ``--out-topic`` (keys spread a
  transaction's outputs over the partitions) and commits the consumed offsets with
  ``send_offsets_to_transaction(offsets, consumer.group_metadata())`` in the same
  transaction. ``<txn>`` is ``"<id>/<n>"``, unique across incarnations.
  Any failure (fenced, rebalanced, a coordinator gone) ends the instance: the transaction is
  aborted if it can be, producer and consumer are closed and new ones start from the
  group's committed offsets (Kafka's recipe for exactly-once).
* reader: a read_committed Consumer assigned every partition of ``--out-topic`` from the
  start, polling for ever (Jepsen's readers: what it was given is checked for aborted and
  precommitted reads).

History lines (besides ``start``/``end``/``error``):

* ``txn-<id>.jsonl``: ``instance`` {producer_id, epoch}; ``assign`` {gen, partitions};
  ``txn`` {txn, phase, ...}:
  phase ``begin`` {inputs: {partition: [lo, hi]}, n: records}, ``commit`` (invoked),
  then ``ok`` (committed), ``aborted`` (abort_transaction() returned: nothing of it may be
  visible) or ``info`` {error} (the outcome is unknown: the checker accepts either).
* ``txnread-<id>.jsonl``: ``poll`` {recs: {partition: [[offset, output value], ...]}}.

The checker is :mod:`tests.chaos.txn_checker`.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time

import kcoord

from .clients import PAD, short
from .history import History

OUT_PAD = PAD[:40]


def _stop_on_sigterm() -> threading.Event:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    return stop


def _connect(args):
    return kcoord.connect(args.cluster, address=args.address, namespace=args.namespace)


def output_value(txn: str, partition: int, offset: int, value: str) -> str:
    return f"{txn}|{partition}:{offset}|{value}"


def parse_output(value: str) -> tuple[str, int, int, str] | None:
    """(txn, input partition, input offset, input value) of an output record."""
    parts = value.split("|")
    if len(parts) < 3 or ":" not in parts[1]:
        return None
    p, _, o = parts[1].partition(":")
    if not (p.isdigit() and o.isdigit()):
        return None
    return parts[0], int(p), int(o), parts[2]


def out_short(value: bytes) -> str:
    """An output record's identity in a history: the value without its padding."""
    return value.decode().rsplit("|", 1)[0] if value.endswith(OUT_PAD) else value.decode()


# ----------------------------------------------------------------------------------------
# consume-transform-produce
# ----------------------------------------------------------------------------------------
def run_ctp(args) -> int:
    hist = History(os.path.join(args.out, f"txn-{args.id}.jsonl"))
    cluster = _connect(args)
    stop = _stop_on_sigterm()  # after connecting: ray.init installs its own SIGTERM handler
    hist.write("start", pid=os.getpid(), worker=args.id, txn_id=args.txn_id)
    n = 0
    instances = 0
    try:
        while not stop.is_set():
            instances += 1
            n = _ctp_instance(args, cluster, hist, stop, n, f"{args.id}.{instances}")
            stop.wait(0.2)
    finally:
        hist.write("end", instances=instances)
        hist.close()
    return 0


def _ctp_instance(args, cluster, hist: History, stop: threading.Event, n: int, instance: str) -> int:
    """One producer + consumer pair until it fails or is asked to stop; the next txn number."""
    from kcoord.client.types import OffsetAndMetadata

    consumer = producer = None
    txn = None
    try:
        consumer = kcoord.Consumer(
            cluster=cluster, group_id=args.group, auto_offset_reset="earliest", enable_auto_commit=False,
            isolation_level="read_committed", session_timeout_ms=args.session_timeout_ms, heartbeat_interval_ms=400,
            max_poll_records=args.max_records,
        )
        producer = kcoord.Producer(cluster, transactional_id=args.txn_id, acks="all", linger_ms=5,
                                   transaction_timeout_ms=args.transaction_timeout_ms, request_timeout_ms=5000, delivery_timeout_ms=30_000)
        producer.init_transactions()
        hist.write("instance", instance=instance, producer_id=producer.producer_id, epoch=producer.producer_epoch)

        def on_assign(partitions) -> None:
            tps = [tp for tp in partitions if tp.topic == args.topic]
            hist.write("assign", instance=instance, gen=consumer.group_metadata().generation_id, partitions=sorted(tp.partition for tp in tps))

        consumer.subscribe([args.topic], on_assign=on_assign)
        while not stop.is_set():
            polled = {tp: rs for tp, rs in consumer.poll(timeout_ms=300).items() if rs}
            if not polled:
                continue
            txn = f"{args.id}/{n}"
            n += 1
            inputs = {str(tp.partition): [rs[0].offset, rs[-1].offset + 1] for tp, rs in polled.items()}
            meta = consumer.group_metadata()
            hist.write("txn", txn=txn, phase="begin", instance=instance, gen=meta.generation_id, inputs=inputs,
                       n=sum(len(rs) for rs in polled.values()))
            producer.begin_transaction()
            for tp, rs in polled.items():
                for r in rs:
                    v = output_value(txn, tp.partition, r.offset, short(r.value))
                    producer.send(args.out_topic, value=v.encode() + OUT_PAD, key=r.value[:24])
            producer.send_offsets_to_transaction({tp: OffsetAndMetadata(rs[-1].offset + 1, "") for tp, rs in polled.items()}, meta)
            hist.write("txn", txn=txn, phase="commit")
            producer.commit_transaction()
            hist.write("txn", txn=txn, phase="ok")
            txn = None
            if args.txn_pause_ms:
                stop.wait(args.txn_pause_ms / 1000)
    except Exception as exc:  # noqa: BLE001 - fenced, rebalanced, coordinator gone: a new instance
        hist.write("error", instance=instance, error=f"{type(exc).__name__}: {exc}"[:300])
        if txn is not None:
            outcome, err = "info", f"{type(exc).__name__}: {exc}"[:200]
            if producer is not None:
                try:
                    producer.abort_transaction()
                    outcome = "aborted"
                except Exception as exc2:  # noqa: BLE001 - fenced, or the outcome is unknown
                    err += f"; abort: {type(exc2).__name__}"
            hist.write("txn", txn=txn, phase=outcome, error=err)
    finally:
        if txn is not None and stop.is_set():
            hist.write("txn", txn=txn, phase="info", error="stopped mid-transaction")
        for c in (producer, consumer):
            if c is not None:
                try:
                    c.close(timeout=10) if c is producer else c.close()
                except Exception:  # noqa: BLE001
                    pass
    return n


# ----------------------------------------------------------------------------------------
# read_committed reader
# ----------------------------------------------------------------------------------------
def run_reader(args) -> int:
    hist = History(os.path.join(args.out, f"txnread-{args.id}.jsonl"))
    cluster = _connect(args)
    stop = _stop_on_sigterm()
    hist.write("start", pid=os.getpid())
    consumer = None
    try:
        while not stop.is_set():
            try:
                if consumer is None:
                    consumer = kcoord.Consumer(cluster=cluster, auto_offset_reset="earliest", enable_auto_commit=False, isolation_level="read_committed")
                    consumer.assign([kcoord.TopicPartition(args.out_topic, p) for p in cluster.partitions_for(args.out_topic)])
                    hist.write("assign", positions={})
                batch = {tp: rs for tp, rs in consumer.poll(timeout_ms=300).items() if rs}
            except Exception as exc:  # noqa: BLE001 - a leader gone: a new consumer from the start
                hist.write("error", error=repr(exc)[:300])
                try:
                    consumer.close()
                except Exception:  # noqa: BLE001
                    pass
                consumer = None
                stop.wait(0.5)
                continue
            if batch:
                hist.write("poll", recs={str(tp.partition): [[r.offset, out_short(r.value)] for r in rs] for tp, rs in batch.items()})
    finally:
        if consumer is not None:
            try:
                consumer.close()
            except Exception:  # noqa: BLE001
                pass
        hist.write("end")
        hist.close()
    return 0


def read_all(cluster, topic: str, isolation_level: str, timeout: float = 300.0) -> list[tuple[int, int, str]]:
    """Every record of ``topic`` up to its end (the LSO in read_committed), read with a
    fresh consumer: [(partition, offset, value)]."""
    tps = [kcoord.TopicPartition(topic, p) for p in cluster.partitions_for(topic)]
    c = kcoord.Consumer(cluster=cluster, auto_offset_reset="earliest", enable_auto_commit=False, isolation_level=isolation_level)
    out: list[tuple[int, int, str]] = []
    try:
        c.assign(tps)
        ends = c.end_offsets(tps)
        deadline = time.monotonic() + timeout
        while any(c.position(tp) < ends[tp] for tp in tps):
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic} {isolation_level}: positions {[c.position(tp) for tp in tps]} of {ends}")
            for tp, recs in c.poll(timeout_ms=500, max_records=5000).items():
                out.extend((tp.partition, r.offset, out_short(r.value)) for r in recs if r.offset < ends[tp])
    finally:
        c.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.chaos.txn_clients")
    ap.add_argument("role", choices=["ctp", "reader"])
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--address", required=True)
    ap.add_argument("--namespace", default="kcoord")
    ap.add_argument("--topic", default="chaos")
    ap.add_argument("--out-topic", default="chaos-txn-out")
    ap.add_argument("--id", default="t0")
    ap.add_argument("--txn-id", default="chaos-ctp-0")
    ap.add_argument("--out", required=True)
    ap.add_argument("--group", default="chaos-txn-group")
    ap.add_argument("--session-timeout-ms", type=int, default=4000)
    ap.add_argument("--transaction-timeout-ms", type=int, default=10_000)
    ap.add_argument("--max-records", type=int, default=200)
    ap.add_argument("--txn-pause-ms", type=int, default=0)
    args = ap.parse_args(argv)
    return {"ctp": run_ctp, "reader": run_reader}[args.role](args)


if __name__ == "__main__":
    sys.exit(main())
