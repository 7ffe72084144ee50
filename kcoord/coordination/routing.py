"""How a coordinator core takes a request: one rule for the group and transaction cores.

Every request names the id it is about (a group id, a transactional id) or none (admin
requests over the whole coordinator). A closed core answers NOT_COORDINATOR; an empty id is
refused with the core's code; an id placed on another coordinator is NOT_COORDINATOR
(clients then look the coordinator up again); the rest goes to the request type's handler.
The core's timers due at ``now_ms`` fire before and after, so a request never sees state a
due timer would have changed."""

from __future__ import annotations

from typing import Any, Callable, Protocol

from ..protocol.codec import Message
from ..protocol.errors import ErrorCode
from ..runtime.actions import Action, Handlers


class Placed(Protocol):
    """What routing reads of a core's context: its outbox and where ids are placed."""

    def reply(self, token: Any, response: Message) -> None: ...

    def take(self) -> list[Action]: ...

    def owns(self, key: str) -> bool: ...

    def not_mine(self, key: str) -> str: ...


def route(
    ctx: Placed,
    handlers: Handlers,
    request: Message,
    token: Any,
    now_ms: int,
    *,
    closed: bool,
    advance: Callable[[int], None],
    key: str,
    empty: tuple[int, str],
    error_response: Callable[[Message, int, str], Message],
) -> list[Action]:
    """Hand ``request`` to its handler under the rule above; ``key``: the request field that
    names the id; ``empty``: (code, message) for an empty id."""
    handler = handlers.of(request)
    if closed:
        ctx.reply(token, error_response(request, ErrorCode.NOT_COORDINATOR, "coordinator closed"))
        return ctx.take()
    advance(now_ms)
    value = getattr(request, key, None)
    if value is not None and not value:
        ctx.reply(token, error_response(request, empty[0], empty[1]))
    elif value is not None and not ctx.owns(value):
        ctx.reply(token, error_response(request, ErrorCode.NOT_COORDINATOR, ctx.not_mine(value)))
    else:
        handler(request, token, now_ms)
    advance(now_ms)
    return ctx.take()
