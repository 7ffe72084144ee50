"""Which calls go over a direct-call channel (:mod:`.channel`), for one event loop.

A replica serves a channel; a caller on the same Ray node learns its endpoint with one Ray
call (``channel()``) and keeps it until a call finds it unreachable. An actor on another
node, one without a channel, or one whose endpoint is refused twice from here goes through
Ray. A connection that breaks from the far end is news: its process exited or was killed
(``on_lost``), and its actor is a *suspect* until something answers -- the next call to it
through Ray asks the GCS at once and often (:data:`SUSPECT_PROBING`).
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from .channel import ChannelClient, ChannelUnavailable, Endpoint
from .probing import Probing, call_probing

LOOKUP_PROBE_S = 0.1  # how often an unanswered endpoint lookup asks the GCS about the actor
LOOKUP_RETRY_S = (0.2, 0.5, 1.0, 2.0, 4.0, 8.0)  # waits before a watcher's next lookup after one failed
# A call through Ray to a *suspect* (see DirectCalls.is_suspect) asks the GCS this often, this
# many times: a process that died on this node is known to the GCS within milliseconds
# (at once after ray.kill), while Ray fails the call itself only after 1-2 s.
SUSPECT_PROBE_S = 0.01
SUSPECT_PROBES = 30
SUSPECT_PROBING = Probing.every(SUSPECT_PROBE_S, SUSPECT_PROBES)
LOOKUP_PROBING = Probing.every(LOOKUP_PROBE_S)
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
            ep = Endpoint.from_wire(await call_probing(method.remote(), handle, self.lookup_timeout, LOOKUP_PROBING))
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
        through Ray should then ask the GCS at once and often (:data:`SUSPECT_PROBING`), not
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


def current_node_id() -> str:
    import ray

    return ray.get_runtime_context().get_node_id()
