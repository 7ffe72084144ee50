"""The numbers the report shows, pulled out of ``results.json``: one function per
benchmark, each returning plain dataclasses (or None when that benchmark did not run or
failed). Plots, the markdown tables and the targets all read the figures from here, so
the knowledge of each benchmark's JSON layout lives in one place."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .results import result


def _get(d: Any, *path: Any, default: Any = None) -> Any:
    for key in path:
        if not isinstance(d, dict) or key not in d:
            return default
        d = d[key]
    return d


@dataclass
class ProduceCase:
    acks: str
    rf: int
    api: str  # "send" | "send_batch"
    records_per_s: float
    mb_per_s: float
    ratio_vs_raw_actor: float | None
    ratio_vs_queue_put_batch: float | None


@dataclass
class ProduceFigures:
    partitions: int
    cases: list[ProduceCase]
    raw_actor_records_per_s: float
    queue_put_batch_records_per_s: float

    def case(self, acks: str, rf: int, api: str) -> ProduceCase | None:
        return next((c for c in self.cases if (c.acks, c.rf, c.api) == (acks, rf, api)), None)


def produce(doc: dict) -> ProduceFigures | None:
    r = result(doc, "produce_matrix")
    if r is None:
        return None
    cases = [
        ProduceCase(str(c["acks"]), int(c["rf"]), c["api"], c["records_per_s"], c["mb_per_s"], c.get("ratio_vs_raw_actor"), c.get("ratio_vs_queue_put_batch"))
        for c in r.get("cases", [])
    ]
    return ProduceFigures(
        partitions=r.get("partitions", 0),
        cases=cases,
        raw_actor_records_per_s=_get(r, "baselines", "raw_actor", "records_per_s", default=0),
        queue_put_batch_records_per_s=_get(r, "baselines", "queue_put_batch", "records_per_s", default=0),
    )


@dataclass
class LatencyRow:
    offered: int
    achieved: float
    sent: int
    received: int
    p50: float | None
    p99: float | None
    p999: float | None
    queue_p50: float | None
    queue_p99: float | None
    queue_p999: float | None
    queue_achieved: float | None
    ratio_p99_vs_queue: float | None
    ack_p50: float | None = None  # send() -> acknowledged (sampled)
    ack_p99: float | None = None


def latency(doc: dict) -> list[LatencyRow] | None:
    r = result(doc, "latency")
    if r is None:
        return None
    rows = []
    for load in r.get("loads", []):
        lat, base = load.get("latency_ms", {}), _get(load, "baseline_queue", "latency_ms", default={})
        rows.append(
            LatencyRow(
                offered=load["offered_records_per_s"],
                achieved=load["achieved_records_per_s"],
                sent=load.get("sent", 0),
                received=load.get("received", 0),
                p50=lat.get("p50"),
                p99=lat.get("p99"),
                p999=lat.get("p999"),
                queue_p50=base.get("p50"),
                queue_p99=base.get("p99"),
                queue_p999=base.get("p999"),
                queue_achieved=_get(load, "baseline_queue", "achieved_records_per_s"),
                ratio_p99_vs_queue=_get(load, "ratios_vs_queue", "p99"),
                ack_p50=_get(load, "ack_latency_ms", "p50"),
                ack_p99=_get(load, "ack_latency_ms", "p99"),
            )
        )
    return rows


def latency_at(rows: list[LatencyRow] | None, offered: int) -> LatencyRow | None:
    return next((row for row in rows or [] if row.offered == offered), None)


@dataclass
class FailoverFigures:
    kills: int
    samples_ms: list[float]
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    lost: int | None
    baseline_samples_ms: list[float] = field(default_factory=list)
    baseline_p50_ms: float | None = None
    baseline_p99_ms: float | None = None
    ratio_p50_vs_baseline: float | None = None


def failover(doc: dict) -> FailoverFigures | None:
    r = result(doc, "failover")
    if r is None:
        return None
    cf = r.get("client_failover_ms", {})
    base = r.get("baseline_ray_restart_ms", {})
    return FailoverFigures(
        kills=r.get("kills", 0),
        samples_ms=list(r.get("samples_ms", [])),
        p50_ms=cf.get("p50"),
        p99_ms=cf.get("p99"),
        max_ms=cf.get("max"),
        lost=r.get("lost"),
        baseline_samples_ms=list(base.get("samples_ms", [])),
        baseline_p50_ms=base.get("p50"),
        baseline_p99_ms=base.get("p99"),
        ratio_p50_vs_baseline=_get(r, "ratios_vs_ray_restart", "client_p50"),
    )


@dataclass
class RebalanceRow:
    members: int
    join_ms: float | None
    leave_ms: float | None
    barrier_ms: float | None
    ratio_join_vs_barrier: float | None


def rebalance(doc: dict) -> list[RebalanceRow] | None:
    r = result(doc, "groups")
    if r is None:
        return None
    join = r.get("join_to_stable_ms", {})
    sizes = sorted(int(n) for n in join)
    return [
        RebalanceRow(
            members=n,
            join_ms=_get(join, str(n), "median_ms"),
            leave_ms=_get(r, "leave_to_stable_ms", str(n), "median_ms"),
            barrier_ms=_get(r, "baseline_barrier_ms", str(n), "median_ms"),
            ratio_join_vs_barrier=_get(r, "ratios_vs_barrier", "join", str(n)),
        )
        for n in sizes
    ]


@dataclass
class SparkRow:
    case: str
    rows_per_s: float
    baseline: str
    baseline_rows_per_s: float
    ratio: float | None
    cpu_ratio: float | None


def spark(doc: dict) -> list[SparkRow] | None:
    r = result(doc, "spark")
    if r is None:
        return None
    cases, ratios = r.get("cases", {}), r.get("ratios", {})
    rows = []
    for case, baseline in (("write", "ray_data_from_spark"), ("read", "ray_data_to_spark")):
        if case in cases and baseline in cases:
            short = baseline.removeprefix("ray_data_")
            rows.append(
                SparkRow(
                    case=case,
                    rows_per_s=cases[case]["rows_per_s"],
                    baseline=f"ray.data.{short}",
                    baseline_rows_per_s=cases[baseline]["rows_per_s"],
                    ratio=ratios.get(f"{case}_vs_{short}"),
                    cpu_ratio=ratios.get(f"{case}_vs_{short}_cpu"),
                )
            )
    return rows


@dataclass
class ThroughputRow:
    case: str
    records_per_s: float
    baseline: str
    baseline_records_per_s: float
    ratio: float | None


def consumer(doc: dict) -> list[ThroughputRow] | None:
    """client.py: the consumer's figures against the queue's get_nowait_batch."""
    r = result(doc, "client")
    if r is None:
        return None
    cases, ratios = r.get("cases", {}), r.get("ratios", {})
    base = _get(cases, "queue_get_batch", "records_per_s", default=0)
    rows = []
    for case in ("consume", "consume_columns"):
        if case in cases:
            rows.append(ThroughputRow(case, cases[case]["records_per_s"], "queue get_nowait_batch", base, ratios.get(f"{case}_vs_queue_get")))
    return rows


def leader_path(doc: dict) -> list[ThroughputRow] | None:
    """replication.py: produce requests straight to the leader, against the raw actor."""
    r = result(doc, "replication")
    if r is None:
        return None
    cases = r.get("cases", {})
    base = _get(cases, "raw_actor", "records_per_s", default=0)
    return [
        ThroughputRow(label, c["records_per_s"], "raw actor", base, c.get("ratio_vs_raw_actor"))
        for label, c in cases.items()
        if label != "raw_actor"
    ]


def log_append(doc: dict) -> list[dict] | None:
    """log_append.py: append/read MB/s against plain file I/O, per batch size and fsync."""
    r = result(doc, "log_append")
    if r is None:
        return None
    return [
        {
            "batch_kib": round(c["batch_bytes"] / 1024),
            "fsync": c["fsync"],
            "append_mb_s": c.get("log_append_mb_s"),
            "plain_write_mb_s": c.get("plain_write_mb_s"),
            "append_ratio": c.get("append_ratio"),
            "read_mb_s": c.get("log_read_mb_s"),
            "read_ratio": c.get("read_ratio"),
        }
        for c in r.get("results", [])
    ]


@dataclass
class CapacityFigures:
    replica_rss_mib: float | None
    replica_uss_mib: float | None
    bare_actor_rss_mib: float | None
    bare_actor_uss_mib: float | None
    max_healthy_partitions: int
    memory_bound_partitions_24gib: int | None
    cpu_bound_partitions: int | None
    idle_cpu_per_partition_cores: float | None
    stop_reason: str
    steps: list[dict]
    idle_cpu_three_bare_actors: float | None = None  # baseline of the same run
    idle_cpu_per_partition_vs_three_bare_actors: float | None = None
    idle_cpu_per_partition_by_process: dict[str, float] | None = None  # where it goes
    idle_cpu_replica_processes_vs_three_bare_actors: float | None = None
    # like for like: own processes against own processes; whole tree against whole tree
    idle_cpu_partition_processes_vs_three_bare_actors: float | None = None
    idle_cpu_three_bare_actors_whole_tree: float | None = None
    idle_cpu_per_partition_vs_three_bare_actors_whole_tree: float | None = None
    idle_cpu_three_bare_actors_same_windows: float | None = None  # measured in the steps' windows
    idle_cpu_per_partition_vs_three_bare_actors_same_windows: float | None = None
    # issue 17's idle goal: an idle partition's processes against three bare actors within
    # each step's window (median over the healthy steps, and every step's)
    idle_cpu_partition_vs_three_bare_actors_in_window: float | None = None
    idle_cpu_partition_vs_three_bare_actors_per_window: list[float] | None = None


def capacity(doc: dict) -> CapacityFigures | None:
    r = result(doc, "capacity")
    if r is None:
        return None
    return CapacityFigures(
        replica_rss_mib=_get(r, "replica_memory", "rss_mib"),
        replica_uss_mib=_get(r, "replica_memory", "uss_mib"),
        bare_actor_rss_mib=_get(r, "baseline", "bare_actor", "rss_mib"),
        bare_actor_uss_mib=_get(r, "baseline", "bare_actor", "uss_mib"),
        max_healthy_partitions=r.get("max_healthy_partitions", 0),
        memory_bound_partitions_24gib=r.get("memory_bound_partitions_24gib"),
        cpu_bound_partitions=r.get("cpu_bound_partitions"),
        idle_cpu_per_partition_cores=r.get("idle_cpu_per_partition_cores"),
        stop_reason=r.get("stop_reason", ""),
        steps=list(r.get("steps", [])),
        idle_cpu_three_bare_actors=_get(r, "baseline", "idle_cpu_three_bare_actors"),
        idle_cpu_per_partition_vs_three_bare_actors=r.get("idle_cpu_per_partition_vs_three_bare_actors"),
        idle_cpu_per_partition_by_process=r.get("idle_cpu_per_partition_by_process"),
        idle_cpu_replica_processes_vs_three_bare_actors=r.get("idle_cpu_replica_processes_vs_three_bare_actors"),
        idle_cpu_partition_processes_vs_three_bare_actors=r.get("idle_cpu_partition_processes_vs_three_bare_actors"),
        idle_cpu_three_bare_actors_whole_tree=_get(r, "baseline", "idle_cpu_three_bare_actors_whole_tree"),
        idle_cpu_per_partition_vs_three_bare_actors_whole_tree=r.get("idle_cpu_per_partition_vs_three_bare_actors_whole_tree"),
        idle_cpu_three_bare_actors_same_windows=r.get("idle_cpu_three_bare_actors_same_windows"),
        idle_cpu_per_partition_vs_three_bare_actors_same_windows=r.get("idle_cpu_per_partition_vs_three_bare_actors_same_windows"),
        idle_cpu_partition_vs_three_bare_actors_in_window=r.get("idle_cpu_partition_vs_three_bare_actors_in_window"),
        idle_cpu_partition_vs_three_bare_actors_per_window=r.get("idle_cpu_partition_vs_three_bare_actors_per_window"),
    )
