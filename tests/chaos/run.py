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
``nemesis.jsonl``; client logs are in ``logs/``. The run's parts: :mod:`tests.chaos.ray_nodes`
(the Ray cluster), :mod:`tests.chaos.processes` (client processes),
:mod:`tests.chaos.observer`, :mod:`tests.chaos.waits` (healing and draining, with
deadlines), :mod:`tests.chaos.final_state` (the final logs and the catch-up rates) and
:mod:`tests.chaos.txn_run` (the transactional workload).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.chaos import checker  # noqa: E402
from tests.chaos.final_state import catch_up, write_final_log  # noqa: E402
from tests.chaos.history import History  # noqa: E402
from tests.chaos.nemesis import TXN_WEIGHTS, WEIGHTS, Nemesis, schedule  # noqa: E402
from tests.chaos.observer import Observer  # noqa: E402
from tests.chaos.processes import Clients  # noqa: E402
from tests.chaos.ray_nodes import EXIT_RAY_STARTUP, WORKER_ARGS, start_ray  # noqa: E402
from tests.chaos.settings import GROUP, MIN_ISR, NAMESPACE, PARTITIONS, T0, TOPIC, log  # noqa: E402
from tests.chaos.txn_run import OUT_TOPIC, TxnWorkload  # noqa: E402
from tests.chaos.waits import healed, wait_for, wait_while_progressing  # noqa: E402

# faults drawn past --seconds, injected only while fewer than --min-kills kills have landed
# (a slower machine skips more kills whose targets are still restarting)
OVERTIME = 0.3
CONTROLLER_CONFIG = {
    "heartbeat_interval_ms": 100,
    "follower_heartbeat_interval_ms": 300,
    "session_timeout_ms": 2000,
    "ensure_replica_interval_ms": 300,
    "leader_rebalance_interval_ms": 3000,
    "restart_stuck_ms": 8000,
}
GROUP_CONFIG = {"group.min.session.timeout.ms": 500, "group.initial.rebalance.delay.ms": 0}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
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
    return ap.parse_args(argv)


def heal_and_drain(args, cluster, admin, clients: Clients, txn: TxnWorkload | None, txn_topics: tuple[str, ...],
                   final: dict, timings: dict[str, float]) -> None:
    """After the faults: stop the producers, wait for the cluster to heal and for the group
    (and the transactional workers) to commit the whole input for as long as they make
    progress; records the outcomes and the group's committed offsets in ``final``."""
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
        final["txn"] = txn.finish(admin, cluster, input_ends, stall_timeout=stall_s, cap=stall_s + args.seconds)
        log(f"transactional workload: {final['txn']}")
    try:
        g = admin.describe_group(GROUP)
        final["committed"] = {str(r["partition"]): r["committed_offset"] for r in g["offsets"] if r["topic"] == TOPIC}
    except Exception as exc:  # noqa: BLE001 - a coordinator left down: checked as not drained
        log(f"committed offsets unavailable ({exc!r:.200})")
        final["committed"] = {}


def summarize(args, code: int, report: dict, final: dict, timings: dict[str, float], out: Path, min_kills: int) -> dict:
    """The run's one-line JSON summary from the checker's report."""
    fig = report["figures"]
    return {
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


# ----------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
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
            txn = TxnWorkload(args.txn_workers, clients.env, name, rc.address, NAMESPACE, TOPIC, out, args.member_session_ms)
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

        heal_and_drain(args, cluster, admin, clients, txn, txn_topics, final, timings)
        observer.stop_event.set()
        observer.join(timeout=30)
        final["divergent"], final["epochs_decrease"] = write_final_log(cluster, out, final["healed"])
        caught_up = catch_up(cluster, admin, clients, out, baseline=not args.no_baseline)
        if "baseline_s" in caught_up:
            timings["baseline_s"] = caught_up.pop("baseline_s")
        final.update(caught_up)
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
    summary = summarize(args, code, report, final, timings, out, min_kills)
    if summary["kills"] < min_kills:
        log(f"only {summary['kills']} kills, fewer than the {min_kills} required")
    print(json.dumps(summary), flush=True)
    return 0 if summary["ok"] else 1


__all__ = ["EXIT_RAY_STARTUP", "main"]

if __name__ == "__main__":
    sys.exit(main())
