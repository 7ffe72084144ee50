"""Chaos: kill leaders, followers and the FailoverCoordinator while producers write.

Producers with acks=all and idempotence write sequence-numbered records to an RF=3 topic
with min.insync.replicas=2, while a killer kills a random leader, follower or the
controller every 0.5-2 s, using both ``ray.kill`` and SIGKILL of the actor's process. A
watcher checks, while it happens, that a leader's HW never moves backwards and that no
fetch returns records at or above the HW it was served under. At the end the cluster is
healed and invariants 1-5 of the README are checked against everything acknowledged.

Runs for ``KCOORD_CHAOS_SECONDS`` (short in ``make test``; ``make chaos DURATION=600``).
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from dataclasses import dataclass, field

import pytest
import ray

import kcoord
from kcoord import records
from kcoord.client.admin import Admin
from kcoord.protocol.replication import FetchRequest, FetchResponse
from waiting import wait_until

pytestmark = [pytest.mark.chaos, pytest.mark.ray]

DURATION = float(os.environ.get("KCOORD_CHAOS_SECONDS", "20"))
SEED = int(os.environ.get("KCOORD_CHAOS_SEED", str(int(time.time()))))
TOPIC = "chaos"
PARTITIONS = 3
PRODUCERS = 2


@dataclass
class Ledger:
    """Everything acknowledged to the producers, and when."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    acked: list = field(default_factory=list)  # (producer, seq, partition, offset, sent, acked)
    failed: int = 0

    def ack(self, producer: int, seq: int, sent: float, meta) -> None:
        with self.lock:
            self.acked.append((producer, seq, meta.partition, meta.offset, sent, time.monotonic()))

    def fail(self, _exc) -> None:
        with self.lock:
            self.failed += 1


@dataclass
class Kill:
    at: float
    target: str  # "leader" | "follower" | "controller"
    how: str  # "ray.kill" | "SIGKILL"
    partition: int = -1
    broker: int = -1


def value_of(producer: int, seq: int) -> bytes:
    return b"p%d:%d" % (producer, seq)


def parse(value: bytes) -> tuple[int, int]:
    p, s = value[1:].split(b":")
    return int(p), int(s)


def produce_loop(cluster, index: int, ledger: Ledger, stop: threading.Event) -> None:
    producer = kcoord.Producer(cluster, acks="all", linger_ms=2, delivery_timeout_ms=120_000, request_timeout_ms=5_000)
    seq = 0
    try:
        while not stop.is_set():
            for _ in range(20):
                s = seq
                fut = producer.send(TOPIC, value=value_of(index, s), key=b"k%d" % (s % 7))
                fut.add_callback(lambda meta, s=s, sent=time.monotonic(): ledger.ack(index, s, sent, meta))
                fut.add_errback(ledger.fail)
                seq += 1
            stop.wait(0.01)  # pacing: ~2k records/s per producer
        producer.flush(timeout=180)
    finally:
        producer.close(timeout=60)


def kill_loop(cluster, rng: random.Random, kills: list[Kill], stop: threading.Event) -> None:
    plan: list[str] = []
    while not stop.wait(rng.uniform(0.5, 2.0)):
        if not plan:  # every kind of target in every round, in a random order
            plan = ["leader", "leader", "follower", "follower", "controller"]
            rng.shuffle(plan)
        target = plan.pop()
        how = rng.choice(["ray.kill", "SIGKILL"])
        try:
            if target == "controller":
                handle = cluster.controller
                if how == "SIGKILL":
                    os.kill(ray.get(handle.pid.remote(), timeout=2), signal.SIGKILL)
                else:
                    ray.kill(handle, no_restart=False)
                kills.append(Kill(time.monotonic(), target, how))
                continue
            partition = rng.randrange(PARTITIONS)
            md = cluster.partition_metadata(TOPIC, partition, refresh=True)
            if md.leader < 0:
                continue
            broker = md.leader if target == "leader" else rng.choice([b for b in md.replicas if b != md.leader])
            handle = cluster.replica(TOPIC, partition, broker, fresh=True)
            if how == "SIGKILL":
                os.kill(ray.get(handle.describe.remote(), timeout=2)["pid"], signal.SIGKILL)
            else:
                ray.kill(handle, no_restart=False)
            kills.append(Kill(time.monotonic(), target, how, partition, broker))
        except Exception:
            continue  # the target was already down or restarting: pick another next time
        finally:
            cluster.invalidate(TOPIC)


