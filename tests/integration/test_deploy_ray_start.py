"""The deployment story end to end, every step in its own process: `ray start --head`,
`kcoord up` with its default Kafka listener, a driver script that produces and exits, another
that consumes everything (the cluster outlived the first driver and the CLI), Kafka clients
through the listener, `kcoord down` removing every actor and releasing the listener's ports,
`kcoord up` again restoring the topics, the groups' offsets and the same ports, `kcoord down
--delete-data` removing actors, logs and metadata.

One cluster runs the whole story (a `kcoord up` with its actors costs 10-20 s on a 2-core
machine): the kcoord drivers and the Kafka clients use different topics and groups."""

from __future__ import annotations

import json

import pytest

from cli_support import RayHead, run_kcoord, run_python

pytestmark = [pytest.mark.ray, pytest.mark.slow]

NAME = "deploytest"

PRODUCER = """
import json, kcoord
cluster = kcoord.connect({name!r})
admin = kcoord.Admin(cluster)
admin.create_topic("orders", partitions=2, replication_factor=3, config={{"min.insync.replicas": 2}})
p = kcoord.Producer(cluster, acks="all")
futs = [p.send("orders", value=b"order-%d" % i, key=b"k%d" % (i % 7)) for i in range(200)]
p.flush()
acked = [[f.get(30).partition, f.get(30).offset, i] for i, f in enumerate(futs)]
p.close()
print(json.dumps(acked))
"""

CONSUMER = """
import json, kcoord
cluster = kcoord.connect({name!r})
c = kcoord.Consumer("orders", cluster=cluster, group_id="auditors", auto_offset_reset="earliest", enable_auto_commit=False)
seen = {{}}
import time
deadline = time.monotonic() + 120
while len(seen) < 200 and time.monotonic() < deadline:
    for tp, recs in c.poll(timeout_ms=500).items():
        for r in recs:
            seen[r.value.decode()] = [r.partition, r.offset]
    c.commit()
c.close()
try:
    kcoord.connect("no-such-cluster")
    missing = "connected?!"
except Exception as exc:
    missing = type(exc).__name__ + ": " + str(exc)
print(json.dumps({{"seen": seen, "missing": missing}}))
"""

ACTORS = """
import json, ray
from ray.experimental import internal_kv
ray.init(address="auto", namespace="kcoord", logging_level="ERROR")
names = json.loads({names!r})
alive = []
for n in names:
    try:
        ray.get_actor(n, namespace="kcoord")
        alive.append(n)
    except ValueError:
        pass
keys = internal_kv._internal_kv_list("", namespace="kcoord/{cluster}")
print(json.dumps({{"alive": alive, "stored_keys": len(keys)}}))
"""


@pytest.fixture(scope="module")
def head():
    h = RayHead().start()
    try:
        yield h
    finally:
        h.stop()


def actor_names(status: dict) -> list[str]:
    out = [f"{NAME}/controller"] + [f"{NAME}/group/{i}" for i in range(status["cluster"]["group_coordinators"])]
    out += [f"{NAME}/txn/{i}" for i in range(status["deploy"]["transaction_coordinators"])]
    for topic, desc in status["topics"].items():
        for p in desc["partitions"]:
            out += [f"{NAME}/replica/{topic}/{p['partition']}/{b}" for b in p["replicas"]]
    return out


def alive_actors(head: RayHead, names: list[str]) -> tuple[list[str], int]:
    """Which of ``names`` are alive, and how many metadata keys the cluster has in the GCS."""
    proc = run_python(head, ACTORS.format(names=json.dumps(names), cluster=NAME))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return out["alive"], out["stored_keys"]


KAFKA_PORTS = (9092, 9093, 9094)

KAFKA_ROUND_TRIP = """
import json, sys, time
from kafka import KafkaConsumer, KafkaProducer
servers, topic, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
p = KafkaProducer(bootstrap_servers=servers, acks="all", request_timeout_ms=30000)
sent = [p.send(topic, b"kafka-%d" % i).get(timeout=60) for i in range(n)]
p.close()
c = KafkaConsumer(topic, bootstrap_servers=servers, group_id="kafka-readers", auto_offset_reset="earliest",
                  enable_auto_commit=False, consumer_timeout_ms=2000)
seen = []
deadline = time.monotonic() + 90
while time.monotonic() < deadline and len(seen) < n:
    for rec in c.poll(timeout_ms=500).values():
        seen += [r.value.decode() for r in rec]
c.commit()
c.close()
print(json.dumps({"sent": len(sent), "seen": seen}))
"""


def bootstrap_servers(up_stdout: str) -> str:
    """HOST:PORT of `kcoord up`'s "bootstrap servers HOST:PORT" line."""
    line = next(line for line in up_stdout.splitlines() if "bootstrap servers " in line)
    return line.split("bootstrap servers ", 1)[1].split()[0]


def ports_taken(host: str, ports: tuple[int, ...]) -> list[int]:
    import socket

    taken = []
    for port in ports:
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                taken.append(port)
    return taken


def kafka_round_trip(head: RayHead, servers: str, topic: str, n: int) -> list[str]:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", KAFKA_ROUND_TRIP, servers, topic, str(n)], env=head.env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["sent"] == n
    return out["seen"]


