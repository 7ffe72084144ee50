"""Group protocol messages: round trips, registry, and bad bytes for every message."""

from __future__ import annotations

import dataclasses

import msgpack
import pytest

from kcoord.protocol import DecodeError, ErrorCode, decode_any, message_class
from kcoord.protocol import group as g

SAMPLES = [
    g.FindCoordinatorRequest("grp", key_type=0),
    g.FindCoordinatorResponse(coordinator=3),
    g.JoinGroupRequest(
        "grp", 10_000, 30_000, member_id="m-1", group_instance_id="i-1",
        protocols=[g.JoinGroupProtocol("range", b"\x00\x01"), g.JoinGroupProtocol("sticky", b"")],
        client_id="cli", client_host="10.0.0.1",
    ),
    g.JoinGroupResponse(
        generation_id=4, protocol_type="consumer", protocol_name="range", leader="m-1", member_id="m-1",
        members=[g.JoinGroupMember("m-1", "i-1", b"meta"), g.JoinGroupMember("m-2", None, b"")],
    ),
    g.GroupHeartbeatRequest("grp", 4, "m-1", "i-1"),
    g.GroupHeartbeatResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS),
    g.LeaveGroupRequest("grp", [g.LeaveGroupMember("m-1"), g.LeaveGroupMember("", "i-2")]),
    g.LeaveGroupResponse(members=[g.LeaveGroupMemberResponse("m-1", None, 0), g.LeaveGroupMemberResponse("", "i-2", 25)]),
    g.SyncGroupRequest("grp", 4, "m-1", assignments=[g.SyncGroupAssignment("m-1", b"a"), g.SyncGroupAssignment("m-2", b"")]),
    g.SyncGroupResponse(protocol_type="consumer", protocol_name="range", assignment=b"\xff\x00"),
    g.OffsetCommitRequest(
        "grp", 4, "m-1", retention_time_ms=1000,
        topics={"t": {0: g.OffsetCommitPartition(10, "md", 2), 7: g.OffsetCommitPartition(11)}, "u": {}},
    ),
    g.OffsetCommitResponse(topics={"t": {0: 0, 7: 12}}),
    g.OffsetFetchRequest("grp", {"t": [0, 1]}),
    g.OffsetFetchRequest("grp"),
    g.OffsetFetchResponse(offsets={"t": {0: g.OffsetFetchPartition(10, "md", 2), 1: g.OffsetFetchPartition()}}),
    g.DescribeGroupsRequest(["a", "b"]),
    g.DescribeGroupsResponse(
        groups=[
            g.DescribedGroup(
                "a", state="Stable", protocol_type="consumer", protocol="range", generation_id=2, leader="m",
                members=[g.DescribedMember("m", None, "c", "h", b"x", b"y")],
            ),
            g.DescribedGroup("b", error_code=69),
        ]
    ),
    g.ListGroupsRequest(["Stable"]),
    g.ListGroupsRequest(),
    g.ListGroupsResponse(groups=[g.ListedGroup("a", "consumer", "Stable")]),
    g.DeleteGroupsRequest(["a"]),
    g.DeleteGroupsResponse(results={"a": 0, "b": 68}),
]

TOP_LEVEL = sorted({type(m) for m in SAMPLES}, key=lambda c: c.__name__)


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: type(m).__name__)
def test_round_trip(msg):
    data = msg.encode()
    assert type(msg).decode(data) == msg
    assert decode_any(data, response=type(msg).IS_RESPONSE) == msg


def test_api_keys_are_kafkas_and_registered():
    keys = {
        g.FindCoordinatorRequest: 10, g.JoinGroupRequest: 11, g.GroupHeartbeatRequest: 12, g.LeaveGroupRequest: 13,
        g.SyncGroupRequest: 14, g.DescribeGroupsRequest: 15, g.ListGroupsRequest: 16, g.OffsetCommitRequest: 8,
        g.OffsetFetchRequest: 9, g.DeleteGroupsRequest: 42,
    }
    for request, key in keys.items():
        response = g.RESPONSE_FOR[request]
        assert request.API_KEY == response.API_KEY == key
        assert message_class(key, False) is request and message_class(key, True) is response


def test_every_response_field_has_a_default_and_starts_with_the_error():
    for response in g.RESPONSE_FOR.values():
        fields = dataclasses.fields(response)
        assert [f.name for f in fields[:2]] == ["error_code", "error_message"]
        response()  # constructible without arguments


