"""The nemesis: one seed -> a schedule of faults, and the code that injects them into a
kcoord cluster running on a multi-node Ray cluster on this machine.

:func:`schedule` is pure (no Ray): the same seed and duration always give the same times,
kinds, durations and target *selectors*. Which actor a selector hits depends on the
cluster's state when the fault fires (who leads partition 2 right now), so a run is
reproducible in its plan, not in its interleaving -- as with Jepsen.

Kinds (weights in ``WEIGHTS``):

* ``kill-leader`` / ``kill-follower``: a replica of the data topic or of
  ``__consumer_offsets``, by SIGKILL of its process or ``ray.kill``. Replicas bound to a
  node are not restarted by Ray: the controller recreates them.
* ``kill-controller``, ``kill-coordinator``: the FailoverCoordinator, a group coordinator
  (Ray restarts both).
* ``kill-member``: SIGKILL of a consumer-group member's process; a new incarnation takes
  its place (the group sees the old one only when its session expires).
* ``pause-leader`` / ``pause-follower`` / ``pause-controller`` / ``pause-coordinator``:
  SIGSTOP for longer than the session timeout, then SIGCONT. A paused leader is replaced
  and resumes as a zombie that must be fenced.
* ``kill-txn-coordinator``, ``kill-txn-leader``, ``kill-txn-worker`` (only with the
  transactional workload, ``TXN_WEIGHTS``): a transaction coordinator (Ray restarts it);
  the leader of a partition of the workload's output topic or of ``__transaction_state``;
  SIGKILL of a consume-transform-produce worker's process (it starts again with the same
  transactional id, fencing its zombie).
* ``node-loss``: a worker raylet is removed (``ray.cluster_utils.Cluster.remove_node``,
  not gracefully), taking every actor on it, and its broker's data directory is deleted
  (a lost machine takes its disk along); after ``duration`` seconds a new node is added,
  the controller re-binds the broker there and its replicas catch up from scratch. Only
  a node whose broker is not the last in-sync replica of any partition is removed (kcoord
  promises to survive losing one copy of acknowledged data, not all of them at once);
  nothing else is injected between that check and the removal.
"""

from __future__ import annotations

import heapq
import os
import random
import shutil
import signal
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable

from kcoord.bench.process_tree import running

WEIGHTS = {
    "kill-leader": 5.0,
    "kill-follower": 3.5,
    "kill-controller": 1.5,
    "kill-coordinator": 1.5,
    "kill-member": 1.0,
    "pause-leader": 1.2,
    "pause-follower": 0.6,
    "pause-controller": 0.8,
    "pause-coordinator": 0.4,
}

# The transactional workload's faults (tests/chaos/txn_clients.py), added to WEIGHTS when it runs.
TXN_WEIGHTS = {
    "kill-txn-coordinator": 1.2,
    "kill-txn-leader": 1.2,
    "kill-txn-worker": 0.8,
}


# A node loss that finds no safe victim is planned again this much later, until one node
# loss has landed (at most this many times past the planned end).
NODE_LOSS_RETRY_S = 10.0
NODE_LOSS_RETRIES = 3


@dataclass(frozen=True)
class Fault:
    at: float  # seconds after the nemesis starts
    kind: str
    pick: float  # selects the target among the candidates when the fault fires
    how: str = ""  # kills: "SIGKILL" or "ray.kill"
    duration: float = 0.0  # pauses, node losses: seconds until SIGCONT / a node returns
    offsets: bool = False  # leader/follower faults on __consumer_offsets instead of the data topic


