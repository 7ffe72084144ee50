"""Waiting for a Ray call while asking Ray's GCS whether its actor is gone.

A call that has not answered by the time it is late asks the GCS (:func:`.handles.actor_state`)
at intervals and fails as soon as the actor is dead or restarting, instead of when Ray
itself gives up on it 1-2 s later (or, for a restarting actor, when it is back). When a
call is late and how often it asks is a :class:`Probing`; :mod:`.retry` holds the policy's
values.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from .handles import GONE, actor_state


class ActorGoneError(Exception):
    """The actor a call went to died or is restarting (per Ray's GCS)."""

    def __init__(self, state: str | None) -> None:
        super().__init__(f"actor is {state or 'gone'}")
        self.state = state


@dataclass(frozen=True)
class Probing:
    """Ask the GCS first ``first_s`` after the call went out, then every ``every_s``, at
    most ``limit`` times (None: until the call ends); after the last probe the call waits
    out the rest of its timeout."""

    first_s: float
    every_s: float
    limit: int | None = None

    @classmethod
    def every(cls, seconds: float, limit: int | None = None) -> Probing:
        return cls(seconds, seconds, limit)


async def _await(ref: Any) -> Any:
    return await ref


async def call_probing(ref: Any, handle: Any, timeout: float | None, probing: Probing) -> Any:
    """Await ``ref`` (a call on ``handle``), probing as ``probing`` says: raise
    :class:`ActorGoneError` once the GCS says the actor is gone, ``asyncio.TimeoutError``
    after ``timeout`` seconds (None: no limit). Either way the wait is cancelled (Ray does
    not cancel the call itself: one queued for a restarting actor runs when it is back),
    and so it is when the caller is cancelled."""
    fut = asyncio.ensure_future(_await(ref))
    try:
        return await _probe(fut, handle, timeout, probing)
    finally:
        fut.cancel()  # a no-op once it has its answer


async def _probe(fut: asyncio.Future, handle: Any, timeout: float | None, probing: Probing) -> Any:
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    probed = 0
    wait = probing.first_s
    while True:
        remaining = None if deadline is None else max(0.0, deadline - loop.time())
        probing_now = probing.limit is None or probed < probing.limit
        step = remaining if not probing_now else wait if remaining is None else min(wait, remaining)
        try:
            return await asyncio.wait_for(asyncio.shield(fut), step)
        except asyncio.TimeoutError:
            pass
        if probing_now:
            probed += 1
            wait = probing.every_s
            # A blocking GCS query: off the event loop, which under load would otherwise
            # stall every other call waiting on it (the controller probes the replicas it
            # heartbeats, and a stalled controller sees more replicas as silent).
            state = await loop.run_in_executor(None, actor_state, handle)
            if state in GONE:
                raise ActorGoneError(state)
        if deadline is not None and loop.time() >= deadline:
            raise asyncio.TimeoutError()
