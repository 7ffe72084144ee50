"""Security benchmark: the Kafka listener over SASL_SSL (SCRAM-SHA-512 over TLS) against
PLAINTEXT on the same cluster in the same run, and what authentication costs per
connection. Prints JSON.

    python -m benchmarks.security [--quick] [--out FILE] [--records N] [--rounds R]

One 3-broker cluster, one topic (6 partitions, RF=3, acks=all, min.insync.replicas=2,
100-byte values). Each round restarts the listener as PLAINTEXT and as SASL_SSL (the
order alternates round by round, so drift favours neither) and in each:

* ``produce``: confluent-kafka (librdkafka; idempotent, linger.ms=5, 5 requests in flight)
  writes N records, from the first produce() to the end of flush(), connected and with its
  producer id before the clock starts;
* ``consume``: kcat (librdkafka in C: no Python per record) reads those N records,
  starting at the round's first timestamp (``-o s@MS``), timed from its first record.

Ratios are SASL_SSL/PLAINTEXT of the medians over the rounds (goal: >= 0.8).
``connect``: aiokafka opens a connection and sends one Metadata request, M times in a row,
for PLAINTEXT, TLS without SASL, and SASL_SSL with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512;
``auth_cost_ms`` is each median minus PLAINTEXT's (TLS handshake, SASL exchange: PLAIN's
PBKDF2 runs on the listener, SCRAM's on the client).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

VALUE = 100
USER, PASSWORD = "bench", "bench-" + uuid.uuid4().hex[:8]
MECHANISM = "SCRAM-SHA-512"


def rate(n: int, seconds: float) -> dict:
    return {"records_per_s": round(n / seconds), "mb_per_s": round(n * VALUE / seconds / 1e6, 2), "seconds": round(seconds, 3)}


def librdkafka_config(bootstrap: str, secure: bool, ca: str) -> dict:
    cfg = {"bootstrap.servers": bootstrap}
    if secure:
        cfg.update({"security.protocol": "SASL_SSL", "sasl.mechanism": MECHANISM, "sasl.username": USER, "sasl.password": PASSWORD, "ssl.ca.location": ca})
    return cfg


def produce(cfg: dict, topic: str, values: list[bytes]) -> float:
    from confluent_kafka import Producer

    p = Producer({**cfg, "acks": "all", "enable.idempotence": True, "linger.ms": 5, "batch.size": 1 << 20, "queue.buffering.max.messages": 1_000_000})
    p.produce(topic, values[0])
    p.flush(60)  # connections, authentication, metadata and producer id outside the timing
    errors: list = []

    def cb(err, _msg) -> None:
        if err:
            errors.append(err)

    t = time.perf_counter()
    for v in values:
        while True:
            try:
                p.produce(topic, v, on_delivery=cb)
                break
            except BufferError:
                p.poll(0.01)
    p.flush(300)
    dt = time.perf_counter() - t
    if errors:
        raise RuntimeError(f"{len(errors)} delivery errors, first {errors[0]}")
    return dt


def kcat_consume(cfg: dict, topic: str, n: int, since_ms: int) -> float | None:
    """kcat reading ``n`` records from the first at or after ``since_ms``; timed from its
    first output line (connecting and authenticating are not in it)."""
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    if kcat is None:
        return None
    x = [a for k, v in cfg.items() if k != "bootstrap.servers" for a in ("-X", f"{k}={v}")]
    args = [kcat, "-C", "-b", cfg["bootstrap.servers"], *x, "-t", topic, "-o", f"s@{since_ms}", "-c", str(n), "-e", "-q", "-f", "\\n", "-X", "queued.min.messages=1000000"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    first = proc.stdout.read(1)
    t = time.perf_counter()
    got = 1 if first == b"\n" else 0
    while True:
        chunk = proc.stdout.read(1 << 16)
        if not chunk:
            break
        got += chunk.count(b"\n")
    proc.wait(60)
    dt = time.perf_counter() - t
    if got < n:
        err = proc.stderr.read() if proc.stderr else b""
        raise RuntimeError(f"kcat read {got} of {n} records (exit {proc.returncode}): {err.decode(errors='replace')[-300:]}")
    return dt


async def connect_times(host: str, port: int, times: int, protocol: str, mechanism: str | None, ca: str) -> list[float]:
    """Milliseconds from opening a connection to the answer to its first Metadata
    request (aiokafka: TCP, TLS, ApiVersions, SASL)."""
    from aiokafka.conn import create_conn
    from aiokafka.helpers import create_ssl_context
    from aiokafka.protocol.metadata import MetadataRequest

    ctx = create_ssl_context(cafile=ca) if "SSL" in protocol else None
    out = []
    for _ in range(times):
        t = time.perf_counter()
        conn = await create_conn(
            host, port, security_protocol=protocol, ssl_context=ctx, sasl_mechanism=mechanism, sasl_plain_username=USER if mechanism else None, sasl_plain_password=PASSWORD if mechanism else None
        )
        await conn.send(MetadataRequest([]))
        out.append((time.perf_counter() - t) * 1000)
        conn.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--quick", action="store_true", help="30k records, 1 round, 15 connections per case (default: 500k, 3 rounds, 40)")
    parser.add_argument("--out", help="also write the JSON here")
    parser.add_argument("--records", type=int, default=None, help="records per produce/consume case")
    parser.add_argument("--rounds", type=int, default=None, help="rounds of PLAINTEXT and SASL_SSL")
    args = parser.parse_args()
    n = args.records or (30_000 if args.quick else 500_000)
    rounds = args.rounds or (1 if args.quick else 3)
    connections = 15 if args.quick else 40
    partitions = 6

    import trustme

    from kcoord.client.admin import Admin
    from kcoord.cluster.deploy import create_users, deploy, teardown
    from kcoord.cluster.local import start_local_ray
    from kcoord.cluster.listeners import listener_stats, restart_listeners

    tmp = Path(tempfile.mkdtemp(prefix="kcoord-bench-sec-"))
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp / "ca.pem"))
    ca.issue_cert("localhost", "127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(tmp / "server.pem"))
    secure_config = {"protocol": "SASL_SSL", "certfile": str(tmp / "server.pem"), "super_users": [USER]}

    wall = time.perf_counter()
    start_local_ray()
    name = f"bench-sec-{uuid.uuid4().hex[:6]}"
    cluster = deploy(name, brokers=3, group_coordinators=0, address=None, kafka_port=0, kafka_local=True)
    results: dict = {
        "benchmark": "security",
        "value_bytes": VALUE,
        "partitions": partitions,
        "replication_factor": 3,
        "acks": "all",
        "records": n,
        "rounds": rounds,
        "sasl_mechanism": MECHANISM,
        "cpus": os.cpu_count(),
        "load_average_at_start": [round(x, 1) for x in os.getloadavg()],
        "cases": {},
    }
    try:
        create_users(cluster, {USER: PASSWORD})
        admin = Admin(cluster)
        admin.create_topic("bench", partitions=partitions, replication_factor=3, config={"min.insync.replicas": 2})
        pool = [os.urandom(VALUE) for _ in range(4096)]
        values = [pool[i % len(pool)] for i in range(n)]
        per_mode: dict[str, dict[str, list]] = {m: {"produce": [], "consume": []} for m in ("PLAINTEXT", "SASL_SSL")}
        stats: dict[str, list] = {}
        for r in range(rounds):
            order = ("PLAINTEXT", "SASL_SSL") if r % 2 == 0 else ("SASL_SSL", "PLAINTEXT")
            for mode in order:
                secure = mode == "SASL_SSL"
                bootstrap = restart_listeners(name, cluster.namespace, kafka_security=secure_config if secure else None)
                cfg = librdkafka_config(bootstrap, secure, str(tmp / "ca.pem"))
                since = int(time.time() * 1000)
                per_mode[mode]["produce"].append(rate(n, produce(cfg, "bench", values)))
                consumed = kcat_consume(cfg, "bench", n, since)
                if consumed is not None:
                    per_mode[mode]["consume"].append(rate(n, consumed))
                keep = ("connections", "requests", "authentication_failures", "produce_requests", "produce_ms_total")
                stats.setdefault(mode, []).append([{k: s[k] for k in keep if k in s} for s in listener_stats(name, cluster.namespace)])
        cases = results["cases"]
        for mode, kinds in per_mode.items():
            for kind, runs in kinds.items():
                if runs:
                    cases[f"{kind}_{mode.lower()}"] = {"median_records_per_s": round(statistics.median(x["records_per_s"] for x in runs)), "runs": runs}
        ratios = results["ratios"] = {}
        for kind in ("produce", "consume"):
            a, b = cases.get(f"{kind}_sasl_ssl"), cases.get(f"{kind}_plaintext")
            if a and b:
                ratios[f"{kind}_sasl_ssl_vs_plaintext"] = round(a["median_records_per_s"] / b["median_records_per_s"], 2)
        if "consume_sasl_ssl" not in cases:
            cases["consume"] = {"skipped": "kcat is not installed (Debian: apt-get install -y kcat)"}
        # authentication cost per connection
        bootstrap = restart_listeners(name, cluster.namespace, kafka_security={**secure_config, "protocol": "SASL_SSL"})
        host, port = bootstrap.split(",")[0].rsplit(":", 1)
        connect: dict[str, dict] = {}

        async def measure_secure() -> None:
            for mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
                ms = await connect_times(host, int(port), connections, "SASL_SSL", mechanism, str(tmp / "ca.pem"))
                connect[f"sasl_ssl_{mechanism.lower().replace('-', '_')}"] = {"median_ms": round(statistics.median(ms), 2), "p90_ms": round(sorted(ms)[int(len(ms) * 0.9) - 1], 2)}

        asyncio.run(measure_secure())
        ssl_only = restart_listeners(name, cluster.namespace, kafka_security={"protocol": "SSL", "certfile": str(tmp / "server.pem"), "allow_everyone_if_no_acl_found": True})
        host, port = ssl_only.split(",")[0].rsplit(":", 1)
        ms = asyncio.run(connect_times(host, int(port), connections, "SSL", None, str(tmp / "ca.pem")))
        connect["ssl"] = {"median_ms": round(statistics.median(ms), 2), "p90_ms": round(sorted(ms)[int(len(ms) * 0.9) - 1], 2)}
        plain = restart_listeners(name, cluster.namespace, kafka_security=None)
        host, port = plain.split(",")[0].rsplit(":", 1)
        ms = asyncio.run(connect_times(host, int(port), connections, "PLAINTEXT", None, str(tmp / "ca.pem")))
        connect["plaintext"] = {"median_ms": round(statistics.median(ms), 2), "p90_ms": round(sorted(ms)[int(len(ms) * 0.9) - 1], 2)}
        base = connect["plaintext"]["median_ms"]
        for case in connect.values():
            case["auth_cost_ms"] = round(case["median_ms"] - base, 2)
        results["connect"] = connect
        results["listener_stats"] = stats
    finally:
        teardown(name, delete_data=True, address=None)
        shutil.rmtree(tmp, ignore_errors=True)
    results["wall_seconds"] = round(time.perf_counter() - wall, 1)
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
