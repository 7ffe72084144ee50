"""The simulated world behind the drivers' interfaces (kcoord.runtime): clock and transport.

:class:`SimClock` is the kernel's clock as one process incarnation sees it: its callbacks
die with the process and wait while it is paused. :class:`SimTransport` sends the process's
calls over the fake network. Both run ``after()`` once the driver has handled the event, so
the simulation can check its invariants after every event a process handles.
"""

from __future__ import annotations

from typing import Any, Callable

from kcoord.protocol.codec import Message
from kcoord.runtime import Outcome

from .kernel import DEAD, OK, TIMEOUT, Kernel, Network, Node, run_on

_OUTCOMES = {OK: Outcome.OK, DEAD: Outcome.DEAD, TIMEOUT: Outcome.TIMEOUT}


class SimTimer:
    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class SimClock:
    def __init__(self, kernel: Kernel, node: Node, after: Callable[[], None] | None = None) -> None:
        self._kernel = kernel
        self._node = node
        self._incarnation = node.incarnation
        self._after = after

    def now_ms(self) -> int:
        return self._kernel.now

    def call_at(self, at_ms: int, fn: Callable[[], None]) -> SimTimer:
        timer = SimTimer()
        self._kernel.at(at_ms, self._due, timer, fn)
        return timer

    def _alive(self) -> bool:
        return self._node.up and self._node.incarnation == self._incarnation

    def _due(self, timer: SimTimer, fn: Callable[[], None]) -> None:
        if not timer.cancelled and self._alive():
            run_on(self._node, self._fire, timer, fn)

    def _fire(self, timer: SimTimer, fn: Callable[[], None]) -> None:
        if timer.cancelled or not self._alive():
            return
        fn()
        if self._after is not None:
            self._after()


class SimTransport:
    """A process's outgoing calls. ``resolve`` maps an actor name to a simulated node."""

    def __init__(
        self,
        net: Network,
        node: Node,
        resolve: Callable[[str], str],
        after: Callable[[], None] | None = None,
        on_call: Callable[[str, Message], None] | None = None,
        route: Callable[[str, str, Message], str] | None = None,
    ) -> None:
        """``on_call(method, request)`` hears every call the process makes, before it is
        sent (the checks watch a leader's ISR proposals); ``route(node, method, request)``
        may send a call to another node (a stand-in answering for some requests)."""
        self._net = net
        self._node = node
        self._resolve = resolve
        self._after = after
        self._on_call = on_call
        self._route = route

    def call(
        self,
        target: str,
        method: str,
        request: Message,
        response_type: type[Message],
        timeout_ms: int,
        on_done: Callable[[Any, Outcome], None],
        *,
        probe_after_ms: int | None = None,
    ) -> None:
        def done(response: Message | None, kind: str) -> None:
            on_done(response, _OUTCOMES[kind])
            if self._after is not None:
                self._after()

        if self._on_call is not None:
            self._on_call(method, request)
        dst = self._resolve(target)
        if self._route is not None:
            dst = self._route(dst, method, request)
        self._net.call(self._node, dst, method, request, response_type, done, timeout_ms)
