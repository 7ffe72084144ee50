"""Kafka's authorizer rules (kcoord.security.authorizer), without Ray: the implication
rules exhaustively, patterns, principals and hosts, DENY over ALLOW, super users, the
no-ACL default, KIP-679's "any topic" check, ACL filters and validation -- and the
indexed authorizer against a brute-force reading of the rules over random ACL sets."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcoord.security.acl import (
    ACL,
    ACLFilter,
    ACLOperation as Op,
    ACLPermissionType as Perm,
    ACLResourcePatternType as Pat,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType as RT,
    any_filter,
    coerce,
)
from kcoord.security.authorizer import Authorizer, operations_bitfield

ALICE = "User:alice"
HOST = "10.0.0.7"
# Every operation an ACL may name, and every operation a request may ask for.
ACL_OPS = [op for op in Op if op not in (Op.UNKNOWN, Op.ANY)]
REQUEST_OPS = [op for op in Op if op not in (Op.UNKNOWN, Op.ANY, Op.ALL)]
# Kafka's implications, written out: an ALLOW of the key also allows these.
IMPLIED = {
    Op.READ: {Op.DESCRIBE},
    Op.WRITE: {Op.DESCRIBE},
    Op.DELETE: {Op.DESCRIBE},
    Op.ALTER: {Op.DESCRIBE},
    Op.ALTER_CONFIGS: {Op.DESCRIBE_CONFIGS},
}


PAIRS = list(itertools.product(ACL_OPS, REQUEST_OPS))
PAIR_IDS = [f"{a.name}-{b.name}" for a, b in PAIRS]


def acl(op: Op, perm: Perm = Perm.ALLOW, name: str = "t", pattern: Pat = Pat.LITERAL, principal: str = ALICE, host: str = "*", rtype: RT = RT.TOPIC) -> ACL:
    return ACL(principal, host, op, perm, ResourcePattern(rtype, name, pattern))


def allows(acl_op: Op, asked: Op) -> bool:
    return acl_op == Op.ALL or acl_op == asked or asked in IMPLIED.get(acl_op, set())


@pytest.mark.parametrize("acl_op,asked", PAIRS, ids=PAIR_IDS)
def test_an_allow_grants_its_operation_all_and_the_implied_ones_only(acl_op: Op, asked: Op) -> None:
    auth = Authorizer([acl(acl_op)])
    assert auth.authorize(ALICE, HOST, asked, RT.TOPIC, "t") == allows(acl_op, asked)


@pytest.mark.parametrize("acl_op,asked", PAIRS, ids=PAIR_IDS)
def test_a_deny_takes_only_its_own_operation_or_all_never_an_implied_one(acl_op: Op, asked: Op) -> None:
    # Everything is allowed by an ALLOW ALL; the DENY takes away exactly what it names.
    auth = Authorizer([acl(Op.ALL), acl(acl_op, Perm.DENY)])
    denied = acl_op == Op.ALL or acl_op == asked
    assert auth.authorize(ALICE, HOST, asked, RT.TOPIC, "t") == (not denied)
    # a DENY beats an ALLOW of the very same operation too
    assert not Authorizer([acl(asked), acl(asked, Perm.DENY)]).authorize(ALICE, HOST, asked, RT.TOPIC, "t")


@pytest.mark.parametrize(
    "pattern,acl_name,resource,applies",
    [
        (Pat.LITERAL, "events", "events", True),
        (Pat.LITERAL, "events", "events-1", False),
        (Pat.LITERAL, "events", "event", False),
        (Pat.LITERAL, "*", "events", True),
        (Pat.LITERAL, "*", "*", True),
        (Pat.PREFIXED, "ev", "events", True),
        (Pat.PREFIXED, "events", "events", True),
        (Pat.PREFIXED, "events-", "events", False),
        (Pat.PREFIXED, "x", "events", False),
        (Pat.PREFIXED, "*", "events", False),  # a prefixed "*" is a literal star prefix
        (Pat.PREFIXED, "*", "*x", True),
    ],
)
def test_patterns(pattern: Pat, acl_name: str, resource: str, applies: bool) -> None:
    auth = Authorizer([acl(Op.READ, name=acl_name, pattern=pattern)])
    assert auth.authorize(ALICE, HOST, Op.READ, RT.TOPIC, resource) == applies
    # and a DENY with that pattern takes away an ALLOW on the literal name exactly then
    both = Authorizer([acl(Op.READ, name=resource), acl(Op.READ, Perm.DENY, name=acl_name, pattern=pattern)])
    assert both.authorize(ALICE, HOST, Op.READ, RT.TOPIC, resource) == (not applies)


def test_prefixed_deny_beats_literal_allow_and_prefixed_allow() -> None:
    auth = Authorizer([acl(Op.WRITE, name="team-a-"), acl(Op.WRITE, pattern=Pat.PREFIXED, name="team-"), acl(Op.WRITE, Perm.DENY, pattern=Pat.PREFIXED, name="team-a")])
    assert auth.authorize(ALICE, HOST, Op.WRITE, RT.TOPIC, "team-b-orders")
    assert not auth.authorize(ALICE, HOST, Op.WRITE, RT.TOPIC, "team-a-orders")
    assert not auth.authorize(ALICE, HOST, Op.WRITE, RT.TOPIC, "team-a-")


def test_principals_and_hosts() -> None:
    auth = Authorizer([acl(Op.READ, principal="User:*"), acl(Op.WRITE, host="10.0.0.7"), acl(Op.DELETE, principal="User:bob")])
    assert auth.authorize("User:anyone", HOST, Op.READ, RT.TOPIC, "t")
    assert auth.authorize(ALICE, "10.0.0.7", Op.WRITE, RT.TOPIC, "t")
    assert not auth.authorize(ALICE, "10.0.0.8", Op.WRITE, RT.TOPIC, "t")
    assert not auth.authorize(ALICE, HOST, Op.DELETE, RT.TOPIC, "t")
    assert auth.authorize("User:bob", HOST, Op.DELETE, RT.TOPIC, "t")
    # "*" is not a principal wildcard in the name part of another type, nor a prefix
    assert not Authorizer([acl(Op.READ, principal="Group:*")]).authorize(ALICE, HOST, Op.READ, RT.TOPIC, "t")
    # a DENY for User:* denies everybody, whatever their own ALLOW
    assert not Authorizer([acl(Op.READ), acl(Op.READ, Perm.DENY, principal="User:*")]).authorize(ALICE, HOST, Op.READ, RT.TOPIC, "t")
    # a DENY from one host leaves the others
    only_there = Authorizer([acl(Op.READ), acl(Op.READ, Perm.DENY, host="10.9.9.9")])
    assert only_there.authorize(ALICE, HOST, Op.READ, RT.TOPIC, "t") and not only_there.authorize(ALICE, "10.9.9.9", Op.READ, RT.TOPIC, "t")


def test_resource_types_are_separate() -> None:
    auth = Authorizer([acl(Op.ALL, rtype=RT.GROUP, name="x")])
    assert auth.authorize(ALICE, HOST, Op.READ, RT.GROUP, "x")
    for rtype in (RT.TOPIC, RT.TRANSACTIONAL_ID, RT.CLUSTER):
        assert not auth.authorize(ALICE, HOST, Op.READ, rtype, "x")


def test_super_users_may_do_anything_even_against_a_deny() -> None:
    auth = Authorizer([acl(Op.ALL, Perm.DENY, principal="User:*", name="*")], super_users=["User:admin"])
    for rtype, op in itertools.product((RT.TOPIC, RT.GROUP, RT.CLUSTER, RT.TRANSACTIONAL_ID), REQUEST_OPS):
        assert auth.authorize("User:admin", HOST, op, rtype, "anything")
        assert not auth.authorize(ALICE, HOST, op, rtype, "anything")


def test_no_matching_acl_denies_and_allow_everyone_only_where_no_acl_applies() -> None:
    assert not Authorizer().authorize(ALICE, HOST, Op.READ, RT.TOPIC, "t")
    open_ = Authorizer([acl(Op.READ, principal="User:bob", name="bobs")], allow_everyone_if_no_acl_found=True)
    assert open_.authorize(ALICE, HOST, Op.READ, RT.TOPIC, "t")  # no ACL at all for t
    assert not open_.authorize(ALICE, HOST, Op.READ, RT.TOPIC, "bobs")  # an ACL exists for bobs, not for alice
    assert open_.authorize("User:bob", HOST, Op.READ, RT.TOPIC, "bobs")
    assert not open_.authorize("User:bob", HOST, Op.WRITE, RT.TOPIC, "bobs")  # the ACL is there; it says READ


# -- KIP-679: WRITE on any topic (an idempotent producer's InitProducerId) -----------------


@pytest.mark.parametrize(
    "acls,allowed",
    [
        ([], False),
        ([acl(Op.WRITE, name="t")], True),
        ([acl(Op.ALL, name="t")], True),
        ([acl(Op.READ, name="t")], False),  # no implication here: READ is not WRITE
        ([acl(Op.WRITE, principal="User:bob")], False),
        ([acl(Op.WRITE, name="t"), acl(Op.WRITE, Perm.DENY, name="t")], False),
        ([acl(Op.WRITE, name="t"), acl(Op.WRITE, Perm.DENY, name="u")], True),
        ([acl(Op.WRITE, name="ab", pattern=Pat.PREFIXED), acl(Op.WRITE, Perm.DENY, name="a", pattern=Pat.PREFIXED)], False),
        ([acl(Op.WRITE, name="a", pattern=Pat.PREFIXED), acl(Op.WRITE, Perm.DENY, name="ab", pattern=Pat.PREFIXED)], True),
        ([acl(Op.WRITE, name="abc"), acl(Op.WRITE, Perm.DENY, name="ab", pattern=Pat.PREFIXED)], False),
        ([acl(Op.WRITE, name="abc"), acl(Op.WRITE, Perm.DENY, name="abc", pattern=Pat.PREFIXED)], False),
        ([acl(Op.WRITE, name="*"), acl(Op.WRITE, Perm.DENY, name="x")], True),
        ([acl(Op.WRITE, name="t"), acl(Op.WRITE, Perm.DENY, name="*")], False),
        ([acl(Op.WRITE, name="*"), acl(Op.ALL, Perm.DENY, name="*", principal="User:*")], False),
        ([acl(Op.WRITE, name="t", host="10.1.1.1")], False),
        ([acl(Op.WRITE, name="t", principal="User:*")], True),
    ],
)
def test_authorize_any_topic(acls: list[ACL], allowed: bool) -> None:
    assert Authorizer(acls).authorize_any(ALICE, HOST, Op.WRITE, RT.TOPIC) == allowed


def test_authorize_any_for_super_users_and_allow_everyone() -> None:
    assert Authorizer([acl(Op.ALL, Perm.DENY, name="*")], super_users=[ALICE]).authorize_any(ALICE, HOST, Op.WRITE, RT.TOPIC)
    assert Authorizer(allow_everyone_if_no_acl_found=True).authorize_any(ALICE, HOST, Op.WRITE, RT.TOPIC)


def test_authorized_operations_bitfield() -> None:
    auth = Authorizer([acl(Op.READ), acl(Op.ALTER_CONFIGS)])
    ops = auth.authorized_operations(ALICE, HOST, RT.TOPIC, "t")
    assert ops == [Op.READ, Op.DESCRIBE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS]
    assert operations_bitfield(ops) == (1 << 3) | (1 << 8) | (1 << 10) | (1 << 11)


# -- the indexed authorizer against a brute-force reading of the rules ---------------------


def reference(acls: list[ACL], supers: set[str], allow_if_none: bool, principal: str, host: str, op: Op, rtype: RT, name: str) -> bool:
    """Kafka's rules as written, one ACL at a time, no index."""
    if principal in supers:
        return True
    on_resource = []
    for a in acls:
        p = a.resource_pattern
        if p.resource_type != rtype:
            continue
        if p.pattern_type == Pat.LITERAL and p.resource_name in (name, "*"):
            on_resource.append(a)
        elif p.pattern_type == Pat.PREFIXED and name.startswith(p.resource_name):
            on_resource.append(a)
    counting = []
    for a in on_resource:
        if a.principal not in (principal, "User:*") or a.host not in (host, "*"):
            continue
        if a.operation == Op.ALL or a.operation == op:
            counting.append(a)
        elif a.permission_type == Perm.ALLOW and op in IMPLIED.get(a.operation, set()):
            counting.append(a)
    if any(a.permission_type == Perm.DENY for a in counting):
        return False
    if counting:
        return True
    return allow_if_none and not on_resource


