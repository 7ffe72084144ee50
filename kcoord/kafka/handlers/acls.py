"""CreateAcls, DescribeAcls, DeleteAcls (v1-3), DescribeUserScramCredentials and
AlterUserScramCredentials (v0, KIP-554): Kafka's admin APIs for ACLs and users, served by
the controller (the only writer of security metadata) through this listener.

Authorization as Kafka's: ALTER on the cluster to create or delete ACLs and to alter
credentials, DESCRIBE on the cluster to describe either (CLUSTER_AUTHORIZATION_FAILED). A
listener without ``kafka_security`` has no authorizer: its ACL APIs answer
SECURITY_DISABLED, as a broker without one does, and its credential APIs are open, as
everything on such a listener is. An upsertion's SaltedPassword is turned into the stored
credential (salt, StoredKey, ServerKey) here and dropped: it never leaves the listener.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import (
    AlterUserScramCredentialsResponse,
    CreateAclsResponse,
    DeleteAclsResponse,
    DescribeAclsResponse,
    DescribeUserScramCredentialsResponse,
)

from ...protocol import security as S
from ...protocol.errors import ErrorCode
from ...security.acl import CLUSTER_NAME, ACLOperation as Op, ResourceType as RT
from ...security.scram import ScramMechanism, credential_from_salted_password
from ._base import ListenerContext

E = ErrorCode
NO_AUTHORIZER = "No Authorizer is configured on the broker (the listener runs without kafka_security)"


def _cluster(ctx: ListenerContext, conn: Any, operation: Op) -> bool:
    return ctx.allowed(conn, operation, RT.CLUSTER, CLUSTER_NAME)


def _acl_refusal(ctx: ListenerContext, conn: Any, operation: Op) -> tuple[int, str | None] | None:
    """Why an ACL request needing ``operation`` on the cluster is refused (code, message):
    no authorizer, or not authorized; None: it is served."""
    if ctx.security is None:
        return E.SECURITY_DISABLED, NO_AUTHORIZER
    if not _cluster(ctx, conn, operation):
        return E.CLUSTER_AUTHORIZATION_FAILED, None
    return None


def _filter_record(f: Any) -> S.AclFilterRecord:
    """kcoord's record of a Kafka ACL filter (a DescribeAcls request, a DeleteAcls filter);
    v0 has no pattern type: LITERAL (3)."""
    return S.AclFilterRecord(
        resource_type=f.resource_type_filter,
        resource_name=f.resource_name_filter,
        pattern_type=getattr(f, "pattern_type_filter", 3),
        principal=f.principal_filter,
        host=f.host_filter,
        operation=f.operation,
        permission_type=f.permission_type,
    )


# -- CreateAcls (30) --------------------------------------------------------------------------


async def create_acls(ctx: ListenerContext, conn: Any, req: Any, version: int) -> Any:
    R = CreateAclsResponse
    if refused := _acl_refusal(ctx, conn, Op.ALTER):
        return create_acls_error(req, version, *refused)
    records = [
        S.AclRecord(c.resource_type, c.resource_name, getattr(c, "resource_pattern_type", 3), c.principal, c.host, c.operation, c.permission_type)
        for c in req.creations
    ]
    resp = await ctx.backend.create_acls(S.CreateAclsRequest(acls=records))
    if resp.error_code:
        return create_acls_error(req, version, resp.error_code, resp.error_message)
    await _refresh(ctx)
    return R(throttle_time_ms=0, results=[R.AclCreationResult(error_code=r.error_code, error_message=r.error_message) for r in resp.results])


def create_acls_error(req: Any, version: int, code: int, message: str | None) -> Any:
    R = CreateAclsResponse
    creations = [] if req is None else req.creations
    return R(throttle_time_ms=0, results=[R.AclCreationResult(error_code=code, error_message=message) for _ in creations])


async def _refresh(ctx: ListenerContext) -> None:
    """After a change made through this listener, take it at once (the others within a poll)."""
    try:
        await ctx.security.refresh()
    except Exception:  # noqa: BLE001 - the poll gets it
        pass


# -- DescribeAcls (29) -------------------------------------------------------------------------


async def describe_acls(ctx: ListenerContext, conn: Any, req: Any, version: int) -> Any:
    R = DescribeAclsResponse
    if refused := _acl_refusal(ctx, conn, Op.DESCRIBE):
        return describe_acls_error(req, version, *refused)
    resp = await ctx.backend.describe_acls(S.DescribeAclsRequest(filter=_filter_record(req)))
    if resp.error_code:
        return describe_acls_error(req, version, resp.error_code, resp.error_message)
    grouped: dict[tuple[int, str, int], list] = {}
    for a in resp.acls:
        grouped.setdefault((a.resource_type, a.resource_name, a.pattern_type), []).append(
            R.DescribeAclsResource.AclDescription(principal=a.principal, host=a.host, operation=a.operation, permission_type=a.permission_type)
        )
    resources = [R.DescribeAclsResource(resource_type=t, resource_name=n, pattern_type=p, acls=acls) for (t, n, p), acls in grouped.items()]
    return R(throttle_time_ms=0, error_code=0, error_message=None, resources=resources)


def describe_acls_error(req: Any, version: int, code: int, message: str | None) -> Any:
    return DescribeAclsResponse(throttle_time_ms=0, error_code=code, error_message=message, resources=[])


# -- DeleteAcls (31) ---------------------------------------------------------------------------


async def delete_acls(ctx: ListenerContext, conn: Any, req: Any, version: int) -> Any:
    R = DeleteAclsResponse
    if refused := _acl_refusal(ctx, conn, Op.ALTER):
        return delete_acls_error(req, version, *refused)
    resp = await ctx.backend.delete_acls(S.DeleteAclsRequest(filters=[_filter_record(f) for f in req.filters]))
    if resp.error_code:
        return delete_acls_error(req, version, resp.error_code, resp.error_message)
    await _refresh(ctx)
    M = R.DeleteAclsFilterResult.DeleteAclsMatchingAcl
    return R(
        throttle_time_ms=0,
        filter_results=[
            R.DeleteAclsFilterResult(
                error_code=r.error_code,
                error_message=r.error_message,
                matching_acls=[
                    M(error_code=0, error_message=None, resource_type=a.resource_type, resource_name=a.resource_name, pattern_type=a.pattern_type, principal=a.principal, host=a.host, operation=a.operation, permission_type=a.permission_type)
                    for a in r.acls
                ],
            )
            for r in resp.results
        ],
    )


def delete_acls_error(req: Any, version: int, code: int, message: str | None) -> Any:
    R = DeleteAclsResponse
    filters = [] if req is None else req.filters
    return R(throttle_time_ms=0, filter_results=[R.DeleteAclsFilterResult(error_code=code, error_message=message, matching_acls=[]) for _ in filters])


# -- DescribeUserScramCredentials (50) ---------------------------------------------------------


async def describe_user_scram_credentials(ctx: ListenerContext, conn: Any, req: Any, version: int) -> Any:
    R = DescribeUserScramCredentialsResponse
    if not _cluster(ctx, conn, Op.DESCRIBE):
        return describe_user_scram_credentials_error(req, version, E.CLUSTER_AUTHORIZATION_FAILED, None)
    users = None if req.users is None else [u.name for u in req.users]
    resp = await ctx.backend.describe_user_scram_credentials(S.DescribeUserScramCredentialsRequest(users=users))
    if resp.error_code:
        return describe_user_scram_credentials_error(req, version, resp.error_code, resp.error_message)
    Res = R.DescribeUserScramCredentialsResult
    return R(
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        results=[
            Res(user=r.user, error_code=r.error_code, error_message=r.error_message, credential_infos=[Res.CredentialInfo(mechanism=m, iterations=i) for m, i in r.credentials])
            for r in resp.results
        ],
    )


def describe_user_scram_credentials_error(req: Any, version: int, code: int, message: str | None) -> Any:
    return DescribeUserScramCredentialsResponse(throttle_time_ms=0, error_code=code, error_message=message, results=[])


# -- AlterUserScramCredentials (51) ------------------------------------------------------------


async def alter_user_scram_credentials(ctx: ListenerContext, conn: Any, req: Any, version: int) -> Any:
    R = AlterUserScramCredentialsResponse
    if not _cluster(ctx, conn, Op.ALTER):
        return alter_user_scram_credentials_error(req, version, E.CLUSTER_AUTHORIZATION_FAILED, None)
    upsertions = []
    for u in req.upsertions:
        if u.mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512) and u.salted_password:
            c = credential_from_salted_password(ScramMechanism(u.mechanism), bytes(u.salt), bytes(u.salted_password), u.iterations)
            record = S.ScramCredentialRecord(int(c.mechanism), c.iterations, c.salt, c.stored_key, c.server_key)
        else:  # the controller names the problem (an unknown mechanism, no password)
            record = S.ScramCredentialRecord(int(u.mechanism), u.iterations, bytes(u.salt or b""), b"", b"")
        upsertions.append(S.ScramUpsertion(u.name, record))
    deletions = [S.ScramDeletion(d.name, d.mechanism) for d in req.deletions]
    resp = await ctx.backend.alter_user_scram_credentials(S.AlterUserScramCredentialsRequest(deletions=deletions, upsertions=upsertions))
    if resp.error_code:
        return alter_user_scram_credentials_error(req, version, resp.error_code, resp.error_message)
    if ctx.security is not None:
        await _refresh(ctx)
    return R(throttle_time_ms=0, results=[R.AlterUserScramCredentialsResult(user=r.user, error_code=r.error_code, error_message=r.error_message) for r in resp.results])


def alter_user_scram_credentials_error(req: Any, version: int, code: int, message: str | None) -> Any:
    R = AlterUserScramCredentialsResponse
    users = [] if req is None else list(dict.fromkeys([d.name for d in req.deletions] + [u.name for u in req.upsertions]))
    return R(throttle_time_ms=0, results=[R.AlterUserScramCredentialsResult(user=u, error_code=code, error_message=message) for u in users])
