"""``kcoord bench``: run the scripts in ``benchmarks/`` (what ``make bench`` calls).

A stub owned by the CLI: it only finds and runs the benchmark scripts, each of which prints
JSON and writes it to ``--out``. The report (tables, plots, the comparison against the
baselines) belongs to the benchmarks, not to this command.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click

from ._common import CliError, Env

pass_env = click.make_pass_decorator(Env)


def benchmarks_dir() -> Path:
    """``benchmarks/`` of the source checkout kcoord runs from (an editable install)."""
    return Path(__file__).resolve().parents[2] / "benchmarks"


@click.command("bench")
@click.option("--quick", is_flag=True, help="Small sizes: a smoke run of every benchmark.")
@click.option("--out", type=click.Path(file_okay=False), default="bench-results", show_default=True, help="Directory for the JSON results.")
@click.option("--only", multiple=True, metavar="NAME", help="Run only this benchmark (file stem, repeatable).")
@pass_env
def bench(env: Env, quick: bool, out: str, only: tuple[str, ...]) -> None:
    """Run the benchmarks in benchmarks/ and collect their JSON in --out.

    Each benchmark starts its own local Ray instance. The report itself comes from the
    benchmark scripts (see benchmarks/).

    \b
    Examples:
      kcoord bench --quick
      kcoord bench --out bench-results --only replication
    """
    root = benchmarks_dir()
    scripts = sorted(p for p in root.glob("*.py") if not p.name.startswith("_"))
    if only:
        wanted = set(only)
        unknown = wanted - {p.stem for p in scripts}
        if unknown:
            raise CliError(f"no benchmark named {sorted(unknown)[0]!r} in {root} (have: {', '.join(p.stem for p in scripts)})")
        scripts = [p for p in scripts if p.stem in wanted]
    if not scripts:
        raise CliError(f"no benchmark scripts found in {root} (kcoord bench needs a source checkout)")
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    failed = []
    for script in scripts:
        target = out_dir / f"{script.stem}.json"
        cmd = [sys.executable, str(script), "--out", str(target)] + (["--quick"] if quick else [])
        env.err.print(f"[bold]bench[/] {script.stem}: {' '.join(cmd[1:])}")
        if subprocess.run(cmd, check=False).returncode != 0:
            failed.append(script.stem)
    if failed:
        raise CliError(f"benchmarks failed: {', '.join(failed)}")
    env.err.print(f"results in {out_dir}/ (one JSON per benchmark)")


COMMANDS = [bench]
