"""Follower-side rules: reconciliation by leader epoch, the fetch loop, HW, backoff."""

from __future__ import annotations

from replication_helpers import batch, lai, make_replica, of_type, produce, replies, leader_and_isr, list_offsets, offsets_for_epoch

from kcoord import records
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.replication import FetchResponse, OffsetsForLeaderEpochResponse
from kcoord.replication.actions import SendFetch, SendOffsetsForLeaderEpoch
from kcoord.replication.config import ReplicationConfig


def deliver(replicas: dict, actions, now: int, rounds: int = 20):
    """Route follower requests to the leader synchronously until nothing is pending that
    can be answered now (long polls that park stop the loop)."""
    queue = list(actions)
    for _ in range(rounds * 10):
        if not queue:
            return
        a = queue.pop(0)
        if isinstance(a, SendFetch):
            leader = replicas[a.leader]
            token = ("fetch", id(a))
            req = a.request
            # answer immediately (no long poll) to keep the test synchronous
            req_now = type(req)(**{**req.__dict__, "max_wait_ms": 0})
            resp = replies(leader.fetch(req_now, token, now)).get(token)
            follower = replicas[req.replica_id]
            if resp is not None and (resp.records or resp.error_code):
                queue += follower.on_fetch_response(req, resp, now)
            elif resp is not None:
                follower.on_fetch_response(req, resp, now)  # caught up: stop here
        elif isinstance(a, SendOffsetsForLeaderEpoch):
            leader = replicas[a.leader]
            resp = offsets_for_epoch(leader, a.request)
            follower = replicas[a.request.replica_id]
            queue += follower.on_offsets_for_leader_epoch_response(a.request, resp, now)


def values(replica) -> list[bytes]:
    data = replica.log.read(replica.log.log_start_offset, 1 << 30) if replica.log.log_end_offset else b""
    return [r.value for r in records.iter_records(data)]


def test_follower_copies_leader_bytes_and_learns_hw():
    leader, follower = make_replica(0), make_replica(1)
    leader_and_isr(leader, lai(0, 1, (0, 1), replicas=(0, 1)), 0)
    produce(leader, batch(3, b"a"), "p", 0)
    _, acts = leader_and_isr(follower, lai(0, 1, (0, 1), replicas=(0, 1)), 0)
    deliver({0: leader, 1: follower}, acts, 1)
    assert follower.log.log_end_offset == 3
    assert follower.log.read(0, 1 << 20) == leader.log.read(0, 1 << 20), "bytes copied unchanged"
    # the follower's next fetch reported LEO 3 -> leader HW 3 -> next response carries HW
    assert leader.hw == 3
    produce(leader, batch(1, b"b"), "q", 2)
    deliver({0: leader, 1: follower}, [SendFetch(0, _fetch_req(follower))], 3)
    # the loop's last fetch reported LEO 4, and its answer carried HW 4 back
    assert follower.log.log_end_offset == 4 and leader.hw == 4 and follower.hw == 4


def _fetch_req(follower):
    """The fetch the follower is waiting on (its loop keeps exactly one in flight)."""
    pending = follower.follower_state.in_flight
    assert pending is not None and pending.fetch_offset == follower.log.log_end_offset
    return pending


def test_deposed_leader_truncates_unreplicated_tail_kip101():
    a, b = make_replica(0), make_replica(1)
    leader_and_isr(a, lai(0, 1, (0, 1), replicas=(0, 1)), 0)
    _, acts = leader_and_isr(b, lai(0, 1, (0, 1), replicas=(0, 1)), 0)
    produce(a, batch(2, b"x"), "p1", 0)
    deliver({0: a, 1: b}, acts, 1)
    assert b.log.log_end_offset == 2
    # a appends more that b never gets, then a is deposed
    produce(a, batch(3, b"lost"), "p2", 2, acks=1)
    assert a.log.log_end_offset == 5
    leader_and_isr(b, lai(1, 2, (1,), replicas=(0, 1)), 3)
    produce(b, batch(1, b"new"), "p3", 3, acks=1)
    _, acts = leader_and_isr(a, lai(1, 2, (1,), replicas=(0, 1)), 4)
    assert of_type(acts, SendOffsetsForLeaderEpoch), "a new follower reconciles first"
    deliver({0: a, 1: b}, acts, 5)
    assert values(a) == values(b) == [b"x0", b"x1", b"new0"]
    assert a.log.read(0, 1 << 20) == b.log.read(0, 1 << 20)
    assert a.metrics["truncated_records"] == 3


