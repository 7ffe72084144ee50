"""``kcoord bench``: run the benchmark suite in ``benchmarks/`` (what ``make bench`` calls).

A thin command: the suite itself (running the scripts, results.json, plots) is
:mod:`kcoord.bench`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ._common import CliError, Env

pass_env = click.make_pass_decorator(Env)


def benchmarks_dir() -> Path:
    """``benchmarks/`` of the source checkout kcoord runs from (an editable install)."""
    return Path(__file__).resolve().parents[2] / "benchmarks"


@click.command("bench")
@click.option("--quick", is_flag=True, help="Small sizes and few repeats: a smoke run of every benchmark (about 2.5 minutes on a quiet 2-core machine, longer when it is busy).")
@click.option("--out", type=click.Path(file_okay=False), default="bench-results", show_default=True, help="Directory for results.json, the per-benchmark JSON, the PNG plots and logs/.")
@click.option("--only", multiple=True, metavar="NAME", help="Run only this benchmark (file stem, repeatable); merged into an existing DIR/results.json.")
@click.option("--timeout", "timeout_s", type=float, default=None, metavar="SECONDS", help="Stop a benchmark that runs longer (default 600 with --quick, else 1800).")
@pass_env
def bench(env: Env, quick: bool, out: str, only: tuple[str, ...], timeout_s: float | None) -> None:
    """Run every benchmark in benchmarks/ and write the performance report's data.

    Each benchmark runs in its own process with its own local Ray instance (started and
    stopped by the benchmark; a running `ray start` cluster is not used) and measures its
    baselines in the same run. The command writes DIR/results.json (every benchmark's
    results, the machine, the git commit, timings), DIR/<benchmark>.json, the plots
    DIR/*.png and the benchmarks' output in DIR/logs/. If a benchmark fails the others
    still run; the command then exits non-zero. PERFORMANCE.md explains the figures;
    `python benchmarks/_report.py --markdown DIR/results.json` renders its tables.

    \b
    Examples:
      kcoord bench --quick
      kcoord bench --out bench-results
      kcoord bench --out bench-results --only latency --only failover
    """
    from ..bench import suite
    from ..bench.markdown import rate

    root = benchmarks_dir()
    if not root.is_dir():
        raise CliError(f"no benchmarks/ directory next to kcoord ({root}); kcoord bench needs a source checkout")
    options = suite.SuiteOptions(out_dir=Path(out), benchmarks_dir=root, quick=quick, only=only, timeout_s=timeout_s, argv=sys.argv[1:])
    try:
        doc = suite.run(options, progress=env.err.print)
    except suite.UnknownBenchmark as exc:
        raise CliError(f"{exc} in {root}") from None
    for o in doc.get("targets", []):
        if o["measured"] is not None:
            shown = rate(o["measured"]) if o["unit"] == "records/s" else f"{o['measured']:.2f}"
            env.err.print(f"target {o['description']}: {shown} {o['unit']} -> {'met' if o['met'] else 'missed'} ({o['margin']})", highlight=False)
    results_file = Path(out) / "results.json"
    failed = doc.get("failures", [])
    if failed:
        first = doc["benchmarks"][failed[0]].get("error")
        raise CliError(f"{len(failed)} benchmark(s) failed: {', '.join(failed)} (first: {first}); details in {results_file} and {Path(out) / 'logs'}/")
    if "plots_error" in doc:
        raise CliError(doc["plots_error"])
    env.err.print(f"results in {results_file}; plots: {', '.join(v for v in doc.get('plots', {}).values() if v.endswith('.png'))}", highlight=False)


COMMANDS = [bench]
