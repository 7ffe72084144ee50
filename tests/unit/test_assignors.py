"""Assignors: no overlap, no gap, only subscribed topics, determinism (property tests), the
Kafka-documented layouts of range and roundrobin, and balance + stickiness of sticky."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kcoord.group.assignors import ASSIGNORS, RangeAssignor, RoundRobinAssignor, StickyAssignor, get_assignor
from kcoord.protocol.group import Assignment, Subscription

ALL = sorted(ASSIGNORS)
TOPICS = ["a", "b", "c"]


def flat(plan: dict[str, Assignment]) -> dict[str, list[tuple[str, int]]]:
    return {m: a.topic_partitions() for m, a in plan.items()}


def counts(plan: dict[str, Assignment]) -> list[int]:
    return [len(a.topic_partitions()) for a in plan.values()]


def check_valid(cluster: dict[str, int], subs: dict[str, Subscription], plan: dict[str, Assignment]) -> None:
    assert set(plan) == set(subs)
    owner: dict[tuple[str, int], str] = {}
    for member, tps in flat(plan).items():
        for tp in tps:
            assert tp not in owner, f"{tp} assigned twice"
            owner[tp] = member
            assert tp[0] in subs[member].topics, f"{member} got {tp} without subscribing"
    wanted = {(t, p) for s in subs.values() for t in s.topics if t in cluster for p in range(cluster[t])}
    assert set(owner) == wanted, "gap or stray partition"


clusters = st.dictionaries(st.sampled_from(TOPICS), st.integers(0, 12), min_size=1)
member_ids = st.lists(st.text("mnxyz0123456789", min_size=1, max_size=4), min_size=1, max_size=7, unique=True)


@st.composite
def groups(draw, identical: bool = False):
    cluster = draw(clusters)
    members = draw(member_ids)
    names = TOPICS + ["missing"]
    if identical:
        topics = draw(st.lists(st.sampled_from(names), min_size=1, unique=True))
        subs = {m: Subscription(list(topics)) for m in members}
    else:
        subs = {m: Subscription(draw(st.lists(st.sampled_from(names), unique=True))) for m in members}
    return cluster, subs


@pytest.mark.parametrize("name", ALL)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=groups())
def test_no_overlap_no_gap_any_subscriptions(name, data):
    cluster, subs = data
    check_valid(cluster, subs, get_assignor(name).assign(cluster, subs))


@pytest.mark.parametrize("name", ALL)
@settings(max_examples=150, deadline=None)
@given(data=groups(identical=True))
def test_balanced_within_one_with_identical_subscriptions(name, data):
    cluster, subs = data
    plan = get_assignor(name).assign(cluster, subs)
    check_valid(cluster, subs, plan)
    if name in ("roundrobin", "sticky"):  # range balances per topic only
        assert max(counts(plan)) - min(counts(plan)) <= 1


@pytest.mark.parametrize("name", ALL)
@settings(max_examples=80, deadline=None)
@given(data=groups(), seed=st.integers(0, 10**6))
def test_deterministic_regardless_of_input_order(name, data, seed):
    cluster, subs = data
    rng = random.Random(seed)
    shuffled_members = list(subs.items())
    rng.shuffle(shuffled_members)
    shuffled_cluster = list(cluster.items())
    rng.shuffle(shuffled_cluster)
    a = get_assignor(name).assign(cluster, subs)
    b = get_assignor(name).assign(dict(shuffled_cluster), dict(shuffled_members))
    assert flat(a) == flat(b)


def test_range_layout_matches_kafka_docs():
    # Kafka's RangeAssignor javadoc: C0, C1 on t0, t1 with 3 partitions each.
    subs = {"C0": Subscription(["t0", "t1"]), "C1": Subscription(["t0", "t1"])}
    plan = RangeAssignor().assign({"t0": 3, "t1": 3}, subs)
    assert plan["C0"].partitions == {"t0": [0, 1], "t1": [0, 1]}
    assert plan["C1"].partitions == {"t0": [2], "t1": [2]}


def test_range_first_members_get_the_extra_partitions():
    subs = {m: Subscription(["t"]) for m in ("a", "b", "c")}
    plan = RangeAssignor().assign({"t": 8}, subs)
    assert [plan[m].partitions["t"] for m in "abc"] == [[0, 1, 2], [3, 4, 5], [6, 7]]


def test_roundrobin_layout_matches_kafka_docs():
    subs = {"C0": Subscription(["t0", "t1"]), "C1": Subscription(["t0", "t1"])}
    plan = RoundRobinAssignor().assign({"t0": 3, "t1": 3}, subs)
    assert plan["C0"].topic_partitions() == [("t0", 0), ("t0", 2), ("t1", 1)]
    assert plan["C1"].topic_partitions() == [("t0", 1), ("t1", 0), ("t1", 2)]


def test_roundrobin_skips_members_not_subscribed():
    # Kafka's javadoc example with unequal subscriptions.
    subs = {"C0": Subscription(["t0"]), "C1": Subscription(["t0", "t1"]), "C2": Subscription(["t0", "t1", "t2"])}
    plan = RoundRobinAssignor().assign({"t0": 1, "t1": 2, "t2": 3}, subs)
    assert plan["C0"].topic_partitions() == [("t0", 0)]
    assert plan["C1"].topic_partitions() == [("t1", 0)]
    assert plan["C2"].topic_partitions() == [("t1", 1), ("t2", 0), ("t2", 1), ("t2", 2)]


def test_members_without_partitions_still_get_an_entry():
    subs = {m: Subscription(["t"]) for m in "abcde"}
    subs["z"] = Subscription(["missing"])
    for name in ALL:
        plan = get_assignor(name).assign({"t": 2}, subs)
        assert set(plan) == set(subs) and plan["z"].partitions == {}
        assert sum(counts(plan)) == 2


def test_unknown_assignor():
    with pytest.raises(ValueError):
        get_assignor("cooperative-sticky")


# -- sticky --------------------------------------------------------------------------------


def with_owned(subs: dict[str, Subscription], plan: dict[str, Assignment], generation: int = 1) -> dict[str, Subscription]:
    return {
        m: Subscription(s.topics, owned_partitions=plan[m].partitions if m in plan else {}, generation_id=generation)
        for m, s in subs.items()
    }


def moved(before: dict[str, Assignment], after: dict[str, Assignment]) -> int:
    old_owner = {tp: m for m, a in before.items() for tp in a.topic_partitions()}
    return sum(1 for m, a in after.items() for tp in a.topic_partitions() if tp in old_owner and old_owner[tp] != m)


def test_sticky_member_leaving_moves_only_its_partitions():
    subs = {m: Subscription(["a", "b"]) for m in ("m1", "m2", "m3", "m4")}
    cluster = {"a": 7, "b": 5}
    first = StickyAssignor().assign(cluster, subs)
    del subs["m3"]
    second = StickyAssignor().assign(cluster, with_owned(subs, first))
    for m in subs:
        assert set(first[m].topic_partitions()) <= set(second[m].topic_partitions())
    assert max(counts(second)) - min(counts(second)) <= 1


def test_sticky_member_joining_takes_only_what_balance_requires():
    subs = {m: Subscription(["t"]) for m in ("m1", "m2", "m3")}
    first = StickyAssignor().assign({"t": 12}, subs)
    subs["m4"] = Subscription(["t"])
    second = StickyAssignor().assign({"t": 12}, with_owned(subs, first))
    assert counts(second) == [3, 3, 3, 3]
    assert moved(first, second) == 3  # exactly the newcomer's share, nothing else


def test_sticky_keeps_a_balanced_assignment_unchanged():
    subs = {m: Subscription(["t", "u"]) for m in ("x", "y")}
    owned = {"x": Assignment({"t": [0, 3], "u": [1]}), "y": Assignment({"t": [1, 2], "u": [0]})}
    plan = StickyAssignor().assign({"t": 4, "u": 2}, with_owned(subs, owned))
    assert flat(plan) == flat(owned)


def test_sticky_conflicting_claims_go_to_the_newest_generation():
    subs = {
        "old": Subscription(["t"], owned_partitions={"t": [0, 1]}, generation_id=3),
        "new": Subscription(["t"], owned_partitions={"t": [1, 2]}, generation_id=4),
    }
    plan = StickyAssignor().assign({"t": 4}, subs)
    assert 1 in plan["new"].partitions["t"] and 2 in plan["new"].partitions["t"]
    assert 0 in plan["old"].partitions["t"]
    check_valid({"t": 4}, subs, plan)


def test_sticky_drops_owned_partitions_it_may_no_longer_have():
    subs = {
        "a": Subscription(["t"], owned_partitions={"t": [0, 9], "gone": [0], "u": [0]}),  # u: not subscribed
        "b": Subscription(["t", "u"]),
    }
    plan = StickyAssignor().assign({"t": 2, "u": 1}, subs)
    check_valid({"t": 2, "u": 1}, subs, plan)
    assert ("t", 0) in plan["a"].topic_partitions() and ("u", 0) in plan["b"].topic_partitions()


@st.composite
def sticky_histories(draw):
    cluster = draw(st.dictionaries(st.sampled_from(TOPICS), st.integers(1, 10), min_size=1))
    members = draw(member_ids)
    all_tps = [(t, p) for t in sorted(cluster) for p in range(cluster[t])]
    # Each partition was owned by one of the current members, someone who left, or nobody.
    owners = draw(st.lists(st.sampled_from(members + ["departed", None]), min_size=len(all_tps), max_size=len(all_tps)))
    owned: dict[str, dict[str, list[int]]] = {m: {} for m in members}
    for (t, p), o in zip(all_tps, owners):
        if o in owned:
            owned[o].setdefault(t, []).append(p)
    subs = {m: Subscription(sorted(cluster), owned_partitions=owned[m], generation_id=1) for m in members}
    return cluster, subs


@settings(max_examples=300, deadline=None)
@given(data=sticky_histories())
def test_sticky_is_balanced_and_moves_the_minimum(data):
    """With identical subscriptions, sticky is balanced within one and moves exactly as many
    previously owned partitions as balance forces: the members owning the most get the
    larger shares, and everyone keeps min(owned, share)."""
    cluster, subs = data
    plan = StickyAssignor().assign(cluster, subs)
    check_valid(cluster, subs, plan)
    assert max(counts(plan)) - min(counts(plan)) <= 1
    total, n = sum(cluster.values()), len(subs)
    base, extra = divmod(total, n)
    owned_counts = sorted((sum(len(v) for v in s.owned_partitions.values()) for s in subs.values()), reverse=True)
    shares = [base + 1] * extra + [base] * (n - extra)
    must_move = sum(max(0, o - q) for o, q in zip(owned_counts, shares))
    before = {m: Assignment(s.owned_partitions) for m, s in subs.items()}
    assert moved(before, plan) == must_move
    for m, s in subs.items():  # nobody loses partitions while under its share
        kept = set(Assignment(s.owned_partitions).topic_partitions()) & set(plan[m].topic_partitions())
        assert len(kept) >= min(len(Assignment(s.owned_partitions).topic_partitions()), base)


@settings(max_examples=150, deadline=None)
@given(data=groups(), seed=st.integers(0, 10**6))
def test_sticky_with_random_previous_ownership_stays_valid(data, seed):
    cluster, subs = data
    rng = random.Random(seed)
    tps = [(t, p) for t in cluster for p in range(cluster[t] + 1)]  # includes stale partitions
    subs = {
        m: Subscription(
            s.topics,
            owned_partitions={t: [p for (tt, p) in tps if tt == t and rng.random() < 0.3] for t in TOPICS},
            generation_id=rng.randrange(3),
        )
        for m, s in subs.items()
    }
    check_valid(cluster, subs, StickyAssignor().assign(cluster, subs))


def test_sticky_large_group_is_fast_enough():
    import time

    subs = {f"m{i:03d}": Subscription(["a", "b", "c"]) for i in range(100)}
    cluster = {"a": 500, "b": 300, "c": 200}
    start = time.perf_counter()
    first = StickyAssignor().assign(cluster, subs)
    del subs["m042"]
    second = StickyAssignor().assign(cluster, with_owned(subs, first))
    assert time.perf_counter() - start < 5
    assert max(counts(second)) - min(counts(second)) <= 1
    # only the departed member's 10 partitions changed hands
    assert moved(first, second) == len(first["m042"].topic_partitions()) == 10
