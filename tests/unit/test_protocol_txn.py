"""Transaction messages: round trips, registry and API keys (no clash with the controller's
InitProducerId), bad bytes for every message, error answers, the fenced-error rule, and the
placement of transactional ids."""

from __future__ import annotations

import copy
import dataclasses

import msgpack
import pytest

from kcoord.protocol import DecodeError, ErrorCode, decode_any, message_class, names
from kcoord.protocol import controller as c
from kcoord.protocol import txn as t
from kcoord.protocol.group import OffsetCommitPartition
from kcoord.txn import coordinator_for
from kcoord.txn.placement import owner_name

SAMPLES = [
    t.TxnInitProducerIdRequest("etl-1", 30_000, 7, 3, enable_two_phase=True, keep_prepared=True, wire_version=4),
    t.TxnInitProducerIdResponse(producer_id=7, producer_epoch=4, ongoing_txn_producer_id=7, ongoing_txn_producer_epoch=3),
    t.AddPartitionsToTxnRequest("etl-1", 7, 4, {"out": [0, 3], "side": [1]}, verify_only=True),
    t.AddPartitionsToTxnResponse(results={"out": {0: 0, 3: 55}, "side": {1: 3}}),
    t.AddOffsetsToTxnRequest("etl-1", 7, 4, "grp", wire_version=1),
    t.AddOffsetsToTxnResponse(error_code=ErrorCode.CONCURRENT_TRANSACTIONS),
    t.EndTxnRequest("etl-1", 7, 4, True, bump_epoch=True),
    t.EndTxnResponse(producer_id=7, producer_epoch=5),
    t.WriteTxnMarkerRequest(7, 5, 2, True, "out", 3, transactional_id="etl-1", current_leader_epoch=9, timeout_ms=5000),
    t.WriteTxnMarkerResponse(offset=120, leader_epoch=9),
    t.TxnOffsetMarkerRequest(7, 5, 2, False, 11, transactional_id="etl-1"),
    t.TxnOffsetMarkerResponse(error_code=ErrorCode.NOT_COORDINATOR),
    t.TxnOffsetCommitRequest(
        "etl-1", "grp", 7, 4, generation_id=3, member_id="m-1", group_instance_id="i-1",
        topics={"in": {0: OffsetCommitPartition(42, "md", 1), 2: OffsetCommitPartition(7)}},
    ),
    t.TxnOffsetCommitResponse(topics={"in": {0: 0, 2: 22}}),
    t.DescribeTransactionsRequest(["etl-1", "etl-2"]),
    t.DescribeTransactionsResponse(
        transactions=[
            t.DescribedTransaction("etl-1", 0, "Ongoing", 60_000, 1_700_000_000_000, 7, 4, {"out": [0, 3]}),
            t.DescribedTransaction("etl-2", error_code=ErrorCode.TRANSACTIONAL_ID_NOT_FOUND),
        ]
    ),
    t.ListTransactionsRequest(["Ongoing", "PrepareCommit"], [7, 8], 1000),
    t.ListTransactionsRequest(),
    t.ListTransactionsResponse(unknown_state_filters=["Bogus"], transactions=[t.ListedTransaction("etl-1", 7, "Ongoing")]),
]

TOP_LEVEL = sorted({type(m) for m in SAMPLES}, key=lambda cls: cls.__name__)


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: type(m).__name__)
def test_round_trip(msg):
    data = msg.encode()
    assert type(msg).decode(data) == msg
    assert decode_any(data, response=type(msg).IS_RESPONSE) == msg


