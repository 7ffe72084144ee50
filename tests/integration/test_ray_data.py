"""kcoord.ray_data without Spark (only the ``data`` extra): a Ray Data write that is
retried after producing still writes each row once, and the read gives every row back with
kcoord's Arrow schema, and a transactional write is read committed exactly once.
tests/spark/test_spark.py runs the same next to a Spark session; this
file is what runs where the ``spark`` extra is not installed (e.g. the oldest Ray of the
supported range)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("ray.data")

from kcoord import ray_data as krd  # noqa: E402
from kcoord.client.admin import Admin  # noqa: E402
from kcoord.protocol.errors import KafkaError  # noqa: E402
from ray_data_support import check_transactional_write_once, check_write_retried_once_and_read_back  # noqa: E402

pytestmark = pytest.mark.ray


def test_write_retried_blocks_once_and_read_back(kcluster, ray_session, topic_name, tmp_path):
    Admin(kcluster).create_topic(topic_name, partitions=3, replication_factor=1)
    check_write_retried_once_and_read_back(kcluster, topic_name, 3000, 100, tmp_path)


def test_transactional_write_is_read_committed_once_despite_failed_attempts_and_a_rerun(kcluster, ray_session, topic_name, tmp_path):
    Admin(kcluster).create_topic(topic_name, partitions=2, replication_factor=3, config={"min.insync.replicas": 2})
    check_transactional_write_once(kcluster, topic_name, 900, tmp_path)


def test_read_of_a_missing_topic_names_it(kcluster, topic_name):
    with pytest.raises(KafkaError, match=topic_name):
        krd.read(kcluster, f"missing-{topic_name}").take_all()
