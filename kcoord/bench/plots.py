"""The report's PNG figures, drawn from ``results.json`` with matplotlib's Agg backend.

matplotlib is imported only here and only when a plot is drawn (``pip install
'kcoord[bench]'``), so the rest of kcoord works without it. Each plot shows the baseline
measured in the same run next to kcoord's figure, and the target where there is one.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Callable, Iterator

from . import figures


class PlotsUnavailable(RuntimeError):
    """matplotlib is not installed."""


def pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as exc:
        raise PlotsUnavailable("matplotlib is not installed (pip install 'kcoord[bench]'); results.json was written, plots were not") from exc
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def subtitle(doc: dict) -> str:
    m, suite = doc.get("machine", {}), doc.get("suite", {})
    commit = (m.get("git", {}).get("commit") or "?")[:10]
    dirty = "+dirty" if m.get("git", {}).get("dirty") else ""
    run = "quick run" if suite.get("quick") else "full run"
    return f"{run}, {m.get('cores', '?')} cores, {m.get('cpu_model', '?')}, commit {commit}{dirty}"


@contextlib.contextmanager
def _figure(doc: dict, title: str, path: Path, size: tuple[int, int] = (8, 5)) -> Iterator[Any]:
    """The axes of a new figure, which is titled, saved to ``path`` and closed after the
    ``with`` block has drawn on them."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=size)
    yield ax
    ax.set_title(f"{title}\n{subtitle(doc)}", fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def throughput(doc: dict, path: Path) -> bool:
    """(a) Produce records/s by acks x RF for send() and send_batch(), the baselines beside."""
    f = figures.produce(doc)
    if f is None or not f.cases:
        return False
    with _figure(doc, f"Produce throughput, {f.partitions} partitions", path, size=(10, 5)) as ax:
        groups = [(a, rf) for rf in (1, 3) for a in ("0", "1", "all")]
        width = 0.38
        for offset, api, color in ((-width / 2, "send", "#4c72b0"), (width / 2, "send_batch", "#55a868")):
            xs, ys = [], []
            for i, (acks, rf) in enumerate(groups):
                c = f.case(acks, rf, api)
                if c:
                    xs.append(i + offset)
                    ys.append(c.records_per_s / 1e6)
                    if api == "send_batch" and c.ratio_vs_raw_actor is not None:
                        ax.annotate(f"{c.ratio_vs_raw_actor:.2f}x raw", (i + offset, c.records_per_s / 1e6), ha="center", va="bottom", fontsize=7)
            ax.bar(xs, ys, width, label=f"kcoord {api}()", color=color)
        base_x = len(groups) + 0.5
        ax.bar([base_x - width / 2], [f.raw_actor_records_per_s / 1e6], width, label="raw Ray actor (same batches)", color="#8c8c8c")
        ax.bar([base_x + width / 2], [f.queue_put_batch_records_per_s / 1e6], width, label="ray.util.queue put_nowait_batch", color="#c44e52")
        ax.axhline(1.0, color="#55a868", ls="--", lw=1, label="target send_batch acks=all RF=3 (1M/s)")
        ax.axhline(0.3, color="#4c72b0", ls=":", lw=1, label="target send() acks=all RF=3 (300k/s)")
        ax.set_xticks(list(range(len(groups))) + [base_x], [f"acks={a}\nRF={rf}" for a, rf in groups] + ["baselines"])
        ax.set_ylabel("million records/s (100-byte values)")
        ax.legend(fontsize=7, loc="upper right")
    return True


def latency(doc: dict, path: Path) -> bool:
    """(b) End-to-end latency percentiles against offered load, the queue baseline dashed."""
    rows = figures.latency(doc)
    if not rows:
        return False
    with _figure(doc, "End-to-end latency vs offered load", path) as ax:
        xs = [r.offered for r in rows]
        for q, color in (("p50", "#4c72b0"), ("p99", "#dd8452"), ("p999", "#c44e52")):
            ax.plot(xs, [getattr(r, q) for r in rows], "o-", color=color, label=f"kcoord {q}")
            ax.plot(xs, [getattr(r, f"queue_{q}") for r in rows], "s--", color=color, alpha=0.5, label=f"Ray queue {q}")
        for r in rows:
            ax.annotate(f"{r.achieved / 1000:.1f}k/s sent", (r.offered, r.p50 or 0.1), textcoords="offset points", xytext=(0, -14), ha="center", fontsize=7)
        ax.plot([10_000], [15], "x", color="black", ms=10, mew=2, label="target: p99 <= 15 ms at 10k/s")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("offered load, records/s (acks=all, RF=3)")
        ax.set_ylabel("send -> consumer poll, ms")
        ax.legend(fontsize=7)
    return True


def failover(doc: dict, path: Path) -> bool:
    """(c) Distribution (ECDF) of the failover times, Ray's own actor restart beside."""
    f = figures.failover(doc)
    if f is None or not f.samples_ms:
        return False
    with _figure(doc, "Failover time distribution (acks=all, RF=3)", path) as ax:
        for samples, label, color in ((f.samples_ms, f"kcoord leader kill -> next acked write ({len(f.samples_ms)} kills)", "#4c72b0"), (f.baseline_samples_ms, f"Ray actor restart ({len(f.baseline_samples_ms)} kills)", "#8c8c8c")):
            if samples:
                s = sorted(samples)
                ax.step(s, [(i + 1) / len(s) for i in range(len(s))], where="post", label=label, color=color)
                ax.plot(s, [(i + 1) / len(s) for i in range(len(s))], "o", color=color, ms=3)
        ax.axvline(500, color="#55a868", ls="--", lw=1, label="target p50 0.5 s")
        ax.axvline(2000, color="#c44e52", ls="--", lw=1, label="target p99 2 s")
        ax.set_xlabel("ms")
        ax.set_ylabel("fraction of kills")
        ax.set_ylim(0, 1.05)
        ax.legend(fontsize=7, loc="lower right")
    return True


def rebalance(doc: dict, path: Path) -> bool:
    """(d) Rebalance time against group size, the barrier baseline beside."""
    rows = figures.rebalance(doc)
    if not rows:
        return False
    with _figure(doc, "Consumer-group rebalance time vs group size", path) as ax:
        xs = [r.members for r in rows]
        ax.plot(xs, [r.join_ms for r in rows], "o-", label="join -> Stable (median)", color="#4c72b0")
        leave = [(r.members, r.leave_ms) for r in rows if r.leave_ms is not None]
        if leave:
            ax.plot([x for x, _ in leave], [y for _, y in leave], "s-", label="leave -> Stable (median)", color="#dd8452")
        ax.plot(xs, [r.barrier_ms for r in rows], "^--", label="Ray barrier round (baseline)", color="#8c8c8c")
        ax.plot([16], [1000], "x", color="black", ms=10, mew=2, label="target: 16 members <= 1 s")
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [str(x) for x in xs])
        ax.set_yscale("log")
        ax.set_xlabel("group size (members)")
        ax.set_ylabel("ms")
        ax.legend(fontsize=7)
    return True