def test_kip279_iterates_to_an_epoch_both_sides_know():
    # Follower f has epochs 1 (offsets 0-1) and 2 (offsets 2-3, never seen by the leader).
    # Leader l has epoch 1 (0-1) then epoch 3 (from 2). f asks about 2; l answers (1, 2);
    # f knows epoch 1, so it truncates to min(2, end of its epoch 1 = 2).
    f, l = make_replica(1), make_replica(0)
    leader_and_isr(l, lai(0, 1, (0,), replicas=(0, 1)), 0)
    produce(l, batch(2, b"e1"), "a", 0, acks=1)
    f.log.append_as_follower(l.log.read(0, 1 << 20))
    f.log.append_as_follower(records.stamp(batch(2, b"e2"), 2, 2))
    assert f.log.epoch_cache.latest_epoch == 2
    leader_and_isr(l, lai(0, 3, (0,), replicas=(0, 1)), 1)
    produce(l, batch(1, b"e3"), "b", 1, acks=1)
    _, acts = leader_and_isr(f, lai(0, 3, (0,), replicas=(0, 1)), 2)
    (ask,) = of_type(acts, SendOffsetsForLeaderEpoch)
    assert ask.request.leader_epoch == 2
    deliver({0: l, 1: f}, acts, 3)
    assert values(f) == [b"e10", b"e11", b"e30"]


def test_kip279_needs_a_second_round_when_epoch_ranges_differ():
    # f: epoch 1 at 0..3 (4 records), epoch 4 at 4. l: epoch 1 at 0..1, epoch 3 at 2..
    # f asks about 4 -> l says (3, LEO). f's largest epoch <= 3 is 1: ask again about 1
    # -> l says (1, 2): f truncates to min(2, 4) = 2.
    f, l = make_replica(1), make_replica(0)
    leader_and_isr(l, lai(0, 1, (0,), replicas=(0, 1)), 0)
    produce(l, batch(2, b"a"), "a", 0, acks=1)
    f.log.append_as_follower(l.log.read(0, 1 << 20))
    f.log.append_as_follower(records.stamp(batch(2, b"f1"), 2, 1))
    f.log.append_as_follower(records.stamp(batch(1, b"f4"), 4, 4))
    leader_and_isr(l, lai(0, 5, (0,), replicas=(0, 1)), 1)
    produce(l, batch(3, b"l5"), "b", 1, acks=1)
    # leader's cache: 1@0, 5@2
    _, acts = leader_and_isr(f, lai(0, 5, (0,), replicas=(0, 1)), 2)
    (ask,) = of_type(acts, SendOffsetsForLeaderEpoch)
    assert ask.request.leader_epoch == 4
    resp = offsets_for_epoch(l, ask.request)
    assert (resp.leader_epoch, resp.end_offset) == (1, 2)
    acts = f.on_offsets_for_leader_epoch_response(ask.request, resp, 3)
    # f knows epoch 1 itself: truncate to min(2, its end of epoch 1 = 4) = 2 and fetch
    assert f.log.log_end_offset == 2
    deliver({0: l, 1: f}, acts, 4)
    assert values(f) == values(l)


def test_follower_backs_off_on_errors_and_ignores_stale_answers():
    f = make_replica(1, ReplicationConfig(replica_fetch_backoff_ms=100))
    _, acts = leader_and_isr(f, lai(0, 1, (0, 1), replicas=(0, 1)), 0)
    (fetch,) = of_type(acts, SendFetch)  # empty log: straight to fetching
    assert f.on_fetch_response(fetch.request, None, 10) == []  # leader unreachable
    assert f.next_deadline(10) == 110
    assert f.tick(50) == []
    (again,) = of_type(f.tick(110), SendFetch)
    # a leader change happens while `again` is in flight; its answer is stale
    _, acts2 = leader_and_isr(f, lai(2, 2, (2, 1), replicas=(0, 1, 2)), 120)
    assert of_type(acts2, SendFetch)[0].leader == 2
    assert f.on_fetch_response(again.request, FetchResponse(records=batch()), 121) == []
    assert f.log.log_end_offset == 0


def test_follower_behind_leader_log_start_restarts_at_it():
    f = make_replica(1)
    _, acts = leader_and_isr(f, lai(0, 1, (0, 1), replicas=(0, 1)), 0)
    (fetch,) = of_type(acts, SendFetch)
    resp = FetchResponse(ErrorCode.OFFSET_OUT_OF_RANGE, "gone", log_start_offset=50, log_end_offset=60)
    acts = f.on_fetch_response(fetch.request, resp, 1)
    assert f.log.log_start_offset == 50 and f.log.log_end_offset == 50
    assert of_type(acts, SendFetch)[0].request.fetch_offset == 50


def test_offline_partition_role_none_refuses_everything():
    r = make_replica(0)
    leader_and_isr(r, lai(0, 1, (0,)), 0)
    _, acts = leader_and_isr(r, lai(-1, 2, (0,)), 1)
    assert r.role == "none"
    resp = replies(produce(r, batch(), "p", 2))["p"]
    assert resp.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER and "offline" in resp.error_message