def schedule(
    seed: int,
    seconds: float,
    mean_interval: float = 0.9,
    pause_s: tuple[float, float] = (2.5, 6.0),
    node_loss_every: float = 80.0,
    node_down_s: tuple[float, float] = (8.0, 25.0),
    weights: dict[str, float] | None = None,
    overtime: float = 0.0,
) -> list[Fault]:
    """The faults of a run of ``seconds``, in time order, drawn from ``seed`` alone.

    ``overtime`` (a fraction of ``seconds``) draws a reserve of faults past the end that
    :meth:`Nemesis.run` injects only while the run has fewer kills than it promised (a slow
    machine, where more targets are still restarting when their fault fires)."""
    rng = random.Random(seed)
    weights = weights or WEIGHTS
    kinds = sorted(weights)
    out: list[Fault] = []
    t = rng.uniform(0.5, 2.0)
    while t < seconds * (1.0 + overtime):
        kind = rng.choices(kinds, [weights[k] for k in kinds])[0]
        pick = rng.random()
        how = rng.choice(["SIGKILL", "ray.kill"]) if kind.startswith("kill-") else ""
        duration = round(rng.uniform(*pause_s), 2) if kind.startswith("pause-") else 0.0
        offsets = kind.endswith(("-leader", "-follower")) and rng.random() < 0.25
        out.append(Fault(round(t, 3), kind, pick, how, duration, offsets))
        t += rng.uniform(0.3, 1.7) * mean_interval
    if node_loss_every > 0:
        t = node_loss_every * rng.uniform(0.3, 0.6)
        while t < seconds - node_down_s[1] - 5:
            out.append(Fault(round(t, 3), "node-loss", rng.random(), "", round(rng.uniform(*node_down_s), 2)))
            t += node_loss_every * rng.uniform(0.8, 1.2)
    return sorted(out, key=lambda f: f.at)


