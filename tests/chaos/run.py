"""One chaos run on real Ray: a multi-node Ray cluster on this machine, kcoord on it,
clients in their own processes, a nemesis from one seed, then the checker.

    python -m tests.chaos.run --seconds 180 [--seed N] [--out HISTORY_DIR]

1. ``ray.cluster_utils.Cluster``: a head and two worker raylets (separate node ids), 3
   brokers bound one per node, so the replicas of every partition are on three nodes. The
   controller sits on the head, which the nemesis never removes.
2. Topic ``chaos`` (3 partitions, RF 3, min.insync.replicas 2) and a consumer group over
   it.
3. Producer and group-member processes (:mod:`tests.chaos.clients`) append their histories
   while the nemesis (:mod:`tests.chaos.nemesis`) injects its schedule and an observer
   thread records every replica's view of itself and the group's state.
4. After ``--seconds`` the faults end (later if fewer than ``--min-kills`` kills have
   landed: the schedule holds a reserve of 30% more); the producers stop; the run waits for the cluster
   to heal (every ISR full, every replica caught up) and the group to commit everything;
   it reads every replica's log (replicas must agree byte for byte), reads the topic
   again with a fresh consumer (the catch-up rate after the run) and writes ``final.json``
   and ``final-log.jsonl``. The undisturbed rate it is compared with is measured then too,
   on a topic ``calm`` created on the healed cluster and written with as many records in
   batches of the same size (a reader's cost depends on the batch size as well as the
   record count); each topic is read ``READS`` times and the medians compared.
5. The checker (:mod:`tests.chaos.checker`) runs over the directory. The last line printed
   is a JSON summary; the exit status is 0 only if the checker found nothing and the
   nemesis managed ``--min-kills`` kills.

Every fault is printed with its time relative to the nemesis' start and kept in
``nemesis.jsonl``; client logs are in ``logs/``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from kcoord.cluster.local import LOCAL_RAY_ENV  # noqa: E402
from tests.chaos import checker  # noqa: E402
from tests.chaos.history import History  # noqa: E402
from tests.chaos.nemesis import TXN_WEIGHTS, WEIGHTS, Nemesis, schedule  # noqa: E402
from tests.chaos.txn_run import OUT_TOPIC, TxnWorkload  # noqa: E402

NAMESPACE = "kcoord"
TOPIC = "chaos"
CALM = "calm"
GROUP = "chaos-group"
OFFSETS = "__consumer_offsets"
PARTITIONS = 3
MIN_ISR = 2
EXIT_RAY_STARTUP = 75
# faults drawn past --seconds, injected only while fewer than --min-kills kills have landed
# (a slower machine skips more kills whose targets are still restarting)
OVERTIME = 0.3
READS = 3  # catch-up reads of each topic; the median counts

# kcoord's own Ray settings for many small actors on a small machine, without usage stats.
RAY_ENV = {**LOCAL_RAY_ENV, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled")}
CONTROLLER_CONFIG = {
    "heartbeat_interval_ms": 100,
    "follower_heartbeat_interval_ms": 300,
    "session_timeout_ms": 2000,
    "ensure_replica_interval_ms": 300,
    "leader_rebalance_interval_ms": 3000,
    "restart_stuck_ms": 8000,
}
GROUP_CONFIG = {"group.min.session.timeout.ms": 500, "group.initial.rebalance.delay.ms": 0}
HEAD_ARGS = {
    "num_cpus": 1,
    "include_dashboard": False,
    # Notice a removed node within ~10 s, yet not declare a merely slow raylet on a
    # saturated 2-core machine dead (as tests/integration/multinode_scenario.py).
    "_system_config": {
        "health_check_period_ms": 1000,
        "health_check_timeout_ms": 2000,
        "health_check_failure_threshold": 8,
        "health_check_initial_delay_ms": 0,
    },
}
WORKER_ARGS = {"num_cpus": 1}

T0 = time.monotonic()


def log(msg: str) -> None:
    print(f"[chaos {time.monotonic() - T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------
# client processes
# ----------------------------------------------------------------------------------------
class Clients:
    """Producer and member processes; members can be killed and replaced."""

    def __init__(self, args, address: str, cluster_name: str, out: Path) -> None:
        self.args = args
        self.address = address
        self.cluster_name = cluster_name
        self.out = out
        (out / "logs").mkdir(parents=True, exist_ok=True)
        self.env = dict(os.environ)
        self.env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in self.env.get("PYTHONPATH", "").split(os.pathsep) if p])
        self.env.update(RAY_ENV)
        self.producers: dict[str, subprocess.Popen] = {}
        self.members: dict[int, tuple[int, subprocess.Popen]] = {}
        self.exits: dict[str, int] = {}
        self._lock = threading.Lock()

    def _spawn(self, role: str, name: str, extra: list[str]) -> subprocess.Popen:
        cmd = [sys.executable, "-m", "tests.chaos.clients", role, "--cluster", self.cluster_name, "--address", self.address,
               "--namespace", NAMESPACE, "--topic", TOPIC, "--out", str(self.out), *extra]
        logf = open(self.out / "logs" / f"{role}-{name}.log", "ab")
        return subprocess.Popen(cmd, cwd=str(REPO), env=self.env, stdout=logf, stderr=subprocess.STDOUT)

    def start_members(self) -> None:
        for i in range(self.args.members):
            self._spawn_member(i, 0)

    def _spawn_member(self, i: int, inc: int) -> None:
        proc = self._spawn("member", f"c{i}-{inc}", ["--id", f"c{i}-{inc}", "--group", GROUP,
                                                     "--session-timeout-ms", str(self.args.member_session_ms)])
        self.members[i] = (inc, proc)

    def start_producers(self) -> None:
        for i in range(self.args.producers):
            name = f"p{i}"
            self.producers[name] = self._spawn("producer", name, ["--id", name, "--rate", str(self.args.rate / self.args.producers)])

    def kill_member(self, pick: float) -> str | None:
        with self._lock:
            if not self.members:
                return None
            i = sorted(self.members)[min(len(self.members) - 1, int(pick * len(self.members)))]
            inc, proc = self.members[i]
            proc.kill()
            proc.wait(timeout=30)
            self.exits[f"member c{i}-{inc}"] = -9  # killed by the nemesis: not a client failure
            self._spawn_member(i, inc + 1)
            return f"c{i}-{inc}"

    @staticmethod
    def _terminate(procs: dict[str, subprocess.Popen], timeout: float) -> dict[str, int]:
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
                out[name] = p.wait()
                out[name] = -999  # did not stop when asked
        return out

    def stop_producers(self, timeout: float) -> None:
        self.exits.update({f"producer {k}": v for k, v in self._terminate(self.producers, timeout).items()})

    def stop_members(self, timeout: float) -> None:
        with self._lock:
            procs = {f"member c{i}-{inc}": p for i, (inc, p) in self.members.items()}
            self.members = {}
        self.exits.update(self._terminate(procs, timeout))

    def kill_all(self) -> None:
        for p in list(self.producers.values()) + [p for _, p in self.members.values()]:
            if p.poll() is None:
                p.kill()

    def crashed(self) -> dict[str, int]:
        return {k: v for k, v in self.exits.items() if v not in (0, -9)}


def run_reader(clients: Clients, topic: str, out_file: str, timeout: float, repeat: int = 1) -> dict:
    cmd = [sys.executable, "-m", "tests.chaos.clients", "reader", "--cluster", clients.cluster_name, "--address", clients.address,
           "--namespace", NAMESPACE, "--topic", topic, "--out", out_file, "--timeout", str(timeout), "--repeat", str(repeat)]
    proc = subprocess.run(cmd, cwd=str(REPO), env=clients.env, capture_output=True, text=True, timeout=timeout * repeat + 120)
    lines = [line for line in proc.stdout.strip().splitlines() if line.startswith("{")]
    if not lines:
        return {"ok": False, "error": proc.stderr[-2000:]}
    result = json.loads(lines[-1])
    result["ok"] = proc.returncode == 0
    return result


# ----------------------------------------------------------------------------------------
# the observer
# ----------------------------------------------------------------------------------------
class Observer(threading.Thread):
    """Samples every replica of the data topic and __consumer_offsets (as each describes
    itself) twice a second and the group once a second; the checker uses the samples for
    invariants 3, 4 and 6 and to know when a partition had a live leader."""

    def __init__(self, cluster, admin, history: History, coordinators: int = 2) -> None:
        super().__init__(daemon=True)
        self.cluster = cluster
        self.admin = admin
        self.history = history
        self.stop_event = threading.Event()
        self.samples = 0
        from kcoord.group.placement import coordinator_for

        self.coordinator = coordinator_for(GROUP, coordinators)  # the group's coordinator
        self._coordinator_handle = None

    def _ask_coordinator(self):
        """describe() of the group's coordinator (None if its actor cannot be found)."""
        import ray

        from kcoord.protocol import names

        try:
            if self._coordinator_handle is None:
                self._coordinator_handle = ray.get_actor(names.group_coordinator(self.cluster.name, self.coordinator), namespace=NAMESPACE)
            return self._coordinator_handle.describe.remote()
        except Exception:  # noqa: BLE001 - restarting, or its node is gone
            self._coordinator_handle = None
            return None

    def run(self) -> None:
        import ray

        group_thread = threading.Thread(target=self._watch_group, daemon=True)
        group_thread.start()
        while not self.stop_event.wait(0.3):
            # both topics at once; a replica that does not answer within a second is not
            # serving (paused, dead, restarting) and is left out of the sample
            t = time.time()
            sent = []
            for topic in (TOPIC, OFFSETS):
                try:
                    md = self.cluster.topic(topic, refresh=True)
                except Exception:  # noqa: BLE001 - controller down or paused: the cached view
                    md = self.cluster.cached_topic(topic)
                    if md is None:
                        continue
                refs = {}
                for pm in md.partitions:
                    for b in pm.replicas:
                        try:
                            refs[(pm.partition, b)] = self.cluster.replica(topic, pm.partition, b, fresh=True).describe.remote()
                        except Exception:  # noqa: BLE001
                            pass
                sent.append((topic, md, refs))
            coordinator_ref = self._ask_coordinator()
            all_refs = [r for _, _, refs in sent for r in refs.values()] + ([coordinator_ref] if coordinator_ref is not None else [])
            ready, _ = ray.wait(all_refs, num_returns=len(all_refs), timeout=1.0)
            ready = set(ready)
            self._coordinator_sample(t, coordinator_ref if coordinator_ref in ready else None)
            for topic, md, refs in sent:
                for pm in md.partitions:
                    reps, live = [], False
                    for b in pm.replicas:
                        ref = refs.get((pm.partition, b))
                        if ref is None or ref not in ready:
                            continue
                        try:
                            info = ray.get(ref, timeout=0)
                        except Exception:  # noqa: BLE001
                            continue
                        reps.append([b, info["incarnation"], info["role"], info["leader_epoch"], info["high_watermark"], info["log_end_offset"]])
                        live = live or (info["role"] == "leader" and b == pm.leader and info["leader_epoch"] == pm.leader_epoch)
                    self.history.write("replicas", t=t, topic=topic, partition=pm.partition, leader=pm.leader, epoch=pm.leader_epoch,
                                       isr=list(pm.isr), replicas=reps, live_leader=live)
            self.samples += 1

    def _coordinator_sample(self, t: float, ref) -> None:
        """The group's coordinator: live if it answered within the second and has loaded
        its partition (it serves the group only then); with its group's state."""
        import ray

        info = None
        if ref is not None:
            try:
                info = ray.get(ref, timeout=0)
            except Exception:  # noqa: BLE001
                info = None
        if info is None:
            self.history.write("coordinator", t=t, index=self.coordinator, live=False)
            return
        g = info.get("groups", {}).get(GROUP) or {}
        self.history.write("coordinator", t=t, index=self.coordinator, live=bool(info.get("loaded")), incarnation=info.get("incarnation"),
                           pid=info.get("pid"), load=info.get("load"), loading=info.get("loading") or None, state=g.get("state"), gen=g.get("generation"),
                           members=len(g.get("members", [])))

    def _watch_group(self) -> None:
        """The group once a second, in its own thread: describe_group asks every leader for
        its log end and may wait out a dead one, which must not hold up the replica samples."""
        while not self.stop_event.wait(1.0):
            t = time.time()
            try:
                g = self.admin.describe_group(GROUP)
            except Exception:  # noqa: BLE001
                continue
            self.history.write(
                "group", t=t, state=g["state"], gen=g["generation"],
                members={m["member_id"]: m["assignment"].get(TOPIC, []) for m in g["members"]},
                committed={str(r["partition"]): r["committed_offset"] for r in g["offsets"] if r["topic"] == TOPIC},
            )