@pytest.mark.parametrize("cls", TOP_LEVEL, ids=lambda c: c.__name__)
def test_garbage_is_corrupt_message(cls):
    for junk in (b"\xc1", b"\x92\x01", b"", b"\xff\xff\xff"):
        with pytest.raises(DecodeError) as info:
            cls.decode(junk)
        assert info.value.code == ErrorCode.CORRUPT_MESSAGE


REQUIRED = [c for c in TOP_LEVEL if any(f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
                                        for f in dataclasses.fields(c))]


@pytest.mark.parametrize("cls", REQUIRED, ids=lambda c: c.__name__)
def test_missing_required_field_is_invalid_request(cls):
    sample = next(m for m in SAMPLES if type(m) is cls)
    required = [f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING]
    for name in required:
        obj = sample.to_obj()
        del obj[name]
        with pytest.raises(DecodeError) as info:
            cls.decode(msgpack.packb(obj, use_bin_type=True))
        assert info.value.code == ErrorCode.INVALID_REQUEST


@pytest.mark.parametrize("cls", TOP_LEVEL, ids=lambda c: c.__name__)
def test_wrong_types_and_wrong_api_key_are_invalid_request(cls):
    sample = next(m for m in SAMPLES if type(m) is cls)
    obj = sample.to_obj()
    name = dataclasses.fields(cls)[0].name
    obj[name] = {"not": "right"} if not isinstance(obj[name], dict) else 5
    with pytest.raises(DecodeError) as info:
        cls.decode(msgpack.packb(obj, use_bin_type=True))
    assert info.value.code == ErrorCode.INVALID_REQUEST
    # (a request and its response share the API key, so take another API's message)
    other = g.ListGroupsRequest if cls.API_KEY != g.ListGroupsRequest.API_KEY else g.DeleteGroupsRequest
    with pytest.raises(DecodeError) as info:
        cls.decode(next(m for m in SAMPLES if type(m) is other).encode())
    assert info.value.code == ErrorCode.INVALID_REQUEST


def test_nested_field_errors_are_invalid_request():
    obj = SAMPLES[2].to_obj()  # JoinGroupRequest
    obj["protocols"][0]["metadata"] = "text, not bytes"
    with pytest.raises(DecodeError) as info:
        g.JoinGroupRequest.decode(msgpack.packb(obj, use_bin_type=True))
    assert info.value.code == ErrorCode.INVALID_REQUEST


def test_unknown_fields_are_ignored():
    obj = g.GroupHeartbeatRequest("grp", 1, "m").to_obj()
    obj["from_the_future"] = [1, 2]
    assert g.GroupHeartbeatRequest.decode(msgpack.packb(obj, use_bin_type=True)) == g.GroupHeartbeatRequest("grp", 1, "m")


def test_consumer_protocol_payloads():
    sub = g.Subscription(["a", "b"], b"ud", {"a": [0, 2]}, generation_id=3)
    assert g.Subscription.decode(sub.encode()) == sub
    asg = g.Assignment({"a": [1, 0], "b": [3]}, None)
    assert g.Assignment.decode(asg.encode()) == asg
    assert asg.topic_partitions() == [("a", 0), ("a", 1), ("b", 3)]
    assert g.Subscription.decode(g.Subscription().encode()) == g.Subscription()
    with pytest.raises(DecodeError) as info:
        g.Subscription.decode(asg.encode())  # an Assignment is not a Subscription
    assert info.value.code == ErrorCode.INVALID_REQUEST
    with pytest.raises(DecodeError) as info:
        g.Assignment.decode(b"\xc1")
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE


def test_error_response_covers_every_request_and_fills_items():
    for request_cls, response_cls in g.RESPONSE_FOR.items():
        sample = next(m for m in SAMPLES if type(m) is request_cls)
        r = g.error_response(sample, ErrorCode.NOT_COORDINATOR, "moved")
        assert type(r) is response_cls and r.error_code == ErrorCode.NOT_COORDINATOR and r.error_message == "moved"
    commit = g.error_response(SAMPLES[10], ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    assert commit.topics == {"t": {0: 14, 7: 14}, "u": {}}
    leave = g.error_response(SAMPLES[6], 15)
    assert [m.error_code for m in leave.members] == [15, 15]
    assert g.error_response(g.DeleteGroupsRequest(["x"]), 16).results == {"x": 16}
    assert g.error_response(g.DescribeGroupsRequest(["x"]), 16).groups[0].error_code == 16
    assert g.error_response(g.OffsetFetchRequest("x", {"t": [1]}), 16).offsets["t"][1].error_code == 16
    with pytest.raises(TypeError):
        g.error_response(g.OffsetCommitPartition(1), 16)
    assert g.is_group_request(SAMPLES[0]) and not g.is_group_request(SAMPLES[1])
