"""The simulated world behind the drivers' interfaces (kcoord.runtime): clock and transport.

:class:`SimClock` is the kernel's clock; :class:`SimTransport` sends a node's calls over
the fake network. Both call back through ``node.on_event`` after the driver ran, so the
simulation can check its invariants after every event a node handles.
"""

from __future__ import annotations

from typing import Any, Callable

from kcoord.protocol.codec import Message
from kcoord.runtime import Outcome

from .kernel import DEAD, OK, TIMEOUT, Kernel, Network

_OUTCOMES = {OK: Outcome.OK, DEAD: Outcome.DEAD, TIMEOUT: Outcome.TIMEOUT}


class SimTimer:
    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class SimClock:
    """The kernel's clock for one node incarnation: its callbacks die with the node
    (``alive()`` false), as an actor's timers die with its process."""

    def __init__(self, kernel: Kernel, alive: Callable[[], bool], after: Callable[[], None] | None = None) -> None:
        self._kernel = kernel
        self._alive = alive
        self._after = after

    def now_ms(self) -> int:
        return self._kernel.now

    def call_at(self, at_ms: int, fn: Callable[[], None]) -> SimTimer:
        timer = SimTimer()
        self._kernel.at(at_ms, self._fire, timer, fn)
        return timer

    def _fire(self, timer: SimTimer, fn: Callable[[], None]) -> None:
        if timer.cancelled or not self._alive():
            return
        fn()
        if self._after is not None:
            self._after()


class SimTransport:
    """A node's outgoing calls. ``resolve`` maps an actor name to a simulated node name."""

    def __init__(self, net: Network, node: Any, resolve: Callable[[str], str], after: Callable[[], None] | None = None) -> None:
        self._net = net
        self._node = node
        self._resolve = resolve
        self._after = after

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

        self._net.call(self._node, self._resolve(target), method, request, response_type, done, timeout_ms)
