"""The Kafka listener's asyncio TCP server: framing, request headers, pipelining, dispatch.

A Kafka connection carries size-prefixed frames: a request header (API key, version,
correlation id, client id; tagged fields from the flexible versions on) and the body. Clients
pipeline requests, and need the responses in request order; so every request gets a task,
and a writer task sends responses strictly in the order the requests came. Requests that
change state (Produce, OffsetCommit, ...) run one at a time per connection, in order, as a
Kafka broker runs them, since Ray does not keep the order of concurrent calls to an actor.

Bad input never takes the listener down: a frame that cannot be parsed (garbage, a size
over ``max_frame_bytes``, a truncated frame, an API key without a schema) is logged and the
connection closed; a known API at a version outside the advertised range gets that API's
error response with UNSUPPORTED_VERSION (ApiVersions: error 35 with a v0 body, so the client
retries with a version it knows).

With security (:mod:`.security`), a connection is admitted under ``max.connections`` and
``max.connections.per.ip``, upgraded to TLS (its client certificate, if any, names its
principal), and on a SASL listener serves nothing but ApiVersions, SaslHandshake and
SaslAuthenticate until authenticated, one request at a time, in frames of at most
``sasl.server.max.receive.size``: any other request gets its error response with
ILLEGAL_SASL_STATE and the connection is closed, as is one whose authentication failed
(after its SASL_AUTHENTICATION_FAILED or UNSUPPORTED_SASL_MECHANISM answer). After that,
every request first checks the session: a credential deleted or replaced since, or a
session lifetime (KIP-368) run out, closes the connection. A connection with nothing in
flight and no request for ``connections.max.idle.ms`` is closed.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import struct
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from ..protocol.errors import ErrorCode
from ..security.acl import ANONYMOUS

logger = logging.getLogger("kcoord.kafka")

_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">hhi")
_CORR = struct.Struct(">i")
DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes
MAX_IN_FLIGHT = 64  # per connection; reading pauses beyond this
CLOSE = "close"  # a request that cannot be answered: close the connection after the ones before
SASL_HANDSHAKE, API_VERSIONS, SASL_AUTHENTICATE = 17, 18, 36
BEFORE_AUTHENTICATION = (API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE)


@dataclass
class Api:
    """One Kafka API: its kafka-python request/response classes, the versions we serve,
    the handler and the error-response builder."""

    key: int
    request: Any
    response: Any
    min_version: int
    max_version: int
    handler: Callable[..., Awaitable[Any]]
    error: Callable[[Any, int, int, str | None], Any]
    ordered: bool = False  # run one at a time per connection, in order

    def flexible(self, version: int) -> bool:
        return self.request.flexible_version_q(version)


@dataclass
class Connection:
    """Per-connection context handed to handlers."""

    client_id: str = ""
    client_host: str = ""
    peer: str = ""
    broker: int = 0  # the kcoord broker id whose address the client connected to
    # (topic, partition) -> (large, answer future) of the last idempotent batch sent
    in_flight: dict = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # -- security (kcoord.kafka.listener_security); a plaintext listener leaves these as they are
    principal: str = ANONYMOUS  # whom ACLs are checked for: "User:name"
    authenticated: bool = True  # False on a SASL listener until SaslAuthenticate succeeds
    user: str | None = None  # the SASL user, whose credential must stay the one it proved
    credential_mechanism: Any = None
    credential_fingerprint: bytes = b""
    session_expiry_ms: int | None = None  # KIP-368: re-authenticate before this
    sasl: Any = None  # the SASL exchange under way (kcoord.security.sasl)
    sasl_mechanism: str = ""
    raw_sasl: bool = False  # SaslHandshake v0: the tokens that follow come without Kafka framing
    sasl_failure: str | None = None  # a re-authentication already doomed (another mechanism)
    reauthenticating: bool = False
    reauth_capable: bool = False  # the client spoke SaslAuthenticate v1+ (KIP-368)
    last_reauth_ms: int = 0
    closing: str | None = None  # why to close once the responses queued so far are out
    requests_in_flight: int = 0
    last_active: float = 0.0


class BadFrame(Exception):
    """A frame we cannot even answer: the connection is closed with a log line."""


def read_tagged_fields(data: memoryview, pos: int) -> int:
    """Skip a tagged-field section; returns the position after it."""
    n, pos = _uvarint(data, pos)
    for _ in range(n):
        _, pos = _uvarint(data, pos)
        size, pos = _uvarint(data, pos)
        pos += size
        if pos > len(data):
            raise BadFrame("tagged field runs past the frame")
    return pos


def _uvarint(data: memoryview, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(data) or shift > 28:
            raise BadFrame("bad varint in request header")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


_UNSERVED: dict[int, Api | None] = {}


def unserved_api(key: int) -> Api | None:
    """A Kafka API kcoord does not serve but kafka-python has a schema for: answered with
    UNSUPPORTED_VERSION in its top-level error code (if it has one; else None)."""
    if key in _UNSERVED:
        return _UNSERVED[key]
    import importlib
    import pkgutil

    import kafka.protocol as kp
    from kafka.protocol.api_message import ApiMessage

    for mod in pkgutil.walk_packages(kp.__path__, kp.__name__ + "."):  # every schema module
        if not mod.name.endswith("generate_stubs"):
            try:
                importlib.import_module(mod.name)
            except Exception:
                pass
    found: dict[bool, Any] = {}
    stack = [ApiMessage]
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        try:
            if getattr(cls, "_class_version", None) is None and cls._json and cls.API_KEY == key:
                found[cls.is_request()] = cls
        except Exception:
            continue
    api = None
    req, resp = found.get(True), found.get(False)
    if req is not None and resp is not None and "error_code" in {f.name for f in resp._struct._fields}:

        async def refuse(conn: Any, request: Any, version: int) -> Any:
            return resp(error_code=int(ErrorCode.UNSUPPORTED_VERSION))

        def error(request: Any, version: int, code: int, message: str | None) -> Any:
            return resp(error_code=int(code))

        api = Api(key, req, resp, 1, 0, refuse, error)  # min > max: every version unsupported
    _UNSERVED[key] = api
    return api


def parse_header(data: bytes, apis: dict[int, Api]) -> tuple[int, int, int, str | None, int]:
    """(api_key, api_version, correlation_id, client_id, body position)."""
    mv = memoryview(data)
    if len(mv) < 10:
        raise BadFrame(f"request of {len(mv)} bytes is shorter than a request header")
    key, version, corr = _HEADER.unpack_from(mv, 0)
    (n,) = struct.unpack_from(">h", mv, 8)
    pos = 10
    client_id = None
    if n >= 0:
        if pos + n > len(mv):
            raise BadFrame("client id runs past the frame")
        client_id = bytes(mv[pos : pos + n]).decode("utf-8", "replace")
        pos += n
    api = apis.get(key)
    if api is not None and 0 <= version <= api.request.max_version and api.flexible(version):
        pos = read_tagged_fields(mv, pos)
    return key, version, corr, client_id, pos


class KafkaServer:
    """Serves ``apis`` on one TCP socket per broker id (``endpoints``: broker -> port, 0 for
    a free one): Kafka clients tell brokers apart by address, so every broker id a client
    may connect to needs its own. ``start()`` binds them all, ``close()`` stops."""

    def __init__(
        self,
        apis: dict[int, Api],
        host: str = "127.0.0.1",
        endpoints: dict[int, int] | None = None,
        *,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        security: Any = None,
        limits: Any = None,
    ) -> None:
        from .listener_security import ConnectionLimits

        self.apis = apis
        self.host = host
        self.endpoints = dict(endpoints or {0: 0})
        self.max_frame_bytes = max_frame_bytes
        self.security = security  # kcoord.kafka.listener_security.ListenerSecurity, or None: plaintext
        self.limits = limits or (security.limits if security is not None else ConnectionLimits(idle_ms=None))
        self._servers: list[asyncio.AbstractServer] = []
        self._per_ip: dict[str, int] = {}
        self.stats = {
            "connections": 0,
            "open": 0,
            "requests": 0,
            "errors": 0,
            "closed_bad_frames": 0,
            "refused_connections": 0,  # over max.connections or max.connections.per.ip
            "closed_idle": 0,
            "tls_failures": 0,
            "tls_principal_failures": 0,  # no ssl.principal.mapping.rules rule applied
            "closed_unauthenticated_requests": 0,  # requests before authentication
            "closed_sessions": 0,  # credential changed or deleted, lifetime over
        }

    async def start(self) -> dict[int, int]:
        """Bind every endpoint; returns broker -> bound port."""
        bound: dict[int, int] = {}
        try:
            for broker, port in sorted(self.endpoints.items()):
                server = await asyncio.start_server(
                    lambda r, w, b=broker: self._serve(r, w, b), self.host, port, reuse_address=True, limit=1 << 20
                )
                self._servers.append(server)
                bound[broker] = server.sockets[0].getsockname()[1]
        except BaseException:
            await self.close()
            raise
        self.endpoints = bound
        return bound

    async def close(self) -> None:
        for server in self._servers:
            server.close()
        for server in self._servers:
            await server.wait_closed()
        self._servers = []

    # -- one connection ---------------------------------------------------------------------
    def _admit(self, host: str) -> str | None:
        """Why a new connection from ``host`` is refused, or None."""
        limits = self.limits
        if limits.max_connections is not None and self.stats["open"] >= limits.max_connections:
            return f"max.connections ({limits.max_connections}) reached"
        per_ip = limits.per_ip(host)
        if per_ip is not None and self._per_ip.get(host, 0) >= per_ip:
            return f"max.connections.per.ip ({per_ip}) reached for {host}"
        return None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, broker: int = 0) -> None:
        peer = writer.get_extra_info("peername")
        host = str(peer[0]) if peer else ""
        refused = self._admit(host)
        if refused is not None:
            self.stats["refused_connections"] += 1
            if self.stats["refused_connections"] % 100 == 1:
                logger.warning("[kafka %s] refusing connections: %s (%d refused so far)", host, refused, self.stats["refused_connections"])
            writer.transport.abort()
            return
        self._per_ip[host] = self._per_ip.get(host, 0) + 1
        self.stats["connections"] += 1
        self.stats["open"] += 1
        try:
            await self._connection(reader, writer, broker, host, peer)
        finally:
            self.stats["open"] -= 1
            left = self._per_ip.get(host, 1) - 1
            if left > 0:
                self._per_ip[host] = left
            else:
                self._per_ip.pop(host, None)
            try:
                writer.close()
            except Exception:
                pass

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, broker: int, host: str, peer: Any) -> None:
        conn = Connection(client_host=host, peer=f"{peer[0]}:{peer[1]}" if peer else "?", broker=broker)
        loop = asyncio.get_running_loop()
        conn.last_active = loop.time()
        idle = _IdleWatch(self, conn, writer, loop)
        security = self.security
        if security is not None:
            if security.ssl_context is not None:
                # Nothing is awaited before this: the client's first TLS bytes go to TLS.
                try:
                    await start_tls(writer, security.ssl_context, min(60.0, (self.limits.idle_ms or 60_000) / 1000))
                except (ssl.SSLError, OSError, asyncio.TimeoutError, ConnectionError) as exc:
                    self.stats["tls_failures"] += 1
                    logger.info("[kafka %s] closing: TLS handshake failed (%s)", conn.peer, exc)
                    idle.cancel()
                    return
                try:
                    conn.principal = security.tls_principal(writer.get_extra_info("ssl_object"))
                except ValueError as exc:
                    self.stats["tls_principal_failures"] += 1
                    logger.warning("[kafka %s] closing: %s", conn.peer, exc)
                    idle.cancel()
                    return
            if security.config.sasl:
                conn.authenticated = False
        queue: asyncio.Queue = asyncio.Queue(MAX_IN_FLIGHT)
        sender = loop.create_task(self._send_loop(queue, writer, conn))
        try:
            while conn.closing is None:
                try:
                    head = await reader.readexactly(4)
                except asyncio.IncompleteReadError as exc:
                    if exc.partial:
                        logger.warning("[kafka %s] closing: connection ended inside a frame size (%d bytes)", conn.peer, len(exc.partial))
                    break
                (size,) = _SIZE.unpack(head)
                limit = self.max_frame_bytes if conn.authenticated else min(self.max_frame_bytes, self.limits.sasl_max_receive_size)
                if size < 0 or size > limit:
                    self.stats["closed_bad_frames"] += 1
                    what = "socket.request.max.bytes" if conn.authenticated else "sasl.server.max.receive.size, before authentication"
                    logger.warning("[kafka %s] closing: frame size %d outside 0..%d (%s)", conn.peer, size, limit, what)
                    break
                try:
                    data = await reader.readexactly(size)
                except asyncio.IncompleteReadError as exc:
                    self.stats["closed_bad_frames"] += 1
                    logger.warning("[kafka %s] closing: truncated frame (%d of %d bytes)", conn.peer, len(exc.partial), size)
                    break
                conn.last_active = loop.time()
                if conn.raw_sasl:
                    # After SaslHandshake v0 the SASL tokens come bare, answered bare.
                    task = loop.create_task(self._raw_sasl_token(conn, data))
                    conn.requests_in_flight += 1
                    await queue.put((None, 0, 0, task))
                    await asyncio.wait([task])
                    continue
                try:
                    key, version, corr, client_id, pos = parse_header(data, self.apis)
                except (BadFrame, struct.error) as exc:
                    self.stats["closed_bad_frames"] += 1
                    logger.warning("[kafka %s] closing: cannot parse request header (%s)", conn.peer, exc)
                    break
                if client_id:
                    conn.client_id = client_id
                api = self.apis.get(key)
                if api is None:
                    api = unserved_api(key)
                    if api is None:
                        self.stats["closed_bad_frames"] += 1
                        logger.warning("[kafka %s] closing: unknown API key %d (client %r); kcoord serves %s", conn.peer, key, client_id, sorted(self.apis))
                        break
                    logger.info("[kafka %s] %s is not served by kcoord: answering UNSUPPORTED_VERSION", conn.peer, api.request.name)
                if not 0 <= version <= api.request.max_version and key != API_VERSIONS:
                    self.stats["closed_bad_frames"] += 1
                    logger.warning("[kafka %s] closing: %s version %d has no schema", conn.peer, api.request.name, version)
                    break
                self.stats["requests"] += 1
                if not conn.authenticated and key not in BEFORE_AUTHENTICATION:
                    # Kafka: nothing but the SASL APIs before authentication.
                    self.stats["closed_unauthenticated_requests"] += 1
                    message = f"{api.request.name} before SASL authentication; only ApiVersions, SaslHandshake and SaslAuthenticate are served before it"
                    logger.warning("[kafka %s] closing: %s", conn.peer, message)
                    conn.closing = message
                    task = loop.create_task(self._refuse(api, version, data, pos, ErrorCode.ILLEGAL_SASL_STATE, message))
                    conn.requests_in_flight += 1
                    await queue.put((api, version, corr, task))
                    break
                if conn.user is not None and security is not None and key != SASL_HANDSHAKE:
                    ended = security.session_problem(conn, int(time.monotonic() * 1000))
                    if ended is not None:
                        self.stats["closed_sessions"] += 1
                        logger.info("[kafka %s] closing: %s", conn.peer, ended)
                        break
                task = loop.create_task(self._handle(api, version, corr, data, pos, conn))
                conn.requests_in_flight += 1
                await queue.put((api, version, corr, task))
                if not conn.authenticated or key in (SASL_HANDSHAKE, SASL_AUTHENTICATE):
                    # The SASL exchange runs one request at a time: the next frame is read
                    # (and judged) only after this one changed the connection's state.
                    await asyncio.wait([task])
        except (ConnectionError, OSError) as exc:
            logger.info("[kafka %s] connection error: %s", conn.peer, exc)
        finally:
            idle.cancel()
            try:
                queue.put_nowait(None)
                await sender
            except (Exception, asyncio.CancelledError):
                sender.cancel()

    async def _raw_sasl_token(self, conn: Connection, token: bytes) -> tuple[int, bytes] | str:
        """One bare SASL token (SaslHandshake v0): the exchange's answer, bare; a failure
        closes the connection without an answer, as Kafka does for v0 clients."""
        from .handlers.sasl import step_raw

        answer = await step_raw(self.security, conn, token)
        return CLOSE if answer is None else (0, answer)

    async def _refuse(self, api: Api, version: int, data: bytes, pos: int, code: int, message: str) -> tuple[int, bytes] | str | None:
        """The request's own error response with ``code`` (its body decoded if it can be)."""
        try:
            req = api.request.decode(memoryview(data)[pos:], version=version)
        except Exception:
            req = None
        if not api.min_version <= version <= api.max_version:
            return CLOSE
        return self._error(api, req, version, code, message)

    async def _send_loop(self, queue: asyncio.Queue, writer: asyncio.StreamWriter, conn: Connection) -> None:
        broken = False
        loop = asyncio.get_running_loop()
        while True:
            item = await queue.get()
            if item is None:
                return
            api, version, corr, task = item
            try:
                body = await task
            except Exception:
                body = CLOSE
            finally:
                conn.requests_in_flight -= 1
                conn.last_active = loop.time()
            if api is None:  # a bare SASL token (SaslHandshake v0)
                if body == CLOSE or broken:
                    broken = True
                    writer.close()
                    continue
                try:
                    writer.write(_SIZE.pack(len(body[1])) + body[1])
                    await writer.drain()
                except (ConnectionError, OSError):
                    broken = True
                continue
            if body == CLOSE and not broken:
                logger.warning("[kafka %s] closing: no answer could be built for %s v%d", conn.peer, api.request.name, version)
                broken = True
                writer.close()
            if body is None or broken:
                continue  # acks=0 produce, or a request whose answer cannot be written
            # ApiVersions answers with header v0 always; others with v1 when flexible.
            flexible = api.key != 18 and api.response.flexible_version_q(body[0])
            header = _CORR.pack(corr) + (b"\x00" if flexible else b"")
            payload = body[1]
            try:
                writer.write(_SIZE.pack(len(header) + len(payload)) + header)
                writer.write(payload)
                await writer.drain()
            except (ConnectionError, OSError):
                broken = True

    async def _handle(self, api: Api, version: int, corr: int, data: bytes, pos: int, conn: Connection) -> tuple[int, bytes] | None:
        """Returns (version the body is encoded at, body), or None for no response."""
        if api.key == 18 and not api.min_version <= version <= api.max_version:
            # ApiVersions: an unknown version gets error 35 with a v0 body (KIP-511).
            return 0, api.error(None, 0, ErrorCode.UNSUPPORTED_VERSION, None).encode(version=0)
        try:
            req = api.request.decode(memoryview(data)[pos:], version=version)
        except Exception as exc:
            self.stats["errors"] += 1
            logger.warning("[kafka %s] %s v%d: cannot decode request body (%s: %s)", conn.peer, api.request.name, version, type(exc).__name__, exc)
            return self._error(api, None, version, ErrorCode.INVALID_REQUEST, f"cannot decode request: {exc}")
        if not api.min_version <= version <= api.max_version:
            return self._error(api, req, version, ErrorCode.UNSUPPORTED_VERSION, f"{api.request.name} v{version}: kcoord serves v{api.min_version}-{api.max_version}")
        try:
            if api.ordered:
                async with conn.lock:
                    resp = await api.handler(conn, req, version)
            else:
                resp = await api.handler(conn, req, version)
            if resp is None:
                return None
            return version, resp.encode(version=version)
        except Exception as exc:
            self.stats["errors"] += 1
            logger.error("[kafka %s] %s v%d failed:\n%s", conn.peer, api.request.name, version, traceback.format_exc())
            return self._error(api, req, version, ErrorCode.UNKNOWN_SERVER_ERROR, f"internal error in the kcoord Kafka listener: {exc}")

    def _error(self, api: Api, req: Any, version: int, code: int, message: str | None) -> Any:
        try:
            resp = api.error(req, version, int(code), message)
            return None if resp is None else (version, resp.encode(version=version))
        except Exception:
            logger.error("could not build the %s error response:\n%s", api.request.name, traceback.format_exc())
            return CLOSE


