"""Direct calls to a replica on the caller's own node: a Unix-socket side channel for the
data path (produce and fetch), next to Ray.

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
import concurrent.futures
import logging
import os
import struct
import sys
import threading
import uuid
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from kcoord.calls import call_probing

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


LOOKUP_PROBE_S = 0.1  # how often an unanswered endpoint lookup asks the GCS about the actor
LOOKUP_RETRY_S = (0.2, 0.5, 1.0, 2.0, 4.0, 8.0)  # waits before a watcher's next lookup after one failed
# A call through Ray to a *suspect* (see DirectCalls.is_suspect) asks the GCS this often, this
# many times: a process that died on this node is known to the GCS within milliseconds
# (at once after ray.kill), while Ray fails the call itself only after 1-2 s.
SUSPECT_PROBE_S = 0.01
SUSPECT_PROBES = 30
_FAILED = object()


class DirectCalls:
    """Calls to named replica actors over channels where possible, for one event loop.

    The endpoint is asked of the actor once (a Ray call, bounded by ``lookup_timeout``,
    and given up within ``LOOKUP_PROBE_S`` when Ray's GCS reports the actor restarting or
    dead) and kept until a call finds it unreachable. An actor on another node, one that serves
    no channel, or one whose endpoint is refused twice in a row from here (say, a Ray
    Client driver on another machine) is remembered as such: :meth:`call` returns None and
    the caller calls through Ray."""

    def __init__(
        self,
        node_id: str,
        client: ChannelClient | None = None,
        lookup_timeout: float = 2.0,
        on_lost: Callable[[str], None] | None = None,
    ) -> None:
        """``on_lost(name)``: the connection to actor ``name``'s process broke from its end
        -- the quickest sign that the process died (see :class:`ChannelClient`). With it,
        an actor whose endpoint lookup failed is looked up again in the background
        (``LOOKUP_RETRY_S``) and connected to as soon as it answers."""
        self.node_id = node_id
        self.on_lost = on_lost
        self.client = client or ChannelClient(on_lost=self._lost if on_lost is not None else None)
        self.lookup_timeout = lookup_timeout
        self._endpoints: dict[str, Endpoint | None] = {}
        self._refused: dict[str, Endpoint] = {}
        self._watching: dict[str, asyncio.Task] = {}
        self._suspects: set[str] = set()
        self.calls = 0
        self.fallbacks = 0

    async def endpoint(self, name: str, handle: Any) -> Endpoint | None:
        if name in self._endpoints:
            return self._endpoints[name]
        ep = await self._look_up(name, handle)
        if ep is _FAILED:
            self._watch(name, handle)
            return None
        return ep

    async def _look_up(self, name: str, handle: Any) -> Endpoint | None | object:
        """Ask the actor for its endpoint and remember the answer; ``_FAILED`` (nothing
        remembered) when it did not answer."""
        try:
            method = handle.channel
        except AttributeError:  # an actor class without channels
            self._endpoints[name] = None
            return None
        try:
            # Probing: right after a leader was killed its name is looked up again, and Ray
            # answers a call to a restarting actor only after 1-2 s; the caller's own call
            # through Ray probes the same way and finds the restart out within a probe.
            ep = Endpoint.from_wire(await call_probing(method.remote(), handle, self.lookup_timeout, probe_every=LOOKUP_PROBE_S))
        except Exception:
            return _FAILED  # dead, restarting or slow: this call goes through Ray, which will tell
        if ep is not None and (ep.node_id != self.node_id or self._refused.get(name) == ep):
            ep = None
        self._endpoints[name] = ep
        return ep

    def _watch(self, name: str, handle: Any) -> None:
        """Where deaths are watched (``on_lost`` given), a lookup that failed -- the actor
        still starting, or restarting -- is tried again in the background and the endpoint
        found is connected at once: the connection is what reports the next death, and the
        next call may be a heartbeat many seconds away."""
        if self.on_lost is None or name in self._watching:
            return
        task = asyncio.get_running_loop().create_task(self._connect_when_found(name, handle))
        self._watching[name] = task
        task.add_done_callback(lambda _t: self._watching.pop(name, None))

    async def _connect_when_found(self, name: str, handle: Any) -> None:
        for wait in LOOKUP_RETRY_S:
            await asyncio.sleep(wait)
            ep = self._endpoints[name] if name in self._endpoints else await self._look_up(name, handle)
            if ep is _FAILED:
                continue
            if isinstance(ep, Endpoint):
                try:
                    await self.client.connect(ep)
                except ChannelUnavailable:
                    self._refuse(name, ep)
            return

    def _refuse(self, name: str, ep: Endpoint) -> None:
        """``ep`` refused a connection: the next call asks the actor again, and a name whose
        same endpoint is refused twice goes through Ray from then on."""
        if self._endpoints.get(name) == ep:
            del self._endpoints[name]
        self._refused[name] = ep

    def forget(self, name: str) -> None:
        self._endpoints.pop(name, None)

    def is_suspect(self, name: str) -> bool:
        """Whether the last news of ``name``'s process here was its connection breaking
        from its end or refusing us: probably a death on this node. The caller's next call
        through Ray should then ask the GCS at once and often (``SUSPECT_PROBE_S``), not
        after its usual probe delay. Cleared by the next answer (:meth:`clear_suspect`
        for one that came through Ray)."""
        return name in self._suspects

    def clear_suspect(self, name: str) -> None:
        self._suspects.discard(name)

    def connected(self) -> list[str]:
        """Names whose process this side holds an open connection to: the ones whose death
        ``on_lost`` would report."""
        live = self.client._connections
        return sorted(n for n, ep in self._endpoints.items() if ep is not None and ep in live and live[ep].broken is None)

    def _lost(self, endpoint: Endpoint) -> None:
        # the names now, before the failed calls forget their endpoint; the callbacks once
        # those calls have failed
        loop = asyncio.get_running_loop()
        for name in [n for n, ep in self._endpoints.items() if ep == endpoint]:
            self._suspects.add(name)
            loop.call_soon(self.on_lost, name)

    async def submit(self, name: str, handle: Any, method: str, payload: bytes) -> asyncio.Future | None:
        """Send the call over ``name``'s channel and return the future of its answer (see
        :meth:`ChannelClient.submit`), or None when ``name`` has no channel we can use or
        its endpoint refused the connection: nothing was sent, the caller calls through
        Ray. The future fails with ``ChannelUnavailable`` (``sent`` True) if the connection
        breaks first (the actor's process probably died) or with :class:`RemoteError`."""
        ep = await self.endpoint(name, handle)
        if ep is None:
            return None
        self.calls += 1
        try:
            fut = await self.client.submit(ep, method, payload)
        except ChannelUnavailable:
            self.fallbacks += 1
            self._refuse(name, ep)
            self._suspects.add(name)
            return None

        def forget_if_broken(f: asyncio.Future) -> None:
            if f.cancelled():
                return
            exc = f.exception()
            if isinstance(exc, ChannelUnavailable):
                self._suspects.add(name)
                if self._endpoints.get(name) == ep:
                    del self._endpoints[name]
            else:  # it answered (a result or its own error): alive
                self._suspects.discard(name)

        fut.add_done_callback(forget_if_broken)
        return fut

    async def call(self, name: str, handle: Any, method: str, payload: bytes, timeout: float | None) -> bytes | None:
        """:meth:`submit` and wait up to ``timeout`` for the answer (``asyncio.TimeoutError``);
        None when the call must go through Ray."""
        fut = await self.submit(name, handle, method, payload)
        if fut is None:
            return None
        return await asyncio.wait_for(fut, timeout) if timeout is not None else await fut


_UNKNOWN = object()


class ThreadedDirectCalls:
    """:class:`DirectCalls` for synchronous callers (the consumer): one per process, on an
    event loop of its own in a daemon thread. :meth:`submit` never blocks: a name whose
    endpoint is not known yet gets None (the caller uses Ray this time) and the endpoint
    is looked up in the background for the next call."""

    _shared: ThreadedDirectCalls | None = None
    _shared_pid = 0  # a forked child inherits _shared but not its thread: it makes its own
    _shared_lock = threading.Lock()

    def __init__(self, node_id: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.direct = DirectCalls(node_id)
        self._looking_up: set[str] = set()
        self.thread = threading.Thread(target=self.loop.run_forever, name="kcoord-channel", daemon=True)
        self.thread.start()

    @classmethod
    def shared(cls) -> ThreadedDirectCalls | None:
        """This process's instance; None where channels are off or Ray's node is unknown."""
        if not enabled():
            return None
        with cls._shared_lock:
            if cls._shared is None or cls._shared_pid != os.getpid():
                try:
                    node_id = current_node_id()
                except Exception:
                    return None
                if not node_id:
                    return None
                cls._shared, cls._shared_pid = cls(node_id), os.getpid()
            return cls._shared

    def submit(self, name: str, handle: Any, method: str, payload: bytes) -> concurrent.futures.Future | None:
        """The future of ``method(payload)`` over ``name``'s channel, or None (use Ray).
        The future fails with :class:`ChannelUnavailable` -- ``sent`` False when the
        endpoint refused (send it through Ray at once) -- or :class:`RemoteError`."""
        ep = self.direct._endpoints.get(name, _UNKNOWN)  # a dict read: safe from this thread
        if ep is _UNKNOWN:
            if name not in self._looking_up:
                self._looking_up.add(name)
                asyncio.run_coroutine_threadsafe(self._look_up(name, handle), self.loop)
            return None
        if ep is None:
            return None
        return asyncio.run_coroutine_threadsafe(self._call(name, handle, method, payload), self.loop)

    async def _look_up(self, name: str, handle: Any) -> None:
        try:
            await self.direct.endpoint(name, handle)
        finally:
            self._looking_up.discard(name)

    async def _call(self, name: str, handle: Any, method: str, payload: bytes) -> bytes:
        fut = await self.direct.submit(name, handle, method, payload)
        if fut is None:
            raise ChannelUnavailable(f"{name}: no channel to use", sent=False)
        return await fut


def current_node_id() -> str:
    import ray

    return ray.get_runtime_context().get_node_id()
