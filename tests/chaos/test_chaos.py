"""The chaos suite on real Ray: one run of :mod:`tests.chaos.run` (a 3-node Ray cluster on
this machine, producer and group-member processes, a nemesis of kills, pauses and node
losses from one seed) followed by the Jepsen-style checker (:mod:`tests.chaos.checker`).

The run lives in its own process because ``ray.cluster_utils.Cluster`` must own that
process's Ray connection (the pytest session may hold a local Ray of its own).

``KCOORD_CHAOS_SECONDS`` sets the nemesis' duration (80 s in ``make test``: about 4
minutes in all, at least 50 kills); ``make chaos DURATION=1800`` is the long run.
``KCOORD_CHAOS_SEED`` replays a schedule. Histories are kept under pytest's tmp_path
(the summary names the directory); ``python -m tests.chaos.checker DIR`` re-checks one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from chaos.ray_nodes import EXIT_RAY_STARTUP

pytestmark = [pytest.mark.chaos, pytest.mark.ray, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
DURATION = float(os.environ.get("KCOORD_CHAOS_SECONDS", "80"))


def _run(out: Path) -> tuple[int, str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.chaos.run", "--seconds", str(DURATION), "--out", str(out)]
        # the undisturbed catch-up baseline only means something next to a long run's topic
        + (["--no-baseline"] if DURATION < 600 else []),
        cwd=str(REPO),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stdout: list[str] = []
    stderr: list[str] = []

    def relay_stderr() -> None:  # progress and every fault, as it happens (visible with -s)
        for line in proc.stderr:
            stderr.append(line)
            sys.stderr.write(line)

    t = threading.Thread(target=relay_stderr, daemon=True)
    t.start()
    try:
        for line in proc.stdout:
            stdout.append(line)
            sys.stdout.write(line)
        code = proc.wait(timeout=DURATION + 1500)
    finally:
        if proc.poll() is None:
            proc.kill()
    t.join(timeout=10)
    return code, "".join(stdout), "".join(stderr)


def test_chaos_run_checked_by_the_history_checker(tmp_path):
    for attempt in range(2):
        code, stdout, stderr = _run(tmp_path / f"history-{attempt}")
        if code != EXIT_RAY_STARTUP:
            break
    summaries = [json.loads(line) for line in stdout.splitlines() if line.startswith('{"ok"')]
    # without a summary the run itself failed: its traceback is at the end of stderr
    assert summaries, f"the chaos run printed no summary (exit {code}):\n{stdout[-3000:]}\n--- stderr ---\n{stderr[-6000:]}"
    s = summaries[-1]
    print(
        f"\nchaos seed={s['seed']} nemesis={s['seconds']:.0f}s wall={s['wall_s']}s kills={s['kills']} pauses={s['pauses']} "
        f"node_losses={s['node_losses']} acked={s['acked']} lost={s['lost']} duplicated={s['duplicated']} "
        f"reordered={s['reordered']} stale_reads={s['stale_reads']} producer_max_wait={s['producer_max_wait_s']}s "
        f"consumer_max_wait={s['consumer_max_wait_s']}s (raw {s.get('producer_max_wait_raw_s')}s/{s.get('consumer_max_wait_raw_s')}s) "
        f"catchup_ratio={s['catchup_ratio']} faults={s['faults']}"
    )
    if s.get("txn"):
        print(f"chaos transactional workload: {json.dumps(s['txn'])}")
    assert not s["violations"], f"violations {s['violations']} (seed {s['seed']}); histories in {s['history']}"
    assert s["kills"] >= s["min_kills"], f"only {s['kills']} kills (at least {s['min_kills']} wanted): {s['faults']}"
    assert s["node_losses"] >= (1 if DURATION >= 120 else 0), f"no node loss took place: {s['faults']}"
    assert code == 0 and s["ok"], s
