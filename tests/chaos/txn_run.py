"""The transactional workload's part of a chaos run (:mod:`tests.chaos.run`, issue 34):
its topic, its processes (:mod:`tests.chaos.txn_clients`), the nemesis' callback that kills
a worker, and the end of the run: wait until the workers' group has committed the whole
input, stop them, wait until no transaction is left open on the output topic (LSO = HW),
then read the output to its end read_committed and read_uncommitted into
``final-txn.json`` for :mod:`tests.chaos.txn_checker`.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

OUT_TOPIC = "chaos-txn-out"
TXN_GROUP = "chaos-txn-group"


class TxnWorkload:
    def __init__(self, workers: int, spawn_env: dict, repo: Path, cluster_name: str, address: str, namespace: str,
                 in_topic: str, out: Path, session_timeout_ms: int) -> None:
        self.n = workers
        self.env = spawn_env
        self.repo = repo
        self.base = ["--cluster", cluster_name, "--address", address, "--namespace", namespace, "--topic", in_topic,
                     "--out-topic", OUT_TOPIC, "--group", TXN_GROUP, "--out", str(out), "--session-timeout-ms", str(session_timeout_ms)]
        self.out = out
        self.in_topic = in_topic
        self.workers: dict[int, tuple[int, subprocess.Popen]] = {}
        self.reader: subprocess.Popen | None = None
        self.exits: dict[str, int] = {}
        self._lock = threading.Lock()

    @staticmethod
    def create_topic(admin) -> None:
        admin.create_topic(OUT_TOPIC, partitions=3, replication_factor=3, config={"min.insync.replicas": 2})
        admin.wait_for_leaders(OUT_TOPIC)

    def _spawn(self, role: str, name: str, extra: list[str]) -> subprocess.Popen:
        logf = open(self.out / "logs" / f"txn-{role}-{name}.log", "ab")
        return subprocess.Popen([sys.executable, "-m", "tests.chaos.txn_clients", role, *self.base, *extra],
                                cwd=str(self.repo), env=self.env, stdout=logf, stderr=subprocess.STDOUT)

    def _spawn_worker(self, i: int, inc: int) -> None:
        # one transactional id per worker slot: an incarnation fences the one it replaces
        self.workers[i] = (inc, self._spawn("ctp", f"w{i}-{inc}", ["--id", f"w{i}-{inc}", "--txn-id", f"chaos-ctp-{i}"]))

    def start(self) -> None:
        with self._lock:
            for i in range(self.n):
                self._spawn_worker(i, 0)
        self.reader = self._spawn("reader", "r0", ["--id", "r0"])

    def kill_worker(self, pick: float) -> str | None:
        with self._lock:
            if not self.workers:
                return None
            i = sorted(self.workers)[min(len(self.workers) - 1, int(pick * len(self.workers)))]
            inc, proc = self.workers[i]
            proc.kill()
            proc.wait(timeout=30)
            self.exits[f"txn worker w{i}-{inc}"] = -9  # the nemesis' kill
            self._spawn_worker(i, inc + 1)
            return f"w{i}-{inc}"

    def _terminate(self, procs: dict[str, subprocess.Popen], timeout: float) -> None:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for name, p in procs.items():
            try:
                self.exits[name] = p.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                self.exits[name] = -999  # did not stop when asked

    def stop(self, timeout: float = 60) -> None:
        with self._lock:
            procs = {f"txn worker w{i}-{inc}": p for i, (inc, p) in self.workers.items()}
            self.workers = {}
        if self.reader is not None:
            procs["txn reader"] = self.reader
            self.reader = None
        self._terminate(procs, timeout)

    def kill_all(self) -> None:
        for p in [p for _, p in self.workers.values()] + ([self.reader] if self.reader else []):
            if p.poll() is None:
                p.kill()

    def crashed(self) -> dict[str, int]:
        return {k: v for k, v in self.exits.items() if v not in (0, -9)}

    # -- the end of the run -----------------------------------------------------------------
    def finish(self, admin, cluster, input_ends: dict[int, int], wait_for, wait_while_progressing,
               stall_timeout: float, cap: float) -> dict:
        """Drain (for as long as the workers' commits move, up to ``cap`` s), stop, read the
        output both ways; writes ``final-txn.json``, returns its summary (without the records)."""
        from tests.chaos.txn_clients import read_all

        def committed() -> dict[int, int | None]:
            g = admin.describe_group(TXN_GROUP)
            return {r["partition"]: r["committed_offset"] for r in g["offsets"] if r["topic"] == self.in_topic}

        final: dict = {"input_ends": {str(p): o for p, o in input_ends.items()}}
        t0 = time.monotonic()
        final["drained"], final["drain_error"] = wait_while_progressing(
            "the transactional workers to commit the whole input", lambda: all(committed().get(p) == e for p, e in input_ends.items()),
            lambda: sum(o or 0 for o in committed().values()), stall_timeout=stall_timeout, cap=cap)
        final["drain_s"] = round(time.monotonic() - t0, 1)
        self.stop()
        # a killed worker's open transaction is aborted by its timeout (10 s) at the latest
        final["settled"], final["settle_error"] = wait_for(
            "every transaction on the output to end (LSO = HW)", lambda: _settled(cluster), timeout=120)
        try:
            final["committed"] = {str(p): o for p, o in committed().items()}
        except Exception as exc:  # noqa: BLE001
            final["committed"], final["committed_error"] = {}, repr(exc)[:300]
        for level in ("read_committed", "read_uncommitted"):
            try:
                final[level] = read_all(cluster, OUT_TOPIC, level)
            except Exception as exc:  # noqa: BLE001 - a partition left offline: the checker reports it
                final[level], final[f"{level}_error"] = None, repr(exc)[:300]
        final["crashes"] = self.crashed()
        (self.out / "final-txn.json").write_text(json.dumps(final))
        return {k: (len(v) if isinstance(v, list) else v) for k, v in final.items()}


def _settled(cluster) -> bool:
    """LSO = HW on every partition of the output topic: nothing left open."""
    import kcoord

    tps = [kcoord.TopicPartition(OUT_TOPIC, p) for p in cluster.partitions_for(OUT_TOPIC)]
    rc = kcoord.Consumer(cluster=cluster, enable_auto_commit=False, isolation_level="read_committed")
    ru = kcoord.Consumer(cluster=cluster, enable_auto_commit=False)
    try:
        return rc.end_offsets(tps) == ru.end_offsets(tps)
    finally:
        rc.close()
        ru.close()
