"""The transactional workload's part of a chaos run (:mod:`tests.chaos.run`, issue 34):
its topic, its processes (:mod:`tests.chaos.txn_clients`), the nemesis' callback that kills
a worker, and the end of the run: wait until the workers' group has committed the whole
input, stop them, wait until no transaction is left open on the output topic (LSO = HW),
then read the output to its end read_committed and read_uncommitted into
``final-txn.json`` for :mod:`tests.chaos.txn_checker`.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from tests.chaos.processes import Incarnations, failures, spawn, terminate
from tests.chaos.waits import wait_for, wait_while_progressing

OUT_TOPIC = "chaos-txn-out"
TXN_GROUP = "chaos-txn-group"


class TxnWorkload:
    """The consume-transform-produce workers (killed and replaced by the nemesis, one
    transactional id per slot) and a read_committed reader, each in its own process."""

    def __init__(self, workers: int, spawn_env: dict, cluster_name: str, address: str, namespace: str,
                 in_topic: str, out: Path, session_timeout_ms: int) -> None:
        self.n = workers
        self.env = spawn_env
        self.base = ["--cluster", cluster_name, "--address", address, "--namespace", namespace, "--topic", in_topic,
                     "--out-topic", OUT_TOPIC, "--group", TXN_GROUP, "--out", str(out), "--session-timeout-ms", str(session_timeout_ms)]
        self.out = out
        self.in_topic = in_topic
        # one transactional id per worker slot: an incarnation fences the one it replaces
        self.workers = Incarnations("txn worker", "w", lambda i, name: self._spawn("ctp", name, ["--id", name, "--txn-id", f"chaos-ctp-{i}"]))
        self.reader: subprocess.Popen | None = None
        self.exits: dict[str, int] = {}

    @staticmethod
    def create_topic(admin) -> None:
        admin.create_topic(OUT_TOPIC, partitions=3, replication_factor=3, config={"min.insync.replicas": 2})
        admin.wait_for_leaders(OUT_TOPIC)

    def _spawn(self, role: str, name: str, extra: list[str]) -> subprocess.Popen:
        return spawn("tests.chaos.txn_clients", [role, *self.base, *extra], self.env, self.out / "logs" / f"txn-{role}-{name}.log")

    def start(self) -> None:
        self.workers.start(self.n)
        self.reader = self._spawn("reader", "r0", ["--id", "r0"])

    def kill_worker(self, pick: float) -> str | None:
        return self.workers.kill(pick)

    def stop(self, timeout: float = 60) -> None:
        procs = self.workers.take()
        if self.reader is not None:
            procs["txn reader"] = self.reader
            self.reader = None
        self.exits.update(terminate(procs, timeout))

    def kill_all(self) -> None:
        for p in self.workers.processes() + ([self.reader] if self.reader else []):
            if p.poll() is None:
                p.kill()

    def crashed(self) -> dict[str, int]:
        return failures({**self.exits, **self.workers.exits})

    # -- the end of the run -----------------------------------------------------------------
    def finish(self, admin, cluster, input_ends: dict[int, int], stall_timeout: float, cap: float) -> dict:
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
