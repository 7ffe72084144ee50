"""The listener's options without Ray: Kafka's connection limits from kafka_options, the
listener part of kafka_security (never a password), and which listeners are open to anyone."""

from __future__ import annotations

import pytest

from kcoord.cluster.listeners import exposure_warnings, listener_options
from kcoord.kafka.listener_security import ConnectionLimits


def test_limits_with_kafkas_names_and_defaults() -> None:
    secure = ConnectionLimits.from_options({})
    assert (secure.sasl_max_receive_size, secure.idle_ms, secure.max_connections, secure.max_connections_per_ip, secure.reauth_ms) == (524288, 600000, None, None, 0)
    assert ConnectionLimits.from_options({}, secure=False).idle_ms is None, "a plaintext listener keeps its behaviour"
    limits = ConnectionLimits.from_options({"max.connections.per.ip": "10", "max.connections.per.ip.overrides": "10.0.0.1:100,127.0.0.1:0", "connections.max.reauth.ms": 60000})
    assert limits.per_ip("10.0.0.2") == 10 and limits.per_ip("10.0.0.1") == 100 and limits.per_ip("127.0.0.1") == 0
    assert limits.reauth_ms == 60000
    for bad, message in (({"max.connections": "many"}, "max.connections"), ({"connections.max.idle.ms": 0}, ">= 1"), ({"max.connections.per.ip.overrides": "nohost"}, "HOST:COUNT")):
        with pytest.raises(ValueError, match=message):
            ConnectionLimits.from_options(bad)


def test_listener_options_carry_no_password() -> None:
    opts = listener_options({"protocol": "SASL_PLAINTEXT", "users": {"admin": "s3cret"}, "super_users": ["admin"]}, {"max.connections": 5})
    assert opts["max.connections"] == 5 and opts["security"]["protocol"] == "SASL_PLAINTEXT"
    assert "s3cret" not in repr(opts) and "users" not in opts["security"]
    assert listener_options(None, None) == {}
    with pytest.raises(ValueError, match="kafka_security"):
        listener_options(None, {"security": {}})
    with pytest.raises(ValueError, match="max.connections"):
        listener_options({"protocol": "SASL_PLAINTEXT"}, {"max.connections": -1})


def rec(bind: str, protocol: str = "PLAINTEXT", authenticates: bool = False) -> dict:
    return {"host": bind, "bind": bind, "ports": {0: 9092}, "protocol": protocol, "authenticates": authenticates}


def test_a_listener_open_to_anyone_on_a_routable_address_is_warned_of() -> None:
    warnings = exposure_warnings(
        {
            "a": rec("10.0.0.5"),
            "b": rec("127.0.0.1"),
            "c": rec("10.0.0.6", "SASL_SSL", True),
            "d": rec("10.0.0.7", "SSL"),
            "e": rec("0.0.0.0"),
            "f": rec("localhost"),
            "g": rec("::1"),
        }
    )
    assert len(warnings) == 3
    assert "10.0.0.5:9092" in warnings[0] and "no authentication and no ACLs" in warnings[0]
    assert "10.0.0.7:9092" in warnings[1] and "SSL without client authentication" in warnings[1]
    assert "0.0.0.0:9092" in warnings[2]
