"""The one retry policy of kcoord's callers: when a slow call asks whether its actor is
gone, and what follows a failed attempt.

Its users: the producer's sender, :class:`~kcoord.client.cluster.ClusterClient`'s leader
and controller calls (the consumer's offsets, Admin, Spark and Ray Data reads), the group
coordinators' client, and the Kafka listener, which answers its clients instead of
retrying and lets them retry (as a Kafka broker does). The drivers of the cores pass their
own probing: when they time out and ask is part of what the simulation checks.

* **Probing.** A call is *late* :data:`PROBE_EVERY_S` after it was due: at once for a
  request a healthy actor answers right away, after its parking time for a long poll
  (:func:`probing_after`). From then on it asks Ray's GCS every :data:`PROBE_EVERY_S`
  whether its actor is dead or restarting, and fails as soon as it is. (Was: 0.1 s in the
  producer, 0.25 s in the other clients, none in the listener.)
* **After a failed attempt** (:func:`step_after`):

  - the actor is gone (``DEAD``), or the answer says the metadata is stale: refresh the
    metadata until it names a newer leader, :data:`REFRESH_WAITS_S` apart, for at most one
    backoff (:func:`wait_for_newer_leader`; was: the producer only, the other clients slept
    a whole backoff first). Callers without leader epochs back off once.
  - no answer in time (``TIMEOUT``): the handle is forgotten (the actor is looked up
    again) and the metadata refreshed at once, without a backoff;
  - another retriable answer: one backoff;
  - the method raised in the actor (``ERROR``): no retry; the caller fails the request with
    UNKNOWN_SERVER_ERROR and the actor's error, as Kafka's clients do with that code (was:
    the producer retried until its delivery timeout, the other clients raised Ray's
    ``RayTaskError``, the listener answered NOT_LEADER_OR_FOLLOWER, which it still does);
  - the metadata names no leader (an offline partition): one backoff, then one refresh --
    one metadata call per backoff however long the partition stays offline.

Why these: they are the fastest of what the callers did (PERFORMANCE.md, "One call stack";
docs/architecture.md, "Calling actors").
"""

from __future__ import annotations

import asyncio
import enum
import time
from typing import Awaitable, Callable

from .probing import Probing
from .verdict import DEAD, ERROR, TIMEOUT

_monotonic = time.monotonic

# A late call asks the GCS this often whether its actor is gone.
PROBE_EVERY_S = 0.1
# Waits between metadata refreshes while a partition waits for a new leader: 10 ms, then 20.
REFRESH_WAITS_S = (0.01, 0.02)


def probing_after(parked_s: float = 0.0) -> Probing:
    """The probing of a call that may be parked up to ``parked_s`` before it is answered."""
    return Probing(parked_s + PROBE_EVERY_S, PROBE_EVERY_S)


PROBING = probing_after(0.0)


class Step(enum.Enum):
    """What a caller does before its next attempt."""

    NEW_LEADER = "refresh the metadata until it names a newer leader (at most one backoff)"
    REFRESH = "refresh the metadata at once"
    BACKOFF = "wait one backoff"
    NO_LEADER = "wait one backoff, then refresh the metadata"
    GIVE_UP = "fail the request"


def step_after(failure: str | None = None, *, stale_metadata: bool = False) -> Step:
    """The step after an attempt that failed with ``failure`` (a :class:`~.verdict.CallFailed`
    kind), or that was answered with a retriable error (``stale_metadata``: one of Kafka's
    refresh-the-metadata codes)."""
    if failure == DEAD or (failure is None and stale_metadata):
        return Step.NEW_LEADER
    if failure == TIMEOUT:
        return Step.REFRESH
    if failure == ERROR:
        return Step.GIVE_UP
    return Step.BACKOFF


async def wait_for_newer_leader(
    refresh: Callable[[], Awaitable[None]], leader_epoch: Callable[[], int], epoch: int, backoff_s: float, deadline: float
) -> bool:
    """Refresh metadata until it names a leader newer than ``epoch`` (``leader_epoch()``
    reads it after each refresh, -1 when there is no leader), for at most ``backoff_s`` and
    never past ``deadline`` (``time.monotonic()``); True once it does.

    Why not one refresh then a whole backoff, as Kafka's producer does: the controller elects
    within tens of milliseconds of hearing of a death, and a retry that sat out the rest of
    a 100 ms backoff after the new leader was known was a third of a failover. The refreshes
    come 10 then 20 ms apart: about five metadata calls per 100 ms of backoff, coalesced per
    topic, and only while a partition's leader is gone."""
    end = min(deadline, _monotonic() + backoff_s)
    waits = iter(REFRESH_WAITS_S)
    wait = next(waits)
    while True:
        await refresh()
        if leader_epoch() > epoch:
            return True
        now = _monotonic()
        if now >= end:
            return False
        await asyncio.sleep(min(wait, end - now))
        wait = next(waits, wait)


async def backoff(backoff_s: float, deadline: float) -> None:
    """Sleep one backoff, never past ``deadline`` (``time.monotonic()``)."""
    await asyncio.sleep(max(0.0, min(backoff_s, deadline - _monotonic())))


async def take_step(
    step: Step,
    *,
    refresh: Callable[[], Awaitable[None]],
    leader_epoch: Callable[[], int],
    epoch: int,
    backoff_s: float,
    deadline: float,
) -> None:
    """Do ``step`` (not GIVE_UP) for a partition whose last attempt went to the leader of
    ``epoch``."""
    if step is Step.NEW_LEADER:
        await wait_for_newer_leader(refresh, leader_epoch, epoch, backoff_s, deadline)
    elif step is Step.REFRESH:
        await refresh()
    elif step is Step.NO_LEADER:
        await backoff(backoff_s, deadline)
        await refresh()
    else:
        await backoff(backoff_s, deadline)
