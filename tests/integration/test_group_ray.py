"""Consumer groups on real Ray: GroupCoordinatorActors, GroupMembers in driver threads.

Members here are :class:`GroupMember` objects (the Consumer's group half) driven by a poll
thread each, so the tests exercise the protocol without fetching records; the Consumer
itself is covered in test_consumer_group_ray.py. All groups share one 12-partition topic
(a partition replica is an actor: topics are the expensive part).
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid

import pytest
import ray

from waiting import wait_until
from kcoord.cluster.group_coordinators import configure_group_coordinators
from kcoord.client.admin import Admin
from kcoord.client.coordinator import GroupMember
from kcoord.client.coordinator.coordinators import GroupCoordinators
from kcoord.client.errors import CommitFailedError
from kcoord.client.types import TopicPartition
from kcoord.protocol.errors import ErrorCode, KafkaError
from kcoord.protocol.group import (
    JoinGroupResponse,
    LeaveGroupMember,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)

pytestmark = pytest.mark.ray

# Short timeouts so that expiry tests take seconds (the broker-side minimum is lowered to match).
FAST_GROUP_CONFIG = {"group.min.session.timeout.ms": 500, "group.initial.rebalance.delay.ms": 300}


@pytest.fixture(scope="module")
def groups(kcluster):
    configure_group_coordinators(kcluster, FAST_GROUP_CONFIG)
    return kcluster


@pytest.fixture(scope="module")
def topic12(groups):
    name = f"groups12-{uuid.uuid4().hex[:6]}"
    Admin(groups).create_topic(name, partitions=12, replication_factor=1)
    return name


@pytest.fixture
def group_id(request) -> str:
    return f"{request.node.name[:30]}-{uuid.uuid4().hex[:6]}"


class Host:
    """A stand-in for the Consumer: keeps the assignment and the positions to commit."""

    def __init__(self) -> None:
        self.assigned: list[TopicPartition] = []
        self.positions: dict[TopicPartition, int] = {}
        self.committed_at_assign: dict[TopicPartition, int | None] = {}

    def group_assign(self, partitions, committed):
        self.assigned = list(partitions)
        self.committed_at_assign = dict(committed)
        self.positions = {tp: (c if c is not None else 0) for tp, c in committed.items()}

    def group_positions(self):
        return dict(self.positions)


class Member:
    """A GroupMember with its own poll thread (as a consumer's poll loop would be)."""

    def __init__(self, cluster, group_id, topic, **kw) -> None:
        kw.setdefault("session_timeout_ms", 3000)
        kw.setdefault("heartbeat_interval_ms", 100)
        kw.setdefault("enable_auto_commit", False)
        self.host = Host()
        self.member = GroupMember(cluster, group_id, self.host, **kw)
        self.member.subscribe([topic])
        self.polling = True
        self.errors: list[Exception] = []
        self.assigned_generation = -1  # the generation whose assignment the host holds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(0.02):
            if not self.polling:
                continue
            try:
                self.member.poll()
                # poll() returns once a new assignment is in the host; the member is
                # stable (and heartbeats) from the SyncGroup answer on, before that
                self.assigned_generation = self.member.generation
            except Exception as exc:  # surfaced by the tests
                self.errors.append(exc)

    def partitions(self) -> set[int]:
        return {tp.partition for tp in self.host.assigned}

    def stop_thread(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def close(self, leave_group: bool | None = None) -> None:
        self.stop_thread()
        self.member.close(leave_group=leave_group)


def stable_with(admin: Admin, group_id: str, members: list[Member], generation_above: int = 0) -> dict | None:
    """The group's description once it is Stable with exactly ``members``, all of which
    hold the current generation's assignment; else None."""
    d = admin.describe_group(group_id)
    ids = {m.member.member_id for m in members}
    if d["state"] != "Stable" or d["generation"] <= generation_above or {x["member_id"] for x in d["members"]} != ids:
        return None
    if any(m.member.generation != d["generation"] or m.member.state != "stable" or m.assigned_generation != d["generation"] for m in members):
        return None
    return d


def close_all(members: list[Member]) -> None:
    for m in members:
        try:
            m.close()
        except Exception:
            pass


def test_four_members_split_twelve_partitions_without_overlap_or_gap(groups, topic12, group_id):
    admin = Admin(groups)
    members = [Member(groups, group_id, topic12, client_id=f"m{i}") for i in range(4)]
    try:
        d = wait_until(lambda: stable_with(admin, group_id, members), timeout=60, what="4 members stable")
        owned = [m.partitions() for m in members]
        assert sorted(p for ps in owned for p in ps) == list(range(12)), owned  # no overlap, no gap
        assert all(len(ps) == 3 for ps in owned), owned
        # The coordinator's view (describe) agrees with what members were handed.
        described = {x["member_id"]: set(x["assignment"][topic12]) for x in d["members"]}
        assert described == {m.member.member_id: m.partitions() for m in members}
        assert d["protocol"] == "range" and d["protocol_type"] == "consumer"
        assert not any(m.errors for m in members)
    finally:
        close_all(members)


def test_member_leaves_only_its_partitions_move_with_sticky(groups, topic12, group_id):
    admin = Admin(groups)
    members = [Member(groups, group_id, topic12, partition_assignment_strategy="sticky") for _ in range(4)]
    try:
        d = wait_until(lambda: stable_with(admin, group_id, members), timeout=60, what="4 members stable")
        before = [m.partitions() for m in members]
        leaving = members.pop(1)
        leaving.close()  # LeaveGroup: the rebalance starts at once, not after a session timeout
        d2 = wait_until(lambda: stable_with(admin, group_id, members, d["generation"]), timeout=30, what="rebalance after leave")
        after = [m.partitions() for m in members]
        assert sorted(p for ps in after for p in ps) == list(range(12))
        kept = [before[0], before[2], before[3]]
        for old, new in zip(kept, after):
            assert old <= new, "sticky: a staying member keeps all its partitions"
        moved = set().union(*after) - set().union(*kept)
        assert moved == before[1], "exactly the leaver's partitions moved"
        assert d2["generation"] == d["generation"] + 1
    finally:
        close_all(members)


def pause_heartbeats(member: GroupMember, paused: bool = True) -> None:
    """Stop (or resume) a member's heartbeats while it stays 'stable' locally: a member
    that hangs without leaving."""
    if paused:
        member.heartbeats.beat = lambda: None  # shadows the method the heartbeat thread calls
    else:
        del member.heartbeats.beat


def test_member_that_stops_heartbeating_is_removed_after_session_timeout(groups, topic12, group_id):
    admin = Admin(groups)
    session_ms = 1500
    a = Member(groups, group_id, topic12, session_timeout_ms=session_ms)
    b = Member(groups, group_id, topic12, session_timeout_ms=session_ms)
    revoked: list = []
    lost: list = []
    b.member.subscribe([topic12], on_revoke=revoked.append, on_lost=lost.append)  # same topics: callbacks only
    try:
        d = wait_until(lambda: stable_with(admin, group_id, [a, b]), timeout=60, what="2 members stable")
        held = sorted(b.host.assigned)
        revoked.clear()
        # b hangs: no heartbeats, no polls, no LeaveGroup.
        b.polling = False
        pause_heartbeats(b.member)
        hung_at = time.monotonic()
        wait_until(lambda: stable_with(admin, group_id, [a], d["generation"]), timeout=30, what="b expired, a alone")
        elapsed = time.monotonic() - hung_at
        assert elapsed >= session_ms / 1000 * 0.8, f"removed after {elapsed:.2f} s, before the session timeout"
        assert a.partitions() == set(range(12))
        # The expired member finds out on its next heartbeat and rejoins as a new member.
        pause_heartbeats(b.member, False)
        b.polling = True
        wait_until(lambda: stable_with(admin, group_id, [a, b]), timeout=30, what="b rejoined")
        assert sorted(a.partitions() | b.partitions()) == list(range(12))
        # fenced: b was told its partitions were lost (no commit possible), not revoked
        assert [sorted(ps) for ps in lost] == [held] and revoked == [], (lost, revoked)
    finally:
        close_all([a, b])


def test_member_that_stops_polling_leaves_after_max_poll_interval(groups, topic12, group_id):
    admin = Admin(groups)
    a = Member(groups, group_id, topic12)
    b = Member(groups, group_id, topic12, max_poll_interval_ms=1000)
    try:
        d = wait_until(lambda: stable_with(admin, group_id, [a, b]), timeout=60, what="2 members stable")
        b.polling = False  # heartbeats continue, polls stop: Kafka's "stuck processing" case
        wait_until(lambda: stable_with(admin, group_id, [a], d["generation"]), timeout=30, what="b left on poll timeout")
        assert a.partitions() == set(range(12))
        b.polling = True
        wait_until(lambda: stable_with(admin, group_id, [a, b]), timeout=30, what="b rejoined after polling again")
    finally:
        close_all([a, b])


def test_static_member_restart_keeps_assignment_without_new_generation(groups, topic12, group_id):
    admin = Admin(groups)
    a = Member(groups, group_id, topic12, group_instance_id="instance-a", session_timeout_ms=10_000)
    b = Member(groups, group_id, topic12, group_instance_id="instance-b", session_timeout_ms=10_000)
    members = [a, b]
    try:
        d = wait_until(lambda: stable_with(admin, group_id, members), timeout=60, what="2 static members stable")
        a_parts = a.partitions()
        old_id = a.member.member_id
        a.close()  # a static member does not leave: its seat waits for it
        assert admin.describe_group(group_id)["generation"] == d["generation"]
        a2 = Member(groups, group_id, topic12, group_instance_id="instance-a", session_timeout_ms=10_000)
        members = [a2, b]
        d2 = wait_until(lambda: stable_with(admin, group_id, members), timeout=30, what="restarted static member back")
        assert d2["generation"] == d["generation"], "no rebalance for a static member's restart"
        assert a2.partitions() == a_parts
        assert a2.member.member_id != old_id
        assert b.member.rebalances == 1, "the other member never rejoined"
        # The old incarnation is fenced.
        gc = GroupCoordinators(groups)
        stale = OffsetCommitRequest(group_id, d["generation"], old_id, "instance-a", topics={topic12: {0: OffsetCommitPartition(1)}})
        resp = gc.call_group(group_id, "offset_commit", stale, OffsetCommitResponse, 30)
        assert resp.topics[topic12][0] == ErrorCode.FENCED_INSTANCE_ID
        # ... and cannot remove the instance's new member by leaving (KIP-345: refused).
        leave = gc.call_group(group_id, "leave_group", LeaveGroupRequest(group_id, [LeaveGroupMember(old_id, "instance-a")]), LeaveGroupResponse, 30)
        assert [m.error_code for m in leave.members] == [ErrorCode.FENCED_INSTANCE_ID]
        assert {m["group_instance_id"] for m in admin.describe_group(group_id)["members"]} == {"instance-a", "instance-b"}
        # A static member closed with leave_group=True (KIP-1092's LEAVE_GROUP) leaves at once:
        # the group rebalances without waiting for its session to expire.
        a2.close(leave_group=True)
        members = [b]
        left = wait_until(lambda: stable_with(admin, group_id, members), timeout=8, what="b alone after instance-a left")
        assert left["generation"] > d2["generation"] and b.partitions() == set(range(12))
    finally:
        close_all(members)


def test_commit_from_an_old_generation_is_rejected(groups, topic12, group_id):
    admin = Admin(groups)
    gc = GroupCoordinators(groups)
    a = Member(groups, group_id, topic12)
    members = [a]
    try:
        d = wait_until(lambda: stable_with(admin, group_id, members), timeout=60, what="a stable")
        old_gen, a_id = d["generation"], a.member.member_id
        tp = TopicPartition(topic12, 0)
        a.member.commit({tp: 10})
        b = Member(groups, group_id, topic12)
        members.append(b)
        wait_until(lambda: stable_with(admin, group_id, members, old_gen), timeout=30, what="rebalance to 2 members")
        stale = OffsetCommitRequest(group_id, old_gen, a_id, topics={topic12: {0: OffsetCommitPartition(99)}})
        resp = gc.call_group(group_id, "offset_commit", stale, OffsetCommitResponse, 30)
        assert resp.topics[topic12][0] == ErrorCode.ILLEGAL_GENERATION
        fetched = gc.call_group(group_id, "offset_fetch", OffsetFetchRequest(group_id, {topic12: [0]}), OffsetFetchResponse, 30)
        assert fetched.offsets[topic12][0].offset == 10, "a fenced commit must not move the offset"
        # The client API says the same with CommitFailedError.
        a.polling = False
        pause_heartbeats(a.member)
        c = Member(groups, group_id, topic12)
        members.append(c)
        wait_until(lambda: admin.describe_group(group_id)["state"] != "Stable", timeout=30, what="rebalance started")
        wait_until(lambda: a.member.member_id not in {x["member_id"] for x in admin.describe_group(group_id)["members"]},
                   timeout=30, what="a removed")
        with pytest.raises(CommitFailedError) as info:
            a.member.commit({tp: 50})
        assert info.value.code in (ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID)
        assert "rebalanced" in str(info.value)
    finally:
        close_all(members)


def _coordinator(cluster, group_id):
    index = GroupCoordinators(cluster).index_for(group_id)
    from kcoord.protocol import names

    return ray.get_actor(names.group_coordinator(cluster.name, index), namespace=cluster.namespace)


@pytest.mark.parametrize("how", ["ray_kill", "sigkill"])
def test_coordinator_restart_keeps_offsets_and_generation(groups, topic12, group_id, how):
    admin = Admin(groups)
    members = [Member(groups, group_id, topic12, session_timeout_ms=10_000) for _ in range(2)]
    try:
        d = wait_until(lambda: stable_with(admin, group_id, members), timeout=60, what="2 members stable")
        for i, m in enumerate(members):
            m.member.commit({tp: 100 + tp.partition for tp in m.host.assigned})
        committed = {(x["topic"], x["partition"]): x["committed_offset"] for x in admin.describe_group(group_id)["offsets"]}
        assert committed == {(topic12, p): 100 + p for p in range(12)}
        handle = _coordinator(groups, group_id)
        before = ray.get(handle.describe.remote(), timeout=30)
        if how == "ray_kill":
            ray.kill(handle, no_restart=False)
        else:
            os.kill(before["pid"], signal.SIGKILL)

        def restarted():
            info = ray.get(handle.describe.remote(), timeout=10)
            return info if info["incarnation"] != before["incarnation"] and info["loaded"] else None

        after = wait_until(restarted, timeout=90, what="coordinator restarted and loaded")
        assert after["groups"][group_id]["generation"] == d["generation"]
        d2 = admin.describe_group(group_id)
        assert d2["generation"] == d["generation"] and d2["state"] == "Stable"
        assert {x["member_id"] for x in d2["members"]} == {m.member.member_id for m in members}
        assert {(x["topic"], x["partition"]): x["committed_offset"] for x in d2["offsets"]} == committed
        # Members carry on in the same generation: heartbeats and commits work.
        for m in members:
            m.member.commit({tp: 200 + tp.partition for tp in m.host.assigned})
        assert all(m.member.generation == d["generation"] for m in members)
        assert admin.describe_group(group_id)["generation"] == d["generation"]
    finally:
        close_all(members)


def test_clients_cannot_write_the_offsets_topic_and_a_restarted_coordinator_loads_unharmed(groups, group_id):
    """Issue 32, finding 9: a kcoord Producer's send to ``__consumer_offsets`` was
    acknowledged, and every coordinator replays what is there. The leader refuses it
    (INVALID_TOPIC_EXCEPTION); a coordinator restarted afterwards loads the group as it was."""
    from kcoord.client.producer import Producer
    from kcoord.group.records import OFFSETS_TOPIC, OffsetKey, OffsetValue, offset_record

    admin = Admin(groups)
    gc = GroupCoordinators(groups)
    index = gc.index_for(group_id)
    commit = OffsetCommitRequest(group_id, -1, "", topics={"t-internal": {0: OffsetCommitPartition(42)}})
    assert gc.call_group(group_id, "offset_commit", commit, OffsetCommitResponse, 30).topics["t-internal"][0] == ErrorCode.NONE
    end = admin.list_offsets(OFFSETS_TOPIC, "latest", [index])[index]
    rollback = offset_record(OffsetKey(group_id, "t-internal", 0), OffsetValue(3, commit_timestamp_ms=1))
    with Producer(groups) as producer:
        for key, value in (rollback, (b"\xc1", b"\xc1 not a record")):
            with pytest.raises(KafkaError) as err:
                producer.send(OFFSETS_TOPIC, value=value, key=key, partition=index).get(timeout=60)
            assert err.value.code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert admin.list_offsets(OFFSETS_TOPIC, "latest", [index])[index] == end
    handle = _coordinator(groups, group_id)
    before = ray.get(handle.describe.remote(), timeout=30)
    ray.kill(handle, no_restart=False)

    def restarted():
        info = ray.get(handle.describe.remote(), timeout=10)
        return info if info["incarnation"] != before["incarnation"] and info["loaded"] else None

    after = wait_until(restarted, timeout=90, what="coordinator restarted and loaded")
    assert after["groups"][group_id]["offsets"] == {"t-internal-0": 42}
    assert after["producer"][1] > before["producer"][1], "the new incarnation writes at a higher epoch"
    fetched = gc.call_group(group_id, "offset_fetch", OffsetFetchRequest(group_id), OffsetFetchResponse, 30)
    assert fetched.offsets["t-internal"][0].offset == 42


def test_coordinator_answers_malformed_bytes_with_an_error_and_stays_up(groups):
    handle = _coordinator(groups, "any-group")
    for method in ("join_group", "offset_commit", "heartbeat", "list_groups"):
        raw = ray.get(getattr(handle, method).remote(b"\xc1 not msgpack"), timeout=30)
        from kcoord.protocol.codec import decode_any

        decoded = decode_any(raw, response=True)
        assert decoded.error_code == ErrorCode.CORRUPT_MESSAGE
    wrong = ray.get(handle.join_group.remote(OffsetFetchRequest("g").encode()), timeout=30)
    assert JoinGroupResponse.decode(wrong).error_code == ErrorCode.INVALID_REQUEST
    assert ray.get(handle.describe.remote(), timeout=30)["loaded"]


def _produce(cluster, topic, partition, count):
    from kcoord import records
    from kcoord.protocol.replication import ProduceRequest, ProduceResponse

    batch = records.build_batch_columns([b"v%d" % i for i in range(count)])
    resp = cluster.call_leader(
        topic, partition, "produce",
        lambda epoch: ProduceRequest(topic, partition, batch, acks=-1, current_leader_epoch=epoch), ProduceResponse,
    )
    assert resp.error_code == 0, resp


def test_admin_group_calls_and_bad_input(groups, topic12, group_id):
    admin = Admin(groups)
    # Unknown groups and bad ids are refused clearly.
    for call in (admin.describe_group, admin.delete_group):
        with pytest.raises(KafkaError) as info:
            call(group_id)
        assert info.value.code == ErrorCode.GROUP_ID_NOT_FOUND and group_id in str(info.value)
        with pytest.raises(KafkaError) as info:
            call("")
        assert info.value.code == ErrorCode.INVALID_GROUP_ID
    assert group_id not in {g["group_id"] for g in admin.list_groups()}

    end0 = admin.list_offsets(topic12, "latest", [0])[0]
    end1 = admin.list_offsets(topic12, "latest", [1])[1]
    _produce(groups, topic12, 0, 10)
    _produce(groups, topic12, 1, 4)
    end0, end1 = end0 + 10, end1 + 4
    m = Member(groups, group_id, topic12, client_id="admin-test")
    try:
        wait_until(lambda: stable_with(admin, group_id, [m]), timeout=60, what="member stable")
        m.member.commit({TopicPartition(topic12, 0): end0 - 7, TopicPartition(topic12, 1): end1})
        d = admin.describe_group(group_id)
        assert d["state"] == "Stable" and d["generation"] >= 1 and d["protocol"] == "range"
        [member] = d["members"]
        assert member["client_id"] == "admin-test" and member["member_id"] == m.member.member_id
        assert member["assignment"] == {topic12: list(range(12))}
        rows = {x["partition"]: x for x in d["offsets"]}
        assert rows[0]["committed_offset"] == end0 - 7 and rows[0]["log_end_offset"] == end0 and rows[0]["lag"] == 7
        assert rows[1]["committed_offset"] == end1 and rows[1]["lag"] == 0
        assert rows[2]["committed_offset"] is None and rows[2]["lag"] is None and rows[2]["member_id"] == member["member_id"]
        assert d["lag"] == 7
        listed = {g["group_id"]: g for g in admin.list_groups()}
        assert listed[group_id]["state"] == "Stable" and listed[group_id]["protocol_type"] == "consumer"
        assert group_id in {g["group_id"] for g in admin.list_groups(states=["stable"])}
        assert group_id not in {g["group_id"] for g in admin.list_groups(states=["Empty"])}

        # While the group has members: reset and delete are refused with a clear reason.
        with pytest.raises(KafkaError) as info:
            admin.reset_offsets(group_id, topic12, "earliest")
        assert info.value.code == ErrorCode.NON_EMPTY_GROUP and "inactive" in str(info.value)
        with pytest.raises(KafkaError) as info:
            admin.delete_group(group_id)
        assert info.value.code == ErrorCode.NON_EMPTY_GROUP
    finally:
        m.close()
    assert admin.describe_group(group_id)["state"] == "Empty"

    # Bad reset targets.
    with pytest.raises(KafkaError) as info:
        admin.reset_offsets(group_id, topic12, {0: end0 + 1})
    assert info.value.code == ErrorCode.OFFSET_OUT_OF_RANGE and f"[0, {end0}]" in str(info.value)
    with pytest.raises(KafkaError) as info:
        admin.reset_offsets(group_id, topic12, {0: -1})
    assert info.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    with pytest.raises(KafkaError) as info:
        admin.reset_offsets(group_id, topic12, {99: 0})
    assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    with pytest.raises(KafkaError) as info:
        admin.reset_offsets(group_id, "no-such-topic-" + group_id, "earliest")
    assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    with pytest.raises(ValueError):
        admin.reset_offsets(group_id, topic12, "yesterday")

    # Good resets.
    assert admin.reset_offsets(group_id, topic12, {0: 3}) == {0: 3}
    rows = {x["partition"]: x for x in admin.describe_group(group_id)["offsets"]}
    assert rows[0]["committed_offset"] == 3 and rows[0]["lag"] == end0 - 3
    assert admin.reset_offsets(group_id, topic12, "latest")[0] == end0
    assert admin.reset_offsets(group_id, topic12, "earliest") == {p: 0 for p in range(12)}
    assert admin.describe_group(group_id)["lag"] == end0 + end1 + sum(
        admin.list_offsets(topic12, "latest", list(range(2, 12))).values()
    )

    admin.delete_group(group_id)
    with pytest.raises(KafkaError) as info:
        admin.describe_group(group_id)
    assert info.value.code == ErrorCode.GROUP_ID_NOT_FOUND
    assert group_id not in {g["group_id"] for g in admin.list_groups()}
