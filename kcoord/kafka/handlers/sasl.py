"""SaslHandshake (v0-1) and SaslAuthenticate (v0-2): SASL PLAIN and SCRAM-SHA-256/512 with
Kafka's framing (the tokens inside SaslAuthenticate; after SaslHandshake v0, as old clients
send them, bare size-prefixed tokens: :func:`step_raw`), and re-authentication (KIP-368).

The exchange (kcoord.security.sasl) runs against the credentials this listener polled
from the controller. On success the connection gets its principal (``User:`` + the user)
and, with ``connections.max.reauth.ms``, a session lifetime the client is told. A
failure answers SASL_AUTHENTICATION_FAILED (a mechanism not enabled:
UNSUPPORTED_SASL_MECHANISM with the enabled ones) and the connection is closed after the
answer. A SaslHandshake on an authenticated connection starts a re-authentication when the
session has a lifetime (at most once a second, the same mechanism, the same principal, as
Kafka); otherwise it is answered ILLEGAL_SASL_STATE, as Kafka's broker answers it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kafka.protocol.sasl import SaslAuthenticateResponse, SaslHandshakeResponse

from ...protocol.errors import ErrorCode
from ...security.sasl import PLAIN, SaslAuthenticationFailed, server_for
from ..listener_security import now_ms
from ._base import ListenerContext

logger = logging.getLogger("kcoord.kafka")
E = ErrorCode
MIN_REAUTH_INTERVAL_MS = 1000


async def sasl_handshake(ctx: ListenerContext, conn: Any, req: Any, version: int) -> Any:
    R = SaslHandshakeResponse
    security = ctx.security
    if security is None or not security.config.sasl:
        return R(error_code=E.ILLEGAL_SASL_STATE, mechanisms=[])
    enabled = list(security.config.mechanisms)
    if conn.authenticated:
        now = now_ms()
        if conn.session_expiry_ms is None or not conn.reauth_capable or now - conn.last_reauth_ms < MIN_REAUTH_INTERVAL_MS or conn.sasl is not None:
            return R(error_code=E.ILLEGAL_SASL_STATE, mechanisms=enabled)
        conn.last_reauth_ms = now
        conn.reauthenticating = True
        if req.mechanism != conn.sasl_mechanism:
            conn.sasl_failure = f"SASL mechanism {req.mechanism!r} requested by client is not supported for re-authentication of mechanism {conn.sasl_mechanism!r}"
        conn.sasl = server_for(conn.sasl_mechanism, security.credentials)
        return R(error_code=0, mechanisms=enabled)
    if conn.sasl is not None:
        conn.closing = "a second SaslHandshake"
        return R(error_code=E.ILLEGAL_SASL_STATE, mechanisms=enabled)
    if req.mechanism not in enabled:
        security.stats["authentication_failures"] += 1
        logger.warning("[kafka %s] closing: SASL mechanism %r is not enabled (enabled: %s)", conn.peer, req.mechanism, ", ".join(enabled))
        conn.closing = f"unsupported SASL mechanism {req.mechanism!r}"
        return R(error_code=E.UNSUPPORTED_SASL_MECHANISM, mechanisms=enabled)
    conn.sasl = server_for(req.mechanism, security.credentials)
    conn.sasl_mechanism = req.mechanism
    conn.raw_sasl = version == 0
    return R(error_code=0, mechanisms=enabled)


def sasl_handshake_error(req: Any, version: int, code: int, message: str | None) -> Any:
    return SaslHandshakeResponse(error_code=code, mechanisms=[])


async def sasl_authenticate(ctx: ListenerContext, conn: Any, req: Any, version: int) -> Any:
    R = SaslAuthenticateResponse
    security = ctx.security
    exchange = conn.sasl
    if security is None or exchange is None:
        if not conn.authenticated:
            conn.closing = "SaslAuthenticate before SaslHandshake"
        return R(error_code=E.ILLEGAL_SASL_STATE, error_message="SaslAuthenticate without a SaslHandshake before it", auth_bytes=b"", session_lifetime_ms=0)
    if version >= 1:
        conn.reauth_capable = True

    def fail(message: str) -> Any:
        security.stats["authentication_failures"] += 1
        logger.warning("[kafka %s] closing: %s %s failed for client %r: %s", conn.peer, "re-authentication" if conn.reauthenticating else "authentication", exchange.mechanism, conn.client_id, message)
        conn.closing = message
        conn.sasl = None
        return R(error_code=E.SASL_AUTHENTICATION_FAILED, error_message=message, auth_bytes=b"", session_lifetime_ms=0)

    if conn.sasl_failure is not None:
        return fail(conn.sasl_failure)
    if not await security.ready():
        return fail("Authentication failed: this listener has not loaded the cluster's credentials yet; try again")
    try:
        if exchange.mechanism == PLAIN:  # one PBKDF2: off the event loop
            token = await asyncio.to_thread(exchange.step, bytes(req.auth_bytes or b""))
        else:
            token = exchange.step(bytes(req.auth_bytes or b""))
    except SaslAuthenticationFailed as exc:
        return fail(str(exc))
    if not exchange.complete:
        return R(error_code=0, error_message=None, auth_bytes=token, session_lifetime_ms=0)
    result = exchange.result
    principal = f"User:{result.user}"
    if conn.reauthenticating and principal != conn.principal:
        return fail(f"Cannot change principals during re-authentication from {conn.principal}: {principal}")
    if conn.reauthenticating:
        security.stats["reauthentications"] += 1
    lifetime = _authenticated(security, conn, result)
    return R(error_code=0, error_message=None, auth_bytes=token, session_lifetime_ms=lifetime)


async def step_raw(security: Any, conn: Any, token: bytes) -> bytes | None:
    """One bare token after SaslHandshake v0: the answer token, or None on failure (the
    connection is then closed without an answer: v0 has no way to carry an error)."""
    exchange = conn.sasl
    if security is None or exchange is None:
        conn.closing = "a bare SASL token without a SaslHandshake v0"
        return None
    if not await security.ready():
        conn.closing = "the cluster's credentials are not loaded yet"
        return None
    try:
        if exchange.mechanism == PLAIN:
            answer = await asyncio.to_thread(exchange.step, bytes(token))
        else:
            answer = exchange.step(bytes(token))
    except SaslAuthenticationFailed as exc:
        security.stats["authentication_failures"] += 1
        logger.warning("[kafka %s] closing: authentication (SaslHandshake v0) %s failed: %s", conn.peer, exchange.mechanism, exc)
        conn.closing = str(exc)
        conn.sasl = None
        return None
    if exchange.complete:
        _authenticated(security, conn, exchange.result)
        conn.raw_sasl = False
    return answer


def _authenticated(security: Any, conn: Any, result: Any) -> int:
    """The connection is now ``User:`` + the user; returns the session lifetime (0: none)."""
    reauth_ms = security.limits.reauth_ms
    conn.principal = f"User:{result.user}"
    conn.user = result.user
    conn.credential_mechanism = result.credential.mechanism
    conn.credential_fingerprint = result.credential.fingerprint
    conn.session_expiry_ms = now_ms() + reauth_ms if reauth_ms > 0 else None
    conn.authenticated = True
    conn.reauthenticating = False
    conn.sasl = None
    return reauth_ms if reauth_ms > 0 else 0


def sasl_authenticate_error(req: Any, version: int, code: int, message: str | None) -> Any:
    return SaslAuthenticateResponse(error_code=code, error_message=message, auth_bytes=b"", session_lifetime_ms=0)
