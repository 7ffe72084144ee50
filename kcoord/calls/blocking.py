""":class:`BlockingCalls`: the call stack for synchronous callers.

ClusterClient, the consumer's fetches, Admin, the group member, Spark and Ray Data tasks
are synchronous. Their calls run on one event loop per process, in a daemon thread, through
that loop's :func:`~.caller.actor_calls` -- the same code the producer's sender, the Kafka
listener and the actors run on their own loops -- so there is one way to call an actor,
with one set of verdicts and one retry policy, whatever the caller. A call made from
another thread returns a ``concurrent.futures.Future`` at once (:meth:`BlockingCalls.submit`)
or blocks for its answer (:meth:`BlockingCalls.call`, :meth:`BlockingCalls.run`).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import os
import threading
import functools
import inspect
from typing import Any, Callable, Concatenate, Coroutine, ParamSpec, TypeVar

from .caller import actor_calls, close_actor_calls
from .probing import Probing
from .retry import PROBING

T = TypeVar("T")
S = TypeVar("S")
P = ParamSpec("P")

CLOSE_AT_EXIT_S = 2.0  # how long a process's exit waits for its calls loop to wind down


def blocking(method: Callable[Concatenate[S, P], Coroutine[Any, Any, T]]) -> Callable[Concatenate[S, P], T]:
    """The synchronous flavour of the ``a``-prefixed coroutine method ``method``, named
    without the ``a``: it runs ``method`` on the instance's :class:`BlockingCalls`
    (``self.calls``) and waits, so each call has one body and two thin flavours.
    ``call_leader = blocking(acall_leader)`` in a class body."""
    if not method.__name__.startswith("a"):
        raise ValueError(f"blocking() wants an a-prefixed coroutine method, got {method.__name__!r}")
    name = method.__name__[1:]

    @functools.wraps(method)
    def run(self: Any, *args: P.args, **kwargs: P.kwargs) -> T:
        return self.calls.run(getattr(self, method.__name__)(*args, **kwargs))  # a subclass's override too

    run.__name__ = name
    run.__qualname__ = method.__qualname__[: -len(method.__name__)] + name
    run.__doc__ = f"{inspect.cleandoc(method.__doc__ or '')}\n\nBlocks for the answer: :meth:`{method.__name__}` on kcoord's calls thread."
    return run


class BlockingCalls:
    """One event loop thread per process (:meth:`shared`) running every synchronous
    caller's calls."""

    _shared: BlockingCalls | None = None
    _shared_pid = 0  # a forked child inherits _shared but not its thread: it makes its own
    _shared_lock = threading.Lock()

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.pid = os.getpid()
        self.thread = threading.Thread(target=self.loop.run_forever, name="kcoord-calls", daemon=True)
        self.thread.start()

    @classmethod
    def shared(cls) -> BlockingCalls:
        """This process's instance, closed when the process exits (:meth:`close`):
        synchronous callers rarely close what they used, and a daemon thread's loop left
        running at exit has its connections' reader tasks destroyed pending."""
        with cls._shared_lock:
            if cls._shared is None or cls._shared_pid != os.getpid():
                cls._shared, cls._shared_pid = cls(), os.getpid()
                atexit.register(cls._shared.close)
            return cls._shared

    def start(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run ``coro`` on the calls loop; its future."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the calls loop and wait for it."""
        if threading.current_thread() is self.thread:
            coro.close()
            raise RuntimeError("a blocking kcoord call made on kcoord's calls thread would wait for itself")
        return self.start(coro).result()

    def submit(
        self, namespace: str, name: str, method: str, *args: Any, timeout: float | None = None, probing: Probing | None = PROBING
    ) -> concurrent.futures.Future:
        """``name.method(*args)`` (see :meth:`~.caller.ActorCalls.call`): the future of its
        answer, which fails with :class:`~.verdict.CallFailed`."""
        return self.start(_call(namespace, name, method, args, timeout, probing))

    def call(
        self, namespace: str, name: str, method: str, *args: Any, timeout: float | None = None, probing: Probing | None = PROBING
    ) -> Any:
        """:meth:`submit` and wait for the answer (bounded by ``timeout``)."""
        return self.run(_call(namespace, name, method, args, timeout, probing))

    def stop(self) -> None:
        """End the loop thread (tests)."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)

    def close(self, timeout: float = CLOSE_AT_EXIT_S) -> None:
        """Close the loop's channel connections, cancel the calls still running (they fail
        as in a process that exits), end the thread and close the loop; at most
        ``timeout`` seconds. A no-op in a forked child (the thread is the parent's) and
        once closed."""
        if self.pid != os.getpid() or not self.thread.is_alive() or threading.current_thread() is self.thread:
            return
        try:
            self.start(_wind_down()).result(timeout)
        except Exception:  # the loop is stuck or stopping: exit anyway, as a daemon thread would
            return
        self.stop()
        if not self.thread.is_alive():
            self.loop.close()


async def _wind_down() -> None:
    close_actor_calls()
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in others:
        task.cancel()
    if others:
        await asyncio.wait(others)
    await asyncio.sleep(0)  # the closed transports' own callbacks


async def _call(namespace: str, name: str, method: str, args: tuple, timeout: float | None, probing: Probing | None) -> Any:
    return await actor_calls(namespace).call(name, method, *args, timeout=timeout, probing=probing)
