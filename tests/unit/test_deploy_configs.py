"""The Ray cluster-launcher YAMLs in cluster/configs: they parse, pass Ray's own schema
(the check `ray up` makes), install kcoord and start Ray before deploying kcoord."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

CONFIGS = Path(__file__).resolve().parents[2] / "cluster" / "configs"
FILES = sorted(CONFIGS.glob("*.yaml"))


def test_both_configs_exist():
    assert {p.name for p in FILES} >= {"local.yaml", "aws-example.yaml"}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_config_is_a_valid_ray_cluster_config(path: Path):
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = yaml.safe_load(path.read_text())
    for key in ("cluster_name", "provider", "auth", "setup_commands", "head_start_ray_commands", "worker_start_ray_commands"):
        assert key in config, f"{path.name} lacks {key}"
    validate_config(prepare_config(copy.deepcopy(config)))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_config_installs_kcoord_then_starts_ray_then_deploys(path: Path):
    config = yaml.safe_load(path.read_text())
    setup = " ; ".join(config["setup_commands"])
    assert "pip install" in setup and "~/kcoord" in setup
    head = config["head_start_ray_commands"]
    start = next(i for i, c in enumerate(head) if "ray start --head" in c)
    up = next(i for i, c in enumerate(head) if "kcoord up" in c)
    assert start < up
    assert "--if-not-exists" in head[up] and "--min-nodes" in head[up]
    assert any("ray start --address=" in c for c in config["worker_start_ray_commands"])


def test_local_config_has_head_and_worker_placeholders():
    config = yaml.safe_load((CONFIGS / "local.yaml").read_text())
    assert config["provider"]["type"] == "local"
    assert config["provider"]["head_ip"] == "HEAD_IP"
    assert len(config["provider"]["worker_ips"]) == config["min_workers"] == config["max_workers"]


def test_aws_example_head_type_is_declared():
    config = yaml.safe_load((CONFIGS / "aws-example.yaml").read_text())
    assert config["provider"]["type"] == "aws"
    assert config["head_node_type"] in config["available_node_types"]
