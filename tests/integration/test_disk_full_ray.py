"""A real full disk (KIP-112) on real Ray: one replica's log directory is a small tmpfs that
a producer with acks=all fills. That replica must go offline with KAFKA_STORAGE_ERROR
(ENOSPC), the controller must take it out of the ISR -- and move leadership when it led --,
writes must go on with RF=3 and min.insync.replicas=2, every acknowledged record must read
back, the rest of the cluster must stay healthy, and once the disk has room again a
restarted replica must rejoin the ISR.

Mounting needs root (or CAP_SYS_ADMIN): without it the tests skip and say why.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import ray

from kcoord.actors.replica import replica_dir
from kcoord.client.admin import Admin
from kcoord.client.consumer import Consumer
from kcoord.client.producer import Producer
from kcoord.cluster.deploy import deploy_info

from consumer_support import drain
from waiting import wait_until

pytestmark = pytest.mark.ray

VICTIM = 1  # the broker whose log directory (of partition 0) is on the small tmpfs
VALUE_BYTES = 4000
DISK = "1m"


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def _mount_problem() -> str | None:
    """Why a tmpfs cannot be mounted here (None when it can)."""
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root"
    with tempfile.TemporaryDirectory() as probe:
        r = _run("mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", probe)
        if r.returncode != 0:
            return f"mount -t tmpfs is not permitted here: {r.stderr.strip()}"
        _run("umount", probe)
    return None


@pytest.fixture
def small_disk():
    """``mount(path, size)``: a tmpfs of ``size`` at ``path``; ``grow(path, size)`` gives it
    room again. Everything is unmounted at teardown (after the test's topics are deleted)."""
    problem = _mount_problem()
    if problem:
        pytest.skip(problem)
    mounted: list[Path] = []

    class Disk:
        @staticmethod
        def mount(path: Path, size: str) -> None:
            path.mkdir(parents=True, exist_ok=True)
            r = _run("mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path))
            assert r.returncode == 0, r.stderr
            mounted.append(path)

        @staticmethod
        def grow(path: Path, size: str) -> None:
            r = _run("mount", "-o", f"remount,size={size}", str(path))
            assert r.returncode == 0, r.stderr

    yield Disk
    for path in reversed(mounted):
        if _run("umount", str(path)).returncode != 0:
            _run("umount", "-l", str(path))  # a replica process still exiting holds a file


def describe(cluster, topic, partition, broker) -> dict:
    return ray.get(cluster.replica(topic, partition, broker, fresh=True).describe.remote(), timeout=30)


def value(i: int) -> bytes:
    return b"%08d" % i + b"x" * (VALUE_BYTES - 8)


@pytest.mark.parametrize("victim_role", ["follower", "leader"])
def test_a_full_disk_takes_one_replica_offline_and_writes_go_on(kcluster, topic_name, small_disk, victim_role):
    assignment = {0: [0, VICTIM, 2] if victim_role == "follower" else [VICTIM, 0, 2], 1: [2, 0, VICTIM]}
    directory = replica_dir(deploy_info(kcluster.name)["data_dir"], topic_name, 0, VICTIM)
    small_disk.mount(directory, DISK)
    admin = Admin(kcluster)
    config = {"min.insync.replicas": 2, "segment.bytes": 256 * 1024}
    admin.create_topic(topic_name, partitions=2, replication_factor=3, config=config, assignment=assignment)
    first = kcluster.partition_metadata(topic_name, 0, refresh=True)
    assert first.leader == assignment[0][0] and first.isr == assignment[0]
    offline_logs_before = admin.describe_cluster()["metrics"].get("offline_log_replicas", 0)

    producer = Producer(kcluster, acks="all", linger_ms=2)
    sent: list[tuple[int, int, object]] = []  # (partition, i, future)
    i = 0

    def send(partition: int, n: int) -> None:
        nonlocal i
        for _ in range(n):
            sent.append((partition, i, producer.send(topic_name, value(i), partition=partition)))
            i += 1
        producer.flush(timeout=120)

    # Write until the tmpfs is full and the victim's log offline (a 1 MiB disk holds ~250
    # records of 4 kB; give up well past that) ...
    deadline = time.monotonic() + 120
    while describe(kcluster, topic_name, 0, VICTIM)["role"] != "offline":
        assert time.monotonic() < deadline and i < 2000, f"the victim never went offline after {i} records"
        send(0, 25)
    filled_after = i
    # ... and as much again and more: writes go on with the two other replicas.
    send(0, 400)
    send(1, 50)
    acked = {(p, j): f.get(timeout=120) for p, j, f in sent}  # raises if any record failed
    producer.close()

    victim = describe(kcluster, topic_name, 0, VICTIM)
    assert victim["role"] == "offline" and "No space left on device" in victim["offline_reason"], victim
    md = kcluster.partition_metadata(topic_name, 0, refresh=True)
    assert md.leader in (0, 2) and VICTIM not in md.isr and sorted(md.isr) == [0, 2], md
    assert md.offline_replicas == [VICTIM], md
    if victim_role == "leader":
        assert md.leader_epoch > first.leader_epoch, "leadership moved away from the full disk"
    described = {p["partition"]: p for p in admin.describe_topic(topic_name)["partitions"]}
    assert described[0]["offline_replicas"] == [VICTIM]
    cluster = admin.describe_cluster()
    assert cluster["metrics"]["offline_log_replicas"] == offline_logs_before + 1
    # the other partition (the victim's disk there is fine) and the controller are healthy
    other = kcluster.partition_metadata(topic_name, 1, refresh=True)
    assert other.leader == 2 and sorted(other.isr) == [0, 1, 2] and other.offline_replicas == [], other
    assert describe(kcluster, topic_name, 1, VICTIM)["role"] == "follower"
    assert cluster["controller_epoch"] >= 1

    # Every acknowledged record reads back at its offset, exactly once.
    consumer = Consumer(topic_name, cluster=kcluster, auto_offset_reset="earliest")
    got = {(r.partition, r.offset): r.value for r in drain(consumer, len(acked), timeout=120)}
    consumer.close()
    for (p, j), meta in acked.items():
        assert got.get((meta.partition, meta.offset)) == value(j), f"acked record {j} (partition {p}) lost"
    assert len(got) == len(acked), "duplicates or records never acknowledged"

    # The disk gets room again and the replica is restarted (a new process): it rejoins.
    small_disk.grow(directory, "64m")
    name = kcluster.replica_name(topic_name, 0, VICTIM)
    ray.kill(kcluster.replica(topic_name, 0, VICTIM, fresh=True), no_restart=False)

    def rejoined():
        kcluster.forget(name)
        p = kcluster.partition_metadata(topic_name, 0, refresh=True)
        return VICTIM in p.isr and p.offline_replicas == []

    wait_until(rejoined, timeout=90, what=f"replica {VICTIM} to rejoin the ISR after its restart")
    assert describe(kcluster, topic_name, 0, VICTIM)["role"] in ("leader", "follower")
    assert admin.describe_cluster()["metrics"]["offline_log_replicas"] == offline_logs_before
    print(
        f"\n[{victim_role}] disk full after ~{filled_after} records of {VALUE_BYTES} B; {len(acked)} acked, all read back; "
        f"failover_ms_last={cluster['metrics'].get('failover_ms_last')}"
    )