NAMES = ["a", "ab", "abc", "b", "*"]
acl_strategy = st.builds(
    lambda principal, host, op, perm, rtype, name, pattern: ACL(principal, host, op, perm, ResourcePattern(rtype, name, pattern)),
    st.sampled_from([ALICE, "User:bob", "User:*"]),
    st.sampled_from(["*", HOST, "10.0.0.8"]),
    st.sampled_from(ACL_OPS),
    st.sampled_from([Perm.ALLOW, Perm.DENY]),
    st.sampled_from([RT.TOPIC, RT.GROUP]),
    st.sampled_from(NAMES),
    st.sampled_from([Pat.LITERAL, Pat.PREFIXED]),
)


@settings(max_examples=120, deadline=None)
@given(
    acls=st.lists(acl_strategy, max_size=8),
    supers=st.sets(st.sampled_from([ALICE, "User:bob"]), max_size=1),
    allow_if_none=st.booleans(),
)
def test_the_indexed_authorizer_agrees_with_the_rules_read_one_acl_at_a_time(acls, supers, allow_if_none) -> None:
    auth = Authorizer(acls, super_users=supers, allow_everyone_if_no_acl_found=allow_if_none)
    for principal, host, op, rtype, name in itertools.product([ALICE, "User:carol"], [HOST, "10.0.0.8"], REQUEST_OPS, [RT.TOPIC, RT.GROUP], ["a", "abc", "b", "c"]):
        expected = reference(acls, supers, allow_if_none, principal, host, op, rtype, name)
        assert auth.authorize(principal, host, op, rtype, name) == expected, (principal, host, op, rtype, name)


