"""How many RF=3 partitions one node holds while staying healthy, and what an idle
ReplicaActor costs in memory.

Why: every partition replica is its own Ray actor (a process), so the number of partitions
a node can hold is bounded by memory (an idle Ray worker process each) and by CPU (each
replica wakes for controller heartbeats, follower long-polls and its timer even when no
record flows). This finds the first bound on this machine and extrapolates the other.

Method: on one node with 3 logical brokers, create RF=3 partitions in steps (a topic of
``--step`` partitions each step). After each step, wait until every partition has a full
ISR (the leader reports 3 in-sync replicas and every replica answers), then, with nothing
produced, measure for ``--idle-seconds``:

* idle CPU of the Ray processes (everything this process started: Ray's daemons, the
  controller and every replica), in cores;
* controller heartbeat health: the failure detector holds every replica alive, and no
  replica was failed or dropped from an ISR (``replicas_failed``/``isr_shrinks`` did not
  move) while idle; the controller answers DescribeCluster within 1 s;
* the controller's under-replicated and offline partition counts (must be 0).

A step is healthy when all of that holds and idle CPU stays at or below half the machine's
cores (an idle cluster that needs more leaves too little for work). The run stops at the
first unhealthy step, at ``--max-partitions``, when the next step would leave less than a
quarter of the machine's memory free, or when the time budget (300 s; 30 s with
``--quick``) runs out.

Memory: RSS and USS (psutil, memory only this process holds) of every idle replica,
median; baseline: a bare Ray actor (no kcoord code) measured in the same run. The memory
bound for 24 GiB is (24 GiB - what Ray and the controller hold with no partitions) / (3 x
replica USS). The CPU bound extrapolates the idle CPU per partition (a line through the
steps) to half the cores; that slope is also given as a ratio to three bare Ray actors
idling in the same run (an RF=3 partition is three processes). A bare actor idles at a few
mCPU, a few 10 ms clock ticks per window, plus Ray's own reports every few seconds: so the
baseline idles BARE_ACTORS of them (3 with ``--quick``) for BASELINE_WINDOWS windows, takes
the median window and scales it to three. The same line per kind of process (leaders,
followers, controller, Ray's daemons, the rest) says where a partition's idle cost goes;
``idle_cpu_replica_processes_vs_three_bare_actors`` is its three replica processes alone
against the three bare actors. The bare actors stay alive through the steps and are
measured in every step's window (left out of the step's idle CPU), so
``..._same_windows`` compares the partitions with bare actors under the same load (the
start-of-run baseline read 9.5-15.8 mCPU per three from one run to the next; during the
steps of one run, 7-15), and ``idle_cpu_partition_processes_vs_three_bare_actors`` the
partition's own processes (replicas, its share of the controller) with theirs. The whole
tree's line against what the bare actors cost the whole tree (idled with and without them
before the steps: Ray's agents spend on every actor process, kcoord's or not) is
``..._whole_tree``. Issue 17's idle goal is read window by window
(``idle_cpu_partition_vs_three_bare_actors_in_window``, the median over the healthy steps):
in each step's window, the replicas' CPU per partition plus the controller's line, against
three of the bare actors idling in that same window -- processes on one machine speed up
and slow down together from one window to the next, which a ratio within a window cancels.
Prints JSON.

    python benchmarks/capacity.py [--quick] [--out FILE] [--step N] [--max-partitions N]
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil  # noqa: E402
import ray  # noqa: E402

from kcoord.bench import script  # noqa: E402
from kcoord.bench.process_tree import tree, tree_cpu  # noqa: E402
from kcoord.bench.stats import median, ratio  # noqa: E402

RF = 3
BASELINE_WINDOWS = 3  # idle windows for the bare-actor baseline (median)
BARE_ACTORS = 24  # bare actors idled for the baseline, reported per three
GIB = 2**30
TARGET_MEMORY = 24 * GIB
CPU_LIMIT_FRACTION = 0.5  # of the machine's cores, for an idle cluster
MEMORY_FREE_FRACTION = 0.25  # keep this much of the machine's memory free


class BareActor:
    """The baseline: a Ray actor process with nothing of kcoord in it."""

    def pid(self) -> int:
        import os

        return os.getpid()




def idle_cpu(seconds: float) -> dict[int, float]:
    """Cores used by each process of this tree (Ray and every actor) over ``seconds`` of
    idling."""
    before = tree_cpu()
    start = time.perf_counter()
    time.sleep(seconds)  # measuring idle cost: nothing to wait for, the time is the point
    took = time.perf_counter() - start
    after = tree_cpu()
    return {pid: max(0.0, c - before.get(pid, 0.0)) / took for pid, c in after.items()}


def by_kind(per_pid: dict[int, float], kinds: dict[int, str]) -> dict[str, float]:
    """Idle cores split by what the process is: where an idle cluster's CPU goes."""
    out: dict[str, float] = {}
    for pid, cores in per_pid.items():
        kind = kinds.get(pid)
        if kind is None:
            try:
                name = psutil.Process(pid).name()
            except psutil.Error:
                name = ""
            kind = "ray_daemons" if any(d in name for d in ("raylet", "gcs_server")) else "other"
        out[kind] = round(out.get(kind, 0.0) + cores, 3)
    return dict(sorted(out.items()))


