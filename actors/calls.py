"""Calling other actors from inside an actor: name lookup, timeouts, and a clear verdict.

Every remote call ends in one of three ways the state machines understand: an answer, the
peer is *dead* (Ray says the actor died, is restarting, or its name is gone), or *no answer*
in time (which alone is not a failure).
"""

from __future__ import annotations

import asyncio
from typing import Any

import ray
from ray.exceptions import RayActorError, RayTaskError

from kcoord.client.liveness import GONE, actor_state

DEAD = "dead"
TIMEOUT = "timeout"
ERROR = "error"


class CallFailed(Exception):
    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


class Handles:
    """Named actor handles, looked up once and forgotten when a call finds them dead."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self._cache: dict[str, Any] = {}

    def get(self, name: str) -> Any:
        handle = self._cache.get(name)
        if handle is None:
            try:
                handle = ray.get_actor(name, namespace=self.namespace)
            except ValueError:
                raise CallFailed(DEAD, f"no actor named {name!r}") from None
            self._cache[name] = handle
        return handle

    def forget(self, name: str) -> None:
        self._cache.pop(name, None)

    async def call(
        self, name: str, method: str, *args: Any, timeout: float | None = None, probe_after: float | None = None
    ) -> Any:
        """Call ``name.method(*args)``. With ``probe_after``, a call still unanswered after
        that many seconds makes us ask the GCS whether the actor is gone (dead or
        restarting): if so the call fails as DEAD at once instead of 1-2 s later."""
        try:
            handle = self.get(name)
            ref = getattr(handle, method).remote(*args)
            if probe_after is not None and (timeout is None or probe_after < timeout):
                fut = asyncio.ensure_future(_await(ref))
                try:
                    return await asyncio.wait_for(asyncio.shield(fut), probe_after)
                except asyncio.TimeoutError:
                    if actor_state(handle) in GONE:
                        fut.cancel()
                        raise CallFailed(DEAD, f"{name} is {actor_state(handle) or 'gone'} (GCS)") from None
                remaining = None if timeout is None else max(0.0, timeout - probe_after)
                return await asyncio.wait_for(fut, remaining)
            if timeout is None:
                return await ref
            return await asyncio.wait_for(ref, timeout)
        except CallFailed as exc:
            if exc.kind == DEAD:
                self.forget(name)
            raise
        except asyncio.TimeoutError:
            raise CallFailed(TIMEOUT, f"{name}.{method} did not answer within {timeout} s") from None
        except RayActorError as exc:  # ActorDiedError, ActorUnavailableError
            self.forget(name)
            raise CallFailed(DEAD, f"{name}: {type(exc).__name__}") from None
        except RayTaskError as exc:
            raise CallFailed(ERROR, f"{name}.{method} raised: {exc}") from None


async def _await(ref: Any) -> Any:
    return await ref
