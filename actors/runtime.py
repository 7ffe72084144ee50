"""The Ray world behind the drivers' interfaces: an asyncio clock, Ray actor calls, RPC methods.

:class:`AsyncioClock` and :class:`RayTransport` implement :mod:`kcoord.runtime` for code
running inside an asyncio Ray actor. The drivers they serve are the same ones the
simulation runs on its fake clock and network. :func:`rpc_methods` gives a shell its
actor methods from its service's table (``kcoord.protocol.services``), and
:func:`serve_encoded` is what each of them does: decode, serve, await the one reply.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from kcoord.calls import DEAD, ERROR, TIMEOUT, ActorCalls, CallFailed, Probing
from kcoord.calls.direct import DirectCalls
from kcoord.protocol.codec import Message
from kcoord.protocol.errors import DecodeError
from kcoord.protocol.services import RESPONSE_FOR, Service
from kcoord.records import now_ms as wall_ms
from kcoord.runtime import Outcome, ReplyFn


class AsyncioClock:
    """Wall-clock milliseconds; callbacks on the running event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    def now_ms(self) -> int:
        return wall_ms()

    def call_at(self, at_ms: int, fn: Callable[[], None]) -> asyncio.TimerHandle:
        return self.loop.call_later(max(0.0, (at_ms - wall_ms()) / 1000), fn)


class RayTransport:
    """The drivers' :class:`~kcoord.runtime.Transport` on kcoord's one call stack
    (:class:`kcoord.calls.ActorCalls`): each call an asyncio task whose outcome is handed to
    the caller's callback on the event loop. Data-path calls to a replica on this node
    (``direct_methods``) go over its direct-call channel when it serves one; everything
    else, and every call the channel cannot carry, goes through Ray. The driver's
    ``probe_after_ms`` is the call's probing: when the drivers give up and ask is theirs."""

    def __init__(
        self,
        namespace: str,
        loop: asyncio.AbstractEventLoop | None = None,
        handles: ActorCalls | None = None,
        direct: DirectCalls | None = None,
        direct_methods: tuple[str, ...] = ("fetch", "offsets_for_leader_epoch"),
    ) -> None:
        """``direct_methods``: which calls go over a replica's channel (when ``direct`` is
        given): a follower's fetches, or the controller's heartbeats. ``handles``: the
        calls to use (default: new ones with ``direct``)."""
        self.handles = handles or ActorCalls(namespace, direct=direct, direct_methods=direct_methods)
        self._loop = loop
        self._tasks: set[asyncio.Task] = set()
        self.direct = self.handles.direct

    def call(
        self,
        target: str,
        method: str,
        request: Message,
        response_type: type[Message],
        timeout_ms: int,
        on_done: Callable[[Any, Outcome], None],
        *,
        probe_after_ms: int | None = None,
    ) -> None:
        loop = self._loop or asyncio.get_running_loop()
        task = loop.create_task(self._call(target, method, request, response_type, timeout_ms, on_done, probe_after_ms))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _call(self, target, method, request, response_type, timeout_ms, on_done, probe_after_ms) -> None:
        response = None
        probing = None if probe_after_ms is None else Probing.every(probe_after_ms / 1000, 1)
        try:
            raw = await self.handles.call(target, method, request.encode(), timeout=timeout_ms / 1000, probing=probing)
            response = response_type.decode(raw)
            outcome = Outcome.OK
        except CallFailed as exc:
            outcome = _OUTCOMES[exc.kind]
        except DecodeError:
            outcome = Outcome.ERROR
        on_done(response, outcome)

    def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()


_OUTCOMES = {DEAD: Outcome.DEAD, TIMEOUT: Outcome.TIMEOUT, ERROR: Outcome.ERROR}


def ray_alive_nodes() -> list[str]:
    """Ids of the alive nodes of the connected Ray cluster."""
    return ray_nodes()[0]


def ray_nodes() -> tuple[list[str], dict[str, str]]:
    """(ids of the alive nodes, {node id: host address} of every node the GCS still lists,
    dead ones included) of the connected Ray cluster."""
    import ray

    nodes = ray.nodes()
    alive = [n["NodeID"] for n in nodes if n.get("Alive")]
    hosts = {n["NodeID"]: n["NodeManagerAddress"] for n in nodes if n.get("NodeManagerAddress")}
    return alive, hosts


# -- the RPC surface of a shell ----------------------------------------------------------------


def coordinator_io(namespace: str) -> dict[str, Any]:
    """A coordinator driver's transport and clock, on this actor's event loop."""
    loop = asyncio.get_running_loop()
    return {"transport": RayTransport(namespace, loop), "clock": AsyncioClock(loop)}


async def wait_loaded(driver: Any, timeout_s: float | None) -> None:
    """Wait until a coordinator's driver has loaded its partition (``driver.when_loaded``);
    asyncio.TimeoutError after ``timeout_s`` (None: no limit)."""
    if not driver.loaded:
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        driver.when_loaded(lambda: fut.done() or fut.set_result(None))
        await asyncio.wait_for(asyncio.shield(fut), timeout_s)


async def serve_encoded(data: bytes, request_type: type[Message], serve: Callable[[Message, ReplyFn], None]) -> Message:
    """Decode ``data`` as ``request_type``, hand it to ``serve(request, reply)`` (a driver's
    serve loop) and await its one reply. Malformed bytes are answered with the error the
    decoder names, and the actor carries on."""
    try:
        request = request_type.decode(data)
    except DecodeError as exc:
        return RESPONSE_FOR[request_type](int(exc.code), exc.message)
    answer: asyncio.Future = asyncio.get_running_loop().create_future()
    serve(request, lambda response: answer.done() or answer.set_result(response))
    return await answer


def rpc_methods(service: Service) -> Callable[[type], type]:
    """Class decorator: one actor method per row of ``service`` -- ``async def
    <name>(self, data: bytes) -> bytes``, msgpack bytes of the request in and of the
    response out -- each calling the shell's ``_serve(data, request_type)``. Ray calls
    methods by name, so the names are the table's (what clusters and other processes call)."""

    def add(cls: type) -> type:
        for name, request_type in service.methods.items():
            if name in cls.__dict__:
                raise TypeError(f"{cls.__name__}.{name} is {service.name}'s RPC method; define _serve, not {name}")
            setattr(cls, name, _rpc_method(cls, name, request_type))
        return cls

    return add


def _rpc_method(cls: type, name: str, request_type: type[Message]) -> Callable[..., Any]:
    async def method(self: Any, data: bytes) -> bytes:
        return await self._serve(data, request_type)

    method.__name__ = name
    method.__qualname__ = f"{cls.__name__}.{name}"
    method.__module__ = cls.__module__
    method.__doc__ = f"{request_type.__name__} -> {RESPONSE_FOR[request_type].__name__} (msgpack bytes in and out)."
    return method