def watch_loop(cluster, violations: list[str], leaders_seen: dict, stop: threading.Event) -> None:
    """Invariants 3 and 4 live. Every replica that claims leadership is recorded with its
    epoch (two brokers claiming one epoch violate 3; a replica's epoch must only grow);
    per leader tenure (incarnation, epoch) the HW never decreases; a fetch never returns a
    record at or above the HW it was served under."""
    hw_seen: dict[tuple, int] = {}
    epoch_seen: dict[tuple, int] = {}
    while not stop.wait(0.05):
        for partition in range(PARTITIONS):
            try:
                md = cluster.partition_metadata(TOPIC, partition, refresh=True)
                refs = {b: cluster.replica(TOPIC, partition, b, fresh=True).describe.remote() for b in md.replicas}
            except Exception:
                continue
            for broker, ref in refs.items():
                try:
                    info = ray.get(ref, timeout=2)
                except Exception:
                    continue
                tenure = (partition, broker, info["incarnation"])
                if info["leader_epoch"] < epoch_seen.get(tenure, -1):
                    violations.append(f"epoch went back on {tenure}: {epoch_seen[tenure]} -> {info['leader_epoch']}")
                epoch_seen[tenure] = max(epoch_seen.get(tenure, -1), info["leader_epoch"])
                if info["role"] != "leader":
                    continue
                leaders_seen.setdefault((partition, info["leader_epoch"]), set()).add(broker)
                key = tenure + (info["leader_epoch"],)
                if info["high_watermark"] < hw_seen.get(key, -1):
                    violations.append(f"HW went back on {key}: {hw_seen[key]} -> {info['high_watermark']}")
                hw_seen[key] = max(hw_seen.get(key, -1), info["high_watermark"])
                try:
                    start = max(info["log_start_offset"], info["high_watermark"] - 50)
                    req = FetchRequest(TOPIC, partition, start, max_bytes=1 << 20, max_wait_ms=0, current_leader_epoch=info["leader_epoch"])
                    resp = FetchResponse.decode(ray.get(cluster.replica(TOPIC, partition, broker, fresh=True).fetch.remote(req.encode()), timeout=2))
                except Exception:
                    continue
                if resp.error_code == 0:
                    for rec in records.iter_records(resp.records):
                        if rec.offset >= resp.high_watermark:
                            violations.append(f"fetch on {partition} returned offset {rec.offset} >= HW {resp.high_watermark}")


def healed(cluster) -> bool:
    for partition in range(PARTITIONS):
        md = cluster.partition_metadata(TOPIC, partition, refresh=True)
        if md.leader < 0 or len(md.isr) != 3:
            return False
        infos = [ray.get(cluster.replica(TOPIC, partition, b, fresh=True).describe.remote(), timeout=5) for b in md.replicas]
        leader = [i for i in infos if i["role"] == "leader"]
        if len(leader) != 1 or any(i["log_end_offset"] != leader[0]["high_watermark"] for i in infos):
            return False
    return True


