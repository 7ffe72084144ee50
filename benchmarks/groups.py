"""Consumer-group benchmark: rebalance latency and commit throughput.

* join -> Stable: a group of N-1 stable members, one more joins; the time from its first
  JoinGroup until every one of the N members holds its assignment of the new generation
  (the group is Stable and ready to consume). N = 1, 2, 4, 8, 16;
  ``group.initial.rebalance.delay.ms`` = 0.
* leave -> Stable: one member of N closes (LeaveGroup); the time until the N-1 others hold
  their new assignment.
* the same leave measurement with real Consumers polling an idle topic (``poll(1000)``): a
  consumer notices the rebalance when its poll loop wakes, i.e. when a long-poll fetch
  (``fetch_max_wait_ms`` = 500) returns, so this adds up to that much to the protocol's time.
* commit throughput: synchronous OffsetCommits of each member's partitions, from one member
  and from 8 members at once (the coordinator merges concurrent appends into one acks=all write).

Members are GroupMembers (the Consumer's group half) on threads of this process, with a
100 ms heartbeat interval: that is how fast existing members learn a rebalance started.

Why: a rebalance stops every member of the group from consuming until it ends, so its
length is the pause an application sees when a consumer joins, leaves or dies. The baseline,
measured in the same run, is the least any coordination of N members on Ray can take: N
calls that meet at one async actor and all return when the last arrives (one barrier
round; the group protocol needs a JoinGroup and a SyncGroup round, and existing members
first learn of the rebalance from a heartbeat). Ratios are kcoord / barrier.
Prints JSON (medians, and every sample).

    python benchmarks/groups.py [--quick] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kcoord.bench.stats import ratio  # noqa: E402

HEARTBEAT_MS = 100
SESSION_MS = 3000
PARTITIONS = 16
QUICK_PARTITIONS = 4  # each partition replica is an actor: --quick keeps setup short


class BenchMember:
    """A GroupMember with a poll thread that wakes as soon as a rebalance is flagged, and
    records when each generation's assignment arrived."""

    def __init__(self, client, group_id: str, topic: str) -> None:
        from kcoord.client.coordinator import GroupMember

        self.assigned_at: dict[int, float] = {}
        self.member = GroupMember(
            client,
            group_id,
            None,
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=HEARTBEAT_MS,
            enable_auto_commit=False,
            partition_assignment_strategy="range",
        )
        self._wake = threading.Event()
        self.member.on_rejoin_needed = self._wake.set
        self.member.subscribe([topic], on_assign=self._on_assign)
        self.join_started = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _on_assign(self, partitions) -> None:
        self.assigned_at[self.member.generation] = time.perf_counter()

    def start(self) -> None:
        self.join_started = time.perf_counter()
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.member.poll()
            except Exception as exc:  # pragma: no cover - reported, the benchmark carries on
                print(f"member error: {exc}", file=sys.stderr)
            self._wake.wait(0.05)
            self._wake.clear()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=30)
        self.member.close()


