"""__consumer_offsets is compacted on a real cluster (issue 14): a group commits the same
partitions over and over, the replica's log cleaner (``log.cleaner.backoff.ms``, a broker
config) compacts the coordinator's partition, and a coordinator Ray restarts loads only
what is left -- and serves exactly the last committed offsets."""

from __future__ import annotations

import pytest
import ray

import kcoord
from tests.conftest import TEST_CONTROLLER_CONFIG
from kcoord import records as batch_format
from kcoord.client.admin import Admin
from kcoord.client.coordinator.coordinators import GroupCoordinators
from kcoord.client.types import TopicPartition
from kcoord.group.records import OFFSETS_TOPIC
from kcoord.protocol import names
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.group import OffsetCommitPartition, OffsetCommitRequest, OffsetCommitResponse
from waiting import wait_until

pytestmark = pytest.mark.ray

COMMITS = 240
PARTITIONS = 3


def test_a_restarted_coordinator_loads_the_compacted_partition_with_the_last_offsets(ray_session):
    with kcoord.local_cluster(
        brokers=1,
        group_coordinators=1,
        controller_config=TEST_CONTROLLER_CONFIG,
        # segments roll every 200 ms (on append, and idle ones at the retention check), so
        # the commits below land in many sealed segments the cleaner may rewrite
        default_topic_config={"segment.ms": "200"},
        broker_config={"log.cleaner.backoff.ms": 200, "log.retention.check.interval.ms": 200},
    ) as cluster:
        admin = Admin(cluster)
        config = admin.describe_topic(OFFSETS_TOPIC)["config"]
        assert config["cleanup.policy"] == "compact", config
        gc = GroupCoordinators(cluster)
        group = "compacted"
        last: dict[int, int] = {}
        for i in range(COMMITS):
            p = i % PARTITIONS
            req = OffsetCommitRequest(group, -1, "", topics={"events": {p: OffsetCommitPartition(1_000 + i)}})
            resp = gc.call_group(group, "offset_commit", req, OffsetCommitResponse, 30)
            assert resp.topics["events"][p] == ErrorCode.NONE, resp
            last[p] = 1_000 + i
        replica = cluster.replica(OFFSETS_TOPIC, 0, 0)
        log_end = ray.get(replica.describe.remote(), timeout=30)["log_end_offset"]
        assert log_end > COMMITS  # every commit is a record (plus the coordinator's fence)

        def records_in_log() -> int:
            return sum(1 for _ in batch_format.iter_records(ray.get(replica.read_log.remote(0), timeout=30)))

        kept = wait_until(lambda: (n := records_in_log()) < COMMITS // 4 and n, timeout=60, what="the cleaner to compact __consumer_offsets")
        info = ray.get(replica.describe.remote(), timeout=30)
        assert info["log_end_offset"] >= log_end, "compaction never moves the log end"

        handle = ray.get_actor(names.group_coordinator(cluster.name, 0), namespace=cluster.namespace)
        before = ray.get(handle.describe.remote(), timeout=30)
        assert before["load"]["records"] <= 1  # loaded an empty partition at the start
        ray.kill(handle, no_restart=False)

        def restarted():
            d = ray.get(handle.describe.remote(), timeout=10)
            return d if d["incarnation"] != before["incarnation"] and d["loaded"] else None

        after = wait_until(restarted, timeout=90, what="the coordinator restarted and loaded")
        assert after["load"]["records"] <= kept + 2, (after["load"], kept)  # + records appended since
        assert after["load"]["records"] < COMMITS // 4, after["load"]
        committed = admin.list_consumer_group_offsets(group)
        assert {tp.partition: om.offset for tp, om in committed.items()} == last
        assert set(committed) == {TopicPartition("events", p) for p in range(PARTITIONS)}