def test_api_keys_are_kafkas_or_private_and_registered():
    keys = {
        t.TxnInitProducerIdRequest: 1022, t.AddPartitionsToTxnRequest: 24, t.AddOffsetsToTxnRequest: 25,
        t.EndTxnRequest: 26, t.WriteTxnMarkerRequest: 27, t.TxnOffsetMarkerRequest: 1027,
        t.TxnOffsetCommitRequest: 28, t.DescribeTransactionsRequest: 65, t.ListTransactionsRequest: 66,
    }
    assert set(keys) == set(t.RESPONSE_FOR)
    for request, key in keys.items():
        response = t.RESPONSE_FOR[request]
        assert request.API_KEY == response.API_KEY == key
        assert message_class(key, False) is request and message_class(key, True) is response


def test_the_controllers_init_producer_id_keeps_key_22():
    """The allocator's InitProducerId and the transactional one never share a registry slot:
    a transactional request cannot decode as a controller request (or back) unnoticed."""
    assert message_class(22, False) is c.InitProducerIdRequest and message_class(22, True) is c.InitProducerIdResponse
    with pytest.raises(DecodeError) as info:
        c.InitProducerIdRequest.decode(t.TxnInitProducerIdRequest("x").encode())
    assert info.value.code == ErrorCode.INVALID_REQUEST
    with pytest.raises(DecodeError):
        t.TxnInitProducerIdRequest.decode(c.InitProducerIdRequest(count=5).encode())


def test_every_response_field_has_a_default_and_starts_with_the_error():
    for response in t.RESPONSE_FOR.values():
        fields = dataclasses.fields(response)
        assert [f.name for f in fields[:2]] == ["error_code", "error_message"]
        response()


@pytest.mark.parametrize("cls", TOP_LEVEL, ids=lambda cls: cls.__name__)
def test_garbage_is_corrupt_message(cls):
    for junk in (b"\xc1", b"\x92\x01", b"", b"\xff\xff\xff"):
        with pytest.raises(DecodeError) as info:
            cls.decode(junk)
        assert info.value.code == ErrorCode.CORRUPT_MESSAGE


REQUIRED = [
    cls for cls in TOP_LEVEL
    if any(f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING for f in dataclasses.fields(cls))
]


