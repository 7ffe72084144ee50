"""The client processes of a chaos run (:mod:`tests.chaos.clients`: producers, group
members, readers), and what the run and the transactional workload share to start, kill,
replace and stop processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from tests.chaos.settings import GROUP, NAMESPACE, RAY_ENV, REPO, TOPIC

#: Exit status recorded for a process the nemesis killed (not a client failure).
KILLED = -9
#: Exit status recorded for a process that did not stop when asked.
UNSTOPPED = -999


def client_env() -> dict[str, str]:
    """The environment of a client process: this repository first on PYTHONPATH, kcoord's Ray settings."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.update(RAY_ENV)
    return env


def spawn(module: str, args: list[str], env: dict[str, str], log_file: Path) -> subprocess.Popen:
    """``python -m module args`` from the repository, its output appended to ``log_file``."""
    logf = open(log_file, "ab")
    return subprocess.Popen([sys.executable, "-m", module, *args], cwd=str(REPO), env=env, stdout=logf, stderr=subprocess.STDOUT)


def terminate(procs: dict[str, subprocess.Popen], timeout: float) -> dict[str, int]:
    """SIGTERM every process, wait for all within ``timeout`` s; a process still running
    then is killed and recorded as :data:`UNSTOPPED`. Returns each one's exit status."""
    for p in procs.values():
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    out = {}
    deadline = time.monotonic() + timeout
    for name, p in procs.items():
        try:
            out[name] = p.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            out[name] = UNSTOPPED
    return out


def failures(exits: dict[str, int]) -> dict[str, int]:
    """The processes that failed: neither a clean exit nor the nemesis' kill."""
    return {k: v for k, v in exits.items() if v not in (0, KILLED)}


class Incarnations:
    """Numbered process slots whose process the nemesis kills and replaces with the slot's
    next incarnation, named ``{letter}{slot}-{incarnation}``; ``spawn(slot, name)`` starts
    one. ``exits`` keys each ended process as ``"{kind} {name}"``."""

    def __init__(self, kind: str, letter: str, spawn: Callable[[int, str], subprocess.Popen]) -> None:
        self.kind = kind
        self.letter = letter
        self._spawn = spawn
        self.slots: dict[int, tuple[int, subprocess.Popen]] = {}
        self.exits: dict[str, int] = {}
        self._lock = threading.Lock()

    def _start(self, slot: int, incarnation: int) -> None:
        self.slots[slot] = (incarnation, self._spawn(slot, f"{self.letter}{slot}-{incarnation}"))

    def start(self, n: int) -> None:
        with self._lock:
            for slot in range(n):
                self._start(slot, 0)

    def kill(self, pick: float) -> str | None:
        """Kill the slot ``pick`` (in [0, 1)) falls on and start its next incarnation;
        returns the killed process's name (None: no slot)."""
        with self._lock:
            if not self.slots:
                return None
            slot = sorted(self.slots)[min(len(self.slots) - 1, int(pick * len(self.slots)))]
            incarnation, proc = self.slots[slot]
            proc.kill()
            proc.wait(timeout=30)
            name = f"{self.letter}{slot}-{incarnation}"
            self.exits[f"{self.kind} {name}"] = KILLED
            self._start(slot, incarnation + 1)
            return name

    def take(self) -> dict[str, subprocess.Popen]:
        """Every running slot's process, by ``"{kind} {name}"``; the slots are emptied."""
        with self._lock:
            procs = {f"{self.kind} {self.letter}{slot}-{inc}": p for slot, (inc, p) in self.slots.items()}
            self.slots = {}
        return procs

    def stop(self, timeout: float) -> None:
        self.exits.update(terminate(self.take(), timeout))

    def processes(self) -> list[subprocess.Popen]:
        return [p for _, p in self.slots.values()]


class Clients:
    """The run's producer and group-member processes; members are killed and replaced."""

    def __init__(self, args, address: str, cluster_name: str, out: Path) -> None:
        self.args = args
        self.address = address
        self.cluster_name = cluster_name
        self.out = out
        (out / "logs").mkdir(parents=True, exist_ok=True)
        self.env = client_env()
        self.producers: dict[str, subprocess.Popen] = {}
        self.members = Incarnations("member", "c", self._spawn_member)
        self.exits: dict[str, int] = {}

    def _spawn(self, role: str, name: str, extra: list[str]) -> subprocess.Popen:
        args = [role, "--cluster", self.cluster_name, "--address", self.address, "--namespace", NAMESPACE, "--topic", TOPIC, "--out", str(self.out), *extra]
        return spawn("tests.chaos.clients", args, self.env, self.out / "logs" / f"{role}-{name}.log")

    def _spawn_member(self, _slot: int, name: str) -> subprocess.Popen:
        return self._spawn("member", name, ["--id", name, "--group", GROUP, "--session-timeout-ms", str(self.args.member_session_ms)])

    def start_members(self) -> None:
        self.members.start(self.args.members)

    def start_producers(self) -> None:
        for i in range(self.args.producers):
            name = f"p{i}"
            self.producers[name] = self._spawn("producer", name, ["--id", name, "--rate", str(self.args.rate / self.args.producers)])

    def kill_member(self, pick: float) -> str | None:
        return self.members.kill(pick)

    def stop_producers(self, timeout: float) -> None:
        self.exits.update({f"producer {k}": v for k, v in terminate(self.producers, timeout).items()})

    def stop_members(self, timeout: float) -> None:
        self.members.stop(timeout)

    def kill_all(self) -> None:
        for p in list(self.producers.values()) + self.members.processes():
            if p.poll() is None:
                p.kill()

    def crashed(self) -> dict[str, int]:
        return failures({**self.exits, **self.members.exits})


def run_reader(clients: Clients, topic: str, out_file: str, timeout: float, repeat: int = 1) -> dict:
    """Read ``topic`` to its end in a reader process (``repeat`` times); its JSON summary,
    with ``ok`` for its exit status."""
    cmd = [sys.executable, "-m", "tests.chaos.clients", "reader", "--cluster", clients.cluster_name, "--address", clients.address,
           "--namespace", NAMESPACE, "--topic", topic, "--out", out_file, "--timeout", str(timeout), "--repeat", str(repeat)]
    proc = subprocess.run(cmd, cwd=str(REPO), env=clients.env, capture_output=True, text=True, timeout=timeout * repeat + 120)
    lines = [line for line in proc.stdout.strip().splitlines() if line.startswith("{")]
    if not lines:
        return {"ok": False, "error": proc.stderr[-2000:]}
    result = json.loads(lines[-1])
    result["ok"] = proc.returncode == 0
    return result
