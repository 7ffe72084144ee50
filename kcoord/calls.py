"""Calling Ray actors: named handles, timeouts, and asking Ray's GCS whether an actor is gone.

Ray fails a call to a killed actor only after 1-2 s, and queues calls to a restarting one
until it is back. Ray's GCS knows within ~30 ms that the process died, and answers in
~0.3 ms. A caller whose call is slow can therefore *probe* the GCS and give up on an actor
that is gone, without failing a live one that is merely slow. ``ray._private.state`` is
private Ray API: it is used here and nowhere else.

Everything in kcoord that calls an actor goes through this module: the client (producer,
consumer, admin, group member), the Spark and Ray Data tasks, the Kafka listener and the
actors themselves (the controller heartbeating replicas, replicas fetching from leaders).

* :class:`HandleCache` -- actor handles by name, looked up once (``ray.get_actor``) and
  forgotten after a call finds the actor dead, restarting or silent, so that the next
  attempt looks the name up again: an actor *recreated* under the same name is a new actor
  that a handle cached before never reaches.
* :func:`get_probing` (blocking) and :func:`call_probing` (asyncio) wait for one call on a
  handle for at most a timeout, and sooner raise :class:`ActorGoneError` once a probe finds
  the actor dead or restarting.
* :class:`Handles` calls actors by name from inside an asyncio actor and ends every call
  with a verdict the state machines understand: an answer, the peer is dead
  (:data:`DEAD`), no answer in time (:data:`TIMEOUT`, which alone is not a failure), or the
  call raised (:data:`ERROR`).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

GONE = frozenset({"RESTARTING", "DEAD"})

DEAD = "dead"
TIMEOUT = "timeout"
ERROR = "error"


class ActorGoneError(Exception):
    """The actor a call went to died or is restarting (per Ray's GCS)."""

    def __init__(self, state: str | None) -> None:
        super().__init__(f"actor is {state or 'gone'}")
        self.state = state


def actor_state(handle: Any) -> str | None:
    """"ALIVE", "RESTARTING", "DEAD", "PENDING_CREATION", ... or None if unknown."""
    try:
        from ray._private import state as _state

        info = _state.actors(handle._actor_id.hex())
        return info.get("State") if info else None
    except Exception:
        return None


def is_gone(handle: Any) -> bool:
    """True if Ray's GCS says the actor of ``handle`` is dead or restarting."""
    return actor_state(handle) in GONE


class HandleCache(dict):
    """Actor handles by name in one Ray namespace (a dict of name -> handle).

    :meth:`lookup` returns the cached handle or looks the name up with ``ray.get_actor``
    (raising its ValueError when no actor has that name); :meth:`forget` drops a handle so
    that the next lookup asks Ray again. Single dict operations are atomic, so the cache
    may be shared between threads."""

    def __init__(self, namespace: str) -> None:
        super().__init__()
        self.namespace = namespace

    def lookup(self, name: str) -> Any:
        handle = self.get(name)
        if handle is None:
            import ray

            handle = ray.get_actor(name, namespace=self.namespace)  # ValueError when missing
            self[name] = handle
        return handle

    def forget(self, name: str) -> None:
        self.pop(name, None)


def get_probing(ref: Any, handle: Any, timeout: float, probe_every: float = 0.25) -> Any:
    """``ray.get(ref)`` (a call on ``handle``) for at most ``timeout`` seconds: raise
    :class:`ActorGoneError` as soon as a probe, every ``probe_every`` seconds without an
    answer, finds the actor dead or restarting, and ``ray.exceptions.GetTimeoutError``
    after ``timeout``. Errors of the call itself (``RayActorError``...) propagate. The call
    is not cancelled: a call queued for a restarting actor runs when it is back."""
    import ray
    from ray.exceptions import GetTimeoutError

    deadline = time.monotonic() + max(0.0, timeout)
    while True:
        step = min(probe_every, max(0.0, deadline - time.monotonic()))
        try:
            return ray.get(ref, timeout=step)
        except GetTimeoutError:
            if time.monotonic() >= deadline:
                raise
        state = actor_state(handle)
        if state in GONE:
            raise ActorGoneError(state)


async def _await(ref: Any) -> Any:
    return await ref


async def call_probing(
    ref: Any, handle: Any, timeout: float | None, probe_every: float = 0.2, *, probes: int | None = None
) -> Any:
    """Await ``ref`` (a call on ``handle``); every ``probe_every`` seconds without an answer
    -- at most ``probes`` times, then wait out the rest of ``timeout`` -- raise
    :class:`ActorGoneError` if the GCS says the actor is gone, and ``asyncio.TimeoutError``
    after ``timeout`` seconds (None: no limit). Either way the call is cancelled."""
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    fut = asyncio.ensure_future(_await(ref))
    probed = 0
    while True:
        remaining = None if deadline is None else max(0.0, deadline - loop.time())
        probing = probes is None or probed < probes
        wait = remaining if not probing else probe_every if remaining is None else min(probe_every, remaining)
        try:
            return await asyncio.wait_for(asyncio.shield(fut), wait)
        except asyncio.TimeoutError:
            pass
        if probing:
            probed += 1
            # A blocking GCS query: off the event loop, which under load would otherwise
            # stall every other call waiting on it (the controller probes the replicas it
            # heartbeats, and a stalled controller sees more replicas as silent).
            state = await loop.run_in_executor(None, actor_state, handle)
            if state in GONE:
                fut.cancel()
                raise ActorGoneError(state)
        if deadline is not None and loop.time() >= deadline:
            fut.cancel()
            raise asyncio.TimeoutError()


class CallFailed(Exception):
    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


class Handles(HandleCache):
    """Named actor handles for code running inside an asyncio actor, with calls that end in
    an answer or a :class:`CallFailed` verdict (:data:`DEAD`, :data:`TIMEOUT`,
    :data:`ERROR`)."""

    def get_handle(self, name: str) -> Any:
        try:
            return self.lookup(name)
        except ValueError:
            raise CallFailed(DEAD, f"no actor named {name!r}") from None

    async def call(
        self,
        name: str,
        method: str,
        *args: Any,
        timeout: float | None = None,
        probe_after: float | None = None,
        probes: int = 1,
    ) -> Any:
        """Call ``name.method(*args)``. With ``probe_after``, a call still unanswered after
        that many seconds makes us ask the GCS whether the actor is gone (dead or
        restarting), ``probes`` times that far apart: if so the call fails as DEAD at once
        instead of 1-2 s later."""
        from ray.exceptions import RayActorError, RayTaskError

        try:
            handle = self.get_handle(name)
            ref = getattr(handle, method).remote(*args)
            if probe_after is not None and (timeout is None or probe_after < timeout):
                return await call_probing(ref, handle, timeout, probe_after, probes=probes)
            if timeout is None:
                return await ref
            return await asyncio.wait_for(ref, timeout)
        except CallFailed as exc:
            if exc.kind == DEAD:
                self.forget(name)
            raise
        except ActorGoneError as exc:
            self.forget(name)
            raise CallFailed(DEAD, f"{name} is {exc.state or 'gone'} (GCS)") from None
        except asyncio.TimeoutError:
            raise CallFailed(TIMEOUT, f"{name}.{method} did not answer within {timeout} s") from None
        except RayActorError as exc:  # ActorDiedError, ActorUnavailableError
            self.forget(name)
            raise CallFailed(DEAD, f"{name}: {type(exc).__name__}") from None
        except RayTaskError as exc:
            raise CallFailed(ERROR, f"{name}.{method} raised: {exc}") from None
