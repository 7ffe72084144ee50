"""The direct-call channel: a Unix-socket side channel to a replica on the caller's own
node for the data path (produce and fetch), next to Ray. This module is the wire (server,
client, frames); :mod:`.direct` finds endpoints and decides when a channel may be used.

Why: an acks=all produce crosses four process hops in sequence (producer to leader, the
leader's answer to a follower's parked fetch, the follower's next fetch, the leader's
answer to the producer). As a Ray actor call, each hop costs 1.5-2.5 ms on an idle 2-core
machine (a call hands off between Ray's gRPC and core-worker threads and the actor's event
loop at both ends); a frame on a Unix socket between two asyncio loops costs ~0.2 ms. See
PERFORMANCE.md, "Latency".

Ray stays the control plane: it names, places, restarts and kills actors, and only a Ray
call learns an endpoint. A channel carries calls to a process on the caller's node whose
endpoint its actor returned; any failure to reach it (refused, reset, closed) raises
:class:`ChannelUnavailable`, and the caller then does what it does when a Ray call finds an
actor dead: forget what it knew and ask Ray again. A request that was written before the
connection broke may or may not have run, exactly as a Ray call to an actor that died.

The socket lives in Linux's abstract namespace, named after the actor's incarnation: it
disappears with its process, and a restarted actor has a new name, so a stale endpoint is
refused, never answered by the wrong process. The controller's heartbeats to replicas on
its node use channels too: on an idle cluster they are most of what the controller and the
leaders do. ``KCOORD_DIRECT_CALLS=0`` in a process's
environment makes it neither serve nor use channels (calls go through Ray only).

Frames (big-endian): request ``length:u32 id:u32 method:u8`` then ``length`` bytes of
payload (the same msgpack bytes the Ray method takes); answer ``length:u32 id:u32
status:u8`` then the method's bytes (status 0) or a UTF-8 error text (status 1).
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import sys
import uuid
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

logger = logging.getLogger("kcoord.channel")

METHODS = ("produce", "fetch", "list_offsets", "offsets_for_leader_epoch", "heartbeat")
_METHOD_CODE = {name: i for i, name in enumerate(METHODS)}
HEADER = struct.Struct(">IIB")
MAX_FRAME = 1 << 30  # a fetch answer is bounded by its max_bytes; this only guards garbage
OK, FAILED = 0, 1

Dispatch = Callable[[str, bytes], Awaitable[bytes]]


def enabled() -> bool:
    """Channels need Linux's abstract socket namespace, and may be turned off per process."""
    return sys.platform.startswith("linux") and os.environ.get("KCOORD_DIRECT_CALLS", "1") != "0"


@dataclass(frozen=True)
class Endpoint:
    """Where one actor process answers direct calls: its Ray node and socket name."""

    node_id: str
    address: str

    def to_wire(self) -> list[str]:
        return [self.node_id, self.address]

    @classmethod
    def from_wire(cls, value: Any) -> Endpoint | None:
        if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, str) for v in value):
            return cls(value[0], value[1])
        return None


class ChannelUnavailable(Exception):
    """The endpoint could not be reached (``sent`` False: the request never left, so the
    caller may simply send it through Ray), or the connection broke before the answer came
    (``sent`` True: the request may have run, as with a Ray call to an actor that died)."""

    def __init__(self, message: str, *, sent: bool) -> None:
        super().__init__(message)
        self.sent = sent


class RemoteError(Exception):
    """The method raised in the serving process (the text of its exception)."""


# -- serving ---------------------------------------------------------------------------------
class ChannelServer:
    """Serves direct calls on the running event loop: each request runs as its own task
    (a parked fetch must not hold up a produce behind it, as in an asyncio Ray actor), and
    its answer is written when ready, in any order."""

    def __init__(self, dispatch: Dispatch, node_id: str) -> None:
        self._dispatch = dispatch
        self.endpoint = Endpoint(node_id, f"\0kcoord-{uuid.uuid4().hex}")
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self.served = 0
        self.rejected = 0
        self._closed = False

    async def start(self) -> Endpoint:
        self._server = await asyncio.start_unix_server(self._connection, path=self.endpoint.address)
        return self.endpoint

    def close(self) -> None:
        """Stop listening and drop every connection (callers see their calls in flight
        fail, as if this process had died)."""
        self._closed = True
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for writer in list(self._writers):
            writer.close()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._closed:  # accepted just before close(), its handler runs only now
            writer.close()
            return
        self._writers.add(writer)
        try:
            while True:
                header = await reader.readexactly(HEADER.size)
                length, call_id, code = HEADER.unpack(header)
                if length > MAX_FRAME or code >= len(METHODS):
                    self.rejected += 1
                    logger.warning("closing a channel connection: bad frame (length %d, method %d)", length, code)
                    return
                payload = await reader.readexactly(length)
                task = asyncio.ensure_future(self._answer(writer, call_id, METHODS[code], payload))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass  # the caller went away, or close() dropped the connection
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _answer(self, writer: asyncio.StreamWriter, call_id: int, method: str, payload: bytes) -> None:
        try:
            body, status = await self._dispatch(method, payload), OK
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the same contract as a Ray call: the caller sees the error
            body, status = f"{type(exc).__name__}: {exc}".encode(), FAILED
        if writer.is_closing():
            return
        self.served += 1
        writer.write(HEADER.pack(len(body), call_id, status))
        writer.write(body)
        try:
            await writer.drain()
        except ConnectionError:
            pass


