"""The controller's security metadata (SCRAM credentials, ACLs) through the ControllerDriver,
without Ray: persisted before answered, survives a restart, a failed write is an unknown
outcome and the store's truth comes after; Kafka's error codes for bad requests; the
listeners' poll."""

from __future__ import annotations

from kcoord.protocol.errors import ErrorCode as E
from kcoord.protocol.security import (
    AclFilterRecord,
    AclRecord,
    AlterUserScramCredentialsRequest,
    CreateAclsRequest,
    DeleteAclsRequest,
    DescribeAclsRequest,
    DescribeUserScramCredentialsRequest,
    ScramCredentialRecord,
    ScramDeletion,
    ScramUpsertion,
    SecurityMetadataRequest,
)
from kcoord.replication.security_metadata import ACL_PREFIX, USER_PREFIX
from kcoord.security.acl import ACLOperation as Op, ACLPermissionType as Perm, ACLResourcePatternType as Pat, ResourceType as RT
from kcoord.security.scram import ScramMechanism, credential_from_password
from manual_clock import ManualClock
from test_controller_driver import Replicas, Store, make_driver, serve

S256, S512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512


def upsert(user: str, mechanism=S256, password: str = "pw", iterations: int = 4096) -> ScramUpsertion:
    c = credential_from_password(mechanism, password, 4096)
    return ScramUpsertion(user, ScramCredentialRecord(int(mechanism), iterations, c.salt, c.stored_key, c.server_key))


def acl(name: str = "t", op: Op = Op.READ, perm: Perm = Perm.ALLOW, pattern: Pat = Pat.LITERAL, principal: str = "User:alice", rtype: RT = RT.TOPIC) -> AclRecord:
    return AclRecord(int(rtype), name, int(pattern), principal, "*", int(op), int(perm))


def setup():
    clock, store = ManualClock(), Store()
    replicas = Replicas(clock)
    return clock, store, make_driver(store, clock, replicas)


def test_credentials_are_persisted_salted_before_the_answer_and_survive_a_restart() -> None:
    clock, store, d = setup()
    up = upsert("alice", S256, "s3cret")
    answer = serve(d, clock, AlterUserScramCredentialsRequest(upsertions=[up, upsert("bob", S512)]))
    assert [(r.user, r.error_code) for r in answer.results] == [("alice", 0), ("bob", 0)]
    assert set(store.keys(USER_PREFIX)) == {USER_PREFIX + "alice", USER_PREFIX + "bob"}
    assert b"s3cret" not in b"".join(store.data.values())
    # a new controller (a restart) reads them back
    d2 = make_driver(store, clock, Replicas(clock))
    clock.run_until(clock.now + 50)
    described = serve(d2, clock, DescribeUserScramCredentialsRequest(users=None))
    assert [(r.user, r.credentials) for r in described.results] == [("alice", [(1, 4096)]), ("bob", [(2, 4096)])]
    snap = serve(d2, clock, SecurityMetadataRequest())
    alice = next(u for u in snap.users if u.user == "alice")
    assert alice.credentials[0].stored_key == up.credential.stored_key


def test_alter_user_scram_credentials_errors_are_kafkas() -> None:
    clock, _, d = setup()
    serve(d, clock, AlterUserScramCredentialsRequest(upsertions=[upsert("alice"), upsert("twice")]))
    answer = serve(
        d,
        clock,
        AlterUserScramCredentialsRequest(
            deletions=[ScramDeletion("bob", 1), ScramDeletion("twice", 1), ScramDeletion("alice", 9)],
            upsertions=[upsert("twice"), upsert(""), upsert("few", iterations=1000), upsert("many", iterations=20000), upsert("carol")],
        ),
    )
    codes = {r.user: r.error_code for r in answer.results}
    assert codes == {
        "bob": E.RESOURCE_NOT_FOUND,
        "twice": E.DUPLICATE_RESOURCE,
        "alice": E.UNSUPPORTED_SASL_MECHANISM,
        "": E.UNACCEPTABLE_CREDENTIAL,
        "few": E.UNACCEPTABLE_CREDENTIAL,
        "many": E.UNACCEPTABLE_CREDENTIAL,
        "carol": 0,
    }
    # deleting the last credential removes the user
    assert serve(d, clock, AlterUserScramCredentialsRequest(deletions=[ScramDeletion("alice", 1)])).results[0].error_code == 0
    described = serve(d, clock, DescribeUserScramCredentialsRequest(users=["alice", "carol", "carol"]))
    assert {r.user: r.error_code for r in described.results} == {"alice": E.RESOURCE_NOT_FOUND, "carol": E.DUPLICATE_RESOURCE}


