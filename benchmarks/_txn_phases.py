"""Where a transactional producer's commit goes (not a benchmark: ``kcoord bench`` skips
files starting with ``_``). One local cluster as benchmarks/transactions.py sets it up (3
brokers, RF 3, 3 partitions, acks=all, linger 5 ms, 100-byte values); a transactional
Producer sends ``--records`` records committing every ``--every-ms`` of sending, and every
call to the transaction coordinator and every phase of each commit is timed from the
client by wrapping the producer's own objects (nothing in kcoord is changed for it):

* ``commit.flush_ms``: ``commit_transaction()``'s flush of what is still queued or in flight;
* ``commit.wait_adds_ms``: its wait for an AddPartitionsToTxn in flight;
* ``commit.end_txn_ms``: the EndTxn round trip (the coordinator persists PREPARE_COMMIT);
* ``add.first_ms``: from ``begin_transaction()`` to the answer of the transaction's first
  AddPartitionsToTxn (the coordinator holds it until the previous transaction's markers
  and COMPLETE record are written, then persists ONGOING);
* ``calls``: every request to the coordinator by kind: latency and error codes;
* the producer's produce latency and retries, and the coordinator's counters.

    python -m benchmarks._txn_phases [--records N] [--every-ms 100] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._report import emit  # noqa: E402
from kcoord.bench.stats import percentile  # noqa: E402


def summary(xs: list[float]) -> dict:
    if not xs:
        return {"count": 0}
    return {"count": len(xs), "p50": round(percentile(xs, 0.5), 1), "p90": round(percentile(xs, 0.9), 1), "max": round(max(xs), 1), "sum": round(sum(xs), 1)}


def run_txn(cluster, topic: str, values: list[bytes], every_s: float) -> dict:
    from kcoord.client.producer import Producer

    phases: dict[str, list[float]] = {"flush_ms": [], "wait_adds_ms": [], "end_txn_ms": [], "commit_ms": [], "first_add_ms": []}
    calls: dict[str, list[float]] = {}
    codes: dict[str, dict[int, int]] = {}
    began = [0.0]
    first_add_pending = [False]

    with Producer(cluster, acks="all", linger_ms=5, transactional_id=f"phases-{uuid.uuid4().hex[:8]}") as p:
        txn = p._txn
        assert txn is not None
        orig_call = txn._txn_call

        async def timed_call(request, remaining_s):
            kind = type(request).__name__
            t = time.perf_counter()
            answer = await orig_call(request, remaining_s)
            now = time.perf_counter()
            calls.setdefault(kind, []).append((now - t) * 1000)
            code = int(getattr(answer, "error_code", 0) or 0)
            codes.setdefault(kind, {}).setdefault(code, 0)
            codes[kind][code] += 1
            if kind == "AddPartitionsToTxnRequest" and code == 0 and first_add_pending[0]:
                first_add_pending[0] = False
                phases["first_add_ms"].append((now - began[0]) * 1000)
            return answer

        txn._txn_call = timed_call
        orig_flush_for, orig_wait_adds, orig_run = txn._flush_for, txn.wait_adds, txn._run

        def flush_for(what, deadline):
            t = time.perf_counter()
            orig_flush_for(what, deadline)
            phases["flush_ms"].append((time.perf_counter() - t) * 1000)

        def wait_adds(loop, timeout_s):
            t = time.perf_counter()
            orig_wait_adds(loop, timeout_s)
            phases["wait_adds_ms"].append((time.perf_counter() - t) * 1000)

        def run(coro):
            t = time.perf_counter()
            try:
                return orig_run(coro)
            finally:
                if txn.manager.state.name in ("COMMITTING_TRANSACTION", "READY"):
                    phases["end_txn_ms"].append((time.perf_counter() - t) * 1000)

        txn._flush_for, txn.wait_adds, txn._run = flush_for, wait_adds, run

        p.init_transactions()
        p.begin_transaction()
        p.send(topic, value=values[0])
        p.commit_transaction()
        for k in phases:
            phases[k].clear()
        calls.clear()
        codes.clear()
        m0 = p.metrics()

        def begin():
            p.begin_transaction()
            began[0] = time.perf_counter()
            first_add_pending[0] = True

        txns = 0
        t0 = time.perf_counter()
        begin()
        started, in_txn = t0, 0
        sending = 0.0
        for v in values:
            p.send(topic, value=v)
            in_txn += 1
            if in_txn % 64 == 0 and time.perf_counter() - started >= every_s:
                c0 = time.perf_counter()
                sending += c0 - started
                p.commit_transaction()
                phases["commit_ms"].append((time.perf_counter() - c0) * 1000)
                txns += 1
                begin()
                started, in_txn = time.perf_counter(), 0
        c0 = time.perf_counter()
        sending += c0 - started
        p.commit_transaction()
        end = time.perf_counter()
        phases["commit_ms"].append((end - c0) * 1000)
        m1 = p.metrics()
    return {
        "seconds": round(end - t0, 3),
        "records_per_s": round(len(values) / (end - t0)),
        "transactions": txns + 1,
        "sending_s": round(sending, 3),
        "phases": {k: summary(v) for k, v in phases.items()},
        "calls": {k: summary(v) for k, v in calls.items()},
        "codes": codes,
        "produce": {
            "requests": m1["requests"] - m0["requests"],
            "retries": m1["retries"] - m0["retries"],
            "latency_p50": m1.get("request_latency_p50"),
            "latency_p99": m1.get("request_latency_p99"),
            "errors": m1.get("request_errors"),
        },
    }


def run_idempotent(cluster, topic: str, values: list[bytes]) -> float:
    from kcoord.client.producer import Producer

    with Producer(cluster, acks="all", linger_ms=5) as p:
        p.send(topic, value=values[0])
        p.flush()
        t0 = time.perf_counter()
        for v in values:
            p.send(topic, value=v)
        p.flush()
        return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks._txn_phases", description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--every-ms", type=float, default=100)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out")
    args = ap.parse_args(argv)

    import ray

    from kcoord.client.admin import Admin
    from kcoord.cluster.deploy import deploy, teardown
    from kcoord.cluster.local import start_local_ray

    start_local_ray()
    name = f"phases-{uuid.uuid4().hex[:6]}"
    cluster = deploy(name, brokers=3, group_coordinators=1, transaction_coordinators=1, address=None, kafka_port=0, kafka_local=True)
    pool = [os.urandom(100) for _ in range(4096)]
    values = [pool[i % len(pool)] for i in range(args.records)]
    admin = Admin(cluster)
    out: dict = {"load_average_at_start": [round(x, 1) for x in os.getloadavg()], "runs": []}

    def topic(prefix: str) -> str:
        t = f"{prefix}-{uuid.uuid4().hex[:6]}"
        admin.create_topic(t, partitions=3, replication_factor=3, config={"min.insync.replicas": 2})
        admin.wait_for_leaders(t)
        return t

    try:
        for _ in range(args.repeats):
            idem = run_idempotent(cluster, topic("idem"), values)
            r = run_txn(cluster, topic("txn"), values, args.every_ms / 1000)
            r["idempotent_records_per_s"] = round(len(values) / idem)
            r["ratio"] = round(r["records_per_s"] / r["idempotent_records_per_s"], 3)
            out["runs"].append(r)
        try:
            from kcoord.protocol import names

            tc = ray.get_actor(names.transaction_coordinator(name, 0))
            if tc is not None:
                out["coordinator_stats"] = ray.get(tc.describe.remote()).get("stats")
        except Exception as exc:  # noqa: BLE001 - the counters are extra
            out["coordinator_stats_error"] = repr(exc)[:200]
    finally:
        teardown(name, delete_data=True, address=None)
        emit(out, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