def tree_memory() -> dict:
    """Bytes held by this process tree (Ray, the controller, every replica)."""
    rss = uss = 0
    for proc in tree():
        try:
            info = proc.memory_full_info()
            rss += info.rss
            uss += info.uss
        except psutil.Error:
            pass
    return {"rss_bytes": rss, "uss_bytes": uss}


def mib(memory: dict) -> dict:
    return {k.replace("_bytes", "_mib"): round(v / 2**20) for k, v in memory.items()}


def process_memory(pids: list[int]) -> dict:
    rss, uss = [], []
    for pid in pids:
        try:
            info = psutil.Process(pid).memory_full_info()
            rss.append(info.rss)
            uss.append(info.uss)
        except psutil.Error:
            pass
    return {"rss_mib": round(median(rss) / 2**20, 1), "uss_mib": round(median(uss) / 2**20, 1), "processes": len(rss)}


def controller_state(admin) -> tuple[dict, float]:
    t0 = time.perf_counter()
    metrics = admin.describe_cluster()["metrics"]
    return metrics, (time.perf_counter() - t0) * 1000


def describe_all(cluster, topics: list[str]) -> list[dict]:
    calls = []
    for topic in topics:
        for pm in cluster.topic(topic, refresh=True).partitions:
            for b in pm.replicas:
                calls.append(cluster.replica(topic, pm.partition, b).describe.remote())
    return ray.get(calls, timeout=60)


def full_isr(cluster, topics: list[str]) -> tuple[bool, list[dict]]:
    """Every replica answers and every leader reports a full ISR."""
    try:
        infos = describe_all(cluster, topics)
    except Exception:
        return False, []
    leaders = [i for i in infos if i["role"] == "leader"]
    expected = sum(len(cluster.topic(t).partitions) for t in topics)
    return len(leaders) == expected and all(len(i["isr"]) == RF for i in leaders), infos


