"""The controller's security metadata: SCRAM credentials and ACLs, as a sans-I/O part of
the controller core (it owns nothing else and nothing else owns these).

Like every piece of cluster metadata, a change is persisted before anyone hears of it:
:meth:`SecurityMetadata.decisions` return the :class:`Persist` actions a change needs and
the response the driver sends after them; a store failure makes the driver reload the
core from the store, so memory never runs ahead of it. Keys:

* ``security/user/{name}``: the user's credentials, one per SCRAM mechanism
  (:class:`~kcoord.protocol.security.UserCredentials`; never a password);
* ``security/acl/{id}``: one ACL, ``id`` a digest of its fields, so creating an ACL that
  exists already changes nothing (Kafka answers success without a new record too).

Listeners poll :class:`~kcoord.protocol.security.SecurityMetadataRequest` with the
``(epoch, version)`` they hold and get everything back when it differs: ``epoch`` is the
controller epoch the state was loaded at, ``version`` counts changes since. A polled
snapshot is always whole (the core answers between requests, never mid-change).

Kafka's rules here: AlterUserScramCredentials refuses a user altered twice in one request
(DUPLICATE_RESOURCE), an unknown mechanism (UNSUPPORTED_SASL_MECHANISM), an empty user
name or an iteration count outside 4096..16384 (UNACCEPTABLE_CREDENTIAL), the deletion of
a credential that does not exist (RESOURCE_NOT_FOUND); CreateAcls refuses what
:meth:`kcoord.security.acl.ACL.problem` names (INVALID_REQUEST), DescribeAcls and
DeleteAcls an unknown filter (INVALID_REQUEST); a DeleteAcls filter deletes what it
matches that an earlier filter of the same request did not.
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable

from ..protocol.errors import ErrorCode
from ..protocol.security import (
    AclFilterRecord,
    AclRecord,
    AclResult,
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    ScramCredentialRecord,
    SecurityMetadataRequest,
    SecurityMetadataResponse,
    UserCredentials,
    UserResult,
)
from ..security.acl import ACL, ACLFilter, ResourcePattern, ResourcePatternFilter
from ..security.scram import ScramMechanism, iterations_problem
from .controller_actions import Persist

USER_PREFIX = "security/user/"
ACL_PREFIX = "security/acl/"

E = ErrorCode
_SCRAM = {int(ScramMechanism.SCRAM_SHA_256), int(ScramMechanism.SCRAM_SHA_512)}


def acl_from_record(r: AclRecord) -> ACL:
    """ValueError for values no ACL can have (ANY, unknown numbers)."""
    return ACL(r.principal, r.host, r.operation, r.permission_type, ResourcePattern(r.resource_type, r.resource_name, r.pattern_type))


def record_from_acl(acl: ACL) -> AclRecord:
    p = acl.resource_pattern
    return AclRecord(int(p.resource_type), p.resource_name or "", int(p.pattern_type), acl.principal, acl.host, int(acl.operation), int(acl.permission_type))


def filter_from_record(r: AclFilterRecord) -> ACLFilter:
    return ACLFilter(r.principal, r.host, r.operation, r.permission_type, ResourcePatternFilter(r.resource_type, r.resource_name, r.pattern_type))


def record_from_filter(f: ACLFilter) -> AclFilterRecord:
    p = f.resource_pattern
    return AclFilterRecord(int(p.resource_type), p.resource_name, int(p.pattern_type), f.principal, f.host, int(f.operation), int(f.permission_type))


def acl_key(record: AclRecord) -> str:
    return ACL_PREFIX + hashlib.sha256(record.encode()).hexdigest()[:32]


class SecurityMetadata:
    def __init__(self) -> None:
        self.users: dict[str, dict[int, ScramCredentialRecord]] = {}
        self.acls: dict[str, AclRecord] = {}  # store key -> ACL
        self.epoch = -1
        self.version = 0

    def load(self, stored: dict[str, bytes], epoch: int) -> None:
        """Take what the store holds (at boot, after the controller epoch was bumped)."""
        self.epoch = epoch
        self.version = 0
        self.users = {}
        self.acls = {}
        for key, value in stored.items():
            if key.startswith(USER_PREFIX):
                rec = UserCredentials.decode(value)
                self.users[rec.user] = {c.mechanism: c for c in rec.credentials}
            elif key.startswith(ACL_PREFIX):
                self.acls[key] = AclRecord.decode(value)

    def decisions(self) -> dict[type, Callable[[Any, int], tuple[Any, list[Persist]]]]:
        """How each security request is decided: ``(request, now_ms) -> (response,
        actions)``; a change that writes anything is a new version for the listeners."""

        def query(answer: Callable[[Any], Any]) -> Callable[[Any, int], tuple[Any, list[Persist]]]:
            return lambda request, now_ms: (answer(request), [])

        def change(decide: Callable[[Any], tuple[Any, list[Persist]]]) -> Callable[[Any, int], tuple[Any, list[Persist]]]:
            def decided(request: Any, now_ms: int) -> tuple[Any, list[Persist]]:
                response, actions = decide(request)
                if actions:
                    self.version += 1
                return response, actions

            return decided

        return {
            SecurityMetadataRequest: query(self.snapshot),
            DescribeUserScramCredentialsRequest: query(self.describe_users),
            DescribeAclsRequest: query(self.describe_acls),
            AlterUserScramCredentialsRequest: change(self.alter_users),
            CreateAclsRequest: change(self.create_acls),
            DeleteAclsRequest: change(self.delete_acls),
        }

    # -- listeners' poll ---------------------------------------------------------------------
    def snapshot(self, req: SecurityMetadataRequest) -> SecurityMetadataResponse:
        if (req.known_epoch, req.known_version) == (self.epoch, self.version):
            return SecurityMetadataResponse(epoch=self.epoch, version=self.version, changed=False)
        return SecurityMetadataResponse(
            epoch=self.epoch,
            version=self.version,
            changed=True,
            users=[UserCredentials(u, [c[m] for m in sorted(c)]) for u, c in sorted(self.users.items())],
            acls=[self.acls[k] for k in sorted(self.acls)],
        )

    # -- SCRAM credentials (KIP-554) ----------------------------------------------------------
    def describe_users(self, req: DescribeUserScramCredentialsRequest) -> DescribeUserScramCredentialsResponse:
        names = list(req.users or sorted(self.users))
        results = []
        for user in dict.fromkeys(names):
            if names.count(user) > 1:
                results.append(UserResult(user, E.DUPLICATE_RESOURCE, f"Cannot describe SCRAM credentials for the same user twice in a single request: {user}"))
            elif user not in self.users:
                results.append(UserResult(user, E.RESOURCE_NOT_FOUND, f"Attempt to describe a user credential that does not exist: {user}"))
            else:
                creds = self.users[user]
                results.append(UserResult(user, credentials=[(m, creds[m].iterations) for m in sorted(creds)]))
        return DescribeUserScramCredentialsResponse(results=results)

    def alter_users(self, req: AlterUserScramCredentialsRequest) -> tuple[AlterUserScramCredentialsResponse, list[Persist]]:
        errors: dict[str, tuple[int, str]] = {}
        deletions: dict[str, int] = {}
        upsertions: dict[str, ScramCredentialRecord] = {}
        twice = (E.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")
        for d in req.deletions:
            if d.user in errors:
                continue
            if deletions.pop(d.user, None) is not None:
                errors[d.user] = twice
                continue
            problem = _user_problem(d.user, d.mechanism)
            if problem is None and d.mechanism not in self.users.get(d.user, {}):
                problem = (E.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")
            if problem is not None:
                errors[d.user] = problem
            else:
                deletions[d.user] = d.mechanism
        for u in req.upsertions:
            if u.user in errors:
                continue
            if deletions.pop(u.user, None) is not None or upsertions.pop(u.user, None) is not None:
                errors[u.user] = twice
                continue
            c = u.credential
            problem = _user_problem(u.user, c.mechanism)
            if problem is None and iterations_problem(c.iterations):
                problem = (E.UNACCEPTABLE_CREDENTIAL, "Too few iterations" if c.iterations < 4096 else "Too many iterations")
            if problem is None and not (c.salt and c.stored_key and c.server_key):
                problem = (E.UNACCEPTABLE_CREDENTIAL, "a credential needs a salt and its keys")
            if problem is not None:
                errors[u.user] = problem
            else:
                upsertions[u.user] = c
        actions: list[Persist] = []
        results: list[UserResult] = []
        changed = sorted(set(deletions) | set(upsertions))
        for user in changed:
            creds = dict(self.users.get(user, {}))
            if user in deletions:
                creds.pop(deletions[user], None)
            else:
                creds[upsertions[user].mechanism] = upsertions[user]
            if creds:
                self.users[user] = creds
                actions.append(Persist(USER_PREFIX + user, UserCredentials(user, [creds[m] for m in sorted(creds)]).encode()))
            else:
                self.users.pop(user, None)
                actions.append(Persist(USER_PREFIX + user, None))
            results.append(UserResult(user))
        results += [UserResult(user, code, message) for user, (code, message) in sorted(errors.items())]
        return AlterUserScramCredentialsResponse(results=results), actions

    # -- ACLs -----------------------------------------------------------------------------------
    def create_acls(self, req: CreateAclsRequest) -> tuple[CreateAclsResponse, list[Persist]]:
        results: list[AclResult] = []
        actions: list[Persist] = []
        for record in req.acls:
            try:
                problem = acl_from_record(record).problem()
            except ValueError as exc:
                problem = str(exc)
            if problem is not None:
                results.append(AclResult(E.INVALID_REQUEST, problem))
                continue
            key = acl_key(record)
            if key not in self.acls:
                self.acls[key] = record
                actions.append(Persist(key, record.encode()))
            results.append(AclResult())
        return CreateAclsResponse(results=results), actions

    def _filter(self, record: AclFilterRecord) -> tuple[ACLFilter | None, str | None]:
        try:
            f = filter_from_record(record)
        except ValueError as exc:
            return None, str(exc)
        return f, f.problem()

    def describe_acls(self, req: DescribeAclsRequest) -> DescribeAclsResponse:
        f, problem = self._filter(req.filter)
        if problem is not None or f is None:
            return DescribeAclsResponse(E.INVALID_REQUEST, problem)
        return DescribeAclsResponse(acls=[r for k, r in sorted(self.acls.items()) if f.matches(acl_from_record(r))])

    def delete_acls(self, req: DeleteAclsRequest) -> tuple[DeleteAclsResponse, list[Persist]]:
        results: list[AclResult] = []
        actions: list[Persist] = []
        for record in req.filters:
            f, problem = self._filter(record)
            if problem is not None or f is None:
                results.append(AclResult(E.INVALID_REQUEST, problem))
                continue
            matched = [(k, r) for k, r in sorted(self.acls.items()) if f.matches(acl_from_record(r))]
            for key, _ in matched:
                del self.acls[key]
                actions.append(Persist(key, None))
            results.append(AclResult(acls=[r for _, r in matched]))
        return DeleteAclsResponse(results=results), actions


def _user_problem(user: str, mechanism: int) -> tuple[int, str] | None:
    if not user:
        return E.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if mechanism not in _SCRAM:
        return E.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    return None
