"""Admin's find-hanging decision (kafka-transactions.sh find-hanging, KIP-664) and its
argument checks, without Ray: which open transactions are old enough to look at, and which
of those no coordinator holds."""

from __future__ import annotations

import pytest

from kcoord.client.admin_transactions import (
    PartitionProducerState,
    ProducerState,
    TransactionAdmin,
    TransactionDescription,
    hanging_among,
    open_transactions,
)
from kcoord.client.types import TopicPartition

NOW = 1_800_000_000_000
TP, OTHER = TopicPartition("out", 0), TopicPartition("out", 1)


def producer(pid: int, start: int, age_ms: int | None, epoch: int = 2) -> ProducerState:
    return ProducerState(pid, epoch, last_sequence=4, last_timestamp=-1 if age_ms is None else NOW - age_ms, coordinator_epoch=-1, current_transaction_start_offset=start)


def described(pid: int, state: str, partitions: set[TopicPartition], epoch: int = 2) -> TransactionDescription:
    return TransactionDescription(0, state, pid, epoch, 60_000, NOW - 5_000, frozenset(partitions))


def test_candidates_are_open_transactions_older_than_the_threshold():
    producers = {
        TP: PartitionProducerState([producer(1, 10, 20 * 60_000), producer(2, 11, 1_000), producer(3, -1, 99 * 60_000), producer(4, 12, None)]),
    }
    assert [(p.producer_id, age) for _, p, age in open_transactions(producers, 15 * 60_000, NOW)] == [(1, 20 * 60_000), (4, -1)]
    # 0: any age; a producer without an open transaction never is one
    assert [p.producer_id for _, p, _ in open_transactions(producers, 0, NOW)] == [1, 2, 4]


def test_a_transaction_its_coordinator_holds_at_that_partition_is_not_hanging():
    candidates = [(TP, producer(1, 10, 0), 0), (TP, producer(2, 11, 0), 0), (TP, producer(3, 12, 0), 0), (TP, producer(4, 13, 0), 0), (TP, producer(5, 14, 0), 0), (TP, producer(6, 15, 0, epoch=3), 0)]
    listed = {1: ["live"], 2: ["ended"], 3: ["elsewhere"], 5: ["deciding"], 6: ["older-epoch"]}
    desc = {
        "live": described(1, "Ongoing", {TP, OTHER}),
        "ended": described(2, "CompleteAbort", {TP}),  # a write that landed after its marker
        "elsewhere": described(3, "Ongoing", {OTHER}),  # ongoing, but without this partition
        "deciding": described(5, "PrepareCommit", {TP}, epoch=4),  # a later epoch still owns it
        "older-epoch": described(6, "Ongoing", {TP}, epoch=2),  # the coordinator's epoch is older than what wrote here
    }
    got = {h.producer_id: (h.transactional_id, h.reason) for h in hanging_among(candidates, listed, desc)}
    assert sorted(got) == [2, 3, 4, 6]
    assert got[2] == ("ended", "its coordinator has 'ended' CompleteAbort at epoch 2")
    assert got[3][1].endswith("without out-0") and got[4] == (None, "no transaction coordinator knows this producer id")


def test_bad_arguments_name_the_problem_before_anything_is_sent():
    admin = TransactionAdmin(cluster=None, list_topics=lambda: [])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Bogus"):
        admin.list_transactions(states=["Ongoing", "Bogus"])
    with pytest.raises(ValueError, match="duration_filter_ms"):
        admin.list_transactions(duration_filter_ms=-5)
    with pytest.raises(TypeError, match="list of transactional ids"):
        admin.describe_transactions("etl-1")
    with pytest.raises(TypeError, match="TopicPartition"):
        admin.abort_transaction(("out", "0"), 5, 0)
    with pytest.raises(ValueError, match="producer_epoch"):
        admin.abort_transaction(TP, 5, -1)
    with pytest.raises(ValueError, match="max_transaction_timeout_ms"):
        admin.find_hanging_transactions(partitions=[TP], max_transaction_timeout_ms=-1)