def wait_generation(members: list[BenchMember], above: int, timeout: float = 60.0) -> tuple[int, float]:
    """Wait until all members hold the same generation > ``above``; returns it and the time
    the last of them got its assignment."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        gens = {m.member.generation for m in members}
        if len(gens) == 1:
            gen = gens.pop()
            if gen > above and all(m.member.state == "stable" and gen in m.assigned_at for m in members):
                return gen, max(m.assigned_at[gen] for m in members)
        time.sleep(0.002)
    raise TimeoutError(f"group did not stabilise above generation {above}")


class Barrier:
    """The baseline: ``arrive(round, n)`` returns once ``n`` calls of that round arrived."""

    def __init__(self) -> None:
        self.rounds: dict[int, list] = {}

    async def arrive(self, round_id: int, n: int) -> int:
        import asyncio

        entry = self.rounds.setdefault(round_id, [asyncio.Event(), 0])
        entry[1] += 1
        if entry[1] >= n:
            entry[0].set()
        await entry[0].wait()
        return entry[1]


def bench_barrier(sizes: list[int], repeats: int) -> dict:
    """One barrier round of N calls, timed from the first call to the last answer."""
    import ray

    barrier = ray.remote(Barrier).options(num_cpus=0, max_concurrency=1000).remote()
    ray.get(barrier.arrive.remote(-1, 1))
    out: dict[str, dict] = {}
    round_id = 0
    for n in sizes:
        samples = []
        for _ in range(repeats + 1):  # the first round of each size warms up
            round_id += 1
            t0 = time.perf_counter()
            ray.get([barrier.arrive.remote(round_id, n) for _ in range(n)], timeout=60)
            samples.append((time.perf_counter() - t0) * 1000)
        out[str(n)] = {"median_ms": median(samples[1:]), "samples_ms": [round(x, 2) for x in samples[1:]]}
    ray.kill(barrier)
    return out


def median(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 1) if xs else None


def bench_rebalances(client, topic: str, sizes: list[int], repeats: int) -> tuple[dict, dict]:
    join: dict[str, dict] = {}
    leave: dict[str, dict] = {}
    for n in sizes:
        group_id = f"bench-join-{n}-{os.getpid()}"
        base = [BenchMember(client, group_id, topic) for _ in range(n - 1)]
        for m in base:
            m.start()
        gen = wait_generation(base, 0)[0] if base else 0
        join_ms: list[float] = []
        leave_ms: list[float] = []
        for _ in range(repeats):
            extra = BenchMember(client, group_id, topic)
            extra.start()
            members = base + [extra]
            gen, done = wait_generation(members, gen)
            join_ms.append((done - extra.join_started) * 1000)
            if n >= 2:
                t0 = time.perf_counter()
                extra.close()  # sends LeaveGroup
                gen, done = wait_generation(base, gen)
                leave_ms.append((done - t0) * 1000)
            else:
                extra.close()  # the group goes Empty; the next generation is still higher
        for m in base:
            m.close()
        join[str(n)] = {"median_ms": median(join_ms), "samples_ms": [round(x, 1) for x in join_ms]}
        if leave_ms:
            leave[str(n)] = {"median_ms": median(leave_ms), "samples_ms": [round(x, 1) for x in leave_ms]}
    return join, leave


def bench_commits(client, topic: str, seconds: float) -> dict:
    from kcoord.client.types import TopicPartition

    out = {}
    for members_count in (1, 8):
        group_id = f"bench-commit-{members_count}-{os.getpid()}"
        members = [BenchMember(client, group_id, topic) for _ in range(members_count)]
        for m in members:
            m.start()
        wait_generation(members, 0)
        counts = [0] * members_count
        offsets = [0] * members_count

        def run(i: int, m: BenchMember, stop_at: float) -> None:
            parts = m.member.assignment() or [TopicPartition(topic, 0)]
            off = 0
            while time.perf_counter() < stop_at:
                off += 1
                m.member.commit({tp: off for tp in parts})
                counts[i] += 1
                offsets[i] += len(parts)

        stop_at = time.perf_counter() + seconds
        threads = [threading.Thread(target=run, args=(i, m, stop_at)) for i, m in enumerate(members)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - t0
        out[f"{members_count}_members"] = {
            "commits_per_s": round(sum(counts) / elapsed, 1),
            "partition_offsets_per_s": round(sum(offsets) / elapsed, 1),
            "commit_latency_ms_mean": round(elapsed * 1000 * members_count / max(1, sum(counts)), 2),
        }
        for m in members:
            m.close()
    return out


class BenchConsumer:
    """A real Consumer in the group, polling on its own thread."""

    def __init__(self, client, group_id: str, topic: str) -> None:
        from kcoord.client.consumer import Consumer

        self.assigned_at: dict[int, float] = {}
        self.consumer = Consumer(
            cluster=client, group_id=group_id, enable_auto_commit=False,
            heartbeat_interval_ms=HEARTBEAT_MS, session_timeout_ms=SESSION_MS,
        )
        self.member = self.consumer._group
        self.consumer.subscribe([topic], on_assign=self._on_assign)
        self.closing_at = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _on_assign(self, partitions) -> None:
        self.assigned_at[self.member.generation] = time.perf_counter()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.consumer.poll(timeout_ms=1000)
        self.closing_at = time.perf_counter()
        self.consumer.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def bench_consumer_leaves(client, topic: str, members: int) -> dict:
    group_id = f"bench-consumers-{os.getpid()}"
    group = [BenchConsumer(client, group_id, topic) for _ in range(members)]
    gen, _ = wait_generation(group, 0)  # type: ignore[arg-type]
    samples = []
    while len(group) > 1:
        leaving = group.pop()
        leaving.close()
        gen, done = wait_generation(group, gen)  # type: ignore[arg-type]
        samples.append((done - leaving.closing_at) * 1000)
    for c in group:
        c.close()
    return {"from_members": members, "median_ms": median(samples), "samples_ms": [round(x, 1) for x in samples]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (< 60 s)")
    parser.add_argument("--out", help="also write the JSON here")
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args()
    repeats = args.repeats or (3 if args.quick else 7)
    commit_seconds = 1.0 if args.quick else 5.0
    partitions = QUICK_PARTITIONS if args.quick else PARTITIONS

    import ray

    from kcoord.cluster.group_coordinators import configure_group_coordinators
    from kcoord.cluster.deploy import deploy, teardown
    from kcoord.cluster.local import start_local_ray
    from kcoord.client.admin import Admin

    started = time.perf_counter()
    start_local_ray()
    name = f"bench-groups-{os.getpid()}"
    client = deploy(name, brokers=3, group_coordinators=1, address=None)
    config = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 1000}
    configure_group_coordinators(client, config)
    results: dict = {
        "benchmark": "groups",
        "group_config": config,
        "heartbeat_interval_ms": HEARTBEAT_MS,
        "session_timeout_ms": SESSION_MS,
        "partitions": partitions,
        "repeats": repeats,
    }
    try:
        topic = "bench-groups"
        Admin(client).create_topic(topic, partitions=partitions, replication_factor=1)
        results["setup_s"] = round(time.perf_counter() - started, 1)
        sizes = [1, 2, 4, 8, 16]
        barrier = bench_barrier(sizes, repeats)
        join, leave = bench_rebalances(client, topic, sizes, repeats)
        results["join_to_stable_ms"] = join
        results["leave_to_stable_ms"] = leave
        results["baseline_barrier_ms"] = barrier
        results["ratios_vs_barrier"] = {
            "join": {n: ratio(join[n]["median_ms"], barrier[n]["median_ms"]) for n in join},
            "leave": {n: ratio(leave[n]["median_ms"], barrier[n]["median_ms"]) for n in leave},
        }
        results["consumer_leave_to_stable_ms"] = bench_consumer_leaves(client, topic, 4 if args.quick else 8)
        results["commits"] = bench_commits(client, topic, commit_seconds)
        results["targets"] = {
            "join_to_stable_16_members_le_1000_ms": (join["16"]["median_ms"] or 1e9) <= 1000,
            "leave_to_stable_le_500_ms": all((v["median_ms"] or 1e9) <= 500 for v in leave.values()),
        }
    finally:
        teardown(name, delete_data=True, address=None)
        ray.shutdown()
    results["total_s"] = round(time.perf_counter() - started, 1)
    results["load_average_1m"] = round(os.getloadavg()[0], 1)  # this machine is shared
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
