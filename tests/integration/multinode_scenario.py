"""Multi-node placement and node loss on one machine (run by test_multinode.py in its own
process, because ``ray.cluster_utils.Cluster`` must own the driver's Ray connection).

A 3-node Ray cluster (head + 2 workers) with 3 brokers: every broker is bound to its own
node, so the 3 replicas of each partition run on 3 distinct nodes. A worker node is then
removed while a producer writes with acks=all (after one follower on a worker node is
killed and must be found dead without heartbeats of its own, through its leader's
vouches stopping): every partition that node led fails over,
the lost broker waits for a node (no other node may take it without holding two replicas of
one partition), the partitions run under-replicated, and nothing acknowledged is lost.
Adding a node back re-binds the broker there, recreates its replicas, and they catch up and
rejoin the ISR: full replication again, still on 3 distinct nodes.

An RF=1 topic on the lost broker is offline meanwhile: its only copy is on that machine's
disk, so the broker may not move to another machine. Ray gives a returning machine a new
node id; the node added back runs on the same host (one machine here), so it counts as the
machine returning: the broker moves there, reopens its disk and the topic is back with
every acknowledged record.

Prints one JSON line with the timings; exits non-zero (with the reason) on failure.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE.parent)]

from cli_support import RAY_ENV  # noqa: E402
from local_nodes import EXIT_RAY_STARTUP, add_nodes  # noqa: E402

os.environ.update(RAY_ENV)

import ray  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

from waiting import wait_until  # noqa: E402

TOPIC = "spread"
PARTITIONS = 3
SOLO = "solo"  # RF=1, on the broker of the node that is removed
CONTROLLER_CONFIG = {
    "heartbeat_interval_ms": 100,
    "session_timeout_ms": 2000,
    "ensure_replica_interval_ms": 500,
    "leader_rebalance_interval_ms": 2000,
}
def log(msg: str) -> None:
    print(f"[multinode {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Writer:
    """A producer thread writing acks=all until stopped; remembers what was acknowledged."""

    def __init__(self, cluster) -> None:
        import kcoord

        self.producer = kcoord.Producer(cluster, acks="all", linger_ms=2)
        self.acked: dict[bytes, tuple[int, int]] = {}
        self.errors: list[BaseException] = []
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _ack(self, value: bytes, meta) -> None:
        self.acked[value] = (meta.partition, meta.offset)

    def _run(self) -> None:
        while not self._stop.is_set():
            value = b"rec-%06d" % self.sent
            fut = self.producer.send(TOPIC, value=value, key=b"k%d" % (self.sent % 11))
            fut.add_callback(self._ack, value).add_errback(lambda exc: self.errors.append(exc))
            self.sent += 1
            if self.sent % 50 == 0:
                self._stop.wait(0.05)  # a steady trickle, not a flood, on a 2-core machine

    def start(self) -> "Writer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.producer.flush(timeout=120)
        self.producer.close(timeout=30)


def replica_nodes(cluster, topic: str, partitions: int, brokers: list[int]) -> dict[int, dict[int, str]]:
    """{partition: {broker: node id}} from the replica actors themselves (looked up afresh:
    a recreated replica is a new actor under the old name)."""
    refs = {
        (p, b): ray.get_actor(cluster.replica_name(topic, p, b), namespace=cluster.namespace).describe.remote()
        for p in range(partitions)
        for b in brokers
    }
    out: dict[int, dict[int, str]] = {}
    for (p, b), ref in refs.items():
        out.setdefault(p, {})[b] = ray.get(ref, timeout=30)["node_id"]
    return out


def read_all(cluster, admin, topic: str = TOPIC) -> dict[tuple[int, int], bytes]:
    import kcoord

    ends = admin.list_offsets(topic, "latest")
    consumer = kcoord.Consumer(topic, cluster=cluster, auto_offset_reset="earliest", enable_auto_commit=False)
    out: dict[tuple[int, int], bytes] = {}
    try:
        deadline = time.monotonic() + 120
        while any(consumer.position(kcoord.TopicPartition(topic, p)) < end for p, end in ends.items()):
            assert time.monotonic() < deadline, "reading the topic back took too long"
            for recs in consumer.poll(timeout_ms=500).values():
                for r in recs:
                    out[(r.partition, r.offset)] = r.value
    finally:
        consumer.close()
    return out


def check_no_loss(cluster, admin, writer: Writer) -> int:
    log_records = read_all(cluster, admin)
    lost = [v for v, where in writer.acked.items() if log_records.get(where) != v]
    assert not lost, f"{len(lost)} acknowledged records lost, e.g. {lost[:3]}"
    return len(writer.acked)


def show_status(victim_broker: int) -> None:
    """What `kcoord status` shows meanwhile: the broker waiting for a node, 3 partitions
    under-replicated, none offline."""
    import io

    from rich.console import Console

    from kcoord.cluster.deploy import status
    from kcoord.cli.cluster_cmds import _status_tables

    snap = status("mn", address=None)
    assert snap["placement"]["waiting"] == [victim_broker], snap["placement"]
    buf = io.StringIO()
    console = Console(file=buf, width=200)
    for table in _status_tables(snap, internal=False):
        console.print(table)
    text = buf.getvalue()
    assert "waiting for a node" in text and text.count("under-replicated") >= PARTITIONS, text
    log("kcoord status:\n" + text)


def scenario(rc: Cluster, workers: list) -> dict:
    import kcoord
    from kcoord.cluster.deploy import deploy, teardown

    timings: dict[str, float] = {}
    data_dir = tempfile.mkdtemp(prefix="kcoord-multinode-")
    t = time.monotonic()
    cluster = deploy("mn", brokers=3, data_dir=data_dir, group_coordinators=0, address=None, controller_config=CONTROLLER_CONFIG)
    try:
        admin = kcoord.Admin(cluster)
        head_node = ray.get_runtime_context().get_node_id()
        placement = ray.get(cluster.controller.placement.remote(), timeout=30)
        binding = {int(b): v["node"] for b, v in placement["brokers"].items()}
        assert sorted(binding) == [0, 1, 2] and len(set(binding.values())) == 3, placement
        admin.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3, config={"min.insync.replicas": 2})
        victim = workers[0]
        victim_broker = next(b for b, n in binding.items() if n == victim.node_id)
        assert binding[victim_broker] != head_node
        admin.create_topic(SOLO, partitions=1, replication_factor=1, assignment={0: [victim_broker]})
        with kcoord.Producer(cluster, acks="all") as solo_producer:
            solo_futures = [solo_producer.send(SOLO, value=b"solo-%03d" % i) for i in range(100)]
            solo_producer.flush(timeout=60)
        solo_acked = {f.get(timeout=10).offset: b"solo-%03d" % i for i, f in enumerate(solo_futures)}
        timings["deploy_and_create_s"] = time.monotonic() - t

        # 1. the replicas of each partition sit on 3 distinct nodes, each on its broker's node
        nodes = replica_nodes(cluster, TOPIC, PARTITIONS, [0, 1, 2])
        for p, by_broker in nodes.items():
            assert len(set(by_broker.values())) == 3, f"partition {p}: replicas share a node {by_broker}"
            assert by_broker == binding, f"partition {p}: {by_broker} != binding {binding}"
        log(f"replicas on distinct nodes: {binding}; controller epoch {admin.describe_cluster()['controller_epoch']}")

        # 1b. an idle follower on another node than the controller is killed: the controller
        # does not beat it while its leader vouches for it, so its death shows when its
        # parked fetch ends and the leader no longer vouches (~2 s with the default 2 s
        # fetch wait); it leaves the ISR, is recreated and rejoins.
        controller_node = ray.get(cluster.controller.__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id()), timeout=30)
        # on another node than the controller: no connection of its own tells the controller
        p0, follower = next(
            (p, b)
            for p in range(PARTITIONS)
            for b in (0, 1, 2)
            if b != cluster.partition_metadata(TOPIC, p, refresh=True).leader and binding[b] != controller_node
        )
        failed_before = admin.describe_cluster()["metrics"]["replicas_failed"]
        t_kill = time.monotonic()
        ray.kill(cluster.replica(TOPIC, p0, follower, fresh=True), no_restart=True)
        wait_until(lambda: admin.describe_cluster()["metrics"]["replicas_failed"] > failed_before, timeout=30,
                   interval=0.05, what=f"the killed follower {follower} of partition {p0} to be failed")
        timings["dead_follower_detected_s"] = time.monotonic() - t_kill
        wait_until(lambda: len(cluster.partition_metadata(TOPIC, p0, refresh=True).isr) == 3, timeout=120,
                   what="the recreated follower to rejoin the ISR")
        log(f"killed follower {follower} of partition {p0}: failed after {timings['dead_follower_detected_s']:.1f} s, back in the ISR")
        assert timings["dead_follower_detected_s"] < 10, timings

        # 2. remove a worker node that leads partitions, while a producer writes
        writer = Writer(cluster).start()
        wait_until(lambda: len(writer.acked) >= 200, timeout=120, what="the first acknowledged writes")
        led = [p for p in range(PARTITIONS) if cluster.partition_metadata(TOPIC, p, refresh=True).leader == victim_broker]
        assert led, "the victim node leads no partition"
        before = len(writer.acked)
        t_remove = time.monotonic()
        rc.remove_node(victim, allow_graceful=False)
        log(f"removed node {victim.node_id[:8]} (broker {victim_broker}, leader of {led})")

        def failed_over() -> bool:
            for p in led:
                md = cluster.partition_metadata(TOPIC, p, refresh=True)
                if md.leader in (-1, victim_broker):
                    return False
                info = ray.get(cluster.replica(TOPIC, p, md.leader, fresh=True).describe.remote(), timeout=10)
                if info["role"] != "leader" or info["leader_epoch"] != md.leader_epoch:
                    return False
            return True

        wait_until(failed_over, timeout=120, what=f"partitions {led} to fail over")
        log(f"failed over; controller epoch {admin.describe_cluster()['controller_epoch']}")
        timings["failover_s"] = time.monotonic() - t_remove
        # writes to every partition keep being acknowledged after the failover
        wait_until(lambda: len(writer.acked) >= before + 300, timeout=120, what="writes to continue after the failover")
        timings["writes_resumed_s"] = time.monotonic() - t_remove

        # 3. the lost broker waits for a node; every partition runs under-replicated, but
        # the RF=1 topic, whose only copy is on the lost machine, is offline
        def degraded() -> bool:
            pl = ray.get(cluster.controller.placement.remote(), timeout=10)
            metrics = admin.describe_cluster()["metrics"]
            return pl["waiting"] == [victim_broker] and metrics["under_replicated_partitions"] == PARTITIONS and metrics["offline_partitions"] == 1

        wait_until(degraded, timeout=120, what="the lost broker to wait and the partitions to run with ISR 2")
        show_status(victim_broker)
        for p in range(PARTITIONS):
            assert victim_broker not in cluster.partition_metadata(TOPIC, p, refresh=True).isr
        writer.stop()
        assert not writer.errors, f"write errors: {writer.errors[:3]}"
        checked = check_no_loss(cluster, admin, writer)
        log(f"failover in {timings['failover_s']:.1f} s, {checked} acknowledged records all present")

        # 4. adding a node back restores full replication, on 3 distinct nodes again
        t_add = time.monotonic()
        fresh = rc.add_node(num_cpus=1)
        rc.wait_for_nodes()

        def restored() -> bool:
            pl = ray.get(cluster.controller.placement.remote(), timeout=10)
            if pl["brokers"][victim_broker]["node"] != fresh.node_id or pl["waiting"]:
                return False
            if cluster.partition_metadata(SOLO, 0, refresh=True).leader != victim_broker:
                return False
            return all(len(cluster.partition_metadata(TOPIC, p, refresh=True).isr) == 3 for p in range(PARTITIONS))

        wait_until(restored, timeout=180, interval=0.2, what="full replication after adding a node")
        timings["restore_s"] = time.monotonic() - t_add
        nodes = replica_nodes(cluster, TOPIC, PARTITIONS, [0, 1, 2])
        for p, by_broker in nodes.items():
            assert len(set(by_broker.values())) == 3 and by_broker[victim_broker] == fresh.node_id, (p, by_broker)
            assert victim.node_id not in by_broker.values()

        def caught_up() -> bool:
            for p in range(PARTITIONS):
                infos = [
                    ray.get(ray.get_actor(cluster.replica_name(TOPIC, p, b), namespace=cluster.namespace).describe.remote(), timeout=10)
                    for b in (0, 1, 2)
                ]
                if len({i["log_end_offset"] for i in infos}) != 1:
                    return False
            return True

        wait_until(caught_up, timeout=60, what="the recreated replicas to catch up")
        assert check_no_loss(cluster, admin, writer) == checked
        # the RF=1 topic came back from its machine's disk, every record of it
        solo = {o: v for (_, o), v in read_all(cluster, admin, SOLO).items()}
        assert solo == solo_acked, f"RF=1 topic after its node returned: {len(solo)} of {len(solo_acked)} records"
        metrics = admin.describe_cluster()["metrics"]
        assert metrics["under_replicated_partitions"] == 0 and metrics["offline_partitions"] == 0, metrics
        log(f"full replication restored {timings['restore_s']:.1f} s after adding node {fresh.node_id[:8]}; "
            f"RF=1 topic back with its {len(solo)} records")
        return {"ok": True, "acked": checked, "victim_broker": victim_broker, "led": led, **timings}
    finally:
        teardown("mn", delete_data=True, address=None, data_dir=data_dir)


def main() -> int:
    t0 = time.monotonic()
    rc = Cluster(initialize_head=False, shutdown_at_exit=True)
    try:
        workers = add_nodes(rc, workers=2)
        if workers is None:
            log("Ray node startup timed out")
            return EXIT_RAY_STARTUP
        ray.init(address=rc.address, namespace="kcoord", log_to_driver=False, logging_level="ERROR")
        rc.wait_for_nodes()
        log(f"3-node Ray cluster up in {time.monotonic() - t0:.1f} s")
        result = scenario(rc, workers)
        result["total_s"] = time.monotonic() - t0
        print(json.dumps(result), flush=True)
        return 0
    finally:
        ray.shutdown()
        rc.shutdown()


if __name__ == "__main__":
    sys.exit(main())