# ----------------------------------------------------------------------------------------
# healing and the final state
# ----------------------------------------------------------------------------------------
def healed(cluster, extra_topics: tuple[str, ...] = ()) -> bool:
    import ray

    for topic in (TOPIC, OFFSETS, *extra_topics):
        for pm in cluster.topic(topic, refresh=True).partitions:
            if pm.leader < 0 or sorted(pm.isr) != sorted(pm.replicas):
                return False
            infos = ray.get([cluster.replica(topic, pm.partition, b, fresh=True).describe.remote() for b in pm.replicas], timeout=10)
            leaders = [i for i in infos if i["role"] == "leader"]
            if len(leaders) != 1 or leaders[0]["broker"] != pm.leader:
                return False
            if any(i["log_end_offset"] != leaders[0]["high_watermark"] for i in infos):
                return False
    return not ray.get(cluster.controller.placement.remote(), timeout=10).get("waiting")


def wait_for(what: str, predicate, timeout: float, interval: float = 1.0) -> tuple[bool, str | None]:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            if predicate():
                return True, None
        except Exception as exc:  # noqa: BLE001
            last = repr(exc)[:300]
        time.sleep(interval)
    log(f"timed out after {timeout:.0f} s waiting for {what} (last error {last})")
    return False, f"timed out waiting for {what} (last error {last})"


