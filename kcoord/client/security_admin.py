"""Users (SCRAM credentials) and ACLs for :class:`kcoord.Admin`, with kafka-python's
names and return shapes (``kafka.admin``): ``create_acls``, ``describe_acls`` (returning
``(acls, error)``), ``delete_acls``, ``alter_user_scram_credentials``,
``describe_user_scram_credentials``; types ``ACL``, ``ACLFilter``, ``ResourcePattern``,
``ResourcePatternFilter``, ``ACLOperation``, ``ACLPermissionType``, ``ResourceType``,
``ACLResourcePatternType``, ``ScramMechanism``, ``UserScramCredentialUpsertion``,
``UserScramCredentialDeletion``.

These go to the controller over Ray, not through a Kafka listener: whoever can call the
cluster's actors is trusted (docs/security.md). A password never leaves this process: an
upsertion is turned into a salted, hashed credential here.
"""

from __future__ import annotations

from typing import Any, Iterable

from ..protocol.errors import KafkaError, NoError, for_code, raise_for_error
from ..protocol.security import (
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
    ScramDeletion,
    ScramUpsertion,
)
from ..replication.security_metadata import acl_from_record, record_from_acl, record_from_filter
from ..security.acl import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from ..security.scram import DEFAULT_ITERATIONS, ScramMechanism, credential_from_password

__all__ = [
    "ACL",
    "ACLFilter",
    "ACLOperation",
    "ACLPermissionType",
    "ACLResourcePatternType",
    "ResourcePattern",
    "ResourcePatternFilter",
    "ResourceType",
    "ScramMechanism",
    "UserScramCredentialDeletion",
    "UserScramCredentialUpsertion",
]


class UserScramCredentialUpsertion:
    """Create or replace ``user``'s credential for one SCRAM mechanism (kafka-python's
    UserScramCredentialUpsertion). The password is turned into a salted credential at
    once and not kept."""

    def __init__(self, user: str, mechanism: Any, password: str | bytes, iterations: int | None = None, salt: bytes | None = None) -> None:
        self.user = user
        self.mechanism = ScramMechanism.parse(mechanism)
        if self.mechanism == ScramMechanism.UNKNOWN:
            raise ValueError("the SCRAM mechanism must be SCRAM-SHA-256 or SCRAM-SHA-512")
        self.iterations = DEFAULT_ITERATIONS if iterations is None else iterations
        if isinstance(password, bytes):
            password = password.decode("utf-8")
        self.credential = credential_from_password(self.mechanism, password, self.iterations, salt)

    def __repr__(self) -> str:
        return f"UserScramCredentialUpsertion({self.user!r}, {self.mechanism.name}, iterations={self.iterations})"


class UserScramCredentialDeletion:
    """Delete ``user``'s credential for one SCRAM mechanism."""

    def __init__(self, user: str, mechanism: Any) -> None:
        self.user = user
        self.mechanism = ScramMechanism.parse(mechanism)

    def __repr__(self) -> str:
        return f"UserScramCredentialDeletion({self.user!r}, {self.mechanism.name})"


def user_upsertions(user: str, password: str, mechanisms: Iterable[Any] = (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512), iterations: int | None = None) -> list[UserScramCredentialUpsertion]:
    """One upsertion per mechanism (a user made by kcoord has both SCRAM mechanisms)."""
    return [UserScramCredentialUpsertion(user, m, password, iterations) for m in mechanisms]


