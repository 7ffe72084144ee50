"""Failover benchmark: kill the partition leader 20 times under steady acks=all load.

For every kill (alternating ``ray.kill`` and SIGKILL of the actor process) it measures:

* ``client_ms``: kill -> first acknowledgement of a record sent after the killed process
  was gone (what a producing application observes; includes detection, election, metadata
  refresh, retry). ``ray.kill`` returns before the process exits, and the old leader may
  still acknowledge what is sent meanwhile; those acknowledgements do not count;
* ``metadata_ms``: kill -> the controller's metadata names a new leader;
* the controller's own figure (failure detected -> new leader accepted LeaderAndIsr).

At the end every acknowledged record is checked to be in the log at its acked offset.

Why: ``acks=all`` promises that nothing acknowledged is lost when a leader dies; what it
costs is the time a producer cannot write. The baseline, measured in the same run before the
kills, is what Ray alone offers: a plain actor with ``max_restarts=-1``, killed the same
two ways, timed until it answers a call again (``ray_restart_ms``). kcoord does not wait
for the dead replica to come back (it elects another in-sync replica), so its figure can
be below the baseline. Ratios are kcoord / baseline (lower is better for kcoord).

Prints JSON.  ``python benchmarks/failover.py [--quick] [--kills N] [--out FILE]``
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ray  # noqa: E402

from kcoord.bench.process_tree import running  # noqa: E402
from kcoord.bench.stats import percentile as pct  # noqa: E402
from kcoord.bench.stats import ratio, summary  # noqa: E402

TOPIC = "failover"


class Restartable:
    """The baseline: a plain actor that Ray restarts after it dies."""

    def pid(self) -> int:
        return os.getpid()


def ray_restart_samples(count: int) -> list[float]:
    """Kill a restartable plain actor ``count`` times (alternating ``ray.kill`` and
    SIGKILL, as for the leaders); ms from the kill until a new process answers."""
    actor = ray.remote(Restartable).options(num_cpus=0, max_restarts=-1).remote()
    out: list[float] = []
    try:
        for i in range(count):
            pid = ray.get(actor.pid.remote(), timeout=60)
            t0 = time.monotonic()
            if i % 2:
                os.kill(pid, signal.SIGKILL)
            else:
                ray.kill(actor, no_restart=False)
            while time.monotonic() - t0 < 60:
                try:
                    if ray.get(actor.pid.remote(), timeout=1) != pid:
                        out.append((time.monotonic() - t0) * 1000)
                        break
                except Exception:  # dead or restarting: ask again
                    pass
    finally:
        ray.kill(actor, no_restart=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 kills instead of 20")
    parser.add_argument("--kills", type=int, default=None)
    parser.add_argument("--rate", type=int, default=5000, help="records/s offered")
    parser.add_argument("--baseline-restarts", type=int, default=None, help="kills of the plain-actor baseline (default 10, 3 with --quick)")
    parser.add_argument("--out")
    args = parser.parse_args()
    kills = args.kills or (5 if args.quick else 20)
    restarts = args.baseline_restarts or (3 if args.quick else 10)
    started = time.perf_counter()

    import kcoord
    from kcoord.cluster.deploy import deploy, teardown
    from kcoord.cluster.local import start_local_ray
    from kcoord import records
    from kcoord.client.admin import Admin
    from kcoord.protocol.replication import FetchRequest, FetchResponse

    start_local_ray()
    name = f"bench-failover-{os.getpid()}"
    client = deploy(name, brokers=3, group_coordinators=0, address=None, controller_config={"heartbeat_interval_ms": 100})
    result: dict = {"benchmark": "failover", "quick": args.quick, "controller_config": {"heartbeat_interval_ms": 100}, "kills": kills, "offered_records_per_s": args.rate, "load_average_at_start": [round(x, 1) for x in os.getloadavg()]}
    try:
        baseline = ray_restart_samples(restarts)
        Admin(client).create_topic(TOPIC, partitions=1, replication_factor=3, config={"min.insync.replicas": 2})
        producer = kcoord.Producer(client, acks="all", linger_ms=2)
        acked: list[tuple[float, float, int, bytes]] = []  # (sent, acked, offset, value)
        lock = threading.Lock()
        stop = threading.Event()
        seq = [0]

        def load() -> None:
            per_tick = max(1, args.rate // 200)
            while not stop.is_set():
                for _ in range(per_tick):
                    value = b"%012d" % seq[0]
                    seq[0] += 1
                    sent = time.monotonic()

                    def done(meta, sent=sent, value=value):
                        with lock:
                            acked.append((sent, time.monotonic(), meta.offset, value))

                    producer.send(TOPIC, value=value).add_callback(done)
                stop.wait(0.005)

        loader = threading.Thread(target=load, daemon=True)
        loader.start()
        client_ms, metadata_ms, kinds = [], [], []
        for i in range(kills):
            # let the previous victim rejoin the ISR so every kill starts from a full ISR
            deadline = time.monotonic() + 60
            while len(client.partition_metadata(TOPIC, 0, refresh=True).isr) < 3 and time.monotonic() < deadline:
                stop.wait(0.05)
            md = client.partition_metadata(TOPIC, 0, refresh=True)
            handle = client.replica(TOPIC, 0, md.leader)
            pid = ray.get(handle.describe.remote())["pid"]
            how = "SIGKILL" if i % 2 else "ray.kill"
            t0 = time.monotonic()
            if how == "SIGKILL":
                os.kill(pid, signal.SIGKILL)
            else:
                ray.kill(handle, no_restart=False)
            gone_by = t0 + 30
            while running(pid) and time.monotonic() < gone_by:
                stop.wait(0.001)
            t_gone = time.monotonic()
            new_meta = None
            while time.monotonic() - t0 < 60:
                m = client.partition_metadata(TOPIC, 0, refresh=True)
                if m.leader >= 0 and m.leader_epoch > md.leader_epoch:
                    new_meta = time.monotonic() - t0
                    break
                stop.wait(0.005)
            first = None
            while time.monotonic() - t0 < 60 and first is None:
                with lock:
                    after = [a for s, a, _, _ in acked if s > t_gone]
                first = min(after) - t0 if after else None
                if first is None:
                    stop.wait(0.005)
            client.forget(client.replica_name(TOPIC, 0, md.leader))
            if new_meta is not None:
                metadata_ms.append(new_meta * 1000)
            if first is not None:
                client_ms.append(first * 1000)
                kinds.append(how)
        stop.set()
        loader.join()
        producer.flush(timeout=120)
        producer.close()
        # every acknowledged record must be where it was acked
        log: dict[int, bytes] = {}
        offset = 0
        while True:
            resp = client.call_leader(TOPIC, 0, "fetch", lambda e: FetchRequest(TOPIC, 0, offset, max_bytes=8 << 20, max_wait_ms=0, current_leader_epoch=e), FetchResponse)
            got = list(records.iter_records(resp.records, from_offset=offset))
            if not got:
                break
            for r in got:
                log[r.offset] = r.value
            offset = got[-1].offset + 1
        lost = sum(1 for _, _, off, v in acked if off >= 0 and log.get(off) != v)
        metrics = Admin(client).describe_cluster()["metrics"]
        result.update(
            {
                "client_failover_ms": summary(client_ms, 0),
                "metadata_failover_ms": summary(metadata_ms, 0),
                "controller_detect_to_leader_ms": {"p50": metrics["failover_ms_p50"], "p99": metrics["failover_ms_p99"], "max": metrics["failover_ms_max"]},
                "acked_records": len(acked),
                "lost": lost,
                "samples_ms": [round(x) for x in client_ms],
                "samples_kill": kinds,
                "baseline_ray_restart_ms": {**summary(baseline, 0), "samples_ms": [round(x) for x in baseline]},
                "ratios_vs_ray_restart": {
                    "client_p50": ratio(pct(client_ms, 0.5), pct(baseline, 0.5)),
                    "client_p99": ratio(pct(client_ms, 0.99), pct(baseline, 0.99)),
                },
                "targets": {"p50_ms": 500, "p99_ms": 2000, "lost": 0},
            }
        )
        cf = result["client_failover_ms"]
        result["targets_met"] = cf.get("p50", math.inf) <= 500 and cf.get("p99", math.inf) <= 2000 and lost == 0
    finally:
        teardown(name, delete_data=True, address=None)
        ray.shutdown()
    result["wall_seconds"] = round(time.perf_counter() - started, 1)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
