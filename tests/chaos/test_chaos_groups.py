"""Chaos for consumer groups: kill group coordinators, consumers and partition leaders
while a group consumes and commits after processing.

Checks invariant 6 of the README while it happens: a group's committed offsets never go
backwards (no commit from a fenced generation lands), and whenever the group is Stable
every subscribed partition is owned by exactly one member. At the end the group must have
consumed and committed everything that was produced.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time

import pytest
import ray

import kcoord
from kcoord.client.admin import Admin
from kcoord.protocol import names
from waiting import wait_until

pytestmark = [pytest.mark.chaos, pytest.mark.ray]

DURATION = float(os.environ.get("KCOORD_CHAOS_SECONDS", "20"))
SEED = int(os.environ.get("KCOORD_CHAOS_SEED", str(int(time.time()))))
TOPIC = "gchaos"
PARTITIONS = 4
CONSUMERS = 3
GROUP = "chaos-group"


@ray.remote(num_cpus=0, max_restarts=0)
class ConsumerWorker:
    """A group member in its own process, so the killer can kill it for real. It commits
    after processing each poll (at-least-once)."""

    def __init__(self, cluster_name: str, namespace: str) -> None:
        from kcoord.client.cluster import ClusterClient

        cluster = ClusterClient(cluster_name, namespace=namespace, address=None)
        self.consumer = kcoord.Consumer(
            TOPIC,
            cluster=cluster,
            group_id=GROUP,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=2000,
            heartbeat_interval_ms=300,
        )
        self.processed = 0
        self.errors = 0
        self.running = True
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while self.running:
            try:
                batch = self.consumer.poll(timeout_ms=200, max_records=500)
                if batch:
                    self.processed += sum(len(v) for v in batch.values())
                    self.consumer.commit()
            except Exception:
                self.errors += 1  # fenced commits, coordinator moves: carry on, as an app would

    def progress(self) -> tuple[int, int]:
        return self.processed, self.errors

    def stop(self) -> None:
        self.running = False
        self.thread.join(timeout=30)
        self.consumer.close()


def test_group_invariants_under_coordinator_and_consumer_kills(chaos_cluster):
    cluster = chaos_cluster
    admin = Admin(cluster)
    from kcoord.cluster.groups import configure_group_coordinators

    configure_group_coordinators(cluster, {"group.min.session.timeout.ms": 500, "group.initial.rebalance.delay.ms": 0})
    admin.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3, config={"min.insync.replicas": 2})
    producer = kcoord.Producer(cluster, acks="all", linger_ms=5)
    for i in range(20_000):
        producer.send(TOPIC, value=b"v%d" % i, key=b"k%d" % i)
    producer.flush(timeout=120)

    rng = random.Random(SEED)
    workers = [ConsumerWorker.remote(cluster.name, cluster.namespace) for _ in range(CONSUMERS)]
    stop = threading.Event()
    violations: list[str] = []
    observed = {"stable_checks": 0, "commit_checks": 0}
    kills: list[str] = []

    def produce() -> None:
        i = 20_000
        while not stop.wait(0.01):
            for _ in range(10):
                producer.send(TOPIC, value=b"v%d" % i, key=b"k%d" % i)
                i += 1

    def watch() -> None:
        committed: dict[int, int] = {}
        while not stop.wait(0.1):
            try:
                g = admin.describe_group(GROUP)
            except Exception:
                continue
            for row in g["offsets"]:
                off = row["committed_offset"]
                if row["topic"] != TOPIC or off is None:
                    continue
                observed["commit_checks"] += 1
                if off < committed.get(row["partition"], -1):
                    violations.append(f"committed offset of {TOPIC}-{row['partition']} went back {committed[row['partition']]} -> {off} (generation {g['generation']})")
                committed[row["partition"]] = max(committed.get(row["partition"], -1), off)
            if g["state"] == "Stable" and g["members"]:
                observed["stable_checks"] += 1
                owned = [p for m in g["members"] for p in m["assignment"].get(TOPIC, [])]
                if sorted(owned) != list(range(PARTITIONS)):
                    violations.append(f"Stable generation {g['generation']}: partitions owned {sorted(owned)}")

    def kill() -> None:
        plan: list[str] = []
        while not stop.wait(rng.uniform(0.5, 2.0)):
            if not plan:  # every kind of target in every round, in a random order
                plan = ["coordinator", "coordinator", "consumer", "offsets_leader", "topic_leader"]
                rng.shuffle(plan)
            target = plan.pop()
            how = rng.choice(["ray.kill", "SIGKILL"])
            try:
                if target == "coordinator":
                    handle = ray.get_actor(names.group_coordinator(cluster.name, rng.randrange(2)), namespace=cluster.namespace)
                elif target == "consumer":
                    i = rng.randrange(len(workers))
                    ray.kill(workers[i], no_restart=True)  # gone without leaving: the session must expire
                    workers[i] = ConsumerWorker.remote(cluster.name, cluster.namespace)
                    kills.append("consumer")
                    continue
                else:
                    topic = "__consumer_offsets" if target == "offsets_leader" else TOPIC
                    p = rng.randrange(2 if target == "offsets_leader" else PARTITIONS)
                    md = cluster.partition_metadata(topic, p, refresh=True)
                    if md.leader < 0:
                        continue
                    handle = cluster.replica(topic, p, md.leader, fresh=True)
                if how == "SIGKILL":
                    if target == "coordinator":
                        pid = ray.get(handle.pid.remote(), timeout=2)
                    else:
                        pid = ray.get(handle.describe.remote(), timeout=2)["pid"]
                    os.kill(pid, signal.SIGKILL)
                else:
                    ray.kill(handle, no_restart=False)
                kills.append(target)
            except Exception:
                continue
            finally:
                cluster.invalidate()

    threads = [threading.Thread(target=f, daemon=True) for f in (produce, watch, kill)]
    wait_until(lambda: sum(ray.get(w.progress.remote(), timeout=30)[0] for w in workers) > 1000, timeout=120, what="the group to start consuming")
    for t in threads:
        t.start()
    stop.wait(DURATION)
    stop.set()
    for t in threads:
        t.join(timeout=60)
    producer.flush(timeout=180)
    producer.close()
    end = admin.list_offsets(TOPIC, "latest")

    def drained() -> bool:
        g = admin.describe_group(GROUP)
        got = {r["partition"]: r["committed_offset"] for r in g["offsets"] if r["topic"] == TOPIC}
        return g["state"] == "Stable" and all(got.get(p) == end[p] for p in range(PARTITIONS))

    wait_until(drained, timeout=240, interval=0.5, what="the group to commit everything produced")
    final = admin.describe_group(GROUP)
    errors = sum(ray.get(w.progress.remote(), timeout=30)[1] for w in workers)
    for w in workers:
        ray.get(w.stop.remote(), timeout=60)
    print(
        f"\ngroup chaos seed={SEED} duration={DURATION:.0f}s kills={len(kills)} "
        f"(coordinator {kills.count('coordinator')}, consumer {kills.count('consumer')}, "
        f"offsets leader {kills.count('offsets_leader')}, topic leader {kills.count('topic_leader')}) "
        f"records={sum(end.values())} generation={final['generation']} commit_checks={observed['commit_checks']} "
        f"stable_checks={observed['stable_checks']} member_errors={errors} violations={len(violations)}"
    )
    assert len(kills) >= max(3, int(DURATION / 2.5)), f"the killer only managed {len(kills)} kills"
    assert "consumer" in kills and "coordinator" in kills, f"kills {kills} must include consumers and coordinators"
    assert observed["commit_checks"] > 0 and observed["stable_checks"] > 0, "the watcher saw too little"
    assert not violations, violations[:20]
