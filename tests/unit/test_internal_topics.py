"""Both coordinators' topics are internal topics alike: the controller creates
``__transaction_state`` as it creates ``__consumer_offsets`` (marked internal; other names
starting with ``__`` stay reserved), and their leaders refuse DeleteRecords (the records are
the coordinators' state)."""

from __future__ import annotations

import pytest

from kcoord.log import LogConfig, MemoryLog
from kcoord.protocol import names
from kcoord.protocol.controller import CreateTopicsRequest, LeaderAndIsrRequest
from kcoord.protocol.errors import ErrorCode, KafkaError
from kcoord.protocol.replication import DeleteRecordsRequest
from kcoord.replication.replica import Replica
from kcoord.replication.topic_plan import plan_topic


@pytest.mark.parametrize("topic", sorted(names.INTERNAL_TOPICS))
def test_the_controller_creates_each_internal_topic_marked_internal(topic):
    state, parts = plan_topic(CreateTopicsRequest(topic, partitions=2, replication_factor=1), [0], set(), {}, 0)
    assert state.internal and len(parts) == 2


def test_other_double_underscore_names_stay_reserved():
    with pytest.raises(KafkaError) as exc:
        plan_topic(CreateTopicsRequest("__mine"), [0], set(), {}, 0)
    assert exc.value.code == ErrorCode.INVALID_TOPIC_EXCEPTION


@pytest.mark.parametrize("topic", sorted(names.INTERNAL_TOPICS))
def test_delete_records_of_an_internal_topic_is_refused(topic):
    replica = Replica(topic, 0, 0, MemoryLog(LogConfig(flush_messages=1)), now_ms=1_000)
    replica.handle(LeaderAndIsrRequest(1, topic, 0, leader=0, leader_epoch=1, partition_epoch=1, isr=[0], replicas=[0]), None, 1_000)
    (reply,) = [a for a in replica.handle(DeleteRecordsRequest(topic, 0, -1, current_leader_epoch=1), "t", 1_000) if getattr(a, "token", None) == "t"]
    assert reply.response.error_code == ErrorCode.POLICY_VIOLATION
