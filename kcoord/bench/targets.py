"""kcoord's performance targets (acks=all, RF=3, 100-byte values, a 2-core machine) and
whether a results document meets them, with the margin: a miss says by how much."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable

from . import figures


@dataclass(frozen=True)
class Target:
    key: str
    description: str
    threshold: float
    unit: str
    higher_is_better: bool
    measure: Callable[[dict], float | None]


@dataclass
class Outcome:
    key: str
    description: str
    threshold: float
    unit: str
    higher_is_better: bool
    measured: float | None
    met: bool | None  # None: not measured in this run
    margin: str

    def to_dict(self) -> dict:
        return asdict(self)


def _send_batch(doc: dict) -> float | None:
    f = figures.produce(doc)
    c = f.case("all", 3, "send_batch") if f else None
    return c.records_per_s if c else None


def _send_batch_ratio(doc: dict) -> float | None:
    f = figures.produce(doc)
    c = f.case("all", 3, "send_batch") if f else None
    return c.ratio_vs_raw_actor if c else None


def _send(doc: dict) -> float | None:
    f = figures.produce(doc)
    c = f.case("all", 3, "send") if f else None
    return c.records_per_s if c else None


def _p99_at_10k(doc: dict) -> float | None:
    row = figures.latency_at(figures.latency(doc), 10_000)
    return row.p99 if row else None


def _failover(q: str) -> Callable[[dict], float | None]:
    def measure(doc: dict) -> float | None:
        f = figures.failover(doc)
        return getattr(f, f"{q}_ms") if f else None

    return measure


def _rebalance_16(doc: dict) -> float | None:
    rows = figures.rebalance(doc) or []
    row = next((r for r in rows if r.members == 16), None)
    return row.join_ms if row else None


def _idle_partition(doc: dict) -> float | None:
    c = figures.capacity(doc)
    return c.idle_cpu_partition_vs_three_bare_actors_in_window if c else None


TARGETS: tuple[Target, ...] = (
    Target("send_batch_records_per_s", "send_batch() throughput", 1_000_000, "records/s", True, _send_batch),
    Target("send_batch_vs_raw_actor", "send_batch() / raw-actor ceiling", 0.30, "x", True, _send_batch_ratio),
    Target("send_records_per_s", "send() throughput", 300_000, "records/s", True, _send),
    Target("e2e_p99_ms_at_10k", "end-to-end p99 at 10k records/s", 15, "ms", False, _p99_at_10k),
    Target("failover_p50_ms", "failover p50 (kill -> next acked write)", 500, "ms", False, _failover("p50")),
    Target("failover_p99_ms", "failover p99", 2000, "ms", False, _failover("p99")),
    Target("rebalance_16_members_ms", "16-member rebalance (join -> Stable)", 1000, "ms", False, _rebalance_16),
    Target("idle_partition_vs_three_bare_actors", "idle RF=3 partition / three bare Ray actors (same window)", 1.25, "x", False, _idle_partition),
)


def margin(measured: float, threshold: float, higher_is_better: bool) -> str:
    """How far from the target: '1.3x the target' when met, '-42% (0.58x)' or '+30% over'
    when missed."""
    if threshold == 0:
        return ""
    share = measured / threshold
    met = share >= 1 if higher_is_better else share <= 1
    if met:
        better = share if higher_is_better else (1 / share if share else float("inf"))
        return f"{better:.2f}x better than the target"
    if higher_is_better:
        return f"{(share - 1) * 100:+.0f}% ({share:.2f}x of the target)"
    return f"{(share - 1) * 100:+.0f}% over ({share:.2f}x the limit)"


def evaluate(doc: dict, targets: tuple[Target, ...] = TARGETS) -> list[Outcome]:
    out = []
    for t in targets:
        try:
            value = t.measure(doc)
        except (KeyError, TypeError, ValueError):
            value = None
        if value is None:
            out.append(Outcome(t.key, t.description, t.threshold, t.unit, t.higher_is_better, None, None, "not measured"))
            continue
        met = value >= t.threshold if t.higher_is_better else value <= t.threshold
        out.append(Outcome(t.key, t.description, t.threshold, t.unit, t.higher_is_better, value, met, margin(value, t.threshold, t.higher_is_better)))
    return out
