"""Actor handles by name, and asking Ray's GCS whether an actor is gone.

Ray fails a call to a killed actor only after 1-2 s, and queues calls to a restarting one
until it is back. Ray's GCS knows within ~30 ms that the process died, and answers in
~0.3 ms, so a caller whose call is slow can ask it (:func:`actor_state`) and give up on an
actor that is gone without failing a live one that is merely slow (:mod:`.probing`).
``ray._private.state`` is private Ray API: it is used here and nowhere else.
"""

from __future__ import annotations

import os
import threading
from typing import Any

GONE = frozenset({"RESTARTING", "DEAD"})


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
    that the next lookup asks Ray again: an actor *recreated* under the same name is a new
    actor that a handle cached before never reaches. Single dict operations are atomic, so
    the cache may be shared between threads (:meth:`shared`: one per process and
    namespace)."""

    _shared: dict[str, HandleCache] = {}
    _shared_pid = 0
    _shared_lock = threading.Lock()

    def __init__(self, namespace: str) -> None:
        super().__init__()
        self.namespace = namespace

    @classmethod
    def shared(cls, namespace: str) -> HandleCache:
        """This process's cache for ``namespace`` (a forked child starts its own)."""
        with cls._shared_lock:
            if cls._shared_pid != os.getpid():
                cls._shared, cls._shared_pid = {}, os.getpid()
            cache = cls._shared.get(namespace)
            if cache is None:
                cache = cls._shared[namespace] = cls(namespace)
            return cache

    def lookup(self, name: str) -> Any:
        handle = self.get(name)
        if handle is None:
            import ray

            handle = ray.get_actor(name, namespace=self.namespace)  # ValueError when missing
            self[name] = handle
        return handle

    def forget(self, name: str) -> None:
        self.pop(name, None)