def spark(doc: dict, path: Path) -> bool:
    """(e) Spark write/read rows/s through kcoord against Ray Data's from_spark/to_spark."""
    rows = figures.spark(doc)
    if not rows:
        return False
    with _figure(doc, "Spark (RayDP) through a kcoord topic vs Ray Data", path, size=(7, 5)) as ax:
        width = 0.38
        for i, r in enumerate(rows):
            ax.bar([i - width / 2], [r.rows_per_s / 1e3], width, color="#4c72b0", label="kcoord" if i == 0 else None)
            ax.bar([i + width / 2], [r.baseline_rows_per_s / 1e3], width, color="#8c8c8c", label="Ray Data baseline" if i == 0 else None)
            if r.ratio is not None:
                ax.annotate(f"{r.ratio:.2f}x", (i - width / 2, r.rows_per_s / 1e3), ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(rows)), [f"{r.case}\nvs {r.baseline}" for r in rows])
        ax.set_ylabel("thousand rows/s (100-byte values)")
        ax.legend(fontsize=8)
    return True


PLOTS: dict[str, tuple[str, Callable[[dict, Path], bool]]] = {
    "throughput": ("throughput.png", throughput),
    "latency": ("latency.png", latency),
    "failover": ("failover.png", failover),
    "rebalance": ("rebalance.png", rebalance),
    "spark": ("spark.png", spark),
}


def draw_all(doc: dict, out_dir: Path) -> dict[str, str]:
    """Draw every plot the document has data for: {plot: file name, or why not}.
    Raises PlotsUnavailable without matplotlib."""
    pyplot()
    out: dict[str, str] = {}
    for name, (file, draw) in PLOTS.items():
        try:
            out[name] = file if draw(doc, out_dir / file) else "skipped: no results"
        except PlotsUnavailable:
            raise
        except Exception as exc:  # one broken plot must not cost the others
            out[name] = f"failed: {exc.__class__.__name__}: {exc}"
    return out