def wait_while_progressing(what: str, predicate, progress, stall_timeout: float, cap: float,
                           interval: float = 1.0) -> tuple[bool, str | None]:
    """:func:`wait_for` ``predicate`` for as long as ``progress()`` (a figure that changes while
    work gets done, such as the sum of committed offsets) keeps changing: give up when it has
    not changed for ``stall_timeout`` s, or after ``cap`` s in all. A backlog the nemesis left
    takes its time to drain; a stuck workload does not get longer than a stalled one."""
    start = time.monotonic()
    last_change, seen, last_err = start, None, None
    while True:
        now = time.monotonic()
        try:
            if predicate():
                return True, None
            p = progress()
            if p != seen:
                seen, last_change = p, now
        except Exception as exc:  # noqa: BLE001
            last_err = repr(exc)[:300]
        if now - last_change >= stall_timeout or now - start >= cap:
            why = f"no progress for {now - last_change:.0f} s" if now - last_change >= stall_timeout else f"still going after {cap:.0f} s"
            log(f"gave up waiting for {what}: {why} (progress {seen}, last error {last_err})")
            return False, f"gave up waiting for {what}: {why} (progress {seen}, last error {last_err})"
        time.sleep(interval)


def read_replica(cluster, topic: str, partition: int, broker: int):
    """(sha256 of the raw log, [(offset, value)], [batch leader epochs]) of one replica."""
    import ray

    from kcoord import records

    handle = cluster.replica(topic, partition, broker, fresh=True)
    digest = hashlib.sha256()
    out: list[tuple[int, bytes]] = []
    epochs: list[int] = []
    offset = 0
    while True:
        raw = ray.get(handle.read_log.remote(offset, 8 << 20), timeout=120)
        if not raw:
            break
        digest.update(raw)
        epochs += [h.leader_epoch for _, h in records.iter_headers(raw)]
        recs = list(records.iter_records(raw, from_offset=offset))
        if not recs:
            break
        out += [(r.offset, r.value) for r in recs]
        offset = recs[-1].offset + 1
    return digest.hexdigest(), out, epochs