def alter_user_scram_credentials(cluster: Any, alterations: Iterable[Any]) -> dict[str, str | None]:
    """``{user: error message or None}``; a user may appear once per call (Kafka refuses
    a second alteration of the same user in one request: DUPLICATE_RESOURCE)."""
    deletions, upsertions = [], []
    for alt in alterations:
        if isinstance(alt, UserScramCredentialDeletion):
            deletions.append(ScramDeletion(alt.user, int(alt.mechanism)))
        elif isinstance(alt, UserScramCredentialUpsertion):
            c = alt.credential
            upsertions.append(ScramUpsertion(alt.user, ScramCredentialRecord(int(c.mechanism), c.iterations, c.salt, c.stored_key, c.server_key)))
        else:
            raise TypeError(f"alterations must be UserScramCredentialUpsertion or UserScramCredentialDeletion, got {type(alt).__name__}")
    resp = cluster.call_controller("alter_user_scram_credentials", AlterUserScramCredentialsRequest(deletions=deletions, upsertions=upsertions), AlterUserScramCredentialsResponse)
    raise_for_error(resp.error_code, resp.error_message or "")
    return {r.user: (r.error_message or for_code(r.error_code).__name__) if r.error_code else None for r in resp.results}


def describe_user_scram_credentials(cluster: Any, users: Iterable[str] | None = None) -> dict[str, dict]:
    """``{user: {"error": message or None, "credential_infos": [{"mechanism", "iterations"}]}}``."""
    request = DescribeUserScramCredentialsRequest(users=None if users is None else list(users))
    resp = cluster.call_controller("describe_user_scram_credentials", request, DescribeUserScramCredentialsResponse)
    raise_for_error(resp.error_code, resp.error_message or "")
    return {
        r.user: {
            "error": r.error_message if r.error_code else None,
            "credential_infos": [{"mechanism": ScramMechanism(m), "iterations": i} for m, i in r.credentials],
        }
        for r in resp.results
    }


def _all_of(items: Iterable[Any], cls: type, what: str) -> list[Any]:
    """``items`` as a list, each an instance of ``cls``; TypeError ``what, got <type>`` if not."""
    items = list(items)
    for item in items:
        if not isinstance(item, cls):
            raise TypeError(f"{what}, got {type(item).__name__}")
    return items


def create_acls(cluster: Any, acls: Iterable[ACL]) -> dict[str, list]:
    """kafka-python's shape: ``{"succeeded": [ACL, ...], "failed": [error, ...]}`` where
    each failure is the KafkaError (with its message) of an ACL refused."""
    acls = _all_of(acls, ACL, "create_acls takes ACL objects")
    resp = cluster.call_controller("create_acls", CreateAclsRequest(acls=[record_from_acl(a) for a in acls]), CreateAclsResponse)
    raise_for_error(resp.error_code, resp.error_message or "")
    out: dict[str, list] = {"succeeded": [], "failed": []}
    for acl, result in zip(acls, resp.results):
        if result.error_code:
            out["failed"].append(KafkaError(result.error_code, f"{acl.describe()}: {result.error_message}"))
        else:
            out["succeeded"].append(acl)
    return out


def describe_acls(cluster: Any, acl_filter: ACLFilter) -> tuple[list[ACL], type]:
    """``(acls, NoError)``; a refused filter raises its KafkaError (as kafka-python)."""
    if not isinstance(acl_filter, ACLFilter):
        raise TypeError(f"describe_acls takes an ACLFilter, got {type(acl_filter).__name__}")
    resp = cluster.call_controller("describe_acls", DescribeAclsRequest(filter=record_from_filter(acl_filter)), DescribeAclsResponse)
    raise_for_error(resp.error_code, resp.error_message or "")
    return [acl_from_record(r) for r in resp.acls], NoError


def delete_acls(cluster: Any, acl_filters: Iterable[ACLFilter]) -> list[tuple[ACLFilter, list[ACL], type]]:
    """For each filter: ``(filter, the ACLs it deleted, NoError or the error's class)``."""
    filters = _all_of(acl_filters, ACLFilter, "delete_acls takes ACLFilter objects")
    resp = cluster.call_controller("delete_acls", DeleteAclsRequest(filters=[record_from_filter(f) for f in filters]), DeleteAclsResponse)
    raise_for_error(resp.error_code, resp.error_message or "")
    return [(f, [acl_from_record(a) for a in r.acls], for_code(r.error_code) if r.error_code else NoError) for f, r in zip(filters, resp.results)]
