"""Run one benchmark script in its own process and turn whatever happens into a
:class:`~kcoord.bench.results.BenchmarkRun`: a crash, a timeout or missing JSON is recorded
as a failure, never raised, so the other benchmarks still run.

Each script starts (and stops) its own local Ray. It runs in a new session (process group)
so that a timeout can stop it and everything it started, without touching any other Ray
instance on the machine. Its stdout and stderr go to ``logs/<name>.out|.err`` next to the
results.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .results import FAILED, OK, BenchmarkRun, utc_now


@dataclass
class RunOptions:
    out_dir: Path
    quick: bool
    timeout_s: float
    repo: Path  # the checkout the scripts import kcoord from (PYTHONPATH for Ray's workers)
    commit: str | None = None


def discover(benchmarks_dir: Path) -> list[Path]:
    """The benchmark scripts: ``*.py`` not starting with ``_`` (helpers and tools do)."""
    return sorted(p for p in benchmarks_dir.glob("*.py") if not p.name.startswith("_"))


def script_env(repo: Path) -> dict[str, str]:
    """The environment of a benchmark: the checkout first on PYTHONPATH, so the script and
    every Ray worker it starts import the same kcoord (not another installed copy)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(repo), env.get("PYTHONPATH", "")) if p)
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    return env


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def run_script(script: Path, options: RunOptions) -> BenchmarkRun:
    name = script.stem
    logs = options.out_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    json_file = options.out_dir / f"{name}.json"
    json_file.unlink(missing_ok=True)
    cmd = [sys.executable, str(script), "--out", str(json_file)] + (["--quick"] if options.quick else [])
    started_at = utc_now()
    start = time.perf_counter()
    out_path, err_path = logs / f"{name}.out", logs / f"{name}.err"
    with open(out_path, "w") as out, open(err_path, "w") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=script_env(options.repo), cwd=str(options.repo), start_new_session=True)
        try:
            returncode: int | None = proc.wait(timeout=options.timeout_s)
            error = None
        except subprocess.TimeoutExpired:
            stop_group(proc)
            returncode = None
            error = f"timed out after {options.timeout_s:.0f} s"
    seconds = round(time.perf_counter() - start, 1)
    run = BenchmarkRun(name=name, status=FAILED, started_at=started_at, seconds=seconds, returncode=returncode, commit=options.commit)
    if error is None and returncode != 0:
        why = last_line(err_path.read_text(errors="replace")) or "no output on stderr"
        error = f"exit code {returncode}: {why[:300]}"
    if error is None:
        try:
            run.result = json.loads(json_file.read_text())
            run.json_file = json_file.name
            run.status = OK
        except (OSError, ValueError) as exc:
            error = f"wrote no JSON to {json_file.name} ({exc.__class__.__name__})"
    run.error = error
    return run


def stop_group(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGTERM, then SIGKILL, the benchmark's own process group (its Ray goes with it)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            continue
