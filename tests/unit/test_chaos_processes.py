"""The chaos run's process bookkeeping (tests/chaos/processes.py) on real OS processes,
without Ray: a killed slot is replaced by its next incarnation, a stop asks with SIGTERM
and kills what does not stop, and only real failures count as crashes."""

from __future__ import annotations

import subprocess
import sys

from chaos.processes import KILLED, UNSTOPPED, Incarnations, failures, terminate

# A client that exits 0 on SIGTERM (as tests/chaos/clients.py does) once it says it is ready.
POLITE = "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(0)); print('ready', flush=True); time.sleep(60)"
# One that ignores SIGTERM.
DEAF = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"


def started(script: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"  # its handler is installed
    return proc


def test_a_killed_slot_is_replaced_by_its_next_incarnation_and_a_clean_stop_is_no_failure():
    spawned: list[tuple[int, str]] = []

    def spawn(slot: int, name: str) -> subprocess.Popen:
        spawned.append((slot, name))
        return started(POLITE)

    workers = Incarnations("worker", "w", spawn)
    workers.start(2)
    try:
        assert workers.kill(0.99) == "w1-0"
        assert spawned == [(0, "w0-0"), (1, "w1-0"), (1, "w1-1")]
        assert workers.exits == {"worker w1-0": KILLED}
        workers.stop(timeout=20)
    finally:
        for p in workers.processes():
            p.kill()
    assert workers.slots == {} and workers.kill(0.5) is None
    assert workers.exits == {"worker w1-0": KILLED, "worker w0-0": 0, "worker w1-1": 0}
    assert failures(workers.exits) == {}


def test_a_process_that_ignores_the_stop_is_killed_and_counted_as_a_failure():
    deaf, polite = started(DEAF), started(POLITE)
    exits = terminate({"deaf": deaf, "polite": polite}, timeout=1.0)
    assert exits == {"deaf": UNSTOPPED, "polite": 0}
    assert deaf.poll() is not None  # killed, not left behind
    assert failures({**exits, "killed by the nemesis": KILLED, "crashed": 1}) == {"deaf": UNSTOPPED, "crashed": 1}