class _IdleWatch:
    """Closes ``conn`` once it had nothing in flight and no request for
    ``connections.max.idle.ms`` (one timer per connection, re-armed lazily)."""

    def __init__(self, server: KafkaServer, conn: Connection, writer: asyncio.StreamWriter, loop: asyncio.AbstractEventLoop) -> None:
        self.server = server
        self.conn = conn
        self.writer = writer
        self.loop = loop
        idle_ms = server.limits.idle_ms
        self.idle_s = idle_ms / 1000 if idle_ms else 0.0
        self.handle: asyncio.TimerHandle | None = loop.call_later(self.idle_s, self._check) if idle_ms else None

    def _check(self) -> None:
        conn = self.conn
        quiet = self.loop.time() - conn.last_active
        if conn.requests_in_flight == 0 and quiet >= self.idle_s * 0.999:
            self.handle = None
            self.server.stats["closed_idle"] += 1
            logger.info("[kafka %s] closing: idle for %.1f s (connections.max.idle.ms)%s", conn.peer, quiet, "" if conn.authenticated else ", never authenticated")
            conn.closing = "idle"
            self.writer.transport.abort()
            return
        self.handle = self.loop.call_later(max(0.001, self.idle_s - quiet) if conn.requests_in_flight == 0 else self.idle_s, self._check)

    def cancel(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None


async def start_tls(writer: asyncio.StreamWriter, context: ssl.SSLContext, timeout_s: float) -> None:
    """Upgrade an accepted connection to TLS, server side (StreamWriter.start_tls from
    Python 3.11; the same steps by hand on 3.10)."""
    if hasattr(writer, "start_tls"):
        await writer.start_tls(context, ssl_handshake_timeout=timeout_s)
        return
    loop = asyncio.get_running_loop()
    protocol = writer.transport.get_protocol()
    transport = await loop.start_tls(writer.transport, protocol, context, server_side=True, ssl_handshake_timeout=timeout_s)
    writer._transport = transport  # type: ignore[attr-defined]
    protocol._transport = transport  # type: ignore[attr-defined]
    protocol._over_ssl = True  # type: ignore[attr-defined]
