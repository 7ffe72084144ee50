"""One kcoord cluster for the chaos suite, separate from the integration tests' cluster
because chaos kills its controller and coordinators. Module-scoped: torn down after each
chaos file, so its actors do not load the machine for the rest of the run."""

from __future__ import annotations

import uuid

import pytest

CHAOS_CONTROLLER_CONFIG = {
    "heartbeat_interval_ms": 100,
    # Tests SIGSTOP followers for a moment; a slower follower beat would leave too
    # little of the session timeout for that (the default is 1 s).
    "follower_heartbeat_interval_ms": 300,
    "session_timeout_ms": 2000,
    "ensure_replica_interval_ms": 300,
    "leader_rebalance_interval_ms": 3000,
}


@pytest.fixture(scope="module")
def chaos_cluster(ray_session, tmp_path_factory):
    from kcoord.cluster.deploy import deploy, teardown

    name = f"chaos-{uuid.uuid4().hex[:6]}"
    data_dir = str(tmp_path_factory.mktemp("chaos-data"))
    client = deploy(
        name,
        brokers=3,
        data_dir=data_dir,
        group_coordinators=2,
        address=None,
        controller_config=CHAOS_CONTROLLER_CONFIG,
    )
    yield client
    teardown(name, delete_data=True, address=None, data_dir=data_dir)
