"""The one call stack: a call to a named actor goes over a direct-call channel where it
can and through Ray where it must, and ends in an answer or a :class:`.CallFailed` verdict.

Every caller uses it: the producer's sender, the Kafka listener, the actors (through the
Ray runtime's transport: followers' fetches, the controller's heartbeats, every call a
driver makes), and synchronous callers -- ClusterClient, the consumer's fetches, Admin,
the group member, Spark and Ray Data tasks -- through :class:`~.blocking.BlockingCalls`.

One call, in order:

1. **On its way.** A data-path call (:data:`.channel.METHODS`) to a replica on this node
   whose endpoint is known goes over its channel (:mod:`.direct`); anything else, and a
   call whose channel refused us, is a Ray actor call on a handle looked up by name once.
2. **Its end.**

   - an answer: its bytes;
   - the channel broke after the request went out (its process died): a call that changes
     nothing (:data:`RESENDABLE`: reads and heartbeats) goes again through Ray, whose
     verdict stands (the actor is a suspect, so the GCS is asked at once); a produce is
     DEAD (it may have run, as with a Ray call to an actor that died);
   - Ray reports the actor dead, or the GCS says it is dead or restarting while the call
     is late (:class:`.Probing`; the policy is :mod:`.retry`'s): DEAD;
   - no answer within the timeout (or Ray lost it): TIMEOUT;
   - the method raised: ERROR.

   DEAD and TIMEOUT forget the cached handle, so the next call looks the name up again: a
   replica the controller recreated is a new actor under the old name.

What to do next (refresh metadata, back off, answer a Kafka client) is the caller's:
:mod:`.retry` is the policy they share.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any, Awaitable, Iterable

from . import channel
from .direct import SUSPECT_PROBING, DirectCalls, current_node_id
from .handles import HandleCache
from .probing import ActorGoneError, Probing, call_probing
from .retry import PROBING
from .verdict import DEAD, ERROR, TIMEOUT, CallFailed

# Calls that change nothing in the replica: sent again through Ray when their channel
# breaks mid-call, so that Ray's verdict (dead, restarting -- or an answer) stands.
RESENDABLE = frozenset(channel.METHODS) - {"produce"}


class ActorCalls:
    """Calls to named actors of one Ray namespace from one event loop (see the module doc).

    ``direct``: the channels this loop may use (None: Ray only); ``direct_methods``: which
    of :data:`.channel.METHODS` may use them. ``handles``: the handle cache (shared between
    the loops of a process by :func:`actor_calls`)."""

    def __init__(
        self,
        namespace: str,
        *,
        handles: HandleCache | None = None,
        direct: DirectCalls | None = None,
        direct_methods: Iterable[str] = channel.METHODS,
    ) -> None:
        self.namespace = namespace
        self.handles = handles if handles is not None else HandleCache(namespace)
        self.direct = direct
        self.direct_methods = frozenset(direct_methods) & frozenset(channel.METHODS)

    # -- handles ---------------------------------------------------------------------------
    def handle(self, name: str) -> Any:
        """The cached handle of ``name`` (looked up once); CallFailed(DEAD) if no actor has it."""
        try:
            return self.handles.lookup(name)
        except ValueError:
            raise CallFailed(DEAD, f"no actor named {name!r}") from None

    def forget(self, name: str) -> None:
        self.handles.forget(name)

    # -- calls -----------------------------------------------------------------------------
    async def call(self, name: str, method: str, *args: Any, timeout: float | None = None, probing: Probing | None = PROBING) -> Any:
        """``name.method(*args)``: its answer, or :class:`.CallFailed`. ``timeout`` in
        seconds (None: none); ``probing``: when a late call asks the GCS (None: never)."""
        return await (await self.submit(name, method, *args, timeout=timeout, probing=probing))

    async def submit(
        self, name: str, method: str, *args: Any, timeout: float | None = None, probing: Probing | None = PROBING
    ) -> Awaitable[Any]:
        """Send the call; returns the awaitable of its answer (which raises
        :class:`.CallFailed`) once the request is on its way -- written to the channel or
        handed to Ray -- so calls submitted one after another arrive in that order. The
        awaitable must be awaited."""
        if self.direct is not None and method in self.direct_methods and len(args) == 1:
            try:
                handle = self.handle(name)
            except CallFailed as failed:
                return _raise(failed)
            fut = await self.direct.submit(name, handle, method, args[0])
            if fut is not None:
                return self._direct_answer(fut, name, method, args, timeout, probing)
        return self._ray_answer(name, method, self._ray_send(name, method, args), timeout, probing)

    def _ray_send(self, name: str, method: str, args: tuple) -> tuple[Any, Any]:
        """(handle, ObjectRef), or (None, CallFailed) when the call could not be made."""
        try:
            handle = self.handle(name)
        except CallFailed as failed:
            return None, failed
        try:
            return handle, getattr(handle, method).remote(*args)
        except Exception as exc:  # an unknown method, arguments Ray cannot serialize
            return handle, CallFailed(ERROR, f"{name}.{method} could not be called: {exc!r}")

    async def _ray_answer(self, name: str, method: str, sent: tuple[Any, Any], timeout: float | None, probing: Probing | None) -> Any:
        from ray.exceptions import RayActorError, RayTaskError

        handle, ref = sent
        if isinstance(ref, CallFailed):
            if ref.kind == DEAD:
                self.forget(name)
            raise ref
        suspect = self.direct is not None and self.direct.is_suspect(name)
        if suspect:
            # Its channel broke or refused us: probably dead. Ask the GCS now and often
            # rather than once the call is late (failover time).
            probing = SUSPECT_PROBING
        try:
            if probing is not None and (timeout is None or probing.first_s < timeout):
                raw = await call_probing(ref, handle, timeout, probing)
            elif timeout is None:
                raw = await ref
            else:
                raw = await asyncio.wait_for(ref, timeout)
        except ActorGoneError as exc:
            self.forget(name)
            raise CallFailed(DEAD, f"{name} is {exc.state or 'gone'} (GCS)") from None
        except asyncio.TimeoutError:
            self.forget(name)  # alive per Ray but silent: look it up again next time
            raise CallFailed(TIMEOUT, f"{name}.{method} did not answer within {timeout} s") from None
        except RayActorError as exc:  # ActorDiedError, ActorUnavailableError
            self.forget(name)
            raise CallFailed(DEAD, f"{name}: {type(exc).__name__}") from None
        except RayTaskError as exc:  # the method raised
            raise CallFailed(ERROR, f"{name}.{method} raised: {exc}") from None
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # Ray lost the answer (ObjectLostError, RaySystemError...)
            raise CallFailed(TIMEOUT, f"{name}.{method}: no answer ({type(exc).__name__}: {exc})") from None
        if suspect:
            self.direct.clear_suspect(name)  # it answered
        return raw

    async def _direct_answer(self, fut: asyncio.Future, name: str, method: str, args: tuple, timeout: float | None, probing: Probing | None) -> Any:
        try:
            return await (asyncio.wait_for(fut, timeout) if timeout is not None else fut)
        except asyncio.TimeoutError:
            self.forget(name)
            raise CallFailed(TIMEOUT, f"{name}.{method} did not answer within {timeout} s") from None
        except channel.RemoteError as exc:
            raise CallFailed(ERROR, f"{name}.{method} raised: {exc}") from None
        except channel.ChannelUnavailable as exc:
            if method not in RESENDABLE:
                self.forget(name)
                raise CallFailed(DEAD, f"{name}: its channel broke mid-call ({exc})") from None
        return await self._ray_answer(name, method, self._ray_send(name, method, args), timeout, probing)

    def close(self) -> None:
        """Close this loop's channel connections (calls in flight on them fail)."""
        if self.direct is not None:
            self.direct.client.close()


