"""Tokens for the requests a driver passed to its core, and whom each one answers."""

from __future__ import annotations

from typing import Any, Iterator, NamedTuple

from ..protocol.codec import Message
from .transport import ReplyFn


class Waiter(NamedTuple):
    reply: ReplyFn
    request: Message | None


class Waiters:
    """Pending requests by token. A token is handed to the core with its request; the core's
    :class:`~kcoord.runtime.actions.Reply` names it, and the driver completes the waiter once
    (a Reply for a token no longer waiting is dropped)."""

    def __init__(self) -> None:
        self._next = 0
        self._pending: dict[int, Waiter] = {}

    def add(self, reply: ReplyFn, request: Message | None) -> int:
        self._next += 1
        self._pending[self._next] = Waiter(reply, request)
        return self._next

    def pop(self, token: Any) -> Waiter | None:
        return self._pending.pop(token, None)

    def drain(self) -> Iterator[Waiter]:
        """Every waiter, oldest first, each removed as it is handed out."""
        while self._pending:
            token = next(iter(self._pending))
            yield self._pending.pop(token)

    def __len__(self) -> int:
        return len(self._pending)
