"""The simulation's clock, event queue and fake network.

Everything that happens in a run is an event on one heap, ordered by (time, sequence number),
so a run is a pure function of its seed: the only randomness is ``Kernel.rng``, there is no
wall clock, and nothing iterates a set or depends on ``hash()``.

The network models Ray actor calls as the shells (actors/) make them: a call is a request
from one node to another that ends exactly once for the caller, with the answer, with
``DEAD`` (the callee's actor died or is down, which Ray reports) or with ``TIMEOUT`` (no
answer in time, which alone says nothing). Each request and each answer is msgpack-encoded
on the way, as Ray serializes them, so no object is ever shared between nodes. The network
delays every message by a random amount (so messages overtake each other), drops some,
delivers some requests twice, and drops everything across a *cut* link: both ways (a
network partition) or one way (``a`` cannot reach ``b``, while ``b``'s messages reach ``a``).

A node can be *paused* (SIGSTOP): nothing reaches its code -- requests, answers, call
outcomes, its own timers -- until it resumes, when it handles all of it in arrival order
with whatever stale state it had. Callers see no answer (TIMEOUT), never DEAD: Ray does not
notice a stopped process.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from kcoord.protocol.codec import Message

OK = "ok"
DEAD = "dead"
TIMEOUT = "timeout"


class Kernel:
    """Simulated clock plus the event heap."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.now = 0
        self._heap: list[tuple[int, int, Callable[..., None], tuple]] = []
        self._seq = 0
        self.events = 0

    def at(self, when: int, fn: Callable[..., None], *args: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (max(when, self.now), self._seq, fn, args))

    def after(self, delay: int, fn: Callable[..., None], *args: Any) -> None:
        self.at(self.now + delay, fn, *args)

    def step(self) -> bool:
        if not self._heap:
            return False
        when, _, fn, args = heapq.heappop(self._heap)
        self.now = when
        self.events += 1
        fn(*args)
        return True

    def next_time(self) -> int | None:
        return self._heap[0][0] if self._heap else None


class Node(Protocol):
    name: str
    up: bool
    incarnation: int
    paused: bool
    deferred: list
    catching_up: list

    def receive(self, call: "Call", request: Message) -> None: ...


def run_on(node: Node, fn: Callable[..., None], *args: Any) -> None:
    """Run ``fn(*args)`` as ``node``'s code: now, or when it resumes if it is paused."""
    if node.paused:
        node.deferred.append((fn, args))
    else:
        fn(*args)


def resume(node: Node) -> None:
    """Un-pause ``node`` and let it handle what piled up, in order (``node.catching_up``: what
    it has not handled yet, so that a check between two of them can tell)."""
    node.paused = False
    pending, node.deferred = node.deferred, []
    node.catching_up = pending
    while pending:
        fn, args = pending.pop(0)
        if node.paused:  # paused again by what it handled: keep the rest for later
            node.deferred.append((fn, args))
            continue
        fn(*args)


@dataclass
class NetParams:
    min_delay_ms: int = 1
    max_delay_ms: int = 20
    drop_rate: float = 0.0
    # Probability that a request is delivered a second time (a little later).
    duplicate_rate: float = 0.0
    # Delay before a caller learns that its callee is dead (Ray's failure notification).
    dead_notice_ms: int = 5


@dataclass(eq=False)
class Call:
    id: int
    src: str
    src_incarnation: int
    dst: str
    # The callee's incarnation when the call was sent; None if it was down then (Ray
    # queues such a call for whichever actor answers to the name next).
    dst_incarnation: int | None
    method: str
    response_type: type[Message] | None
    on_done: Callable[[Message | None, str], None] | None
    done: bool = False
    delivered_to: int | None = None


@dataclass
class NetStats:
    calls: int = 0
    dropped: int = 0
    dead: int = 0
    timeouts: int = 0
    duplicated: int = 0
    by_method: dict[str, int] = field(default_factory=dict)