# -- filters (DescribeAcls, DeleteAcls) and validation (CreateAcls) ------------------------


def test_pattern_filters() -> None:
    lit = acl(Op.READ, name="events")
    star = acl(Op.READ, name="*")
    pre = acl(Op.READ, name="ev", pattern=Pat.PREFIXED)
    other = acl(Op.READ, name="other")
    everything = [lit, star, pre, other]

    def selected(rtype, name, pattern):
        f = ACLFilter(None, None, Op.ANY, Perm.ANY, ResourcePatternFilter(rtype, name, pattern))
        return [a for a in everything if f.matches(a)]

    assert selected(RT.ANY, None, Pat.ANY) == everything
    assert selected(RT.GROUP, None, Pat.ANY) == []
    assert selected(RT.TOPIC, "events", Pat.LITERAL) == [lit]
    assert selected(RT.TOPIC, "ev", Pat.PREFIXED) == [pre]
    assert selected(RT.TOPIC, "ev", Pat.LITERAL) == []
    assert selected(RT.TOPIC, "events", Pat.ANY) == [lit]  # ANY: that exact name, any pattern type
    assert selected(RT.TOPIC, "events", Pat.MATCH) == [lit, star, pre]  # what applies to topic "events"
    assert selected(RT.TOPIC, None, Pat.PREFIXED) == [pre]


