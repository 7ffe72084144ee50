"""Is an actor still there? Ask Ray's GCS, which knows within ~30 ms of a process dying.

Ray fails a call to a killed actor only after 1-2 s, and queues calls to a restarting one
until it is back. A caller whose call is slow can ask the GCS instead (~0.3 ms) and give
up on an actor that is gone -- without failing a live one that is merely slow.
``ray._private.state`` is private Ray API: it is used here and nowhere else.

The contract every client call keeps (producer, consumer, admin, group member, Spark
reads): it never waits on a dead or restarting actor longer than its request timeout --
sooner, as soon as the GCS says the actor is gone -- and after a timeout or a gone actor it
drops the cached handle, so the next attempt looks the actor up again (``ray.get_actor``)
with fresh metadata. :func:`get_probing` (blocking) and :func:`call_probing` (asyncio) are
the two ways to wait like that.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

GONE = frozenset({"RESTARTING", "DEAD"})


class ActorGoneError(Exception):
    """The actor a call went to died or is restarting (per Ray's GCS)."""


def actor_state(handle: Any) -> str | None:
    """"ALIVE", "RESTARTING", "DEAD", "PENDING_CREATION", ... or None if unknown."""
    try:
        from ray._private import state as _state

        info = _state.actors(handle._actor_id.hex())
        return info.get("State") if info else None
    except Exception:
        return None


def get_probing(ref: Any, handle: Any, timeout: float, probe_every: float = 0.25) -> Any:
    """``ray.get(ref)`` (a call on ``handle``) for at most ``timeout`` seconds: raise
    :class:`ActorGoneError` as soon as a probe, every ``probe_every`` seconds without an
    answer, finds the actor dead or restarting, and ``ray.exceptions.GetTimeoutError``
    after ``timeout``. Errors of the call itself (``RayActorError``...) propagate."""
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
            raise ActorGoneError(f"actor is {state}")


async def _await(ref: Any) -> Any:
    return await ref


async def call_probing(ref: Any, handle: Any, timeout: float | None, probe_every: float = 0.2) -> Any:
    """Await ``ref`` (a call on ``handle``); every ``probe_every`` seconds without an answer,
    raise :class:`ActorGoneError` if the GCS says the actor is gone, and
    ``asyncio.TimeoutError`` after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    fut = asyncio.ensure_future(_await(ref))
    while True:
        wait = probe_every if deadline is None else min(probe_every, max(0.0, deadline - loop.time()))
        try:
            return await asyncio.wait_for(asyncio.shield(fut), wait)
        except asyncio.TimeoutError:
            pass
        state = actor_state(handle)
        if state in GONE:
            fut.cancel()
            raise ActorGoneError(f"actor is {state}")
        if deadline is not None and loop.time() >= deadline:
            fut.cancel()
            raise asyncio.TimeoutError()
