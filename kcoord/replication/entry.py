"""How the replica core's entry points are wrapped: actions collected as decided, and a
storage error turned into going OFFLINE instead of an exception that loses them."""

from __future__ import annotations

import functools
from typing import Any, Callable

from ..protocol.errors import ErrorCode, KafkaError


def is_storage_error(exc: BaseException) -> bool:
    """An I/O failure of the local log (as opposed to a bad request)."""
    return isinstance(exc, OSError) or (isinstance(exc, KafkaError) and exc.code == ErrorCode.KAFKA_STORAGE_ERROR)


def entry_point(method: Callable[..., None]) -> Callable[..., list]:
    """Wrap a public entry point of :class:`~kcoord.replication.replica.Replica`: run it,
    turn a storage error into going OFFLINE, and return every action decided (including
    those decided before a failure). An OFFLINE replica does nothing on timers and
    answers; ``handle`` answers requests with KAFKA_STORAGE_ERROR itself. A log found
    offline on entry (an I/O error outside the core) takes the replica OFFLINE too."""
    from .roles import OFFLINE

    serves_requests = method.__name__ == "handle"

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any) -> list:
        if self.role is not OFFLINE and self.state.log.offline:
            # The log went offline outside the core (a read by the actor shell): never
            # answer a heartbeat as healthy on a log that is gone.
            self._storage_failed(self.state.log.offline_error)
        if self.role is OFFLINE and not serves_requests:
            return self._take()
        try:
            method(self, *args)
        except BaseException as exc:
            if not is_storage_error(exc):
                raise
            self._storage_failed(exc)
        return self._take()

    return wrapper