class Network:
    def __init__(self, kernel: Kernel, params: NetParams) -> None:
        self.kernel = kernel
        self.params = params
        self.nodes: dict[str, Node] = {}
        self._cuts: dict[tuple[str, str], int] = {}  # link -> number of active cuts
        self._one_way: dict[tuple[str, str], int] = {}  # (from, to) -> number of active cuts
        self._open: dict[int, Call] = {}  # insertion ordered: deterministic iteration
        self._ids = 0
        self.stats = NetStats()
        self.trace: Callable[[str], None] | None = None  # set to log every message
        # Two live processes of one actor (the ``twin`` fault): the older one, by (actor
        # name, incarnation), still gets the calls made to it; and callers that have not
        # noticed the restart yet, by (caller, actor name), still reach it.
        self._ghosts: dict[tuple[str, int], Node] = {}
        self._stale: dict[tuple[str, str], str] = {}

    def add(self, node: Node) -> None:
        self.nodes[node.name] = node

    # -- partitions ------------------------------------------------------------------------
    @staticmethod
    def _link(a: str, b: str) -> tuple[str, str]:
        return (a, b) if a <= b else (b, a)

    def cut(self, a: str, b: str) -> None:
        link = self._link(a, b)
        self._cuts[link] = self._cuts.get(link, 0) + 1

    def heal(self, a: str, b: str) -> None:
        link = self._link(a, b)
        n = self._cuts.get(link, 0) - 1
        if n > 0:
            self._cuts[link] = n
        else:
            self._cuts.pop(link, None)

    def cut_one_way(self, src: str, dst: str) -> None:
        """Messages from ``src`` to ``dst`` are lost; the other way still works."""
        self._one_way[(src, dst)] = self._one_way.get((src, dst), 0) + 1

    def heal_one_way(self, src: str, dst: str) -> None:
        n = self._one_way.get((src, dst), 0) - 1
        if n > 0:
            self._one_way[(src, dst)] = n
        else:
            self._one_way.pop((src, dst), None)

    def heal_all(self) -> None:
        self._cuts.clear()
        self._one_way.clear()

    def is_cut(self, a: str, b: str) -> bool:
        return self._link(a, b) in self._cuts

    def cuts(self) -> list[tuple[str, str]]:
        return sorted(self._cuts) + sorted(self._one_way)

    # -- two live processes of one actor ----------------------------------------------------
    def adopt(self, name: str, incarnation: int, ghost: Node) -> None:
        """``ghost`` (a node of its own name) is incarnation ``incarnation`` of actor
        ``name``, still running while Ray has given up on it: the calls it made are
        answered to it, and calls made to that incarnation are delivered to it."""
        self._ghosts[(name, incarnation)] = ghost
        for call in self._open.values():
            if call.src == name and call.src_incarnation == incarnation:
                call.src = ghost.name

    def route_stale(self, caller: str, name: str, ghost: Node) -> None:
        """``caller``'s calls to actor ``name`` reach ``ghost`` until it is forgotten."""
        self._stale[(caller, name)] = ghost.name

    def forget_ghost(self, ghost: Node) -> None:
        self._ghosts = {k: g for k, g in self._ghosts.items() if g is not ghost}
        self._stale = {k: n for k, n in self._stale.items() if n != ghost.name}

    # -- calls -----------------------------------------------------------------------------
    def _lost(self, a: str, b: str) -> bool:
        if self.is_cut(a, b) or (a, b) in self._one_way:
            return True
        p = self.params.drop_rate
        return p > 0 and self.kernel.rng.random() < p

    def _delay(self) -> int:
        return self.kernel.rng.randint(self.params.min_delay_ms, self.params.max_delay_ms)

    def call(
        self,
        src: Node,
        dst: str,
        method: str,
        request: Message,
        response_type: type[Message] | None,
        on_done: Callable[[Message | None, str], None] | None,
        timeout_ms: int,
    ) -> Call:
        """Send ``request`` to ``dst``; ``on_done(response, kind)`` runs exactly once,
        unless the caller itself crashes first."""
        self._ids += 1
        if self._stale:
            dst = self._stale.get((src.name, dst), dst)
        target = self.nodes.get(dst)
        if target is None:
            # No actor by that name: Ray's get_actor fails, the caller hears DEAD.
            call = Call(self._ids, src.name, src.incarnation, dst, None, method, response_type, on_done)
            self._open[call.id] = call
            self._finish_later(call, DEAD)
            return call
        call = Call(
            self._ids,
            src.name,
            src.incarnation,
            dst,
            target.incarnation if target.up else None,
            method,
            response_type,
            on_done,
        )
        self._open[call.id] = call
        self.stats.calls += 1
        self.stats.by_method[method] = self.stats.by_method.get(method, 0) + 1
        self.kernel.after(timeout_ms, self._timeout, call)
        lost = self._lost(src.name, dst)
        if self.trace is not None:
            self.trace(f"  net #{call.id} {src.name} -> {dst} {method}{' LOST' if lost else ''}: {request!r}"[:400])
        if lost:
            self.stats.dropped += 1
        else:
            data = request.encode()
            self.kernel.after(self._delay(), self._deliver, call, data, type(request))
            dup = self.params.duplicate_rate
            if dup > 0 and self.kernel.rng.random() < dup:
                self.stats.duplicated += 1
                self.kernel.after(self._delay() + self._delay(), self._deliver, call, data, type(request))
        return call

    def _deliver(self, call: Call, data: bytes, request_type: type[Message]) -> None:
        node = self.nodes[call.dst]
        if not node.up or (call.dst_incarnation is not None and node.incarnation != call.dst_incarnation):
            ghost = self._ghosts.get((call.dst, call.dst_incarnation)) if self._ghosts and call.dst_incarnation is not None else None
            if ghost is not None and ghost.up:
                # made to a process that still runs, though Ray has started its next one
                if not self.is_cut(call.src, ghost.name):
                    run_on(ghost, self._receive, ghost, ghost.incarnation, call, data, request_type)
                return
            # The callee died after the call was sent: Ray fails the call, the request
            # never reaches the restarted actor.
            self._finish_later(call, DEAD)
            return
        run_on(node, self._receive, node, node.incarnation, call, data, request_type)

    def _receive(self, node: Node, incarnation: int, call: Call, data: bytes, request_type: type[Message]) -> None:
        if not node.up or node.incarnation != incarnation:
            return  # died while paused with this request queued
        call.delivered_to = node.incarnation
        node.receive(call, request_type.decode(data))

    def reply(self, call: Call, response: Message) -> None:
        """The callee answers ``call`` (at most once; later answers are ignored)."""
        lost = self._lost(call.dst, call.src)
        if self.trace is not None:
            self.trace(f"  net #{call.id} {call.dst} => {call.src} answer{' LOST' if lost else ''}: {response!r}"[:400])
        if lost:
            self.stats.dropped += 1
            return
        self.kernel.after(self._delay(), self._answer, call, response.encode())

    def _answer(self, call: Call, data: bytes) -> None:
        if call.done:
            return
        src = self.nodes[call.src]
        if not src.up or src.incarnation != call.src_incarnation:
            self._close(call)
            return
        assert call.response_type is not None
        self._complete(call, call.response_type.decode(data), OK)

    def _timeout(self, call: Call) -> None:
        if not call.done:
            self.stats.timeouts += 1
            self._complete(call, None, TIMEOUT)

    def _finish_later(self, call: Call, kind: str) -> None:
        if not call.done:
            self.kernel.after(self.params.dead_notice_ms, self._finish_now, call, kind)

    def _finish_now(self, call: Call, kind: str) -> None:
        if not call.done:
            if kind == DEAD:
                self.stats.dead += 1
            self._complete(call, None, kind)

    def _complete(self, call: Call, response: Message | None, kind: str) -> None:
        self._close(call)
        if self.trace is not None and kind != OK:
            self.trace(f"  net #{call.id} {call.src} <- {call.dst} {call.method}: {kind.upper()}")
        src = self.nodes[call.src]
        if src.up and src.incarnation == call.src_incarnation and call.on_done is not None:
            run_on(src, self._outcome, src, call, response, kind)

    @staticmethod
    def _outcome(src: Node, call: Call, response: Message | None, kind: str) -> None:
        if src.up and src.incarnation == call.src_incarnation and call.on_done is not None:
            call.on_done(response, kind)

    def _close(self, call: Call) -> None:
        call.done = True
        self._open.pop(call.id, None)

    def node_crashed(self, name: str) -> None:
        """Calls to the crashed node fail as DEAD (Ray reports the actor died); calls it
        made simply end, since nobody is left to hear the answer."""
        for call in list(self._open.values()):
            if call.src == name:
                self._close(call)
            elif call.dst == name:
                self._finish_later(call, DEAD)
