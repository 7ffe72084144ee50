"""kcoord with Ray's token authentication on (Ray 2.60: RAY_AUTH_MODE=token, the token in
a file named by RAY_AUTH_TOKEN_PATH): local_cluster leaves it on, the controller, replicas,
group coordinator and the Kafka listener (SASL) run, kcoord's own clients and a Kafka
client work -- and a process without the token, or with another one, cannot join the Ray
cluster at all (so cannot call kcoord's actors past the listener), while one with it can.

The cluster runs in a subprocess: its Ray is another one than the test session's."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SCRIPT = r"""
import json, os, subprocess, sys
import kcoord, ray
from kafka import KafkaConsumer, KafkaProducer

out = {}
security = {"protocol": "SASL_PLAINTEXT", "users": {"u": "pw"}, "super_users": ["u"]}
with kcoord.local_cluster(brokers=1, group_coordinators=1, kafka_port=0, kafka_security=security) as c:
    from ray._private.authentication.authentication_utils import is_token_auth_enabled

    out["token_auth"] = bool(is_token_auth_enabled())
    kcoord.Admin(c).create_topic("t", partitions=1, replication_factor=1)
    with kcoord.Producer(c) as p:
        p.send("t", b"from-kcoord").get(timeout=30)
    cfg = dict(bootstrap_servers=c.bootstrap_servers, security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="u", sasl_plain_password="pw")
    producer = KafkaProducer(acks="all", **cfg)
    producer.send("t", b"from-kafka").get(timeout=30)
    producer.close()
    consumer = KafkaConsumer("t", group_id="g", auto_offset_reset="earliest", consumer_timeout_ms=5000, **cfg)
    out["consumed"] = sorted(m.value.decode() for m in consumer)
    consumer.close()
    gcs = ray.get_runtime_context().gcs_address
    probe = "import ray, sys; ray.init(address=sys.argv[1], namespace='kcoord'); print(ray.get_actor(sys.argv[2] + '/controller') is not None)"

    def attempt(**extra):
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
        env.update(extra, RAY_gcs_server_port_wait_time_s="2")  # a refusal fails fast
        r = subprocess.run([sys.executable, "-c", probe, gcs, c.name], env=env, capture_output=True, text=True, timeout=120)
        return {"rc": r.returncode, "out": r.stdout.strip()}

    out["no_token"] = attempt(RAY_AUTH_MODE="disabled")
    out["wrong_token"] = attempt(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN="0" * 64)
    out["right_token"] = attempt(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=os.environ["RAY_AUTH_TOKEN_PATH"])
print("RESULT " + json.dumps(out))
"""


def test_a_cluster_with_ray_token_authentication(tmp_path: Path) -> None:
    token = tmp_path / "ray-token"
    token.write_text(secrets.token_hex(32))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token), PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=400, cwd=tmp_path)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    out = json.loads(lines[-1][len("RESULT ") :])
    assert out["token_auth"], "local_cluster kept Ray's token authentication on"
    assert out["consumed"] == ["from-kafka", "from-kcoord"]
    assert out["no_token"]["rc"] != 0 and out["wrong_token"]["rc"] != 0, "Ray let in a process without the token"
    assert out["right_token"] == {"rc": 0, "out": "True"}
