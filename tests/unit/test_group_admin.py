"""GroupCoordinatorState: DescribeGroups, ListGroups, DeleteGroups, FindCoordinator, and the
NOT_COORDINATOR / INVALID_GROUP_ID guards."""

from __future__ import annotations

from kcoord.group import GroupState, coordinator_for
from kcoord.group.records import GroupKey, OffsetKey, decode_record
from kcoord.protocol.errors import ErrorCode as E
from kcoord.protocol.group import (
    Assignment,
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    ListGroupsRequest,
    OffsetFetchRequest,
    Subscription,
)

try:
    from .test_group_harness import Shell
except ImportError:
    from test_group_harness import Shell


def test_describe_stable_group():
    s = Shell()
    members, gen, assigned = s.form_group("g", 2, partitions={"t": 4})
    (d,) = s.call(DescribeGroupsRequest(["g"])).groups
    assert (d.group_id, d.error_code, d.state, d.protocol_type, d.protocol, d.generation_id) == (
        "g", 0, "Stable", "consumer", "range", gen,
    )
    assert d.leader == s.group().leader
    assert [m.member_id for m in d.members] == members
    assert all(Subscription.decode(m.metadata).topics == ["t"] for m in d.members)
    assert {m.member_id: Assignment.decode(m.assignment) for m in d.members} == assigned
    assert {m.client_id for m in d.members} == {"c0", "c1"}


def test_describe_hides_metadata_until_stable_and_reports_unknown_groups():
    s = Shell()
    s.settle(s.join("g", s.new_member_id("g")))
    d, missing = s.call(DescribeGroupsRequest(["g", "nope"])).groups
    assert d.state == "CompletingRebalance" and d.members[0].metadata == b"" and d.members[0].assignment == b""
    assert missing.group_id == "nope" and missing.error_code == E.GROUP_ID_NOT_FOUND and missing.state == "Dead"


def test_describe_other_coordinators_group():
    s = Shell(partition=0, num_partitions=3)
    foreign = next(f"x{i}" for i in range(100) if coordinator_for(f"x{i}", 3) != 0)
    (d,) = s.call(DescribeGroupsRequest([foreign])).groups
    assert d.error_code == E.NOT_COORDINATOR


def test_list_groups_with_and_without_state_filter():
    s = Shell()
    s.form_group("stable", 1)
    s.reply(s.commit("solo", {("t", 0): 1}))
    listed = s.call(ListGroupsRequest()).groups
    assert [(g.group_id, g.state, g.protocol_type) for g in listed] == [
        ("solo", "Empty", ""),
        ("stable", "Stable", "consumer"),
    ]
    assert [g.group_id for g in s.call(ListGroupsRequest(["stable"])).groups] == ["stable"]
    assert [g.group_id for g in s.call(ListGroupsRequest(["empty", "Dead"])).groups] == ["solo"]
    assert s.call(ListGroupsRequest([])).groups == listed


def test_delete_empty_group_writes_tombstones_and_forgets_it():
    s = Shell(auto_persist=False)
    s.commit("g", {("t", 0): 1, ("t", 1): 2})
    s.complete()
    t = s.send(DeleteGroupsRequest(["g"]))
    assert s.reply(t) is None and s.group().state == GroupState.DEAD
    persist = s.complete()
    assert s.reply(t).results == {"g": 0}
    assert s.group("g") is None and s.fetch("g") == {}
    assert [decode_record(k, v) for k, v in persist.records] == [
        (OffsetKey("g", "t", 0), None),
        (OffsetKey("g", "t", 1), None),
        (GroupKey("g"), None),
    ]


def test_delete_errors_per_group():
    s = Shell()
    s.form_group("busy", 1)
    s.reply(s.commit("idle", {("t", 0): 1}))
    r = s.call(DeleteGroupsRequest(["busy", "nope", "idle", ""]))
    assert r.results == {"busy": E.NON_EMPTY_GROUP, "nope": E.GROUP_ID_NOT_FOUND, "idle": 0, "": E.INVALID_GROUP_ID}
    assert s.call(DeleteGroupsRequest(["idle"])).results == {"idle": E.GROUP_ID_NOT_FOUND}


def test_failed_delete_restores_the_group():
    s = Shell(auto_persist=False)
    s.commit("g", {("t", 0): 1})
    s.complete()
    t = s.send(DeleteGroupsRequest(["g"]))
    s.complete(error=E.NOT_ENOUGH_REPLICAS)
    assert s.reply(t).results == {"g": E.COORDINATOR_NOT_AVAILABLE}
    assert s.group().state == GroupState.EMPTY and s.fetch("g") == {("t", 0): 1}


def test_delete_with_a_commit_in_flight_deletes_it_too():
    s = Shell(auto_persist=False)
    c = s.commit("g", {("t", 0): 1})
    d = s.send(DeleteGroupsRequest(["g"]))
    s.complete_all()
    assert s.reply(c).error_code == 0 and s.reply(d).results == {"g": 0}
    assert s.group("g") is None


def test_find_coordinator():
    s = Shell(partition=1, num_partitions=5)
    r = s.call(FindCoordinatorRequest("my-group"))
    assert r.error_code == 0 and r.coordinator == coordinator_for("my-group", 5)
    assert s.call(FindCoordinatorRequest("x", key_type=1)).error_code == E.INVALID_REQUEST
    assert s.call(FindCoordinatorRequest("")).error_code == E.INVALID_GROUP_ID


def test_offset_fetch_guards():
    s = Shell(partition=0, num_partitions=7)
    foreign = next(f"x{i}" for i in range(100) if coordinator_for(f"x{i}", 7) != 0)
    r = s.call(OffsetFetchRequest(foreign, {"t": [0]}))
    assert r.error_code == E.NOT_COORDINATOR and r.offsets["t"][0].error_code == E.NOT_COORDINATOR
    assert s.call(OffsetFetchRequest("")).error_code == E.INVALID_GROUP_ID