async def _raise(failed: CallFailed) -> Any:
    raise failed


# -- one ActorCalls per event loop and namespace --------------------------------------------
_per_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, ActorCalls]] = weakref.WeakKeyDictionary()


def actor_calls(namespace: str) -> ActorCalls:
    """The :class:`ActorCalls` of the running event loop for ``namespace``, made on first
    use: the process's shared handle cache, and channels where this process may use them
    (:func:`.channel.enabled` and a known Ray node)."""
    loop = asyncio.get_running_loop()
    by_namespace = _per_loop.get(loop)
    if by_namespace is None:
        by_namespace = _per_loop[loop] = {}
    calls = by_namespace.get(namespace)
    if calls is None:
        calls = by_namespace[namespace] = ActorCalls(namespace, handles=HandleCache.shared(namespace), direct=_process_direct_calls())
    return calls


def close_actor_calls() -> None:
    """Close the running loop's :func:`actor_calls` (before the loop ends)."""
    for calls in _per_loop.pop(asyncio.get_running_loop(), {}).values():
        calls.close()


def _process_direct_calls() -> DirectCalls | None:
    if not channel.enabled():
        return None
    try:
        node_id = current_node_id()
    except Exception:  # not connected to Ray the usual way: Ray calls only
        return None
    return DirectCalls(node_id) if node_id else None
