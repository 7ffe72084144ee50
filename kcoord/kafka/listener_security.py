"""A listener's security: TLS, who a connection is, what it may do, and the limits that
keep unauthenticated or silent clients from holding resources.

The credentials and ACLs live in the controller (``kcoord.replication.security_metadata``).
Each listener *polls* them -- every ``poll_interval_s`` (0.5 s) it sends the version it
holds and gets the whole set back only when it changed -- rather than being pushed to:
a push needs the controller to know every listener and to retry the ones that were
restarting, and a listener would still have to ask at start; a poll is the one path for
both, costs one small call per listener and half second, and bounds how stale a listener
is (changes apply within ~0.5 s plus a call). A new set replaces the old one in one
assignment, so each request is judged by one consistent set: ACL changes apply to open
connections' next request, and a connection whose user was deleted or whose password
changed since it authenticated is closed at its next request (its client reconnects and
must authenticate again). Until the first set arrives, authentication waits for it; if
the controller is unreachable later, the last set stays in force.

Kafka's broker settings, from the listener's ``kafka_options``:

* ``sasl.server.max.receive.size`` (512 KiB): the largest frame before authentication;
* ``connections.max.idle.ms`` (10 min): a connection with no request in flight and no
  request for that long is closed -- silent clients, half a SASL exchange included;
* ``max.connections`` and ``max.connections.per.ip`` (unlimited), with
  ``max.connections.per.ip.overrides`` (``host:count,...``): a connection over a limit is
  closed as it is accepted;
* ``connections.max.reauth.ms`` (0: off): the session lifetime a SASL client is given
  (KIP-368); a client that does not re-authenticate in time is closed at its next request.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..protocol.security import SecurityMetadataRequest, SecurityMetadataResponse
from ..security.acl import ANONYMOUS, ACLOperation, ResourceType
from ..security.authorizer import Authorizer
from ..security.config import SecurityConfig
from ..security.principal import PrincipalMapper, subject_dn
from ..security.scram import ScramCredential, ScramMechanism
from ..replication.security_metadata import acl_from_record

logger = logging.getLogger("kcoord.kafka")

POLL_INTERVAL_S = 0.5
FIRST_SNAPSHOT_WAIT_S = 15.0


@dataclass(frozen=True)
class ConnectionLimits:
    """Kafka's connection settings (names in :meth:`from_options`)."""

    sasl_max_receive_size: int = 524_288
    idle_ms: int | None = 600_000  # None: never closed for idleness
    max_connections: int | None = None
    max_connections_per_ip: int | None = None
    per_ip_overrides: dict[str, int] = field(default_factory=dict)
    reauth_ms: int = 0

    @classmethod
    def from_options(cls, options: Mapping[str, Any], secure: bool = True) -> "ConnectionLimits":
        """ValueError naming the option for a bad value. A listener without security
        keeps its behaviour from before security existed: no idle timeout unless
        ``connections.max.idle.ms`` is given."""

        def number(key: str, default: int | None, low: int) -> int | None:
            value = options.get(key, default)
            if value is None:
                return None
            try:
                n = int(value)
            except (TypeError, ValueError):
                raise ValueError(f"kafka_options[{key!r}] must be an integer, got {value!r}") from None
            if n < low:
                raise ValueError(f"kafka_options[{key!r}] must be >= {low}, got {n}")
            return n

        overrides: dict[str, int] = {}
        raw = options.get("max.connections.per.ip.overrides") or ""
        for item in (raw.split(",") if isinstance(raw, str) else [f"{k}:{v}" for k, v in dict(raw).items()]):
            if not item.strip():
                continue
            host, _, count = item.strip().rpartition(":")
            try:
                overrides[host] = int(count)
            except ValueError:
                raise ValueError(f"kafka_options['max.connections.per.ip.overrides']: {item!r} is not HOST:COUNT") from None
        return cls(
            sasl_max_receive_size=number("sasl.server.max.receive.size", 524_288, 1) or 524_288,
            idle_ms=number("connections.max.idle.ms", 600_000 if secure else None, 1),
            max_connections=number("max.connections", None, 1),
            max_connections_per_ip=number("max.connections.per.ip", None, 0),
            per_ip_overrides=overrides,
            reauth_ms=number("connections.max.reauth.ms", 0, 0) or 0,
        )

    def per_ip(self, host: str) -> int | None:
        return self.per_ip_overrides.get(host, self.max_connections_per_ip)


@dataclass(frozen=True)
class SecurityState:
    """One snapshot of the controller's security metadata, ready to judge requests."""

    epoch: int
    version: int
    users: dict[str, dict[ScramMechanism, ScramCredential]]
    authorizer: Authorizer


