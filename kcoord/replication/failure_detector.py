"""Heartbeat-based failure detection for replica actors, with an explicit clock.

A replica is failed when it has not answered a heartbeat for ``session_timeout_ms`` -- one
slow answer is not a failure, only a missed timeout is -- or at once when Ray reports its
actor dead. A heartbeat answer carrying a new *incarnation* (the actor restarted between
two beats) counts as a failure immediately followed by a recovery: whatever the old
process had in memory is gone, so it must not stay in the ISR on trust.

Members need not all be watched equally often: ``interval_of`` gives a member's own
heartbeat interval (the controller beats partition leaders often, since their loss stops
writes, and followers less often, since Ray's death notices and the leader's own ISR
tracking already cover them). Every interval must stay below the session timeout.

A member may also be *vouched for* by another that heard from it (a partition leader for
the followers fetching from it, :meth:`vouch`): that counts as an answer given when it was
heard, and defers the member's own heartbeat by its interval plus ``vouch_grace_ms`` -- so
a follower that keeps fetching is never beaten itself, and is beaten again as soon as nobody
vouches for it. The grace is there because the vouches come with the voucher's own
heartbeat rounds, which run a little late (a timer fires after its time, the answer takes a
round trip): without it, every round that ran a few milliseconds later than the one before
found the vouched members due and beat them too.

A vouch speaks only for the process that last answered a heartbeat itself. Incarnations
have no order (one id per process), and a voucher may still hold a fetch of a process that
has died since (parked, or delayed in the network), so a vouch naming another process --
a restart, or an older one -- never makes it current: the member is beaten at once instead,
and its own answer (which Ray routes to the process running, one beat in flight) decides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Hashable

_NOW = -(2**62)  # a deadline that is due whenever asked (a member never beaten)

OK = "ok"
RECOVERED = "recovered"  # was failed, answers again
RESTARTED = "restarted"  # answers with a new incarnation without having been seen failed


@dataclass
class _Health:
    last_ok_ms: int
    last_sent_ms: int = -1
    in_flight: bool = False
    failed: bool = False
    failed_at_ms: int = -1
    incarnation: str | None = None
    vouched_ms: int = -1  # when another member last vouched for it (controller time)
    # The process Ray reported dead (the incarnation last heard when it did), until the
    # member answers a heartbeat itself: a voucher's word for that process is stale.
    dead_incarnation: str | None = None
    answered: bool = False  # has answered a heartbeat itself (vouches count only then)


class FailureDetector:
    def __init__(
        self,
        heartbeat_interval_ms: int,
        session_timeout_ms: int,
        interval_of: Callable[[Hashable], int] | None = None,
        align_ms: int = 0,
        vouch_grace_ms: int = 0,
    ) -> None:
        """``align_ms``: a member due within that much of another is beaten with it, so
        members added at different times fall into shared rounds -- one wake-up per round
        instead of one per member (an idle controller's cost is its wake-ups).
        ``vouch_grace_ms``: how much later than its interval a member vouched for since its
        last beat comes due (see the module docstring); never past its session."""
        if session_timeout_ms <= heartbeat_interval_ms:
            raise ValueError(
                f"session timeout ({session_timeout_ms} ms) must exceed the heartbeat interval ({heartbeat_interval_ms} ms)"
            )
        self.interval_ms = heartbeat_interval_ms
        self.timeout_ms = session_timeout_ms
        self.align_ms = max(0, align_ms)
        self.vouch_grace_ms = max(0, vouch_grace_ms)
        self._interval_of = interval_of
        self._health: dict[Hashable, _Health] = {}
        # A lower bound of next_deadline (None: unknown), kept up to date member by member:
        # a controller hears one answer at a time, and a scan of every member per answer
        # made an idle controller's cost grow with the square of its replicas.
        self._earliest: int | None = None

    def _interval(self, member: Hashable) -> int:
        if self._interval_of is None:
            return self.interval_ms
        # clamp: a member beaten less often than the timeout would fail without a chance
        return max(1, min(self._interval_of(member), self.timeout_ms - 1))

    def add(self, member: Hashable, now_ms: int, grace_ms: int = 0) -> None:
        """Start watching ``member``; it gets ``grace_ms`` (time to start a new actor)
        plus a full session timeout to answer its first heartbeat."""
        if member not in self._health:
            self._health[member] = _Health(last_ok_ms=now_ms + grace_ms)
            self._lower(member)

    def remove(self, member: Hashable) -> None:
        self._health.pop(member, None)

    def __contains__(self, member: Hashable) -> bool:
        return member in self._health

    def members(self) -> list[Hashable]:
        return list(self._health)

    def has_answered(self, member: Hashable) -> bool:
        """Whether ``member`` has answered a heartbeat itself since it is watched (alive
        before that only by its start-up grace)."""
        h = self._health.get(member)
        return h is not None and h.answered

    def is_alive(self, member: Hashable) -> bool:
        h = self._health.get(member)
        return h is not None and not h.failed

    def failed_members(self) -> list[Hashable]:
        return [m for m, h in self._health.items() if h.failed]

    def failed_since(self, member: Hashable) -> int:
        h = self._health.get(member)
        return h.failed_at_ms if h is not None and h.failed else -1

    # -- heartbeat bookkeeping ------------------------------------------------------------
    def due(self, now_ms: int) -> list[Hashable]:
        """Members to send a heartbeat to now (at most one in flight each): those whose
        interval has passed and, when one has, those within ``align_ms`` of theirs."""
        self._earliest = None  # made exact again at the next next_deadline()
        out = []
        early = []
        for m, h in self._health.items():
            if h.in_flight:
                continue
            at = self._next_beat_ms(m, h)
            wait = at - now_ms if at is not None else 0
            if wait <= 0:
                out.append(m)
            elif wait <= self.align_ms and h.last_sent_ms >= h.vouched_ms:
                early.append(m)  # (not one vouched for since its last beat: let it be)
        return out + early if out else out

    def _next_beat_ms(self, member: Hashable, h: _Health) -> int | None:
        """When ``member``'s own heartbeat is due (None: now, it was never beaten)."""
        last = max(h.last_sent_ms, h.vouched_ms)
        if last < 0:
            return None
        at = last + self._interval(member)
        if h.vouched_ms >= 0 and h.vouched_ms >= h.last_sent_ms and self.vouch_grace_ms:
            # vouched for since its last beat: the next vouch may come a little late; but
            # a beat must still have time to be answered within the session
            at = min(at + self.vouch_grace_ms, max(at, h.last_ok_ms + self.timeout_ms - self._interval(member)))
        return at

    def on_sent(self, member: Hashable, now_ms: int) -> None:
        h = self._health.get(member)
        if h is not None:
            h.in_flight = True
            h.last_sent_ms = now_ms

    def expedite(self, member: Hashable) -> bool:
        """Make ``member``'s next heartbeat due now (a hint that it may be gone, such as
        a broken connection); False if one is in flight already or it is not watched."""
        h = self._health.get(member)
        if h is None or h.in_flight:
            return False
        h.last_sent_ms = -1
        h.vouched_ms = -1
        self._lower(member)
        return True

    def on_ok(self, member: Hashable, now_ms: int, incarnation: str | None = None) -> str | None:
        """A heartbeat answered. Returns OK, RECOVERED or RESTARTED (None if unknown member)."""
        h = self._health.get(member)
        if h is None:
            return None
        h.in_flight = False
        h.dead_incarnation = None
        h.answered = True
        event = self._heard(h, now_ms, incarnation)
        self._lower(member)
        return event

    @staticmethod
    def _heard(h: _Health, at_ms: int, incarnation: str | None) -> str:
        """The member was alive at ``at_ms`` as ``incarnation``: OK, RECOVERED (it was
        failed) or RESTARTED (another process than the one last heard)."""
        h.last_ok_ms = at_ms
        previous = h.incarnation
        if incarnation is not None:
            h.incarnation = incarnation
        if h.failed:
            h.failed = False
            h.failed_at_ms = -1
            return RECOVERED
        if previous is not None and incarnation is not None and incarnation != previous:
            return RESTARTED
        return OK

    def vouch(self, member: Hashable, heard_ms: int, now_ms: int, incarnation: str | None = None) -> str | None:
        """Another member heard from ``member`` at ``heard_ms`` (a leader, a follower's
        fetch): like an answer given then, without touching a heartbeat in flight. Its own
        heartbeat waits another interval. Returns what :meth:`on_ok` would, or None when
        this says nothing newer than what is known: an answer or a failure seen after
        ``heard_ms`` (a process that died after that fetch is not brought back by it), news
        of the very process Ray reported dead, or of another process than the one that last
        answered itself (then the member is beaten at once; see the module docstring)."""
        h = self._health.get(member)
        if h is None:
            return None
        if h.failed and heard_ms <= h.failed_at_ms:
            return None
        if incarnation is not None and incarnation == h.dead_incarnation:
            # A process Ray reported dead cannot be alive again, whatever a voucher says: a
            # leader still holding a fetch that process sent before it died (delayed in
            # the network, or parked) reports it as heard just now.
            return None
        if not h.answered or (incarnation is not None and h.incarnation is not None and incarnation != h.incarnation):
            # Not the process that answered us (or none has yet): newer or older, only its
            # own answer can tell. A process named by nobody but a voucher once came back
            # as current after its successor had answered, and joined the ISR holding
            # nothing (issue 32, finding 2). News older than our last answer needs no beat.
            if heard_ms > h.last_ok_ms:
                self.expedite(member)
            return None
        h.vouched_ms = now_ms
        if heard_ms <= h.last_ok_ms:
            return None
        event = self._heard(h, heard_ms, incarnation)
        self._lower(member)
        return event

    def end_grace(self, member: Hashable, now_ms: int) -> None:
        """Another member says ``member`` has stopped (a leader it no longer fetches from):
        if it is alive only by its start-up grace (it has not answered itself), it gets one
        session timeout from now to answer instead of the rest of the grace."""
        h = self._health.get(member)
        if h is None or h.answered or h.failed or h.last_ok_ms <= now_ms:
            return
        h.last_ok_ms = now_ms
        self._lower(member)

    def on_no_answer(self, member: Hashable, now_ms: int) -> None:
        """A heartbeat timed out: not a failure by itself (only the session timeout is)."""
        h = self._health.get(member)
        if h is not None:
            h.in_flight = False
            self._lower(member)

    def on_dead(self, member: Hashable, now_ms: int) -> bool:
        """Ray says the actor is dead or restarting. Returns True if newly failed."""
        h = self._health.get(member)
        if h is None:
            return False
        h.in_flight = False
        h.dead_incarnation = h.incarnation
        self._lower(member)
        if h.failed:
            return False
        h.failed = True
        h.failed_at_ms = now_ms
        return True

    def check(self, now_ms: int) -> list[Hashable]:
        """Members whose session timed out since the last check (newly failed)."""
        newly = []
        for m, h in self._health.items():
            if not h.failed and now_ms - h.last_ok_ms > self.timeout_ms:
                h.failed = True
                h.failed_at_ms = now_ms
                newly.append(m)
        return newly

    def next_deadline(self, now_ms: int) -> int | None:
        """When the next beat or session timeout is due. It may be earlier than that
        (never later): between rounds it is kept as a bound, lowered member by member as
        answers arrive, and a wake-up that finds nothing due makes it exact again."""
        if self._earliest is None or self._earliest <= now_ms:
            earliest = None
            for m, h in self._health.items():
                at = self._deadline_of(m, h)
                if at is not None and (earliest is None or at < earliest):
                    earliest = at
            self._earliest = earliest
        if self._earliest is None:
            return None
        return now_ms if self._earliest == _NOW else self._earliest

    def invalidate(self) -> None:
        """Something the detector cannot see changed members' intervals (a new leader):
        the next :meth:`next_deadline` looks at every member again."""
        self._earliest = None

    def _deadline_of(self, member: Hashable, h: _Health) -> int | None:
        """``member``'s own next deadline (``_NOW``: a first beat, due at once)."""
        earliest = None if h.failed else h.last_ok_ms + self.timeout_ms + 1
        if not h.in_flight:
            at = self._next_beat_ms(member, h)
            at = _NOW if at is None else at
            earliest = at if earliest is None else min(earliest, at)
        return earliest

    def _lower(self, member: Hashable) -> None:
        """``member`` changed: the bound may have to come down to its deadline."""
        if self._earliest is None:
            return
        at = self._deadline_of(member, self._health[member])
        if at is not None and at < self._earliest:
            self._earliest = at
