"""The figure tables of PERFORMANCE.md, rendered from ``results.json``.

PERFORMANCE.md keeps the generated part between ``<!-- bench:begin -->`` and
``<!-- bench:end -->``; :func:`update` replaces just that part, so a new run updates the
tables without touching the prose around them (``python benchmarks/_report.py --markdown
results.json --update PERFORMANCE.md``).
"""

from __future__ import annotations

import math
import re
from typing import Any, Iterable

from . import figures
from .results import result
from .targets import evaluate

BEGIN = "<!-- bench:begin -->"
END = "<!-- bench:end -->"


def rate(x: float | None) -> str:
    """1234567 -> '1.23M', 45678 -> '45.7k'."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if abs(x) >= 1e6:
        return f"{x / 1e6:.2f}M"
    if abs(x) >= 1e3:
        return f"{x / 1e3:.1f}k"
    return f"{x:.0f}"


def num(x: float | None, digits: int = 1, suffix: str = "") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:.{digits}f}{suffix}"


def times(x: float | None) -> str:
    return num(x, 2, "x")


def table(header: Iterable[str], rows: Iterable[Iterable[Any]]) -> str:
    header = list(header)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def run_section(doc: dict) -> str:
    m, suite = doc.get("machine", {}), doc.get("suite", {})
    git = m.get("git", {})
    pk = m.get("packages", {})
    versions = ", ".join(f"{k} {v}" for k, v in pk.items() if v and k in ("ray", "pyspark", "raydp", "msgpack"))
    kind = "**quick run** (`kcoord bench --quick`: small sizes, few repeats)" if suite.get("quick") else "full run (`kcoord bench`)"
    rows = [
        ("run", kind),
        ("when (the last `kcoord bench` call)", f"{suite.get('started_at', '?')} ({num(suite.get('seconds'), 0, ' s')} in total)"),
        ("machine", f"{m.get('cores', '?')} cores ({m.get('physical_cores') or '?'} physical), {m.get('memory_gib', '?')} GiB, {m.get('cpu_model', '?')}"),
        ("os", m.get("os", "?")),
        ("python", f"{m.get('python', '?')}; {versions}"),
        ("commit (the last call)", f"`{(git.get('commit') or '?')[:12]}`{' (dirty work tree)' if git.get('dirty') else ''} on {git.get('branch') or '?'}"),
        ("load average at start", ", ".join(str(x) for x in m.get("load_average", [])) or "?"),
    ]
    # ``kcoord bench --only`` merges into an earlier run: say when, and on which commit,
    # each benchmark ran
    per = [
        (name, e.get("status"), e.get("started_at") or "?", f"`{(e.get('commit') or '?')[:12]}`", num(e.get("seconds"), 0, " s"), e.get("error") or "")
        for name, e in sorted(doc.get("benchmarks", {}).items())
    ]
    return "### The run\n\n" + table(("", "value"), rows) + "\n\n" + table(("benchmark", "status", "started", "commit", "time", "error"), per)


def targets_section(doc: dict) -> str:
    rows = []
    for o in evaluate(doc):
        shown = "–" if o.measured is None else (rate(o.measured) if o.unit == "records/s" else num(o.measured, 2 if o.unit == "x" else 1))
        verdict = "not measured" if o.met is None else ("**met**" if o.met else "**missed**")
        limit = rate(o.threshold) if o.unit == "records/s" else num(o.threshold, 2 if o.unit == "x" else 0)
        sign = ">=" if o.higher_is_better else "<="
        rows.append((o.description, f"{sign} {limit} {o.unit}", f"{shown} {o.unit}", verdict, o.margin))
    return "### Targets (acks=all, RF=3, 100-byte values)\n\n" + table(("target", "limit", "measured", "", "margin"), rows)


def produce_section(doc: dict) -> str:
    f = figures.produce(doc)
    if f is None:
        return "### Produce throughput\n\nnot measured (produce_matrix failed or did not run)"
    rows = []
    for rf in (1, 3):
        for acks in ("0", "1", "all"):
            s, b = f.case(acks, rf, "send"), f.case(acks, rf, "send_batch")
            rows.append(
                (
                    acks,
                    rf,
                    rate(s.records_per_s) if s else "–",
                    num(s.mb_per_s if s else None),
                    times(s.ratio_vs_queue_put_batch if s else None),
                    rate(b.records_per_s) if b else "–",
                    num(b.mb_per_s if b else None),
                    times(b.ratio_vs_raw_actor if b else None),
                    times(b.ratio_vs_queue_put_batch if b else None),
                )
            )
    head = ("acks", "RF", "send() rec/s", "MB/s", "vs queue", "send_batch() rec/s", "MB/s", "vs raw actor", "vs queue")
    base = (
        f"Baselines in the same run: raw Ray actor (the same 1 MiB batches, one actor per partition) "
        f"**{rate(f.raw_actor_records_per_s)} rec/s**; `ray.util.queue.Queue.put_nowait_batch` "
        f"**{rate(f.queue_put_batch_records_per_s)} rec/s**. {f.partitions} partitions, medians."
    )
    return "### Produce throughput (Producer, 100-byte values)\n\n" + table(head, rows) + "\n\n" + base


def latency_section(doc: dict) -> str:
    rows = figures.latency(doc)
    if rows is None:
        return "### End-to-end latency\n\nnot measured (latency failed or did not run)"
    out = [
        (
            rate(r.offered),
            rate(r.achieved),
            f"{r.received}/{r.sent}",
            num(r.p50, 2),
            num(r.p99, 2),
            num(r.p999, 2),
            f"{num(r.ack_p50, 2)} / {num(r.ack_p99, 2)}",
            f"{num(r.queue_p50, 2)} / {num(r.queue_p99, 2)} / {num(r.queue_p999, 2)}",
            times(r.ratio_p99_vs_queue),
        )
        for r in rows
    ]
    head = ("offered rec/s", "achieved", "received", "p50 ms", "p99 ms", "p99.9 ms", "acked p50/p99 ms", "Ray queue p50/p99/p99.9 ms", "p99 vs queue")
    parts = (result(doc, "latency") or {}).get("partitions", "?")
    return f"### End-to-end latency (acks=all, RF=3, partitions: {parts}, send() paced, consumer in another process)\n\n" + table(head, out)


def consumer_section(doc: dict) -> str:
    rows = figures.consumer(doc)
    if rows is None:
        return "### Consumer throughput\n\nnot measured (client failed or did not run)"
    out = [(r.case, rate(r.records_per_s), r.baseline, rate(r.baseline_records_per_s), times(r.ratio)) for r in rows]
    parts = (result(doc, "client") or {}).get("partitions", "?")
    return f"### Consumer throughput (partitions: {parts}, RF=3)\n\n" + table(("case", "rec/s", "baseline", "baseline rec/s", "ratio"), out)


def failover_section(doc: dict) -> str:
    f = figures.failover(doc)
    if f is None:
        return "### Failover\n\nnot measured (failover failed or did not run)"
    rows = [
        ("kcoord: leader kill -> next acked write", len(f.samples_ms), num(f.p50_ms, 0), num(f.p99_ms, 0), num(f.max_ms, 0)),
        ("baseline: Ray restarts a plain actor", len(f.baseline_samples_ms), num(f.baseline_p50_ms, 0), num(f.baseline_p99_ms, 0), num(max(f.baseline_samples_ms) if f.baseline_samples_ms else None, 0)),
    ]
    tail = f"Acknowledged records lost: **{f.lost}**. p50 kcoord / baseline: {times(f.ratio_p50_vs_baseline)}."
    offered = rate((result(doc, "failover") or {}).get("offered_records_per_s"))
    return f"### Failover (acks=all, RF=3, {offered} rec/s offered)\n\n" + table(("", "kills", "p50 ms", "p99 ms", "max ms"), rows) + "\n\n" + tail


def rebalance_section(doc: dict) -> str:
    rows = figures.rebalance(doc)
    if rows is None:
        return "### Rebalance\n\nnot measured (groups failed or did not run)"
    out = [(r.members, num(r.join_ms), num(r.leave_ms), num(r.barrier_ms, 2), times(r.ratio_join_vs_barrier)) for r in rows]
    head = ("members", "join -> Stable ms", "leave -> Stable ms", "Ray barrier ms (baseline)", "join vs barrier")
    return "### Consumer-group rebalance (medians)\n\n" + table(head, out)


def spark_section(doc: dict) -> str:
    rows = figures.spark(doc)
    if rows is None:
        return "### Spark\n\nnot measured (spark failed or did not run)"
    out = [(r.case, rate(r.rows_per_s), r.baseline, rate(r.baseline_rows_per_s), times(r.ratio), times(r.cpu_ratio)) for r in rows]
    head = ("kcoord.spark", "rows/s", "baseline", "baseline rows/s", "ratio (wall)", "ratio (CPU/row)")
    r = result(doc, "spark") or {}
    return f"### Spark on Ray (RayDP; executors: {r.get('executors', '?')}, partitions: {r.get('partitions', '?')}, RF=3)\n\n" + table(head, out)


def capacity_section(doc: dict) -> str:
    c = figures.capacity(doc)
    if c is None:
        return "### Capacity\n\nnot measured (capacity failed or did not run)"
    rows = [
        ("idle ReplicaActor memory (median)", f"RSS {num(c.replica_rss_mib, 0)} MiB, USS {num(c.replica_uss_mib, 0)} MiB"),
        ("baseline: bare Ray actor", f"RSS {num(c.bare_actor_rss_mib, 0)} MiB, USS {num(c.bare_actor_uss_mib, 0)} MiB"),
        ("largest healthy step (RF=3 partitions on one node)", f"{c.max_healthy_partitions} ({c.stop_reason})"),
        ("idle CPU per partition", num(c.idle_cpu_per_partition_cores, 4, " cores")
         + (f" ({num(c.idle_cpu_per_partition_vs_three_bare_actors, 2, 'x')} of three bare Ray actors idling, {num(c.idle_cpu_three_bare_actors, 4, ' cores')})"
            if c.idle_cpu_per_partition_vs_three_bare_actors is not None else "")),
        *(
            [("of which, per kind of process", ", ".join(f"{k} {v * 1000:.1f} mCPU" for k, v in c.idle_cpu_per_partition_by_process.items() if abs(v) >= 0.00005)
              + (f"; the three replica processes alone {num(c.idle_cpu_replica_processes_vs_three_bare_actors, 2, 'x')} of three bare actors"
                 if c.idle_cpu_replica_processes_vs_three_bare_actors is not None else ""))]
            if c.idle_cpu_per_partition_by_process else []
        ),
        *(
            [("like for like", (f"{num(c.idle_cpu_per_partition_vs_three_bare_actors_same_windows, 2, 'x')} of three bare actors measured in the same windows as the steps ({num(c.idle_cpu_three_bare_actors_same_windows, 4, ' cores')}); "
                                if c.idle_cpu_per_partition_vs_three_bare_actors_same_windows is not None else "")
              + f"the partition's own processes (replicas, controller share) {num(c.idle_cpu_partition_processes_vs_three_bare_actors, 2, 'x')} of the bare actors' own"
              + (f"; the whole tree's line {num(c.idle_cpu_per_partition_vs_three_bare_actors_whole_tree, 2, 'x')} of what three bare actors cost the whole tree ({num(c.idle_cpu_three_bare_actors_whole_tree, 4, ' cores')})"
                 if c.idle_cpu_per_partition_vs_three_bare_actors_whole_tree is not None else ""))]
            if c.idle_cpu_partition_processes_vs_three_bare_actors is not None else []
        ),
        *(
            [("idle partition vs three bare actors, window by window (issue 17: at most 1.25x)",
              f"{num(c.idle_cpu_partition_vs_three_bare_actors_in_window, 2, 'x')} (median of {len(c.idle_cpu_partition_vs_three_bare_actors_per_window or [])} steps"
              + (f", {min(c.idle_cpu_partition_vs_three_bare_actors_per_window):.2f}-{max(c.idle_cpu_partition_vs_three_bare_actors_per_window):.2f}"
                 if c.idle_cpu_partition_vs_three_bare_actors_per_window else "")
              + "): the replicas' CPU in each step's window and the controller's line, against the bare actors in that window")]
            if c.idle_cpu_partition_vs_three_bare_actors_in_window is not None else []
        ),
        ("CPU bound (idle CPU reaches half the cores)", f"~{c.cpu_bound_partitions} partitions" if c.cpu_bound_partitions else "–"),
        ("memory bound for 24 GiB (by USS)", f"~{c.memory_bound_partitions_24gib} partitions" if c.memory_bound_partitions_24gib else "–"),
    ]
    steps = [
        (
            s["partitions"],
            s["replicas"],
            num(s.get("seconds_to_full_isr")),
            num(s.get("idle_cpu_cores"), 2),
            ", ".join(f"{k} {v:.2f}" for k, v in s.get("idle_cpu_by_process", {}).items() if v >= 0.005),
            num(s.get("controller_rtt_ms"), 0),
            num(s.get("under_replicated"), 0),
            "yes" if s.get("healthy") else "no: " + "; ".join(s.get("problems", [])),
        )
        for s in c.steps
    ]
    head = ("partitions", "replicas", "s to full ISR", "idle CPU cores", "of which (cores)", "controller ms", "under-replicated", "healthy")
    return "### Capacity of one node\n\n" + table(("", "value"), rows) + "\n\n" + table(head, steps)


def internals_section(doc: dict) -> str:
    parts = ["### Building blocks"]
    lp = figures.leader_path(doc)
    if lp:
        parts.append("Produce requests straight to a partition leader (`benchmarks/replication.py`, 1 partition):\n\n" + table(("case", "rec/s", "baseline", "baseline rec/s", "ratio"), [(r.case, rate(r.records_per_s), r.baseline, rate(r.baseline_records_per_s), times(r.ratio)) for r in lp]))
    la = figures.log_append(doc)
    if la:
        parts.append(
            "The log on local disk against plain file I/O (`benchmarks/log_append.py`):\n\n"
            + table(
                ("batch KiB", "fsync", "append MB/s", "plain write MB/s", "append ratio", "read MB/s", "read ratio"),
                [(r["batch_kib"], "on" if r["fsync"] else "off", num(r["append_mb_s"]), num(r["plain_write_mb_s"]), times(r["append_ratio"]), num(r["read_mb_s"]), times(r["read_ratio"])) for r in la],
            )
        )
    return "\n\n".join(parts) if len(parts) > 1 else ""


def render(doc: dict) -> str:
    """Every table, in the order PERFORMANCE.md shows them."""
    sections = [
        run_section(doc),
        targets_section(doc),
        produce_section(doc),
        latency_section(doc),
        consumer_section(doc),
        failover_section(doc),
        rebalance_section(doc),
        spark_section(doc),
        capacity_section(doc),
        internals_section(doc),
    ]
    return "\n\n".join(s for s in sections if s) + "\n"


def update(document: str, doc: dict) -> str:
    """``document`` with the part between the markers replaced by :func:`render`. The
    markers count only on lines of their own (prose may quote them)."""
    start = re.search(rf"^{re.escape(BEGIN)}$", document, re.MULTILINE)
    end = re.search(rf"^{re.escape(END)}$", document, re.MULTILINE)
    if start is None or end is None or end.start() < start.end():
        raise ValueError(f"no {BEGIN} ... {END} section (each marker on a line of its own) to update")
    return document[: start.end()] + "\n" + render(doc) + document[end.start() :]
