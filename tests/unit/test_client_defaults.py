"""Client API values without Ray: the shared default replication factor, NewTopic's
defaults, and that what the README names is exported from kcoord."""

from __future__ import annotations

import kcoord
from kcoord.replication.topic_plan import default_replication_factor


def test_default_replication_factor_is_min_3_brokers():
    assert [default_replication_factor(n) for n in (0, 1, 2, 3, 7)] == [1, 1, 2, 3, 3]
    assert default_replication_factor(5, preferred=4) == 4  # the Kafka listener's setting


def test_new_topic_defaults_and_exports():
    t = kcoord.NewTopic("t")
    assert (t.num_partitions, t.replication_factor, t.replica_assignments, t.topic_configs) == (-1, -1, None, None)
    assert kcoord.NewTopic("t", 3, 2, topic_configs={"retention.ms": 1}).topic_configs == {"retention.ms": 1}
    assert kcoord.OffsetAndTimestamp(5, 1000) == (5, 1000)
    for name in ("AIOProducer", "AIOConsumer", "SerializationError", "CommitFailedError", "NoOffsetForPartitionError",
                 "OffsetAndTimestamp", "NewTopic", "TopicAlreadyExistsError", "RequestTimedOutError"):
        assert name in kcoord.__all__ and getattr(kcoord, name) is not None
    assert issubclass(kcoord.SerializationError, ValueError)