def test_acls_create_describe_delete() -> None:
    clock, store, d = setup()
    created = serve(d, clock, CreateAclsRequest(acls=[acl("t"), acl("t"), acl("ev", pattern=Pat.PREFIXED), acl("g", rtype=RT.GROUP)]))
    assert [r.error_code for r in created.results] == [0, 0, 0, 0]
    assert len(store.keys(ACL_PREFIX)) == 3, "an ACL that exists is not written again"
    match = serve(d, clock, DescribeAclsRequest(AclFilterRecord(resource_type=int(RT.TOPIC), resource_name="events", pattern_type=int(Pat.MATCH))))
    assert [a.resource_name for a in match.acls] == ["ev"]
    everything = serve(d, clock, DescribeAclsRequest(AclFilterRecord()))
    assert len(everything.acls) == 3
    deleted = serve(d, clock, DeleteAclsRequest(filters=[AclFilterRecord(resource_type=int(RT.TOPIC)), AclFilterRecord()]))
    assert [len(r.acls) for r in deleted.results] == [2, 1], "the second filter only gets what the first left"
    assert store.keys(ACL_PREFIX) == []


def test_bad_acls_and_filters_are_invalid_requests() -> None:
    clock, store, d = setup()
    created = serve(
        d,
        clock,
        CreateAclsRequest(acls=[acl("x", rtype=RT.CLUSTER, op=Op.ALTER), acl("t", op=Op.ANY), acl("t", principal="alice"), AclRecord(99, "t", 3, "User:a", "*", 3, 3), acl("")]),
    )
    assert [r.error_code for r in created.results] == [E.INVALID_REQUEST] * 5
    assert "kafka-cluster" in created.results[0].error_message
    assert store.keys(ACL_PREFIX) == []
    assert serve(d, clock, DescribeAclsRequest(AclFilterRecord(pattern_type=0))).error_code == E.INVALID_REQUEST
    assert serve(d, clock, DeleteAclsRequest(filters=[AclFilterRecord(operation=0)])).results[0].error_code == E.INVALID_REQUEST


def test_a_failed_write_is_an_unknown_outcome_and_the_poll_version_moves_on() -> None:
    clock, store, d = setup()
    first = serve(d, clock, SecurityMetadataRequest())
    assert first.changed and first.acls == [] and first.users == []
    same = serve(d, clock, SecurityMetadataRequest(known_epoch=first.epoch, known_version=first.version))
    assert not same.changed and same.users == [] and same.acls == []
    store.fail_next = [True]  # the write times out, but lands
    answer = serve(d, clock, CreateAclsRequest(acls=[acl("t")]))
    assert answer.error_code == E.REQUEST_TIMED_OUT
    clock.run_until(clock.now + 500)  # the driver reloaded from the store
    after = serve(d, clock, SecurityMetadataRequest(known_epoch=first.epoch, known_version=first.version))
    assert after.changed and after.epoch > first.epoch and [a.resource_name for a in after.acls] == ["t"]
    store.fail_next = [False]  # refused: nothing lands
    assert serve(d, clock, CreateAclsRequest(acls=[acl("u")])).error_code == E.REQUEST_TIMED_OUT
    clock.run_until(clock.now + 500)
    final = serve(d, clock, SecurityMetadataRequest())
    assert [a.resource_name for a in final.acls] == ["t"]
    bumped = serve(d, clock, CreateAclsRequest(acls=[acl("v")]))
    assert bumped.results[0].error_code == 0
    assert serve(d, clock, SecurityMetadataRequest(known_epoch=final.epoch, known_version=final.version)).version == final.version + 1
