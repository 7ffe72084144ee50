"""Retention on a real cluster (issue 14): with a small retention.ms, segment.ms and
log.retention.check.interval.ms (a broker config given to local_cluster), the earliest
offset moves forward on its own, and a consumer positioned below it gets OFFSET_OUT_OF_RANGE
and resumes at the new log start (auto_offset_reset="earliest")."""

from __future__ import annotations

import time

import pytest

import kcoord
from tests.conftest import TEST_CONTROLLER_CONFIG
from kcoord.client.admin import Admin
from kcoord.client.consumer import Consumer
from kcoord.client.producer import Producer
from kcoord.client.types import TopicPartition
from waiting import wait_until

pytestmark = pytest.mark.ray


def test_retention_moves_the_earliest_offset_and_a_consumer_below_it_resets(ray_session):
    with kcoord.local_cluster(
        brokers=2,
        group_coordinators=0,
        controller_config=TEST_CONTROLLER_CONFIG,
        broker_config={"log.retention.check.interval.ms": 200},
    ) as cluster:
        admin = Admin(cluster)
        admin.create_topic("ret", partitions=1, replication_factor=2, config={"retention.ms": 3000, "segment.ms": 500})
        tp = TopicPartition("ret", 0)
        with Producer(cluster) as p:
            p.send_batch("ret", values=[b"A%02d" % i for i in range(20)], partition=0)
            p.flush()
        assert admin.list_offsets("ret", "earliest") == {0: 0}
        assert admin.list_offsets("ret", "latest") == {0: 20}
        t0 = time.monotonic()
        wait_until(lambda: admin.list_offsets("ret", "earliest")[0] == 20, timeout=30, what="retention to delete the first 20 records")
        took = time.monotonic() - t0
        assert took >= 1.5, "nothing goes before retention.ms has passed"
        with Producer(cluster) as p:
            p.send_batch("ret", values=[b"B%02d" % i for i in range(10)], partition=0)
            p.flush()
        with Consumer(cluster=cluster, auto_offset_reset="earliest") as c:
            c.assign([tp])
            c.seek(tp, 0)  # below the log start now
            got: list = []
            deadline = time.monotonic() + 30
            while len(got) < 10 and time.monotonic() < deadline:
                got += c.poll(timeout_ms=500).get(tp, [])
        assert got, "the consumer read nothing after its reset"
        assert got[0].offset >= 20 and got[0].value.startswith(b"B"), (got[0].offset, got[0].value)
        assert [r.value for r in got] == [b"B%02d" % i for i in range(got[0].offset - 20, 10)]
