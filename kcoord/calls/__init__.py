"""Calling Ray actors: the one call stack of kcoord's clients, its Kafka listener and its
actors (docs/architecture.md, "Calling actors").

* :mod:`.caller` -- :class:`ActorCalls`: a call to a named actor, over a direct-call
  channel where it can, through Ray where it must, ending in an answer or a
  :class:`CallFailed` verdict (:data:`DEAD`, :data:`TIMEOUT`, :data:`ERROR`);
  :func:`actor_calls` gives each event loop its own.
* :mod:`.blocking` -- :class:`BlockingCalls`: the same calls for synchronous callers, on
  one event loop thread per process; :func:`blocking` makes a coroutine method's
  synchronous flavour.
* :mod:`.retry` -- the one retry policy: when a late call asks Ray's GCS whether its actor
  is gone, and what follows a failed attempt.
* :mod:`.channel` (the Unix-socket wire), :mod:`.direct` (endpoints, suspects),
  :mod:`.handles` (handles by name, the GCS's view of an actor), :mod:`.probing`.
"""

from __future__ import annotations

from .blocking import BlockingCalls, blocking
from .caller import RESENDABLE, ActorCalls, actor_calls, close_actor_calls
from .handles import GONE, HandleCache, actor_state, is_gone
from .probing import ActorGoneError, Probing, call_probing
from .verdict import DEAD, ERROR, TIMEOUT, CallFailed

# The name actors/controller.py knew this class by before the call stack was one.
Handles = ActorCalls

__all__ = [
    "ActorCalls",
    "ActorGoneError",
    "BlockingCalls",
    "CallFailed",
    "DEAD",
    "ERROR",
    "GONE",
    "HandleCache",
    "Handles",
    "Probing",
    "RESENDABLE",
    "TIMEOUT",
    "actor_calls",
    "blocking",
    "actor_state",
    "call_probing",
    "close_actor_calls",
    "is_gone",
]