def main() -> None:
    parser = script.parser(__doc__)
    parser.add_argument("--step", type=int, default=None, help="partitions added per step (default 4, 1 with --quick)")
    parser.add_argument("--max-partitions", type=int, default=None, help="stop here (default 96, 2 with --quick)")
    parser.add_argument("--idle-seconds", type=float, default=None, help="idle measurement per step (default 5, 2 with --quick)")
    parser.add_argument("--budget-seconds", type=float, default=None, help="time budget (default 300, 30 with --quick)")
    args = parser.parse_args()
    started = time.perf_counter()
    step = args.step or (1 if args.quick else 4)
    cap = args.max_partitions or (2 if args.quick else 96)
    idle_s = args.idle_seconds or (2.0 if args.quick else 5.0)
    budget = args.budget_seconds or (30.0 if args.quick else 300.0)
    isr_wait = 20.0 if args.quick else 60.0

    import kcoord
    from kcoord.client.admin import Admin

    cores = psutil.cpu_count() or 1
    total_memory = psutil.virtual_memory().total
    results: dict = {
        "benchmark": "capacity",
        "quick": args.quick,
        "replication_factor": RF,
        "step_partitions": step,
        "max_partitions": cap,
        "idle_seconds": idle_s,
        "budget_seconds": budget,
        "cpu_limit_cores": CPU_LIMIT_FRACTION * cores,
        "context": script.context(),
    }
    with kcoord.local_cluster(brokers=3, group_coordinators=0) as cluster:
        admin = Admin(cluster)
        budget_start = time.perf_counter()
        results["setup_seconds"] = round(budget_start - started, 1)
        n_bare = 3 if args.quick else BARE_ACTORS
        controller_pid = ray.get(cluster.controller.pid.remote(), timeout=60)
        kinds = {os.getpid(): "driver", controller_pid: "controller"}
        # The line through the steps starts from the cluster alone (no partitions, no bare
        # actors): the median of BASELINE_WINDOWS windows.
        base_memory = tree_memory()
        without = [idle_cpu(idle_s) for _ in range(BASELINE_WINDOWS)]
        totals = [sum(w.values()) for w in without]
        baseline_cpu = without[totals.index(sorted(totals)[len(totals) // 2])]
        baseline_idle = median(totals)
        # The bare actors. One short window of three measures a few mCPU poorly (10 ms
        # ticks; 3 actors for 5 s read 8-28 mCPU from one run to the next): many actors,
        # the median window, scaled to three. With them the whole tree costs more than
        # their own processes (Ray's agents spend on every actor process): the difference
        # is the like-for-like baseline for the slope, which counts the whole tree.
        bare = [ray.remote(BareActor).options(num_cpus=0).remote() for _ in range(n_bare)]
        bare_pids = ray.get([b.pid.remote() for b in bare])
        kinds.update({pid: "bare_actors" for pid in bare_pids})
        windows = [idle_cpu(idle_s) for _ in range(BASELINE_WINDOWS)]
        bare_sums = [sum(w.get(pid, 0.0) for pid in bare_pids) for w in windows]
        bare_all = median(bare_sums)
        bare_cpu = bare_all * 3 / n_bare
        tree_with_bare = median([sum(w.values()) for w in windows])
        results["baseline"] = {
            "bare_actor": process_memory(bare_pids),
            "bare_actors_idled": n_bare,
            "idle_cpu_three_bare_actors": round(bare_cpu, 4),
            "idle_cpu_three_bare_actors_windows": [round(x * 3 / n_bare, 4) for x in bare_sums],
            "idle_cpu_three_bare_actors_whole_tree": round((tree_with_bare - baseline_idle) * 3 / n_bare, 4),
            "idle_cpu_cores_no_partitions": round(baseline_idle, 3),
            "idle_cpu_by_process_no_partitions": by_kind(baseline_cpu, kinds),
            "tree_memory_no_partitions_mib": mib(base_memory),
        }
        # The bare actors stay through the steps and are measured in every step's window,
        # so the ratio is also given against bare actors under the same load as the
        # partitions. They are left out of each step's idle CPU (they are not kcoord's).

        topics: list[str] = []
        steps: list[dict] = []
        stop_reason = f"reached --max-partitions {cap}"
        while sum(s["added"] for s in steps) < cap:
            partitions = sum(s["added"] for s in steps)
            if time.perf_counter() - budget_start > budget:
                stop_reason = f"time budget of {budget:.0f} s used up"
                break
            if steps:
                per_replica = steps[-1]["replica_memory"]["uss_mib"] * 2**20  # what a new replica adds
                if psutil.virtual_memory().available - step * RF * per_replica < MEMORY_FREE_FRACTION * total_memory:
                    stop_reason = "the next step would leave less than a quarter of the memory free"
                    break
            add = min(step, cap - partitions)
            topic = f"cap-{len(steps)}"
            t0 = time.perf_counter()
            admin.create_topic(topic, partitions=add, replication_factor=RF, config={"min.insync.replicas": 2})
            topics.append(topic)
            deadline = time.monotonic() + isr_wait
            ok, infos = full_isr(cluster, topics)
            while not ok and time.monotonic() < deadline:
                time.sleep(0.2)  # polling the cluster's state with a deadline
                ok, infos = full_isr(cluster, topics)
            ready_s = time.perf_counter() - t0
            before, _ = controller_state(admin)  # counters at the start of the idle window
            per_pid = idle_cpu(idle_s)
            bare_now = sum(per_pid.pop(pid, 0.0) for pid in bare_pids)
            cpu = sum(per_pid.values())
            metrics, rtt_ms = controller_state(admin)
            health = ray.get(cluster.controller.replica_health.remote(), timeout=60)
            row = {
                "partitions": partitions + add,
                "added": add,
                "replicas": (partitions + add) * RF,
                "full_isr": ok,
                "seconds_to_full_isr": round(ready_s, 1),
                "idle_cpu_cores": round(cpu, 3),
                "idle_cpu_by_process": by_kind(per_pid, {**kinds, **{i["pid"]: "leaders" if i["role"] == "leader" else "followers" for i in infos}}),
                "idle_cpu_three_bare_actors": round(bare_now * 3 / n_bare, 4),  # in this same window
                "controller_rtt_ms": round(rtt_ms, 1),
                "replicas_alive": sum(health.values()),
                "replicas_failed_while_idle": metrics["replicas_failed"] - before["replicas_failed"],
                "isr_shrinks_while_idle": metrics["isr_shrinks"] - before["isr_shrinks"],
                "under_replicated": metrics["under_replicated_partitions"],
                "offline": metrics["offline_partitions"],
                "replica_memory": process_memory([i["pid"] for i in infos]),
                "tree_memory_mib": mib(tree_memory()),
            }
            problems = []
            if not ok:
                problems.append(f"ISR not full within {isr_wait:.0f} s")
            if row["replicas_alive"] < row["replicas"]:
                problems.append(f"controller holds {row['replicas_alive']} of {row['replicas']} replicas alive")
            if row["replicas_failed_while_idle"] or row["isr_shrinks_while_idle"]:
                problems.append("replicas failed or left an ISR while idle")
            if row["under_replicated"] or row["offline"]:
                problems.append(f"{row['under_replicated']} under-replicated, {row['offline']} offline")
            if rtt_ms > 1000:
                problems.append(f"controller answered in {rtt_ms:.0f} ms")
            if cpu > CPU_LIMIT_FRACTION * cores:
                problems.append(f"idle CPU {cpu:.2f} cores > {CPU_LIMIT_FRACTION * cores:.1f}")
            row["healthy"] = not problems
            row["problems"] = problems
            steps.append(row)
            print(f"{row['partitions']} partitions: idle CPU {cpu:.2f} cores, healthy={row['healthy']} {problems}", file=sys.stderr, flush=True)
            if problems:
                stop_reason = f"unhealthy at {row['partitions']} partitions: {'; '.join(problems)}"
                break
        results["steps"] = steps
        results["stop_reason"] = stop_reason
        results.update(bounds(steps, results["baseline"], base_memory, cores))
    script.emit(results, args.out, started)


def _line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares slope and intercept of ``ys`` over ``xs``."""
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var if var else 0.0
    return slope, my - slope * mx


def bounds(steps: list[dict], baseline: dict, base_memory: dict, cores: int) -> dict:
    """The largest healthy step, memory per replica, and the two extrapolated bounds."""
    healthy = [s for s in steps if s["healthy"]]
    out: dict = {"max_healthy_partitions": healthy[-1]["partitions"] if healthy else 0}
    if not steps:
        return out
    last = steps[-1]
    rss, uss = last["replica_memory"]["rss_mib"], last["replica_memory"]["uss_mib"]
    bare = baseline["bare_actor"]
    out["replica_memory"] = {
        "rss_mib": rss,
        "uss_mib": uss,
        "ratio_rss_vs_bare_actor": ratio(rss, bare["rss_mib"]),
        "ratio_uss_vs_bare_actor": ratio(uss, bare["uss_mib"]),
    }
    fixed = base_memory["uss_bytes"]
    out["memory_bound_partitions_24gib"] = int((TARGET_MEMORY - fixed) / (RF * uss * 2**20)) if uss else None
    out["memory_bound_partitions_24gib_by_rss"] = int((TARGET_MEMORY - base_memory["rss_bytes"]) / (RF * rss * 2**20)) if rss else None
    # idle CPU per partition: a least-squares line through (partitions, cores) with the
    # no-partition baseline as the first point
    xs = [0] + [s["partitions"] for s in steps]
    ys = [baseline["idle_cpu_cores_no_partitions"]] + [s["idle_cpu_cores"] for s in steps]
    slope, intercept = _line(xs, ys)
    out["idle_cpu_per_partition_cores"] = round(slope, 4)
    # Issue 17's idle goal: an RF=3 partition (three replica processes and its share of the
    # controller) at most 1.25x three bare Ray actors idling in the same run.
    bare3 = baseline.get("idle_cpu_three_bare_actors")
    out["idle_cpu_per_partition_vs_three_bare_actors"] = ratio(slope, bare3)
    # Where a partition's idle cost goes: the same line per kind of process (its replica
    # processes, its share of the controller, of Ray's daemons and of the rest).
    kinds = sorted({k for s in steps for k in s["idle_cpu_by_process"]})
    no_partitions = baseline.get("idle_cpu_by_process_no_partitions", {})
    per_kind = {}
    for kind in kinds:
        kys = [0.0 if kind in ("leaders", "followers") else no_partitions.get(kind, 0.0)] + [s["idle_cpu_by_process"].get(kind, 0.0) for s in steps]
        per_kind[kind] = round(_line(xs, kys)[0], 4)
    out["idle_cpu_per_partition_by_process"] = per_kind
    replicas = per_kind.get("leaders", 0.0) + per_kind.get("followers", 0.0)
    out["idle_cpu_replica_processes_vs_three_bare_actors"] = ratio(replicas, bare3)
    # Like for like, two ways: a partition's own processes (its replicas and its share of
    # the controller) against the bare actors' own processes; and the whole tree's line
    # against what the bare actors cost the whole tree (Ray's agents spend on every actor
    # process, kcoord's or not).
    whole = baseline.get("idle_cpu_three_bare_actors_whole_tree")
    out["idle_cpu_per_partition_vs_three_bare_actors_whole_tree"] = ratio(slope, whole) if whole and whole > 0 else None
    # ... and against the bare actors measured in the steps' own windows (same load)
    during = [s["idle_cpu_three_bare_actors"] for s in steps if s.get("idle_cpu_three_bare_actors") is not None]
    same = median(during) if during else None
    out["idle_cpu_three_bare_actors_same_windows"] = round(same, 4) if same is not None else None
    out["idle_cpu_per_partition_vs_three_bare_actors_same_windows"] = ratio(slope, same)
    out["idle_cpu_partition_processes_vs_three_bare_actors"] = ratio(replicas + per_kind.get("controller", 0.0), same if same else bare3)
    # Issue 17's idle goal, window by window: what an idle partition's own processes cost
    # (its replicas' CPU in the step's window over the partitions, plus its share of the
    # controller: that line's slope) against three of the bare actors idling in the very
    # same window. Processes on one machine speed up and slow down together from one window
    # to the next (the bare actors read 7-18 mCPU per three across runs); a ratio taken
    # within a window cancels that, where a slope against a baseline from other windows does
    # not, and a slope also charges each new partition with what every process already
    # there costs more as the machine fills. Ray's agents' work for each process (kcoord's
    # or a bare actor's alike) is in neither side.
    controller = max(0.0, per_kind.get("controller", 0.0))
    windows = [s for s in steps if s["healthy"] and s.get("idle_cpu_three_bare_actors")]
    ratios = [
        ((s["idle_cpu_by_process"].get("leaders", 0.0) + s["idle_cpu_by_process"].get("followers", 0.0)) / s["partitions"] + controller)
        / s["idle_cpu_three_bare_actors"]
        for s in windows
    ]
    out["idle_cpu_partition_vs_three_bare_actors_per_window"] = [round(r, 3) for r in ratios]
    out["idle_cpu_partition_vs_three_bare_actors_in_window"] = round(median(ratios), 3) if ratios else None
    limit = CPU_LIMIT_FRACTION * cores
    out["cpu_bound_partitions"] = int((limit - intercept) / slope) if slope > 0 else None
    out["cpu_bound_note"] = f"partitions at which idle CPU reaches {limit:.1f} of {cores} cores (line through the steps)"
    return out


if __name__ == "__main__":
    main()
