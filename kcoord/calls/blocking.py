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
import concurrent.futures
import os
import threading
from typing import Any, Coroutine, TypeVar

from .caller import actor_calls
from .probing import Probing
from .retry import PROBING

T = TypeVar("T")


class BlockingCalls:
    """One event loop thread per process (:meth:`shared`) running every synchronous
    caller's calls."""

    _shared: BlockingCalls | None = None
    _shared_pid = 0  # a forked child inherits _shared but not its thread: it makes its own
    _shared_lock = threading.Lock()

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="kcoord-calls", daemon=True)
        self.thread.start()

    @classmethod
    def shared(cls) -> BlockingCalls:
        """This process's instance."""
        with cls._shared_lock:
            if cls._shared is None or cls._shared_pid != os.getpid():
                cls._shared, cls._shared_pid = cls(), os.getpid()
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


async def _call(namespace: str, name: str, method: str, args: tuple, timeout: float | None, probing: Probing | None) -> Any:
    return await actor_calls(namespace).call(name, method, *args, timeout=timeout, probing=probing)