# -- calling ---------------------------------------------------------------------------------
class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.pending: dict[int, asyncio.Future] = {}
        self.next_id = 0
        self.broken: BaseException | None = None
        self.on_broken: Callable[[], None] = lambda: None
        self.on_lost: Callable[[], None] = lambda: None  # the peer went away (not our close)
        self.task = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        try:
            while True:
                length, call_id, status = HEADER.unpack(await self.reader.readexactly(HEADER.size))
                body = await self.reader.readexactly(length)
                fut = self.pending.pop(call_id, None)
                if fut is not None and not fut.done():
                    if status == OK:
                        fut.set_result(body)
                    else:
                        fut.set_exception(RemoteError(body.decode("utf-8", "replace")))
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
            self.on_lost()
            self._break(ChannelUnavailable(f"connection lost: {exc!r}", sent=True))
        except asyncio.CancelledError:
            self._break(ChannelUnavailable("channel closed", sent=True))

    def _break(self, error: BaseException) -> None:
        self.broken = error
        self.on_broken()
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(error)
        self.pending.clear()
        self.writer.close()

    def send(self, code: int, payload: bytes) -> asyncio.Future:
        call_id = self.next_id
        self.next_id = (self.next_id + 1) & 0xFFFFFFFF
        fut = asyncio.get_running_loop().create_future()
        self.pending[call_id] = fut
        self.writer.write(HEADER.pack(len(payload), call_id, code))
        self.writer.write(payload)
        fut.add_done_callback(lambda _f, i=call_id: self.pending.pop(i, None))
        return fut


class ChannelClient:
    """Direct calls from one event loop, one connection per endpoint (multiplexed: answers
    come back in any order)."""

    def __init__(self, on_lost: Callable[[Endpoint], None] | None = None) -> None:
        """``on_lost(endpoint)``: called when a connection breaks from the other end (its
        process exited or was killed), whether or not a call was waiting on it."""
        self._connections: dict[Endpoint, _Connection] = {}
        self._connecting: dict[Endpoint, asyncio.Future] = {}
        self._on_lost = on_lost

    async def submit(self, endpoint: Endpoint, method: str, payload: bytes) -> asyncio.Future:
        """Send ``method(payload)`` to the process at ``endpoint`` (connecting first if
        needed); returns the future of its answer once the request is written, so that
        requests submitted one after another arrive in that order. Raises
        :class:`ChannelUnavailable` (``sent`` False) when the endpoint cannot be reached."""
        code = _METHOD_CODE[method]
        conn = await self._connection(endpoint)
        if conn.broken is not None:
            self._connections.pop(endpoint, None)
            raise ChannelUnavailable(str(conn.broken), sent=False)
        return conn.send(code, payload)

    async def call(self, endpoint: Endpoint, method: str, payload: bytes, timeout: float | None = None) -> bytes:
        """``method(payload)`` in the process at ``endpoint``: its answer, or
        :class:`ChannelUnavailable`, :class:`RemoteError`, ``asyncio.TimeoutError``."""
        fut = await self.submit(endpoint, method, payload)
        return await asyncio.wait_for(fut, timeout) if timeout is not None else await fut

    async def connect(self, endpoint: Endpoint) -> None:
        """Open the connection to ``endpoint`` now, not at the first call (see
        :class:`DirectCalls`); :class:`ChannelUnavailable` when it is refused."""
        await self._connection(endpoint)

    async def _connection(self, endpoint: Endpoint) -> _Connection:
        conn = self._connections.get(endpoint)
        if conn is not None and conn.broken is None:
            return conn
        pending = self._connecting.get(endpoint)
        if pending is not None:
            return await asyncio.shield(pending)
        fut = asyncio.get_running_loop().create_future()
        self._connecting[endpoint] = fut
        try:
            try:
                reader, writer = await asyncio.open_unix_connection(endpoint.address)
            except OSError as exc:
                raise ChannelUnavailable(f"cannot connect: {exc!r}", sent=False) from None
            conn = self._connections[endpoint] = _Connection(reader, writer)
            conn.on_broken = lambda: self._connections.pop(endpoint, None) if self._connections.get(endpoint) is conn else None
            if self._on_lost is not None:
                conn.on_lost = lambda: self._lost(endpoint)
            fut.set_result(conn)
            return conn
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # retrieved: concurrent callers re-raise it, nobody else must log it
            raise
        finally:
            del self._connecting[endpoint]

    def _lost(self, endpoint: Endpoint) -> None:
        try:
            self._on_lost(endpoint)
        except Exception:
            logger.warning("on_lost(%s) failed", endpoint, exc_info=True)

    def close(self) -> None:
        for conn in self._connections.values():
            conn.task.cancel()
        self._connections.clear()