@pytest.mark.parametrize("cls", REQUIRED, ids=lambda cls: cls.__name__)
def test_missing_required_field_is_invalid_request(cls):
    sample = next(m for m in SAMPLES if type(m) is cls)
    required = [f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    assert required
    for name in required:
        obj = copy.deepcopy(sample.to_obj())
        del obj[name]
        with pytest.raises(DecodeError) as info:
            cls.decode(msgpack.packb(obj, use_bin_type=True))
        assert info.value.code == ErrorCode.INVALID_REQUEST


@pytest.mark.parametrize("cls", TOP_LEVEL, ids=lambda cls: cls.__name__)
def test_wrong_types_and_wrong_api_key_are_invalid_request(cls):
    sample = next(m for m in SAMPLES if type(m) is cls)
    obj = copy.deepcopy(sample.to_obj())
    name = dataclasses.fields(cls)[0].name
    obj[name] = {"not": "right"} if not isinstance(obj[name], dict) else 5
    with pytest.raises(DecodeError) as info:
        cls.decode(msgpack.packb(obj, use_bin_type=True))
    assert info.value.code == ErrorCode.INVALID_REQUEST
    other = t.ListTransactionsRequest if cls.API_KEY != t.ListTransactionsRequest.API_KEY else t.EndTxnRequest
    with pytest.raises(DecodeError) as info:
        cls.decode(next(m for m in SAMPLES if type(m) is other).encode())
    assert info.value.code == ErrorCode.INVALID_REQUEST


def test_nested_field_errors_are_invalid_request():
    # (to_obj shares containers with the message: copy before changing them)
    obj = copy.deepcopy(SAMPLES[12].to_obj())  # TxnOffsetCommitRequest
    obj["topics"]["in"][0]["offset"] = "forty-two"
    with pytest.raises(DecodeError) as info:
        t.TxnOffsetCommitRequest.decode(msgpack.packb(obj, use_bin_type=True))
    assert info.value.code == ErrorCode.INVALID_REQUEST
    obj = copy.deepcopy(SAMPLES[2].to_obj())  # AddPartitionsToTxnRequest
    obj["topics"]["out"] = [0, "one"]
    with pytest.raises(DecodeError) as info:
        t.AddPartitionsToTxnRequest.decode(msgpack.packb(obj, use_bin_type=True))
    assert info.value.code == ErrorCode.INVALID_REQUEST


def test_unknown_fields_are_ignored_and_defaults_fill_old_messages():
    obj = t.EndTxnRequest("x", 1, 0, False).to_obj()
    obj["from_the_future"] = {"a": 1}
    del obj["bump_epoch"], obj["wire_version"]
    assert t.EndTxnRequest.decode(msgpack.packb(obj, use_bin_type=True)) == t.EndTxnRequest("x", 1, 0, False)


def test_error_response_covers_every_request_and_fills_items():
    for request_cls, response_cls in t.RESPONSE_FOR.items():
        sample = next(m for m in SAMPLES if type(m) is request_cls)
        r = t.error_response(sample, ErrorCode.NOT_COORDINATOR, "moved")
        assert type(r) is response_cls and r.error_code == ErrorCode.NOT_COORDINATOR and r.error_message == "moved"
    add = t.error_response(SAMPLES[2], ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    assert add.results == {"out": {0: 14, 3: 14}, "side": {1: 14}}
    commit = t.error_response(SAMPLES[12], ErrorCode.NOT_COORDINATOR)
    assert commit.topics == {"in": {0: 16, 2: 16}}
    described = t.error_response(SAMPLES[14], ErrorCode.COORDINATOR_NOT_AVAILABLE)
    assert [(d.transactional_id, d.error_code) for d in described.transactions] == [("etl-1", 15), ("etl-2", 15)]
    with pytest.raises(TypeError):
        t.error_response(t.DescribedTransaction("x"), 16)
    assert t.is_txn_coordinator_request(SAMPLES[0]) and not t.is_txn_coordinator_request(SAMPLES[8])
    assert not t.is_txn_coordinator_request(SAMPLES[12])  # served by a group coordinator


@pytest.mark.parametrize(
    "request_, fenced_below",
    [
        (t.TxnInitProducerIdRequest("x"), 4),
        (t.AddPartitionsToTxnRequest("x", 1, 0), 2),
        (t.AddOffsetsToTxnRequest("x", 1, 0, "g"), 2),
        (t.EndTxnRequest("x", 1, 0, True), 2),
        (t.TxnOffsetCommitRequest("x", "g", 1, 0), 3),
    ],
)
def test_old_kafka_clients_hear_invalid_producer_epoch_instead_of_fenced(request_, fenced_below):
    assert t.fenced_error(request_) == ErrorCode.PRODUCER_FENCED  # kcoord's own clients
    for version in range(0, fenced_below + 2):
        old = dataclasses.replace(request_, wire_version=version)
        expected = ErrorCode.INVALID_PRODUCER_EPOCH if version < fenced_below else ErrorCode.PRODUCER_FENCED
        assert t.fenced_error(old) == expected, version


def test_placement_is_kafkas_java_hash_and_names():
    # Kafka: Utils.abs("etl-1".hashCode()) % 50 -- the same function that places groups.
    from kcoord.group.placement import coordinator_for as group_placement

    for tid in ("etl-1", "", "ü-ñ", "a" * 100):
        for n in (1, 7, 50):
            assert coordinator_for(tid, n) == group_placement(tid, n)
            assert 0 <= coordinator_for(tid, n) < n
    assert coordinator_for("polygenelubricants", 50) == 0  # hashCode is Integer.MIN_VALUE
    with pytest.raises(ValueError):
        coordinator_for("x", 0)
    assert names.transaction_coordinator("c", 3) == "c/txn/3"
    assert owner_name(3) == "__transaction_state-3"
    assert names.TRANSACTION_STATE_TOPIC in names.INTERNAL_TOPICS
