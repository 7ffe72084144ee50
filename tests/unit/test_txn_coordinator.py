"""The core's entry points: construction, routing (ids of other coordinators, empty ids,
requests it does not serve), its config."""

from __future__ import annotations

import pytest
from txn_harness import Shell

from kcoord.protocol.errors import ErrorCode as E
from kcoord.protocol.txn import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    ListTransactionsRequest,
    TxnInitProducerIdRequest,
    TxnOffsetCommitRequest,
    WriteTxnMarkerRequest,
)
from kcoord.txn import TransactionCoordinatorState, TxnConfig, coordinator_for


def test_construction_checks_its_arguments():
    with pytest.raises(ValueError):
        TransactionCoordinatorState(partition=2, num_partitions=2)
    with pytest.raises(ValueError):
        TransactionCoordinatorState(offsets_partitions=0)
    core = TransactionCoordinatorState(partition=1, num_partitions=3, offsets_partitions=7, coordinator_epoch=4)
    assert (core.partition, core.num_partitions, core.offsets_partitions, core.coordinator_epoch) == (1, 3, 7, 4)


@pytest.mark.parametrize(
    "make",
    [
        lambda tid: TxnInitProducerIdRequest(tid),
        lambda tid: AddPartitionsToTxnRequest(tid, 1, 0, {"out": [0]}),
        lambda tid: AddPartitionsToTxnRequest(tid, 1, 0, {"out": [0]}, verify_only=True),
        lambda tid: AddOffsetsToTxnRequest(tid, 1, 0, "g"),
        lambda tid: EndTxnRequest(tid, 1, 0, True),
    ],
    ids=["init", "add", "verify", "offsets", "end"],
)
def test_every_request_for_an_id_of_another_coordinator_or_an_empty_id_is_refused(make):
    s = Shell(partition=1, num_partitions=3)
    theirs = next(f"x{i}" for i in range(100) if coordinator_for(f"x{i}", 3) != 1)
    r = s.ask(make(theirs))
    assert r.error_code == E.NOT_COORDINATOR
    assert s.ask(make("")).error_code == E.INVALID_REQUEST
    assert not s.log and s.core.snapshot() == {}


@pytest.mark.parametrize("request_", [WriteTxnMarkerRequest(1, 0, 0, True, "t", 0), TxnOffsetCommitRequest("t", "g", 1, 0)])
def test_requests_it_does_not_serve_are_a_type_error(request_):
    core = TransactionCoordinatorState()
    with pytest.raises(TypeError):
        core.handle(request_, 1, 0)


def test_list_is_served_without_an_id():
    s = Shell()
    assert s.ask(ListTransactionsRequest()).error_code == E.NONE


def test_config_validation_and_kafka_property_names():
    with pytest.raises(ValueError):
        TxnConfig(transaction_max_timeout_ms=0)
    with pytest.raises(ValueError):
        TxnConfig(producer_id_block_size=2_000_000)
    with pytest.raises(ValueError):
        TxnConfig(marker_retry_backoff_ms=10, marker_max_backoff_ms=5)
    c = TxnConfig.from_properties(
        {
            "transaction.max.timeout.ms": "1000",
            "transactional.id.expiration.ms": 5000,
            "transaction.two.phase.commit.enable": "false",
            "log.retention.ms": "1",  # not ours: ignored
        }
    )
    assert (c.transaction_max_timeout_ms, c.transactional_id_expiration_ms, c.transaction_two_phase_commit_enable) == (1000, 5000, False)
    assert TxnConfig.from_properties({"transaction_two_phase_commit_enable": True}).transaction_two_phase_commit_enable


def test_a_new_config_applies_to_the_next_request():
    s = Shell()
    assert s.init("t", timeout_ms=30_000).error_code == E.NONE
    s.core.config = TxnConfig(transaction_max_timeout_ms=20_000)
    assert s.init("t", timeout_ms=30_000).error_code == E.INVALID_TRANSACTION_TIMEOUT
