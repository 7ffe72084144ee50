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
"""

from __future__ import annotations

import asyncio
import logging
import struct
import traceback
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from ..protocol.errors import ErrorCode

logger = logging.getLogger("kcoord.kafka")

_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">hhi")
_CORR = struct.Struct(">i")
DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes
MAX_IN_FLIGHT = 64  # per connection; reading pauses beyond this
CLOSE = "close"  # a request that cannot be answered: close the connection after the ones before


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

    def __init__(self, apis: dict[int, Api], host: str = "127.0.0.1", endpoints: dict[int, int] | None = None, *, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.apis = apis
        self.host = host
        self.endpoints = dict(endpoints or {0: 0})
        self.max_frame_bytes = max_frame_bytes
        self._servers: list[asyncio.AbstractServer] = []
        self.stats = {"connections": 0, "open": 0, "requests": 0, "errors": 0, "closed_bad_frames": 0}

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
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, broker: int = 0) -> None:
        peer = writer.get_extra_info("peername")
        conn = Connection(client_host=str(peer[0]) if peer else "", peer=f"{peer[0]}:{peer[1]}" if peer else "?", broker=broker)
        self.stats["connections"] += 1
        self.stats["open"] += 1
        queue: asyncio.Queue = asyncio.Queue(MAX_IN_FLIGHT)
        sender = asyncio.get_running_loop().create_task(self._send_loop(queue, writer, conn))
        try:
            while True:
                try:
                    head = await reader.readexactly(4)
                except asyncio.IncompleteReadError as exc:
                    if exc.partial:
                        logger.warning("[kafka %s] closing: connection ended inside a frame size (%d bytes)", conn.peer, len(exc.partial))
                    break
                (size,) = _SIZE.unpack(head)
                if size < 0 or size > self.max_frame_bytes:
                    self.stats["closed_bad_frames"] += 1
                    logger.warning("[kafka %s] closing: frame size %d outside 0..%d (socket.request.max.bytes)", conn.peer, size, self.max_frame_bytes)
                    break
                try:
                    data = await reader.readexactly(size)
                except asyncio.IncompleteReadError as exc:
                    self.stats["closed_bad_frames"] += 1
                    logger.warning("[kafka %s] closing: truncated frame (%d of %d bytes)", conn.peer, len(exc.partial), size)
                    break
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
                if not 0 <= version <= api.request.max_version and key != 18:
                    self.stats["closed_bad_frames"] += 1
                    logger.warning("[kafka %s] closing: %s version %d has no schema", conn.peer, api.request.name, version)
                    break
                self.stats["requests"] += 1
                task = asyncio.get_running_loop().create_task(self._handle(api, version, corr, data, pos, conn))
                await queue.put((api, version, corr, task))
        except (ConnectionError, OSError) as exc:
            logger.info("[kafka %s] connection error: %s", conn.peer, exc)
        finally:
            try:
                queue.put_nowait(None)
                await sender
            except (Exception, asyncio.CancelledError):
                sender.cancel()
            self.stats["open"] -= 1
            try:
                writer.close()
            except Exception:
                pass

    async def _send_loop(self, queue: asyncio.Queue, writer: asyncio.StreamWriter, conn: Connection) -> None:
        broken = False
        while True:
            item = await queue.get()
            if item is None:
                return
            api, version, corr, task = item
            try:
                body = await task
            except Exception:
                body = CLOSE
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