class Nemesis:
    """Injects a schedule into a running cluster; every fault is logged with its time."""

    def __init__(
        self,
        cluster: Any,  # kcoord ClusterClient (its own, not shared with the observer)
        ray_cluster: Any,  # ray.cluster_utils.Cluster
        worker_args: dict,
        topic: str,
        data_dir: str,
        history: Any,
        kill_member: Callable[[float], str | None],
        group_coordinators: int,
        log: Callable[[str], None],
        *,
        txn_coordinators: int = 0,
        txn_topic: str | None = None,
        kill_txn_worker: Callable[[float], str | None] | None = None,
    ) -> None:
        self.cluster = cluster
        self.rc = ray_cluster
        self.worker_args = worker_args
        self.topic = topic
        self.data_dir = Path(data_dir)
        self.history = history
        self.kill_member = kill_member
        self.group_coordinators = group_coordinators
        self.log = log
        self.txn_coordinators = txn_coordinators
        self.txn_topic = txn_topic
        self.kill_txn_worker = kill_txn_worker
        # every topic whose copies a node loss must leave in some other in-sync replica
        self.guarded_topics = (topic, "__consumer_offsets") + ((txn_topic, "__transaction_state") if txn_topic else ())
        self._paused: dict[int, str] = {}  # pid -> what
        self._lock = threading.Lock()
        self._timers: list[threading.Timer] = []
        self._node_down = threading.Event()  # a node is out (set) until it has returned
        # Ray's Cluster.add_node must run in the main thread (it installs signal handlers):
        # a node loss sets when the node is due back, the main loop adds it then.
        self._return_due: tuple[float, Fault] | None = None
        self._stop = threading.Event()
        self.t0 = time.time()

    # -- plumbing -------------------------------------------------------------------------
    def _record(self, fault: Fault, ok: bool, **detail: Any) -> None:
        self.history.write("fault", kind=fault.kind, ok=ok, at=fault.at, rel=round(time.time() - self.t0, 2), plan=asdict(fault), **detail)
        status = "ok" if ok else "skipped"
        self.log(f"nemesis +{time.time() - self.t0:6.1f}s {fault.kind:<18} {status:<7} {detail}")

    def _ray(self):
        import ray

        return ray

    def _get(self, ref, timeout: float = 3.0):
        return self._ray().get(ref, timeout=timeout)

    def _replica_target(self, fault: Fault) -> tuple[str, int, int] | None:
        topic = "__consumer_offsets" if fault.offsets else self.topic
        if fault.kind == "kill-txn-leader":  # the output topic, or (offsets) __transaction_state
            topic = "__transaction_state" if fault.offsets else self.txn_topic
        md = self.cluster.topic(topic, refresh=True)
        parts = sorted(md.partitions, key=lambda p: p.partition)
        if not parts:
            return None
        pm = parts[min(len(parts) - 1, int(fault.pick * len(parts)))]
        if pm.leader < 0:
            return None
        if fault.kind.endswith("-leader"):
            return topic, pm.partition, pm.leader
        followers = [b for b in pm.replicas if b != pm.leader]
        if not followers:
            return None
        sub = (fault.pick * len(parts)) % 1.0
        return topic, pm.partition, followers[min(len(followers) - 1, int(sub * len(followers)))]

    def _handle_and_pid(self, fault: Fault) -> tuple[Any, int, dict] | None:
        ray = self._ray()
        from kcoord.protocol import names

        if fault.kind.endswith(("-leader", "-follower")):
            target = self._replica_target(fault)
            if target is None:
                return None
            topic, p, b = target
            handle = self.cluster.replica(topic, p, b, fresh=True)
            info = self._get(handle.describe.remote())
            return handle, info["pid"], {"topic": topic, "partition": p, "broker": b, "epoch": info["leader_epoch"], "role": info["role"]}
        if fault.kind.endswith("-controller"):
            handle = ray.get_actor(names.controller(self.cluster.name), namespace=self.cluster.namespace)
            return handle, self._get(handle.pid.remote()), {}
        if fault.kind.endswith("-txn-coordinator"):
            i = min(self.txn_coordinators - 1, int(fault.pick * self.txn_coordinators))
            handle = ray.get_actor(names.transaction_coordinator(self.cluster.name, i), namespace=self.cluster.namespace)
            return handle, self._get(handle.pid.remote()), {"txn_coordinator": i}
        if fault.kind.endswith("-coordinator"):
            i = min(self.group_coordinators - 1, int(fault.pick * self.group_coordinators))
            handle = ray.get_actor(names.group_coordinator(self.cluster.name, i), namespace=self.cluster.namespace)
            return handle, self._get(handle.pid.remote()), {"coordinator": i}
        raise ValueError(fault.kind)

    # -- faults ---------------------------------------------------------------------------
    def inject(self, fault: Fault) -> bool:
        """Inject one fault; False if it was skipped (its target down, restarting, paused)."""
        try:
            if fault.kind == "node-loss":
                return self._start_node_loss(fault)
            if fault.kind == "kill-member":
                who = self.kill_member(fault.pick)
                self._record(fault, who is not None, member=who)
                return who is not None
            if fault.kind == "kill-txn-worker":
                who = self.kill_txn_worker(fault.pick) if self.kill_txn_worker else None
                self._record(fault, who is not None, worker=who)
                return who is not None
            if fault.kind.startswith("kill-"):
                return self._kill(fault)
            if fault.kind.startswith("pause-"):
                return self._pause(fault)
            raise ValueError(fault.kind)
        except Exception as exc:  # noqa: BLE001 - target down, restarting, paused: skip it
            self._record(fault, False, error=f"{type(exc).__name__}: {exc}"[:200])
            return False
        finally:
            self.cluster.invalidate()

    def _kill(self, fault: Fault) -> bool:
        found = self._handle_and_pid(fault)
        if found is None:
            self._record(fault, False, error="no target")
            return False
        handle, pid, detail = found
        with self._lock:
            paused = pid in self._paused
        if fault.how == "SIGKILL" or paused:  # ray.kill of a stopped process would wait for it
            os.kill(pid, signal.SIGKILL)
            how = "SIGKILL"
        else:
            self._ray().kill(handle, no_restart=False)
            how = "ray.kill"
        self._record(fault, True, pid=pid, how=how, **detail)
        return True

    def _pause(self, fault: Fault) -> bool:
        found = self._handle_and_pid(fault)
        if found is None:
            self._record(fault, False, error="no target")
            return False
        _, pid, detail = found
        with self._lock:
            if pid in self._paused:
                self._record(fault, False, error="already paused", pid=pid)
                return False
            os.kill(pid, signal.SIGSTOP)
            self._paused[pid] = fault.kind
        timer = threading.Timer(fault.duration, self._resume, args=(pid,))
        timer.daemon = True
        timer.start()
        self._timers.append(timer)
        self._record(fault, True, pid=pid, seconds=fault.duration, **detail)
        return True

    def _resume(self, pid: int) -> None:
        with self._lock:
            what = self._paused.pop(pid, None)
        if what is None:
            return
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass  # killed while paused
        self.history.write("resume", pid=pid, what=what, rel=round(time.time() - self.t0, 2))

    # -- node loss ------------------------------------------------------------------------
    def _victims(self) -> dict[str, int]:
        """{worker node id: its broker} for the worker nodes whose loss, disk included, leaves
        every partition with another in-sync replica (so nothing acknowledged exists only on
        the lost disk: kcoord promises to survive losing one copy, not every copy at once).
        Empty while a broker waits for a node."""
        placement = self._get(self.cluster.controller.placement.remote(), 5)
        if placement.get("waiting"):
            return {}
        isrs = [set(pm.isr) for topic in self.guarded_topics for pm in self.cluster.topic(topic, refresh=True).partitions]
        workers = {n.node_id for n in self.rc.worker_nodes}
        out = {}
        for b, v in placement["brokers"].items():
            node, broker = v.get("node"), int(b)
            if node in workers and v.get("alive", True) and all(isr - {broker} for isr in isrs):
                out[node] = broker
        return out

    def _start_node_loss(self, fault: Fault) -> bool:
        """Remove a worker node, in the main thread: nothing else is injected from the last
        check that the node is a safe victim (see :meth:`_victims`) until it is gone."""
        if self._node_down.is_set():
            self._record(fault, False, error="a node is still out")
            return False
        victims = self._victims()
        workers = sorted((n for n in self.rc.worker_nodes if n.node_id in victims), key=lambda n: n.node_id)
        if not workers:
            self._record(fault, False, error="no worker node whose loss every partition survives")
            return False
        node = workers[min(len(workers) - 1, int(fault.pick * len(workers)))]
        broker = victims[node.node_id]
        # the broker's replica processes, to make sure they are gone before its disk goes
        pids = []
        for topic in self.guarded_topics:
            for pm in self.cluster.topic(topic, refresh=True).partitions:
                if broker in pm.replicas:
                    try:
                        pids.append(self._get(self.cluster.replica(topic, pm.partition, broker, fresh=True).describe.remote())["pid"])
                    except Exception:  # noqa: BLE001
                        pass
        if self._victims().get(node.node_id) != broker:  # checked again right before the loss
            self._record(fault, False, error="the node's loss is no longer safe")
            return False
        self._node_down.set()
        self.rc.remove_node(node, allow_graceful=False)
        gone = time.monotonic() + 15
        while any(running(p) for p in pids) and time.monotonic() < gone:
            time.sleep(0.2)
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.data_dir / f"broker-{broker}", ignore_errors=True)
        self._record(fault, True, node=node.node_id[:12], broker=broker, down_s=fault.duration, replica_pids=len(pids))
        with self._lock:
            self._return_due = (time.monotonic() + fault.duration, fault)
        return True

    def _return_node_if_due(self, now: float | None = None) -> None:
        """Main thread only."""
        with self._lock:
            due = self._return_due
            if due is None or (now is not None and due[0] > now):
                return
            self._return_due = None
        try:
            self._add_node(due[1])
        finally:
            self._node_down.clear()

    def _add_node(self, fault: Fault) -> None:
        node = None
        for attempt in range(3):
            try:
                node = self.rc.add_node(**self.worker_args)
                break
            except Exception as exc:  # noqa: BLE001 - a raylet missing Ray's 30 s start window
                self.log(f"nemesis: adding a node failed ({exc!r}), attempt {attempt + 1}")
        if node is None:
            raise RuntimeError("could not add a node back")
        for _ in range(4):
            try:
                self.rc.wait_for_nodes(timeout=60)
                break
            except Exception as exc:  # noqa: BLE001
                self.log(f"nemesis: waiting for the new node: {exc!r}")
        self.history.write("node-return", node=node.node_id[:12], rel=round(time.time() - self.t0, 2))
        self.log(f"nemesis +{time.time() - self.t0:6.1f}s node-return        ok      node={node.node_id[:12]}")

    # -- the run --------------------------------------------------------------------------
    def run(self, faults: list[Fault], seconds: float, min_kills: int = 0) -> int:
        """Inject ``faults`` on their schedule; returns the number of kills that landed.

        A kill whose target is restarting or unreachable (often from the previous fault) is
        tried once more a second later with another target (Jepsen's nemesis likewise picks
        among the nodes it can reach). Faults planned past ``seconds`` (the schedule's
        overtime), or due after ``seconds`` of wall time, are injected only while fewer
        than ``min_kills`` kills have landed. A node loss that finds no node it can take
        safely is planned again ``NODE_LOSS_RETRY_S`` later, until one node loss landed."""
        self.t0 = time.time()
        start = time.monotonic()
        lag = 0.0  # time spent waiting for full ISRs before node losses shifts the rest
        kills = 0
        node_losses = 0
        end = seconds
        plan = [(f.at, i, f) for i, f in enumerate(faults)]
        heapq.heapify(plan)
        order = len(plan)
        while plan:
            _, _, fault = heapq.heappop(plan)
            # The schedule slips when injecting takes long (timeouts, retries): the run
            # still ends ``seconds`` after it began (node-loss waits aside) once enough
            # kills have landed.
            over = fault.at >= seconds or time.monotonic() - start - lag >= seconds
            if over and kills >= min_kills and not (fault.kind == "node-loss" and not node_losses):
                break
            if self._wait_until(start + lag + fault.at):
                break
            end = max(end, fault.at)
            if fault.kind == "node-loss" and not self._node_down.is_set():
                t = time.monotonic()
                self._quiesce(timeout=30.0)
                lag += time.monotonic() - t
            ok = self.inject(fault)
            if not ok and fault.kind.startswith("kill-") and fault.kind not in ("kill-member", "kill-txn-worker"):
                if self._stop.wait(1.0):
                    break
                ok = self.inject(replace(fault, pick=(fault.pick + 0.5) % 1.0))
            if not ok and fault.kind == "node-loss" and not node_losses and fault.at < seconds + NODE_LOSS_RETRY_S * NODE_LOSS_RETRIES:
                # No node could be lost safely (an ISR still catching up): until one node
                # loss has landed, plan this one again a little later.
                heapq.heappush(plan, (fault.at + NODE_LOSS_RETRY_S, order, replace(fault, at=fault.at + NODE_LOSS_RETRY_S)))
                order += 1
            kills += ok and fault.kind.startswith("kill-")
            node_losses += ok and fault.kind == "node-loss"
        self._wait_until(start + lag + end)
        return kills

    def _quiesce(self, timeout: float) -> None:
        """Inject nothing until some worker node can be lost safely (:meth:`_victims`), at
        most ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self._stop.is_set():
            self._return_node_if_due(time.monotonic())
            try:
                if self._victims():
                    return
            except Exception:  # noqa: BLE001 - controller restarting
                pass
            self._stop.wait(0.5)

    def _wait_until(self, deadline: float) -> bool:
        """Sleep until ``deadline``, returning lost nodes when they are due; True if stopped."""
        while True:
            now = time.monotonic()
            self._return_node_if_due(now)
            if now >= deadline:
                return self._stop.is_set()
            if self._stop.wait(min(0.2, deadline - now)):
                return True

    def stop(self) -> None:
        """End every fault: resume paused processes, wait for a lost node to return."""
        self._stop.set()
        for t in self._timers:
            t.cancel()
        with self._lock:
            pids = list(self._paused)
        for pid in pids:
            self._resume(pid)
        self._return_node_if_due()

    def resume_all(self) -> None:
        """Last resort (exceptions, interrupts): SIGCONT everything still paused."""
        with self._lock:
            pids = list(self._paused)
            self._paused.clear()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
