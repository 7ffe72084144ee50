"""Cluster-wide broker configs (issue 14): validated at deploy time, refused as topic
configs, delivered to every replica with its topic's config."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from controller_harness import Harness, config

from kcoord.cli import cli
from kcoord.protocol.controller import CreateTopicsRequest
from kcoord.protocol.errors import ErrorCode
from kcoord.replication.config import BROKER_KEYS, ReplicationConfig, validate_broker_config
from kcoord.replication.controller import CreateReplica, SendLeaderAndIsr
from kcoord.replication.topic_plan import TOPIC_CONFIG_KEYS


def test_validate_broker_config_takes_kafka_names_and_strings_the_values():
    out = validate_broker_config({"log.retention.check.interval.ms": 1000, "log.cleaner.enable": False, "log.cleaner.backoff.ms": "50"})
    assert out == {"log.retention.check.interval.ms": "1000", "log.cleaner.enable": "false", "log.cleaner.backoff.ms": "50"}
    cfg = ReplicationConfig.from_topic_config(out)
    assert (cfg.log_retention_check_interval_ms, cfg.log_cleaner_enable, cfg.log_cleaner_backoff_ms) == (1000, False, 50)
    assert validate_broker_config(None) == {}


def test_an_unknown_broker_key_is_a_value_error_naming_it():
    with pytest.raises(ValueError, match="log.retention.check.intervall.ms") as err:
        validate_broker_config({"log.retention.check.intervall.ms": 5})
    assert "log.retention.check.interval.ms" in str(err.value), "lists the known keys"
    with pytest.raises(ValueError, match="retention.ms"):
        validate_broker_config({"retention.ms": 5})  # a topic config, not a broker one


def test_a_bad_broker_value_is_a_value_error():
    with pytest.raises(ValueError, match="log.retention.check.interval.ms"):
        validate_broker_config({"log.retention.check.interval.ms": "0"})
    with pytest.raises(ValueError, match="log.cleaner.enable"):
        validate_broker_config({"log.cleaner.enable": "maybe"})


def test_broker_keys_are_not_topic_configs():
    assert not (BROKER_KEYS & TOPIC_CONFIG_KEYS)
    h = Harness()
    resp, _ = h.core.create_topic(
        CreateTopicsRequest(name="x", partitions=1, replication_factor=1, config={"log.cleaner.backoff.ms": "5"}), h.now
    )
    assert resp.error_code == ErrorCode.INVALID_CONFIG and "log.cleaner.backoff.ms" in resp.error_message


def test_the_controller_delivers_broker_config_to_every_replica():
    h = Harness(config(broker_config={"log.retention.check.interval.ms": "1234"}, default_topic_config={"retention.ms": "99"}))
    actions = h.create(config={"segment.ms": "77"})
    creates = [a for a in actions if isinstance(a, CreateReplica)]
    sends = [a for a in actions if isinstance(a, SendLeaderAndIsr)]
    assert len(creates) == 3 and len(sends) == 3
    for cfg in [a.config for a in creates] + [a.request.config for a in sends]:
        assert cfg == {"log.retention.check.interval.ms": "1234", "retention.ms": "99", "segment.ms": "77"}
        assert ReplicationConfig.from_topic_config(cfg).log_retention_check_interval_ms == 1234
    # ... but a topic's described config is its own, without the broker's
    described = h.core.topics["t"].config
    assert "log.retention.check.interval.ms" not in described


def test_kcoord_up_refuses_an_unknown_broker_config_before_connecting():
    result = CliRunner().invoke(cli, ["up", "--broker-config", "log.cleaner.enabled=true"])
    assert result.exit_code != 0
    assert "log.cleaner.enabled" in result.output
    result = CliRunner().invoke(cli, ["up", "--broker-config", "nonsense"])
    assert result.exit_code != 0 and "KEY=VALUE" in result.output
