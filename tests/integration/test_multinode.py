"""Multi-node placement on one machine: 3 Ray nodes from ``ray.cluster_utils.Cluster``.

The scenario (multinode_scenario.py) runs in its own process because the Cluster must own
that process's Ray connection, which the pytest session's local Ray already holds: replicas
of each partition on 3 distinct nodes; removing a node fails over every partition it led
with no acknowledged record lost; adding a node back restores full replication."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from multinode_scenario import EXIT_RAY_STARTUP

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SCRIPT = Path(__file__).with_name("multinode_scenario.py")


def test_replicas_on_distinct_nodes_node_loss_and_node_return():
    for attempt in range(2):
        proc = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=900)
        if proc.returncode != EXIT_RAY_STARTUP:
            break
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-6000:]}"
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["ok"] and result["acked"] > 500 and result["led"]
