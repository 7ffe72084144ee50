"""How long the controller (FailoverCoordinator) takes to answer again after a SIGKILL, next
to the same restart of a bare actor deployed with the controller's Ray options (detached,
async, ``max_concurrency=10_000``, ``num_cpus=0``) in the same cluster and run: the bare
actor's time is Ray's part (failure noticed, actor rescheduled, worker handed the task), the
difference is the controller's own (importing its modules, booting from the store). Not in
``kcoord bench`` (the name starts with ``_``): a probe for the chaos run's longest waits,
which come from ISR changes that wait for a restarted controller.

``--load N`` runs N busy-looping processes during the kills, as the chaos run's load does
(load average 16-20 on 2 cores): a restart that takes ~0.5 s on an idle machine takes
5-10 s there, most of it Ray's.

    python -m benchmarks._controller_restart [--restarts 5] [--load 16] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._report import emit  # noqa: E402


class Bare:
    """The baseline: an actor with nothing to import or boot."""

    async def pid(self) -> int:
        return os.getpid()


def restart_once(handle, deadline_s: float = 120.0) -> float:
    """SIGKILL the actor's process; the seconds until a new process answers ``pid()``."""
    import ray

    old = ray.get(handle.pid.remote(), timeout=deadline_s)
    start = time.monotonic()
    os.kill(old, signal.SIGKILL)
    while True:
        if time.monotonic() - start > deadline_s:
            raise TimeoutError(f"no new process answered within {deadline_s:.0f} s")
        try:
            if ray.get(handle.pid.remote(), timeout=0.1) != old:
                return round(time.monotonic() - start, 3)
        except Exception:  # noqa: BLE001 - dead, restarting or slow: ask again
            pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--restarts", type=int, default=5, help="kills of each actor (default 5)")
    ap.add_argument("--load", type=int, default=0, help="busy-looping processes during the kills (default 0)")
    ap.add_argument("--out", help="also write the JSON here")
    args = ap.parse_args(argv)

    import ray

    from kcoord.cluster.deploy import controller_actor_options
    from kcoord.cluster.local import local_cluster

    with local_cluster(brokers=3, group_coordinators=1) as cluster:
        bare = ray.remote(Bare).options(**controller_actor_options(f"{cluster.name}-bare", cluster.namespace)).remote()
        ray.get(bare.pid.remote())
        busy = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(args.load)]
        try:
            controller_s: list[float] = []
            bare_s: list[float] = []
            # alternate, so that both see the same machine; between kills Ray's worker pool
            # refills (a restart into an empty pool would also time a process start)
            for _ in range(args.restarts):
                time.sleep(1.0)
                bare_s.append(restart_once(bare))
                time.sleep(1.0)
                controller_s.append(restart_once(cluster.controller))
        finally:
            for p in busy:
                p.kill()
            ray.kill(bare, no_restart=True)
    c50, b50 = statistics.median(controller_s), statistics.median(bare_s)
    emit({
        "benchmark": "controller_restart",
        "load_processes": args.load,
        "cores": os.cpu_count(),
        "controller_s": controller_s,
        "bare_actor_s": bare_s,
        "controller_median_s": round(c50, 3),
        "bare_actor_median_s": round(b50, 3),
        "ratio_to_bare": round(c50 / b50, 2) if b50 else None,
        "controller_own_s": round(c50 - b50, 3),
    }, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