def test_ray_start_kcoord_up_drivers_kafka_clients_down_and_up_again(head, tmp_path):
    """The README's Operations path exactly: `kcoord up` with no Kafka options puts a listener
    on the node's address at 9092 (one port per broker: 9092-9094); kcoord drivers and Kafka
    clients produce and consume; `kcoord down` / `kcoord up` keeps the data and binds the same
    ports again. With 9092-9094 taken on this machine the cluster runs with --no-kafka and the
    Kafka steps are reported as skipped at the end, after everything else was checked."""
    taken = ports_taken("0.0.0.0", KAFKA_PORTS)
    kafka = not taken
    data_dir = tmp_path / "data"
    up_args = ("--name", NAME, "up", "--brokers", "3", "--group-coordinators", "1", "--data-dir", str(data_dir)) + (() if kafka else ("--no-kafka",))
    try:
        up = run_kcoord(head, *up_args, check=True)
        assert "is up" in up.stdout

        # A separate driver creates a topic, produces with acks=all and exits.
        produced = run_python(head, PRODUCER.format(name=NAME))
        assert produced.returncode == 0, produced.stderr
        acked = json.loads(produced.stdout.strip().splitlines()[-1])
        assert len(acked) == 200

        # The cluster outlived that driver (and the CLI): another one reads everything back.
        consumed = run_python(head, CONSUMER.format(name=NAME))
        assert consumed.returncode == 0, consumed.stderr
        result = json.loads(consumed.stdout.strip().splitlines()[-1])
        seen = result["seen"]
        for partition, offset, i in acked:
            assert seen.get(f"order-{i}") == [partition, offset], f"record order-{i} acked at {partition}/{offset} not read back"
        # connect() to a cluster that is not there says how to deploy one
        assert result["missing"].startswith("ClusterNotFoundError") and "kcoord up" in result["missing"]

        if kafka:  # Kafka clients through the listener, on a topic of their own (auto-created)
            servers = bootstrap_servers(up.stdout)
            host, port = servers.rsplit(":", 1)
            assert port == "9092" and ports_taken(host, KAFKA_PORTS) == list(KAFKA_PORTS)  # one port per broker
            seen = kafka_round_trip(head, servers, "wire", 50)
            assert sorted(seen) == sorted(f"kafka-{i}" for i in range(50))

        status = json.loads(run_kcoord(head, "--name", NAME, "status", "--json", check=True).stdout)
        assert status["cluster"]["metrics"]["offline_partitions"] == 0
        assert {"orders", "__consumer_offsets", "__transaction_state"} <= set(status["topics"])
        assert status["deploy"]["data_dir"] == str(data_dir)
        names = actor_names(status)
        # controller, group and transaction coordinators, orders replicas, their topics' replicas
        assert len([n for n in names if "/replica/wire/" not in n]) == 1 + 1 + 1 + 2 * 3 + 3 + 3
        if kafka:
            assert status["bootstrap_servers"] == servers
            assert "wire" in status["topics"] and len(status["listeners"]) == 1
            names += [f"{NAME}/kafka/{node}" for node in status["listeners"]]  # one listener actor on the one node
        assert alive_actors(head, names)[0] == names

        # `down` keeps logs and metadata and releases the listener's ports: `up` again brings
        # the topics, their records and the groups' committed offsets back, on the same ports.
        down = run_kcoord(head, "--name", NAME, "down", check=True)
        assert f"{len(names)} actors" in down.stdout and "kept" in down.stdout
        alive, stored = alive_actors(head, names)
        assert alive == [] and stored > 0
        if kafka:
            assert ports_taken(host, KAFKA_PORTS) == []  # every listener port released
        again = run_kcoord(head, *up_args, check=True)
        consumed = run_kcoord(head, "--name", NAME, "consume", "orders", "--from-beginning", "--max-messages", "200", "--timeout-ms", "60000", check=True)
        assert sorted(consumed.stdout.split()) == sorted(f"order-{i}" for i in range(200))
        group = json.loads(run_kcoord(head, "--name", NAME, "groups", "describe", "auditors", "--json", check=True).stdout)
        assert group["lag"] == 0 and sum(o["committed_offset"] for o in group["offsets"]) == 200
        if kafka:
            assert f"bootstrap servers {servers}" in again.stdout
            seen = kafka_round_trip(head, servers, "wire", 10)
            # the first 50 records survived the restart; the group resumed after them
            assert sorted(seen) == sorted(f"kafka-{i}" for i in range(10))
            status = json.loads(run_kcoord(head, "--name", NAME, "status", "--json", check=True).stdout)
            assert status["topics"]["wire"]["partitions"][0]["high_watermark"] == 60

        down = run_kcoord(head, "--name", NAME, "down", "--delete-data", check=True)
        assert f"{len(names)} actors" in down.stdout
        assert alive_actors(head, names) == ([], 0)
        assert not data_dir.exists()
        # nothing left to stop: a clear error, not a traceback
        gone = run_kcoord(head, "--name", NAME, "down")
        assert gone.returncode == 1 and gone.stderr.strip().startswith("error: no kcoord cluster named")
    finally:
        run_kcoord(head, "--name", NAME, "down", "--delete-data")
    if not kafka:
        pytest.skip(f"ports {taken} are taken on this machine: the default listener needs 9092-9094 free; every other step passed")