def batch_shape(cluster, topic: str) -> dict:
    """Records, batches, mean records and bytes per batch in the leaders' logs of ``topic``."""
    import ray

    from kcoord import records

    n_records = n_batches = n_bytes = 0
    for pm in cluster.topic(topic, refresh=True).partitions:
        if pm.leader < 0:
            continue  # offline (a run that did not heal, which the checker reports)
        handle = cluster.replica(topic, pm.partition, pm.leader, fresh=True)
        offset = 0
        while True:
            raw = ray.get(handle.read_log.remote(offset, 8 << 20), timeout=120)
            headers = [h for _, h in records.iter_headers(raw)] if raw else []
            if not headers:
                break
            n_batches += len(headers)
            n_bytes += len(raw)
            n_records += headers[-1].next_offset - max(offset, headers[0].base_offset)
            offset = headers[-1].next_offset
    return {
        "log_records": n_records,
        "batches": n_batches,
        "records_per_batch": round(n_records / n_batches, 2) if n_batches else 0.0,
        "bytes_per_batch": round(n_bytes / n_batches) if n_batches else 0,
    }


def undisturbed_rate(cluster, admin, clients: Clients, shape: dict) -> dict:
    """The catch-up rate of topic ``calm``, created on the healed cluster and written with
    as many records as the chaos topic holds, with the same keys and value sizes, in batches
    of the chaos topic's mean size; nothing is injected meanwhile."""
    import kcoord
    from tests.chaos.clients import PAD

    admin.create_topic(CALM, partitions=PARTITIONS, replication_factor=3, config={"min.insync.replicas": MIN_ISR})
    admin.wait_for_leaders(CALM)
    from kcoord.client.producer.batch import BATCH_OVERHEAD, record_size

    n = max(1, shape["log_records"])
    # the bulk writer cuts batches by its own estimate of a record's size: aim at the chaos
    # topic's mean records per batch through it
    typical = record_size(b"p9:%d" % (n // 2) + PAD, b"k%d" % 48)
    batch_size = BATCH_OVERHEAD + typical * max(1, round(shape["records_per_batch"]))
    with kcoord.Producer(cluster, acks="all", linger_ms=5) as p:
        step = 50_000
        for lo in range(0, n, step):
            idx = range(lo, min(n, lo + step))
            p.send_batch(CALM, values=[b"p9:%d" % i + PAD for i in idx], keys=[b"k%d" % (i % 97) for i in idx],
                         batch_size=batch_size, timeout=300)
    result = run_reader(clients, CALM, "", timeout=600, repeat=READS)
    result.update(batch_shape(cluster, CALM))
    admin.delete_topic(CALM)
    return result


# ----------------------------------------------------------------------------------------
def start_ray():
    import ray
    from ray.cluster_utils import Cluster

    os.environ.update(RAY_ENV)
    rc = Cluster(initialize_head=False, shutdown_at_exit=True)
    try:
        rc.add_node(**HEAD_ARGS)
        for _ in range(2):
            rc.add_node(**WORKER_ARGS)
    except Exception as exc:
        rc.shutdown()
        if "timed out during startup" in str(exc):
            log(f"Ray node startup timed out: {exc}")
            sys.exit(EXIT_RAY_STARTUP)
        raise
    ray.init(address=rc.address, namespace=NAMESPACE, log_to_driver=False, logging_level="ERROR")
    _quiet_raylet_messages()
    rc.wait_for_nodes()
    return rc


def _quiet_raylet_messages() -> None:
    """A Ray driver prints every worker death and node loss the raylets report (to stdout,
    ~1 KB each): hundreds in a chaos run, which kills on purpose and logs each fault
    itself. Drop those; anything else Ray prints still goes through."""
    try:
        import ray._private.worker as ray_worker

        original = ray_worker.print_to_stdstream

        def print_to_stdstream(data, ignore_prefix: bool, *args, **kwargs):
            if data.get("pid") == "raylet":
                return None
            return original(data, ignore_prefix, *args, **kwargs)

        ray_worker.print_to_stdstream = print_to_stdstream
    except Exception:  # noqa: BLE001 - another Ray version: noisier output, nothing else
        pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.chaos.run", description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=float(os.environ.get("KCOORD_CHAOS_SECONDS", "110")))
    ap.add_argument("--seed", type=int, default=int(os.environ.get("KCOORD_CHAOS_SEED", str(int(time.time()) % 1_000_000))))
    ap.add_argument("--out", default="", help="history directory (default: a new temporary one)")
    ap.add_argument("--producers", type=int, default=2)
    ap.add_argument("--members", type=int, default=3)
    ap.add_argument("--rate", type=float, default=200.0, help="records/s over all producers")
    ap.add_argument("--mean-interval", type=float, default=0.9, help="mean seconds between faults (node losses aside)")
    ap.add_argument("--node-loss-every", type=float, default=80.0)
    ap.add_argument("--member-session-ms", type=int, default=4000)
    ap.add_argument("--min-kills", type=int, default=-1, help="fail below this many kills (default: 0.625 per second: 68 in 110 s)")
    ap.add_argument("--no-faults", action="store_true", help="a control run: the same workload with no nemesis")
    ap.add_argument("--no-baseline", action="store_true", help="skip the undisturbed catch-up measurement (saves ~20 s)")
    ap.add_argument("--stall-threshold", type=float, default=60.0)
    ap.add_argument("--heal-timeout", type=float, default=180.0)
    ap.add_argument("--txn-workers", type=int, default=2,
                    help="consume-transform-produce workers of the transactional workload (0: none; tests.chaos.txn_clients)")
    args = ap.parse_args(argv)
    min_kills = args.min_kills if args.min_kills >= 0 else 0 if args.no_faults else int(args.seconds * 0.625)
    out = Path(args.out or tempfile.mkdtemp(prefix="kcoord-chaos-"))
    out.mkdir(parents=True, exist_ok=True)
    data_dir = tempfile.mkdtemp(prefix="kcoord-chaos-data-")
    weights = {**WEIGHTS, **TXN_WEIGHTS} if args.txn_workers else WEIGHTS
    plan = [] if args.no_faults else schedule(args.seed, args.seconds, mean_interval=args.mean_interval,
                                              node_loss_every=args.node_loss_every, overtime=OVERTIME, weights=weights)
    reserve = sum(f.at >= args.seconds for f in plan)
    log(f"seed {args.seed}, {args.seconds:.0f} s, {len(plan) - reserve} faults planned (+{reserve} in reserve "
        f"while fewer than {min_kills} kills have landed); history in {out}")
    (out / "plan.json").write_text(json.dumps([f.__dict__ for f in plan]))

    import ray

    import kcoord
    from kcoord.cluster.deploy import deploy, teardown
    from kcoord.cluster.group_coordinators import configure_group_coordinators

    timings: dict[str, float] = {}
    rc = start_ray()
    name = f"chaos-{os.getpid()}"
    clients = None
    txn = None
    txn_topics: tuple[str, ...] = (OUT_TOPIC, "__transaction_state") if args.txn_workers else ()
    nemesis = None
    observer = None
    final: dict = {"topic": TOPIC, "group": GROUP, "seed": args.seed, "seconds": args.seconds, "min_insync_replicas": MIN_ISR,
                   # __consumer_offsets' (cluster/internal_topics.py: min(2, RF), RF 3 here)
                   "offsets_min_insync_replicas": 2}
    try:
        cluster = deploy(name, brokers=3, data_dir=data_dir, group_coordinators=2, address=None, namespace=NAMESPACE,
                         controller_config=CONTROLLER_CONFIG)
        configure_group_coordinators(cluster, GROUP_CONFIG)
        admin = kcoord.Admin(cluster)
        admin.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3, config={"min.insync.replicas": MIN_ISR})
        admin.wait_for_leaders(TOPIC)
        if args.txn_workers:
            TxnWorkload.create_topic(admin)
        placement = ray.get(cluster.controller.placement.remote(), timeout=30)
        log(f"Ray cluster of {len(rc.worker_nodes) + 1} nodes, kcoord {name!r} deployed; brokers on nodes "
            f"{ {int(b): v['node'][:8] for b, v in placement['brokers'].items()} }")
        timings["setup_s"] = time.monotonic() - T0

        clients = Clients(args, rc.address, name, out)
        final["baseline"] = {}

        # -- clients, observer, nemesis ---------------------------------------------------------
        clients.start_members()
        ok, _ = wait_for("the group to form", lambda: admin.describe_group(GROUP)["state"] == "Stable"
                         and len(admin.describe_group(GROUP)["members"]) == args.members, timeout=120)
        clients.start_producers()
        if args.txn_workers:
            txn = TxnWorkload(args.txn_workers, clients.env, REPO, name, rc.address, NAMESPACE, TOPIC, out, args.member_session_ms)
            txn.start()
        ok, _ = wait_for("the first acknowledged writes", lambda: sum(admin.list_offsets(TOPIC, "latest").values()) > 200, timeout=120)
        obs_client = kcoord.ClusterClient(name, namespace=NAMESPACE, address=None, request_timeout_ms=3000)
        observer = Observer(obs_client, kcoord.Admin(obs_client), History(out / "observer.jsonl"), coordinators=2)
        observer.start()
        nem_client = kcoord.ClusterClient(name, namespace=NAMESPACE, address=None, request_timeout_ms=5000)
        nemesis = Nemesis(nem_client, rc, WORKER_ARGS, TOPIC, data_dir, History(out / "nemesis.jsonl"), clients.kill_member, 2, log,
                          txn_coordinators=2 if txn else 0, txn_topic=OUT_TOPIC if txn else None,
                          kill_txn_worker=txn.kill_worker if txn else None)
        timings["clients_start_s"] = time.monotonic() - T0 - timings["setup_s"]
        t_chaos = time.monotonic()
        log("nemesis starts")
        nemesis.run(plan, args.seconds, min_kills=min_kills)
        log("nemesis stops: resuming paused processes, returning lost nodes")
        nemesis.stop()
        timings["chaos_s"] = time.monotonic() - t_chaos

        # -- heal, stop the producers, drain the group --------------------------------------
        t_heal = time.monotonic()
        time.sleep(3)  # producers keep writing into the healing cluster for a moment
        clients.stop_producers(timeout=200)
        final["healed"], final["heal_error"] = wait_for("the cluster to heal", lambda: healed(cluster, txn_topics), timeout=args.heal_timeout)
        timings["heal_s"] = time.monotonic() - t_heal
        try:
            ends = admin.list_offsets(TOPIC, "latest")
        except Exception as exc:  # noqa: BLE001 - a partition left offline: checked as not healed
            log(f"end offsets unavailable ({exc!r:.200}); the final log is read from every live replica")
            ends = {}
        final["end_offsets"] = {str(p): o for p, o in ends.items()}

        def group_committed() -> tuple[str, dict]:
            g = admin.describe_group(GROUP)
            return g["state"], {r["partition"]: r["committed_offset"] for r in g["offsets"] if r["topic"] == TOPIC}

        def drained() -> bool:
            state, got = group_committed()
            return state == "Stable" and all(got.get(p) == ends[p] for p in ends)

        # the group catches up on the backlog the faults left for as long as it gets on with it
        stall_s = args.heal_timeout if final["healed"] else 60
        final["drained"], final["drain_error"] = wait_while_progressing(
            "the group to commit everything", drained, lambda: sum(o or 0 for o in group_committed()[1].values()),
            stall_timeout=stall_s, cap=stall_s + args.seconds)
        timings["drain_s"] = time.monotonic() - t_heal - timings["heal_s"]
        clients.stop_members(timeout=60)
        if txn is not None:
            input_ends = ends or {p: o for p, o in admin.list_offsets(TOPIC, "latest").items()}
            final["txn"] = txn.finish(admin, cluster, input_ends, wait_for, wait_while_progressing,
                                      stall_timeout=stall_s, cap=stall_s + args.seconds)
            log(f"transactional workload: {final['txn']}")
        observer.stop_event.set()
        observer.join(timeout=30)
        try:
            g = admin.describe_group(GROUP)
            final["committed"] = {str(r["partition"]): r["committed_offset"] for r in g["offsets"] if r["topic"] == TOPIC}
        except Exception as exc:  # noqa: BLE001 - a coordinator left down: checked as not drained
            log(f"committed offsets unavailable ({exc!r:.200})")
            final["committed"] = {}

        # -- the final log: every replica of every partition --------------------------------
        final["divergent"], final["epochs_decrease"] = [], []
        with open(out / "final-log.jsonl", "w") as f:
            for pm in cluster.topic(TOPIC, refresh=True).partitions:
                copies = {}
                for b in pm.replicas:
                    try:
                        copies[b] = read_replica(cluster, TOPIC, pm.partition, b)
                    except Exception as exc:  # noqa: BLE001 - a replica lost with its node
                        log(f"replica {TOPIC}-{pm.partition} of broker {b} unreadable: {exc!r:.200}")
                if not copies:
                    continue
                if final["healed"] and len({c[0] for c in copies.values()}) != 1:
                    final["divergent"].append(pm.partition)
                # the leader's log, or (offline partition) the longest one left
                _, recs, epochs = copies.get(pm.leader) or max(copies.values(), key=lambda c: len(c[1]))
                if epochs != sorted(epochs):
                    final["epochs_decrease"].append(pm.partition)
                for o, v in recs:
                    f.write(json.dumps([pm.partition, o, v.split(b"|", 1)[0].decode()]) + "\n")
        shape = batch_shape(cluster, TOPIC)
        if not args.no_baseline:
            t_base = time.monotonic()
            try:
                final["baseline"] = undisturbed_rate(cluster, admin, clients, shape)
            except Exception as exc:  # noqa: BLE001 - a run that did not heal: no ratio, the rest is checked
                log(f"the undisturbed rate could not be measured: {exc!r:.300}")
                final["baseline"] = {"error": repr(exc)[:300]}
            timings["baseline_s"] = time.monotonic() - t_base
            log(f"undisturbed catch-up: {final['baseline']}")
        final["catchup"] = run_reader(clients, TOPIC, str(out / "reader-final.jsonl"), timeout=900, repeat=READS)
        final["catchup"].update(shape)
        base, after = final["baseline"].get("rate", 0.0), final["catchup"].get("rate", 0.0)
        final["catchup_ratio"] = round(after / base, 3) if base else None
        # the same ratio in batches/s (equal when the batch shapes match, as they should)
        rpb_base, rpb_after = final["baseline"].get("records_per_batch"), final["catchup"].get("records_per_batch")
        final["catchup_ratio_batches"] = round((after / rpb_after) / (base / rpb_base), 3) if base and rpb_base and rpb_after else None
        log(f"catch-up after the run: {final['catchup']} ({final['catchup_ratio']}x the undisturbed rate in records/s, "
            f"{final['catchup_ratio_batches']}x in batches/s)")
        final["client_crashes"] = {**clients.crashed(), **(txn.crashed() if txn else {})}
        final["timings"] = timings
        (out / "final.json").write_text(json.dumps(final, indent=1))
    except BaseException:
        if clients is not None:
            clients.kill_all()
        if txn is not None:
            txn.kill_all()
        raise
    finally:
        if nemesis is not None:
            nemesis.resume_all()
        if observer is not None:
            observer.stop_event.set()
        try:
            teardown(name, delete_data=True, address=None, namespace=NAMESPACE, data_dir=data_dir)
        except Exception as exc:  # noqa: BLE001
            log(f"teardown failed: {exc!r}")
        ray.shutdown()
        rc.shutdown()

    code = checker.main([str(out), "--stall-threshold", str(args.stall_threshold)])
    report = json.loads((out / "check.json").read_text())
    fig = report["figures"]
    summary = {
        "ok": code == 0 and fig["kills"] >= min_kills,
        "seed": args.seed,
        "seconds": args.seconds,
        "wall_s": round(time.monotonic() - T0, 1),
        "kills": fig["kills"],
        "min_kills": min_kills,
        "pauses": fig["pauses"],
        "node_losses": fig["node_losses"],
        "faults": fig["faults"],
        "acked": fig["acked"],
        "violations": {k: v for k, v in report["counts"].items() if v},
        "lost": report["counts"]["lost"],
        "duplicated": report["counts"]["duplicated"],
        "reordered": report["counts"]["reordered"],
        "stale_reads": report["counts"]["stale_reads"],
        "txn": {**fig.get("txn", {}), **{k: v for k, v in report["counts"].items() if k.startswith("txn_")}},
        "producer_max_wait_s": fig["producer_max_wait_s"],
        "consumer_max_wait_s": fig["consumer_max_wait_s"],
        "producer_max_wait_raw_s": fig.get("producer_max_wait_raw_s"),
        "consumer_max_wait_raw_s": fig.get("consumer_max_wait_raw_s"),
        "group_unserved_s": fig.get("group_unserved_s"),
        "catchup_rate": round(final.get("catchup", {}).get("rate", 0.0)),
        "baseline_rate": round(final.get("baseline", {}).get("rate", 0.0)),
        "catchup_ratio": final.get("catchup_ratio"),
        "catchup_ratio_batches": final.get("catchup_ratio_batches"),
        "timings": {k: round(v, 1) for k, v in timings.items()},
        "history": str(out),
    }
    if fig["kills"] < min_kills:
        log(f"only {fig['kills']} kills, fewer than the {min_kills} required")
    print(json.dumps(summary), flush=True)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
