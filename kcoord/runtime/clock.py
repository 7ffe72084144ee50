"""Time for drivers: a clock that can also call back later, and the one-alarm pattern.

Cores never read a clock; drivers do, through :class:`Clock`, so that the simulation can
substitute simulated time. ``now_ms`` is wall-clock epoch milliseconds in production
(commit timestamps and retention compare it across processes).
"""

from __future__ import annotations

from typing import Callable, Protocol


class Timer(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def now_ms(self) -> int: ...

    def call_at(self, at_ms: int, fn: Callable[[], None]) -> Timer:
        """Run ``fn()`` once, at ``at_ms`` or soon after (never before). A time already
        past runs it on the next turn, never inline."""
        ...


class Alarm:
    """A driver's single wake-up for its core's timers.

    A core says when it next has timed work (``next_deadline()``); the driver re-arms after
    every call into the core. The alarm keeps only the earliest wake-up pending, wakes at
    least every ``idle_ms`` (a bounded nap covers deadlines a core forgets to report), and
    never schedules in the past twice in a row -- a deadline that stays in the past right
    after the core handled it would otherwise spin the process.
    """

    def __init__(self, clock: Clock, fire: Callable[[int], None], idle_ms: int = 1000, min_gap_ms: int = 1) -> None:
        self._clock = clock
        self._fire = fire
        self.idle_ms = idle_ms
        self.min_gap_ms = min_gap_ms
        self._timer: Timer | None = None
        self._at: int | None = None
        self._closed = False
        self.fired = 0

    @property
    def armed_at(self) -> int | None:
        return self._at

    def arm(self, deadline: int | None) -> None:
        """Make sure we wake by ``deadline`` (None: only the idle nap)."""
        if self._closed:
            return
        now = self._clock.now_ms()
        at = now + self.idle_ms if deadline is None else min(max(deadline, now), now + self.idle_ms)
        if self._at is not None and self._at <= at:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._at = at
        self._timer = self._clock.call_at(at, self._on_time)

    def _on_time(self) -> None:
        self._timer = None
        self._at = None
        if self._closed:
            return
        self.fired += 1
        self._fire(self._clock.now_ms())

    def rearm_after_fire(self, deadline: int | None, now_ms: int) -> bool:
        """Re-arm right after the core handled a wake-up. Returns False (and naps
        ``min_gap_ms``) when ``deadline`` is still not in the future: the core reported
        work it did not do, which must not become a busy loop."""
        if deadline is not None and deadline <= now_ms:
            self.arm(now_ms + self.min_gap_ms)
            return False
        self.arm(deadline)
        return True

    def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._at = None
