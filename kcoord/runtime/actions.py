"""What every core is built from: actions, the one ``Reply``, the outbox, the request table.

A core's entry points each take their input and ``now_ms`` and return ``list[Action]``; the
driver performs them in order. Every action is a frozen dataclass deriving from
:class:`Action`; each core declares its own kinds next to its code (``actions.py`` of the
replica, the controller and the coordinators), and all share :class:`Reply`, the answer to a
request the driver passed in with a token.

:class:`Outbox` is where a core's parts put the actions they decide, in the order decided;
an entry point returns :meth:`Outbox.take`. The cores' shared contexts derive from it, so a
part writes ``ctx.reply(token, response)`` or ``ctx.emit(action)``.

:class:`Handlers` is how every core routes a request: one handler per request type,
``handler(request, token, now_ms)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..protocol.codec import Message


@dataclass(frozen=True)
class Action:
    """Something a core asks its driver to do (the base of every action kind)."""


@dataclass(frozen=True)
class Reply(Action):
    """Complete the pending request ``token`` with ``response``. It may come many calls after
    the request (a long-poll fetch, an acks=all produce, a rebalance, an append); the
    controller answers after the Persists its answer depends on."""

    token: Any
    response: Message


@dataclass(frozen=True)
class AppendRecords(Action):
    """A coordinator's write to its own partition (of ``__consumer_offsets`` or
    ``__transaction_state``): append ``records`` (key, value-or-tombstone) with acks=all,
    then report the outcome with ``on_persisted(persist_id, error_code, now_ms)`` (0:
    acknowledged by the in-sync replicas).

    Appends land in the order they were emitted (one in flight, or an order-preserving
    pipeline; consecutive ones may be merged as long as each id is reported), and one
    reported failed never lands after a later one (the driver moves to a new producer epoch
    after an unknown outcome). The core applies outcomes in emission order, so its memory
    is what a replay of the partition rebuilds. (Not the controller's ``Persist``, a
    metadata-store write.)"""

    persist_id: int
    records: list[tuple[bytes, bytes | None]] = field(default_factory=list)
    reason: str = ""


@dataclass
class Outbox:
    """The actions decided so far, in order. ``out`` is keyword-only so that contexts
    deriving from this can declare fields without defaults."""

    out: list[Action] = field(default_factory=list, kw_only=True)

    def emit(self, action: Action) -> None:
        self.out.append(action)

    def reply(self, token: Any, response: Message) -> None:
        self.out.append(Reply(token, response))

    def replied(self, token: Any) -> bool:
        """Whether a Reply for ``token`` is waiting in the outbox."""
        return any(isinstance(a, Reply) and a.token == token for a in self.out)

    def take(self) -> list[Action]:
        out, self.out = self.out, []
        return out


class Handlers:
    """A core's request handlers by request type (exact type: a subclass is a request of
    its own)."""

    def __init__(self, what: str, table: Mapping[type[Message], Callable[[Any, Any, int], Any]]) -> None:
        self.what = what  # "a replica", "the controller", ...: for the error
        self._table = dict(table)

    def of(self, request: Message) -> Callable[[Any, Any, int], Any]:
        handler = self._table.get(type(request))
        if handler is None:
            raise TypeError(f"{self.what} does not serve {type(request).__name__}")
        return handler

    def __contains__(self, request_type: object) -> bool:
        return request_type in self._table
