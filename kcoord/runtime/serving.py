"""The serve loop every driver shares: a request in, its core's actions performed, one reply.

A driver derives from :class:`Serving` and names its :class:`~kcoord.protocol.services.Service`.
:meth:`Serving.serve` is the whole life of a request on the driver's side, the same for the
replica, the controller and the coordinators:

1. the service must serve the request type (TypeError otherwise: a caller's bug);
2. the driver may answer it at once or hold it (:meth:`Serving._admit`: stopped, loading,
   still booting);
3. it gets a token and a waiter, and the core decides (:meth:`Serving._handle`); a bug in
   the core is logged and answered UNKNOWN_SERVER_ERROR, and must not take the process down;
4. the driver performs the actions (:meth:`Serving._perform`), a :class:`Reply` completing
   its waiter once (:meth:`Serving._complete`), now or many calls later.

What differs between drivers -- the actions they perform, how they refuse -- is theirs.
"""

from __future__ import annotations

from typing import Any

from ..protocol.codec import Message
from ..protocol.errors import ErrorCode
from ..protocol.services import Service, error_response
from .actions import Action, Reply
from .transport import ReplyFn
from .waiters import Waiters


class Serving:
    """The request side of a driver (see the module docstring). Subclasses set ``service``
    and call :meth:`_init_serving` from their constructor."""

    service: Service

    def _init_serving(self) -> None:
        self._waiters = Waiters()

    # -- the loop ----------------------------------------------------------------------------
    def serve(self, request: Message, reply: ReplyFn) -> None:
        """Any request this driver's service serves; ``reply(response)`` runs exactly once,
        now or later."""
        self.service.check(request)
        if not self._admit(request, reply):
            return
        token = self._waiters.add(reply, request)
        try:
            actions = self._handle(request, token)
        except Exception:
            self._internal_error(f"on {type(request).__name__}")
            waiter = self._waiters.pop(token)
            if waiter is not None:
                waiter.reply(error_response(request, ErrorCode.UNKNOWN_SERVER_ERROR, f"internal error in {self.service.name}; see its logs"))
            return
        self._served(request, token, actions)

    # -- what a driver fills in --------------------------------------------------------------
    def _admit(self, request: Message, reply: ReplyFn) -> bool:
        """Whether the core may decide ``request`` now; if not, the driver has answered it
        (or holds it to serve later)."""
        return True

    def _handle(self, request: Message, token: int) -> list[Action]:
        """Hand ``request`` to the core."""
        raise NotImplementedError

    def _served(self, request: Message, token: int, actions: list[Action]) -> None:
        """Perform what the core decided about ``request``."""
        self._perform(actions)

    def _perform(self, actions: list[Action]) -> Any:
        raise NotImplementedError

    def _internal_error(self, where: str) -> None:
        """A bug in the core (the exception is being handled): log it."""
        raise NotImplementedError

    # -- helpers -----------------------------------------------------------------------------
    def _complete(self, action: Reply) -> None:
        """Answer the request ``action.token`` (a token no longer waiting is dropped)."""
        waiter = self._waiters.pop(action.token)
        if waiter is not None:
            waiter.reply(action.response)

    def _fail_waiting(self, code: int, message: str) -> None:
        """Answer every request still waiting with ``code`` (the driver stops)."""
        for waiter in self._waiters.drain():
            waiter.reply(error_response(waiter.request, code, message))

    @property
    def pending_requests(self) -> int:
        return len(self._waiters)
