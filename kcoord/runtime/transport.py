"""Calls between kcoord's actors, as drivers see them.

A call goes to an actor *name* (``kcoord.protocol.names``) and ends exactly once for the
caller, with one :class:`Outcome`:

* ``OK``: the answer, decoded.
* ``DEAD``: the callee is gone (its actor died, is restarting, or has no such name). Ray
  tells us; a retry should look the actor up again.
* ``TIMEOUT``: no answer in time. Alone this says nothing about the callee: the request
  may or may not have been applied.
* ``ERROR``: the call failed in a way that is neither (the callee raised, the answer did
  not decode). Treated like a timeout by the cores.

Callbacks, not coroutines: the simulation runs drivers on its own event heap, the Ray shells
on asyncio, and both deliver outcomes by calling ``on_done``.
"""

from __future__ import annotations

import enum
from typing import Callable, Protocol, TypeVar

from ..protocol.codec import Message

M = TypeVar("M", bound=Message)

ReplyFn = Callable[[Message], None]
"""Completes one incoming request: called once with its response."""


class Outcome(enum.Enum):
    OK = "ok"
    DEAD = "dead"
    TIMEOUT = "timeout"
    ERROR = "error"


class Transport(Protocol):
    def call(
        self,
        target: str,
        method: str,
        request: Message,
        response_type: type[M],
        timeout_ms: int,
        on_done: Callable[[M | None, Outcome], None],
        *,
        probe_after_ms: int | None = None,
    ) -> None:
        """Call ``method`` of the actor named ``target``; ``on_done(response, outcome)``
        runs once, later (never inline). ``probe_after_ms``: a call still unanswered that
        long asks the cluster whether the callee is gone, and ends as DEAD if it is,
        instead of waiting out ``timeout_ms``."""
        ...
