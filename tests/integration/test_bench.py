"""``kcoord bench --quick`` end to end, as a user runs it: the benchmark scripts run (each in
its own process, a Ray one with its own local Ray), results.json holds the machine, the
commit, every benchmark's results and the targets they measure, and the plots are PNG files.

The suite proves the command works, not every benchmark: it runs one of each kind through
``--only``, as a user picks: ``failover`` (its own local Ray, a plot and two targets) and
``log_append`` (no Ray, no plot), about 25 s on a quiet 2-core machine. ``make bench`` (and
``kcoord bench --quick``) run all nineteen benchmarks, every plot and every target; the
plots and targets of every benchmark layout are checked without running them by
tests/unit/test_bench_report.py. Running the eleven of them that need no second heavy system
took 150-190 s of the suite's 35-minute budget on a 2-core machine, which is why not here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# One benchmark of each kind: a Ray one that a plot and targets read, and one without Ray.
IN_THE_SUITE = {"failover": "failover.png", "log_append": None}
FAILOVER_TARGETS = {"failover_p50_ms", "failover_p99_ms"}
# A busy machine slows it several times: KCOORD_BENCH_QUICK_LIMIT_S raises the bound there.
WALL_LIMIT_S = float(os.environ.get("KCOORD_BENCH_QUICK_LIMIT_S", "150"))


def test_kcoord_bench_quick_writes_results_json_and_plots(tmp_path):
    out = tmp_path / "bench"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    start = time.monotonic()
    scripts = {p.stem for p in (REPO / "benchmarks").glob("*.py") if not p.name.startswith("_")}
    assert set(IN_THE_SUITE) <= scripts and len(scripts) >= 19, scripts
    only = [arg for name in sorted(IN_THE_SUITE) for arg in ("--only", name)]
    proc = subprocess.run(
        [sys.executable, "-m", "kcoord.cli", "bench", "--quick", "--out", str(out), *only],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=900,
    )
    took = time.monotonic() - start
    print(f"kcoord bench --quick took {took:.0f} s\n{proc.stderr}")
    assert proc.returncode == 0, proc.stderr[-4000:]

    doc = json.loads((out / "results.json").read_text())
    m = doc["machine"]
    assert m["cores"] >= 1 and m["memory_bytes"] > 0 and m["cpu_model"] and m["os"] and m["python"]
    assert all(m["packages"][p] for p in ("ray", "pyspark", "raydp", "msgpack"))
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert m["git"]["commit"] == head and isinstance(m["git"]["dirty"], bool)
    assert doc["suite"]["quick"] is True and doc["suite"]["seconds"] > 0 and doc["suite"]["started_at"]

    assert set(doc["benchmarks"]) == set(IN_THE_SUITE)
    assert doc["failures"] == [], {n: doc["benchmarks"][n]["error"] for n in doc["failures"]}
    for name, entry in doc["benchmarks"].items():
        assert entry["status"] == "ok" and entry["seconds"] > 0, name
        assert isinstance(entry["result"], dict) and entry["result"], name
        assert json.loads((out / f"{name}.json").read_text()) == entry["result"], name
    # the targets the failover run measures have figures; the others say they were not measured
    measured = {t["key"] for t in doc["targets"] if t["measured"] is not None}
    assert measured == FAILOVER_TARGETS, measured
    assert all(t["met"] is None and t["margin"] == "not measured" for t in doc["targets"] if t["key"] not in FAILOVER_TARGETS)
    assert "target failover p50" in proc.stderr

    plots = {file for file in IN_THE_SUITE.values() if file}
    for file in plots:
        data = (out / file).read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 1000, file
    assert {v for v in doc["plots"].values() if v.endswith(".png")} == plots
    assert {k for k, v in doc["plots"].items() if v == "skipped: no results"} == {"throughput", "latency", "rebalance", "spark"}  # their benchmarks did not run

    assert took < WALL_LIMIT_S, f"kcoord bench --quick took {took:.0f} s (limit {WALL_LIMIT_S} s)"
