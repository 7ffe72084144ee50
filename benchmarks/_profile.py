"""Where the time of the produce path goes (not a benchmark: ``kcoord bench`` skips files
starting with ``_``; PERFORMANCE.md quotes its output).

On a local 3-broker cluster, topic of 6 partitions, RF=3, acks=all, 100-byte values:

1. cProfile of the calling thread in ``send()`` (N records, then ``flush()``) and in
   ``send_batch()``: the caller's own cost per record;
2. ``py-spy record`` of this whole process (every thread, so also the Producer's sender
   thread that packs batches and calls the leaders) during a ``send()`` loop;
3. ``py-spy record`` of a partition leader's ReplicaActor process and of one of its
   followers while ``send_batch()`` writes only to that partition.

Each py-spy profile is kept as speedscope JSON (open it at https://www.speedscope.app) and
summed up per function (self time / total time, idle waits left out). Prints JSON.

    python benchmarks/_profile.py [--seconds 8] [--out DIR]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ray  # noqa: E402

from kcoord.bench import speedscope  # noqa: E402

VALUE = 100
PARTITIONS = 6
TOPIC = "profile"


def py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(found).exists():
        raise SystemExit("py-spy not found (pip install py-spy)")
    return found


def cprofile_top(prof: cProfile.Profile, limit: int = 12) -> list[dict]:
    stats = pstats.Stats(prof)
    total = sum(v[2] for v in stats.stats.values()) or 1.0  # type: ignore[attr-defined]
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:limit]  # type: ignore[attr-defined]
    return [
        {"function": f"{func} ({Path(file).name}:{line})", "calls": nc, "self_s": round(tt, 3), "self_share": round(tt / total, 3), "cumulative_s": round(ct, 3)}
        for (file, line, func), (cc, nc, tt, ct, _callers) in rows
    ]


class Recorder:
    """``py-spy record`` of one process for a fixed time, in the background."""

    def __init__(self, pid: int, seconds: float, out: Path) -> None:
        self.out = out
        cmd = [py_spy(), "record", "--pid", str(pid), "--duration", str(int(seconds)), "--rate", "200", "--format", "speedscope", "--output", str(out), "--nonblocking"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def summary(self, limit: int = 15) -> dict:
        _, err = self.proc.communicate(timeout=120)
        if self.proc.returncode != 0 or not self.out.exists():
            return {"error": (err or "").strip().splitlines()[-1:] or ["py-spy failed"]}
        costs, samples = speedscope.top_costs(speedscope.load(self.out), limit)
        return {"file": self.out.name, "samples": samples, "top_self": [{"function": c.function, "self": round(c.self_share, 3), "total": round(c.total_share, 3)} for c in costs]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="length of each py-spy recording")
    parser.add_argument("--records", type=int, default=300_000, help="records for the cProfile runs")
    parser.add_argument("--out", type=Path, default=Path("bench-results/profile"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    import kcoord
    from kcoord.client.admin import Admin
    from kcoord.client.producer import Producer

    pool = [os.urandom(VALUE) for _ in range(4096)]
    values = [pool[i % len(pool)] for i in range(args.records)]
    report: dict = {"topic": {"partitions": PARTITIONS, "replication_factor": 3, "acks": "all", "value_bytes": VALUE}}
    with kcoord.local_cluster(brokers=3, group_coordinators=0) as cluster:
        Admin(cluster).create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3, config={"min.insync.replicas": 2})
        producer = Producer(cluster, acks="all")
        try:
            producer.send(TOPIC, values[0]).get(60)
            # 1. cProfile of the caller's thread
            prof = cProfile.Profile()
            t0 = time.perf_counter()
            prof.enable()
            for v in values:
                producer.send(TOPIC, v)
            producer.flush(600)
            prof.disable()
            report["cprofile_send"] = {"records_per_s_profiled": round(len(values) / (time.perf_counter() - t0)), "top": cprofile_top(prof)}
            prof = cProfile.Profile()
            t0 = time.perf_counter()
            prof.enable()
            producer.send_batch(TOPIC, values=values, timeout=600)
            prof.disable()
            report["cprofile_send_batch"] = {"records_per_s_profiled": round(len(values) / (time.perf_counter() - t0)), "top": cprofile_top(prof)}

            # 2. py-spy of this process (all threads) during send()
            rec = Recorder(os.getpid(), args.seconds, args.out / "driver_send.speedscope.json")
            sent, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < args.seconds + 1:
                for v in values[:50_000]:
                    producer.send(TOPIC, v)
                sent += 50_000
                producer.flush(600)
            report["pyspy_driver_send"] = {"records_per_s": round(sent / (time.perf_counter() - t0)), **rec.summary()}

            # 3. py-spy of partition 0's leader and one follower during send_batch to it
            md = cluster.partition_metadata(TOPIC, 0, refresh=True)
            follower = next(b for b in md.replicas if b != md.leader)
            leader_pid = ray.get(cluster.replica(TOPIC, 0, md.leader).describe.remote())["pid"]
            follower_pid = ray.get(cluster.replica(TOPIC, 0, follower).describe.remote())["pid"]
            recs = {"pyspy_leader_send_batch": Recorder(leader_pid, args.seconds, args.out / "leader_send_batch.speedscope.json"),
                    "pyspy_follower_send_batch": Recorder(follower_pid, args.seconds, args.out / "follower_send_batch.speedscope.json")}
            sent, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < args.seconds + 1:
                producer.send_batch(TOPIC, values=values, partition=0, timeout=600)
                sent += len(values)
            rate = round(sent / (time.perf_counter() - t0))
            for key, r in recs.items():
                report[key] = {"records_per_s": rate, **r.summary()}
        finally:
            producer.close()
    text = json.dumps(report, indent=2)
    print(text)
    (args.out / "profile.json").write_text(text + "\n")


if __name__ == "__main__":
    main()