def test_entry_filters() -> None:
    a = acl(Op.READ, host="10.0.0.1")
    any_pattern = ResourcePatternFilter(RT.ANY, None, Pat.ANY)
    assert ACLFilter(ALICE, None, Op.ANY, Perm.ANY, any_pattern).matches(a)
    assert not ACLFilter("User:bob", None, Op.ANY, Perm.ANY, any_pattern).matches(a)
    assert not ACLFilter(None, "10.0.0.2", Op.ANY, Perm.ANY, any_pattern).matches(a)
    assert ACLFilter(None, None, Op.READ, Perm.ALLOW, any_pattern).matches(a)
    assert not ACLFilter(None, None, Op.ALL, Perm.ANY, any_pattern).matches(a)  # ALL is an operation of its own here
    assert not ACLFilter(None, None, Op.ANY, Perm.DENY, any_pattern).matches(a)
    assert any_filter().matches(a)


@pytest.mark.parametrize(
    "make,problem",
    [
        (lambda: acl(Op.READ, rtype=RT.UNKNOWN), "invalid resource type"),
        (lambda: acl(Op.UNKNOWN), "invalid operation"),
        (lambda: ACL(ALICE, "*", Op.READ, Perm.UNKNOWN, ResourcePattern(RT.TOPIC, "t")), "invalid permission"),
        (lambda: ACL(ALICE, "*", Op.READ, Perm.ALLOW, ResourcePattern(RT.TOPIC, "t", Pat.UNKNOWN)), "invalid pattern type"),
        (lambda: acl(Op.READ, name=""), "must not be empty"),
        (lambda: acl(Op.ALTER, rtype=RT.CLUSTER, name="prod"), "kafka-cluster"),
        (lambda: acl(Op.READ, principal="alice"), "TYPE:NAME"),
        (lambda: acl(Op.READ, host=""), "host"),
    ],
)
def test_invalid_acls_name_their_problem(make, problem: str) -> None:
    assert problem in (make().problem() or "")


def test_valid_acl_and_types_refused_at_construction() -> None:
    assert acl(Op.ALTER, rtype=RT.CLUSTER, name="kafka-cluster").problem() is None
    with pytest.raises(ValueError, match="ANY"):
        acl(Op.ANY)
    with pytest.raises(ValueError, match="ANY"):
        ResourcePattern(RT.ANY, "t")
    with pytest.raises(ValueError, match="MATCH"):
        ResourcePattern(RT.TOPIC, "t", Pat.MATCH)
    assert coerce(Op, "describe-configs") == Op.DESCRIBE_CONFIGS and coerce(Op, 3) == Op.READ
    with pytest.raises(ValueError, match="ACLOperation"):
        coerce(Op, "READS")
    assert ACLFilter(None, None, Op.UNKNOWN, Perm.ANY, ResourcePatternFilter(RT.ANY, None, Pat.ANY)).problem()
    assert ACLFilter(None, None, Op.ANY, Perm.ANY, ResourcePatternFilter(RT.ANY, None, Pat.UNKNOWN)).problem()