def build_ssl_context(config: SecurityConfig) -> ssl.SSLContext:
    """The server side of TLS: its certificate chain and key (PEM), and with
    ``client_auth`` the CA that client certificates must chain to."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    assert config.certfile is not None
    ctx.load_cert_chain(config.certfile, config.keyfile)
    if config.cafile:
        ctx.load_verify_locations(config.cafile)
    ctx.verify_mode = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}[config.client_auth]
    return ctx


class ListenerSecurity:
    """Everything the server and handlers ask about security, for one listener."""

    def __init__(self, config: SecurityConfig, backend: Any, limits: ConnectionLimits | None = None, poll_interval_s: float = POLL_INTERVAL_S) -> None:
        self.config = config
        self.backend = backend
        self.limits = limits or ConnectionLimits()
        self.poll_interval_s = poll_interval_s
        self.mapper = PrincipalMapper(config.principal_mapping_rules)
        self.ssl_context = build_ssl_context(config) if config.tls else None
        self.state: SecurityState | None = None
        self._loaded: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self.stats = {"security_polls": 0, "security_updates": 0, "security_poll_errors": 0, "authentication_failures": 0, "reauthentications": 0}

    # -- the controller's snapshot -----------------------------------------------------------
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._poll_forever())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    def _event(self) -> asyncio.Event:
        if self._loaded is None:
            self._loaded = asyncio.Event()
        return self._loaded

    async def _poll_forever(self) -> None:
        while True:
            try:
                await self.refresh()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - keep the last set, ask again
                self.stats["security_poll_errors"] += 1
                logger.warning("[kafka] cannot read the security metadata from the controller: %r (keeping the last set)", exc)
            await asyncio.sleep(self.poll_interval_s)

    async def refresh(self) -> bool:
        """Ask the controller once; True when the set changed."""
        known = (self.state.epoch, self.state.version) if self.state else (-1, -1)
        self.stats["security_polls"] += 1
        resp: SecurityMetadataResponse = await self.backend.security_metadata(SecurityMetadataRequest(known_epoch=known[0], known_version=known[1]))
        if resp.error_code or not resp.changed:
            return False
        self.apply(resp)
        return True

    def apply(self, resp: SecurityMetadataResponse) -> None:
        users = {
            u.user: {
                ScramMechanism(c.mechanism): ScramCredential(ScramMechanism(c.mechanism), c.iterations, c.salt, c.stored_key, c.server_key)
                for c in u.credentials
                if c.mechanism in (1, 2)
            }
            for u in resp.users
        }
        acls = []
        for record in resp.acls:
            try:
                acls.append(acl_from_record(record))
            except ValueError:  # an ACL of a kind this listener does not know: skip it
                logger.warning("[kafka] skipping an ACL this listener cannot read: %r", record)
        authorizer = Authorizer(acls, self.config.super_users, self.config.allow_everyone_if_no_acl_found)
        self.state = SecurityState(resp.epoch, resp.version, users, authorizer)
        self.stats["security_updates"] += 1
        self._event().set()

    async def ready(self, timeout_s: float = FIRST_SNAPSHOT_WAIT_S) -> bool:
        """Whether a snapshot is loaded (waiting up to ``timeout_s`` for the first)."""
        if self.state is not None:
            return True
        try:
            await asyncio.wait_for(self._event().wait(), timeout_s)
        except asyncio.TimeoutError:
            return False
        return True

    def credentials(self, user: str) -> Mapping[ScramMechanism, ScramCredential] | None:
        return None if self.state is None else self.state.users.get(user)

    # -- who a connection is ------------------------------------------------------------------
    def tls_principal(self, ssl_object: Any) -> str:
        """``User:`` + the mapped subject of the client's certificate; ANONYMOUS without
        one. NoMatchingRule (a ValueError) when no mapping rule applies."""
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        if not der:
            return ANONYMOUS
        return "User:" + self.mapper.name(subject_dn(der))

    def session_problem(self, conn: Any, now_ms: int) -> str | None:
        """Why an authenticated connection's session is over, or None: its credential was
        deleted or replaced since it authenticated, or its lifetime ran out (KIP-368)."""
        if conn.user is None:
            return None
        if conn.session_expiry_ms is not None and now_ms > conn.session_expiry_ms:
            return f"the session of {conn.principal} expired (connections.max.reauth.ms) without re-authentication"
        creds = self.credentials(conn.user)
        cred = None if creds is None else creds.get(conn.credential_mechanism)
        if cred is None:
            return f"the credential {conn.principal} authenticated with was deleted"
        if cred.fingerprint != conn.credential_fingerprint:
            return f"the password of {conn.principal} changed since it authenticated"
        return None

    # -- what it may do -----------------------------------------------------------------------
    def authorize(self, conn: Any, operation: ACLOperation, resource_type: ResourceType, name: str) -> bool:
        state = self.state
        if state is None:
            return False
        return state.authorizer.authorize(conn.principal, conn.client_host, operation, resource_type, name)

    def authorize_any(self, conn: Any, operation: ACLOperation, resource_type: ResourceType) -> bool:
        state = self.state
        return state is not None and state.authorizer.authorize_any(conn.principal, conn.client_host, operation, resource_type)

    def authorized_operations(self, conn: Any, resource_type: ResourceType, name: str) -> list[ACLOperation]:
        state = self.state
        return [] if state is None else state.authorizer.authorized_operations(conn.principal, conn.client_host, resource_type, name)


def now_ms() -> int:
    return int(time.monotonic() * 1000)


def from_listener_options(options: Mapping[str, Any], backend: Any) -> tuple["ListenerSecurity | None", ConnectionLimits]:
    """A listener's security (None without ``options["security"]``, i.e. without
    ``kafka_security``) and its connection limits, from its ``kafka_options``."""
    spec = options.get("security")
    limits = ConnectionLimits.from_options(options, secure=spec is not None)
    if spec is None:
        return None, limits
    config = SecurityConfig.from_listener_options(spec)
    config.check_files()
    return ListenerSecurity(config, backend, limits), limits
