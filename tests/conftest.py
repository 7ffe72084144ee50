"""Shared fixtures. A local Ray start costs ~3 s and each actor ~0.6 s on a 2-core machine,
so integration tests share one Ray instance and one kcoord cluster per session and create
small topics with unique names."""

from __future__ import annotations

import os
import uuid

import pytest

# The shared test Ray runs without Ray's token authentication (local_cluster leaves it to
# Ray, which turns it on for a new local Ray); tests/integration/test_ray_auth.py runs a
# cluster with it on.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from waiting import wait_until  # noqa: F401  (re-exported for tests)


@pytest.fixture(scope="session")
def ray_session():
    import ray

    from kcoord.cluster.local import start_local_ray

    started = start_local_ray(num_cpus=2)
    yield ray
    if started:
        ray.shutdown()


# Fast failure detection for tests; the defaults are tuned for production stability.
TEST_CONTROLLER_CONFIG = {
    "heartbeat_interval_ms": 100,
    # Tests SIGSTOP followers for a moment; a slower follower beat would leave too
    # little of the session timeout for that (the default is 1 s).
    "follower_heartbeat_interval_ms": 300,
    "session_timeout_ms": 2000,
    "ensure_replica_interval_ms": 500,
    "leader_rebalance_interval_ms": 2000,
    # Move any partition back to its preferred leader: other tests' topics on this shared
    # cluster would otherwise dilute one partition below the 10% per-broker threshold.
    "leader_imbalance_per_broker_percentage": 0,
    # a test makes a Ray restart hang; replace it sooner than the 30 s default
    "restart_stuck_ms": 8000,
}


@pytest.fixture(scope="session")
def kcluster(ray_session, tmp_path_factory):
    """One 3-broker kcoord cluster shared by the integration tests."""
    from kcoord.cluster.deploy import deploy, teardown

    name = f"it-{uuid.uuid4().hex[:6]}"
    data_dir = tmp_path_factory.mktemp("kcoord-data")
    client = deploy(
        name,
        brokers=3,
        data_dir=str(data_dir),
        group_coordinators=int(os.environ.get("KCOORD_TEST_GROUP_COORDINATORS", "1")),
        address=None,
        controller_config=TEST_CONTROLLER_CONFIG,
    )
    _SHARED["kcluster"] = client
    yield client
    _SHARED.pop("kcluster", None)
    teardown(name, delete_data=True, address=None, data_dir=str(data_dir))


def own_cluster(tmp_path_factory, prefix: str, **deploy_kwargs):
    """A module's own small cluster (one broker, one group and one transaction coordinator
    unless ``deploy_kwargs`` say otherwise) for settings the shared one cannot take; a
    generator for a module-scoped fixture to ``yield from``."""
    from kcoord.cluster.deploy import deploy, teardown

    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    data_dir = tmp_path_factory.mktemp(f"kcoord-{prefix}")
    kwargs = dict(brokers=1, group_coordinators=1, transaction_coordinators=1, address=None)
    client = deploy(name, data_dir=str(data_dir), **{**kwargs, **deploy_kwargs})
    yield client
    teardown(name, delete_data=True, address=None, data_dir=str(data_dir))


# The shared cluster once some test started it, and the topics that existed when each
# module began: a module's own topics (its module-scoped fixtures' too) are deleted when the
# module is done, so later modules do not pay for their idle replicas.
_SHARED: dict = {}
_MODULE_TOPICS: dict[str, set[str] | None] = {}


def _topics(cluster) -> set[str]:
    from kcoord.client.admin import Admin

    return set(Admin(cluster).list_topics())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    module = item.nodeid.split("::")[0]
    if module not in _MODULE_TOPICS:
        cluster = _SHARED.get("kcluster")
        try:
            _MODULE_TOPICS[module] = _topics(cluster) if cluster is not None else None
        except Exception:  # noqa: BLE001 - no baseline (asked again at the next test)
            pass
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield  # the module's fixtures are finalized in here when nextitem is in another module
    module = item.nodeid.split("::")[0]
    cluster = _SHARED.get("kcluster")
    if nextitem is None or nextitem.nodeid.split("::")[0] == module or cluster is None or module not in _MODULE_TOPICS:
        return
    _delete_topics_since(cluster, _MODULE_TOPICS[module] or set(), f"the topics of {module}")


def _delete_topics_since(cluster, before: set[str], what: str) -> None:
    """Delete the topics created since ``before`` (never the internal ones). Failures only
    warn: cleanup must not turn a pass into an error."""
    from kcoord.client.admin import Admin

    try:
        admin = Admin(cluster)
        for topic in sorted(_topics(cluster) - before):
            if not topic.startswith("__"):
                admin.delete_topic(topic)
    except Exception as exc:  # noqa: BLE001
        import warnings

        warnings.warn(f"could not delete {what}: {exc!r}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """Delete the topics a test body created on the shared ``kcluster`` once it is done.

    Every partition is three replica actors that are heartbeaten and long-poll their
    leader; left behind, hundreds of idle actors would eat the 2-core CI machine and slow
    every later test. Only the test body's topics go: those of module-scoped fixtures are
    shared with later tests. Deletion failures only warn: the test has its verdict."""
    cluster = getattr(item, "funcargs", {}).get("kcluster")
    if cluster is None:
        yield
        return
    before = _topics(cluster)
    yield
    _delete_topics_since(cluster, before, "the test's topics")


@pytest.fixture
def topic_name(request) -> str:
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:40]
    return f"{base}-{uuid.uuid4().hex[:6]}"


# Tests that need no Ray first: once the session's Ray and kcoord cluster are up, their
# idle actors (heartbeats, long polls) take a share of the 2 CPUs from every later test.
_NO_RAY_FIRST = ("tests/unit/", "tests/sim/")


def pytest_collection_modifyitems(session, config, items):
    def without_ray(item) -> bool:
        path = str(item.path.relative_to(config.rootpath)) if item.path.is_relative_to(config.rootpath) else str(item.path)
        return path.startswith(_NO_RAY_FIRST)

    items.sort(key=lambda item: 0 if without_ray(item) else 1)  # stable: file order otherwise