def read_partition(cluster, partition: int) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    offset = 0
    while True:
        resp = cluster.call_leader(TOPIC, partition, "fetch", lambda e: FetchRequest(TOPIC, partition, offset, max_bytes=8 << 20, max_wait_ms=0, current_leader_epoch=e), FetchResponse)
        assert resp.error_code == 0, resp
        got = list(records.iter_records(resp.records, from_offset=offset))
        if not got:
            return out
        for rec in got:
            out[rec.offset] = rec.value
        offset = got[-1].offset + 1


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def test_no_acknowledged_write_lost_under_actor_kills(chaos_cluster):
    cluster = chaos_cluster
    Admin(cluster).create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3, config={"min.insync.replicas": 2})
    rng = random.Random(SEED)
    ledger, kills, violations, leaders_seen = Ledger(), [], [], {}
    stop_kill, stop_produce = threading.Event(), threading.Event()
    producers = [threading.Thread(target=produce_loop, args=(cluster, i, ledger, stop_produce), daemon=True) for i in range(PRODUCERS)]
    killer = threading.Thread(target=kill_loop, args=(cluster, rng, kills, stop_kill), daemon=True)
    watcher = threading.Thread(target=watch_loop, args=(cluster, violations, leaders_seen, stop_kill), daemon=True)
    for t in producers + [watcher]:
        t.start()
    wait_until(lambda: len(ledger.acked) > 100, timeout=60, what="producers to get going")
    killer.start()
    deadline = time.monotonic() + DURATION
    while time.monotonic() < deadline and killer.is_alive():
        stop_kill.wait(0.2)
    stop_kill.set()
    killer.join(timeout=30)
    watcher.join(timeout=30)
    stop_produce.set()
    for t in producers:
        t.join(timeout=300)
        assert not t.is_alive(), "a producer did not finish flushing"

    wait_until(lambda: healed(cluster), timeout=180, interval=0.2, what="the cluster to heal (every ISR full, every replica caught up)")

    # -- invariant 1: every acknowledged record is at the offset it was acked with -------
    logs = {p: read_partition(cluster, p) for p in range(PARTITIONS)}
    lost, unknown_offset = [], 0
    for producer, seq, partition, offset, _, _ in ledger.acked:
        want = value_of(producer, seq)
        if offset < 0:  # an idempotent duplicate older than the dedup window
            unknown_offset += 1
            if want not in logs[partition].values():
                lost.append((partition, offset, want))
        elif logs[partition].get(offset) != want:
            lost.append((partition, offset, want, logs[partition].get(offset)))

    # -- invariant 2: replicas hold identical bytes ------------------------------------------
    divergent = []
    for p in range(PARTITIONS):
        md = cluster.partition_metadata(TOPIC, p, refresh=True)
        copies = [ray.get(cluster.replica(TOPIC, p, b, fresh=True).read_log.remote(0), timeout=60) for b in md.replicas]
        if not all(c == copies[0] for c in copies):
            divergent.append(p)

    # -- invariant 3: one leader per epoch (watched live); epochs only grow along the log ---
    epoch_problems = [f"partition {p} epoch {e} had leaders {sorted(b)}" for (p, e), b in leaders_seen.items() if len(b) > 1]
    for p in range(PARTITIONS):
        md = cluster.partition_metadata(TOPIC, p, refresh=True)
        infos = [ray.get(cluster.replica(TOPIC, p, b, fresh=True).describe.remote(), timeout=5) for b in md.replicas]
        if [i["broker"] for i in infos if i["role"] == "leader"] != [md.leader]:
            epoch_problems.append((p, "leaders", [(i["broker"], i["role"], i["leader_epoch"]) for i in infos]))
        epochs = [h.leader_epoch for _, h in records.iter_headers(ray.get(cluster.replica(TOPIC, p, md.leader, fresh=True).read_log.remote(0)))]
        if epochs != sorted(epochs):
            epoch_problems.append((p, "batch epochs decrease"))

    # -- invariant 5: per producer and partition, no duplicate and no reordering -------------
    duplicated, reordered = 0, 0
    for p, log in logs.items():
        last: dict[int, int] = {}
        seen: set[bytes] = set()
        for offset in sorted(log):
            v = log[offset]
            if v in seen:
                duplicated += 1
            seen.add(v)
            producer, seq = parse(v)
            if seq <= last.get(producer, -1):
                reordered += 1
            last[producer] = max(last.get(producer, -1), seq)

    # -- failover times: leader kill -> first ack of a record sent after the kill -------------
    failovers = []
    for k in kills:
        if k.target == "leader":
            later = [a for _, _, partition, _, sent, a in ledger.acked if partition == k.partition and sent > k.at]
            if later:
                failovers.append(min(later) - k.at)
    metrics = Admin(cluster).describe_cluster()["metrics"]
    print(
        f"\nchaos seed={SEED} duration={DURATION:.0f}s kills={len(kills)} "
        f"({sum(k.target == 'leader' for k in kills)} leader, {sum(k.target == 'follower' for k in kills)} follower, "
        f"{sum(k.target == 'controller' for k in kills)} controller) acked={len(ledger.acked)} lost={len(lost)} "
        f"duplicated={duplicated} out_of_order={reordered} failed_sends={ledger.failed} "
        f"failover_p50={percentile(failovers, 0.5):.3f}s failover_p99={percentile(failovers, 0.99):.3f}s "
        f"controller_failover_ms_p50={metrics['failover_ms_p50']:.0f} p99={metrics['failover_ms_p99']:.0f} "
        f"leader_epochs_watched={len(leaders_seen)}"
    )
    assert len(kills) >= max(3, int(DURATION / 2.5)), f"the killer only managed {len(kills)} kills"
    assert not lost, f"{len(lost)} acknowledged records lost (partition, offset, value, found): {lost[:20]}"
    assert not violations, violations[:20]
    assert not divergent, f"replicas diverge on partitions {divergent}"
    assert not epoch_problems, epoch_problems
    assert len(leaders_seen) >= PARTITIONS, "the watcher saw too little to check invariant 3"
    assert duplicated == 0 and reordered == 0, f"idempotence broken: {duplicated} duplicated, {reordered} out of order"
