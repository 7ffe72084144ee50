"""The retry policy every caller shares (kcoord.calls.retry), without Ray: which step follows
each way an attempt fails, and the wait for a new leader after a leader went away --
metadata that names the new leader ends the wait at the next refresh, not at the end of
the backoff."""

from __future__ import annotations

import asyncio
import time

import pytest

from kcoord.calls import DEAD, ERROR, TIMEOUT
from kcoord.calls.retry import PROBE_EVERY_S, Step, probing_after, step_after, take_step, wait_for_newer_leader


class Metadata:
    """A controller that elects a new leader (epoch 5 -> 6) ``elect_after`` seconds from now."""

    def __init__(self, elect_after: float | None) -> None:
        self.elected_at = None if elect_after is None else time.monotonic() + elect_after
        self.refreshes = 0
        self.epoch = 5

    async def refresh(self) -> None:
        self.refreshes += 1
        if self.elected_at is not None and time.monotonic() >= self.elected_at:
            self.epoch = 6


def wait(md: Metadata, backoff_s: float, deadline_s: float = 60.0) -> tuple[bool, float]:
    async def main():
        start = time.monotonic()
        found = await wait_for_newer_leader(md.refresh, lambda: md.epoch, 5, backoff_s, start + deadline_s)
        return found, time.monotonic() - start

    return asyncio.run(main())


def test_a_leader_elected_during_the_backoff_ends_the_wait_at_the_next_refresh() -> None:
    md = Metadata(elect_after=0.05)
    found, took = wait(md, backoff_s=2.0)
    assert found
    # The refreshes come 20 ms apart: the retry goes out long before the 2 s backoff ends.
    assert took < 0.5, f"the wait took {took:.3f} s"
    assert 2 <= md.refreshes <= 10


def test_a_leader_already_elected_is_found_by_the_first_refresh() -> None:
    md = Metadata(elect_after=0.0)
    assert wait(md, backoff_s=2.0)[0]
    assert md.refreshes == 1


def test_without_a_new_leader_the_wait_lasts_one_backoff_and_a_few_refreshes() -> None:
    md = Metadata(elect_after=None)
    found, took = wait(md, backoff_s=0.3)
    assert not found
    assert 0.3 <= took < 1.5, f"the wait took {took:.3f} s"
    assert md.refreshes <= 17  # waits of 10 ms, then 20: at most 16 refreshes in 0.3 s


def test_the_wait_never_passes_the_delivery_deadline() -> None:
    md = Metadata(elect_after=None)
    found, took = wait(md, backoff_s=5.0, deadline_s=0.1)
    assert not found
    assert took < 1.0, f"the wait took {took:.3f} s"


@pytest.mark.parametrize(
    "failure, stale, step",
    [
        (DEAD, False, Step.NEW_LEADER),  # the leader went away: wait for the next one
        (None, True, Step.NEW_LEADER),  # NOT_LEADER_OR_FOLLOWER and the other refresh codes
        (TIMEOUT, False, Step.REFRESH),  # silent: ask who leads now, at once
        (None, False, Step.BACKOFF),  # another retriable answer (OFFSET_NOT_AVAILABLE...)
        (ERROR, False, Step.GIVE_UP),  # the method raised: UNKNOWN_SERVER_ERROR, not retried
    ],
)
def test_the_step_after_each_way_an_attempt_fails(failure, stale, step) -> None:
    assert step_after(failure, stale_metadata=stale) is step


def test_a_partition_without_a_leader_costs_one_metadata_call_per_backoff() -> None:
    async def main():
        md = Metadata(elect_after=None)
        start = time.monotonic()
        for _ in range(3):
            await take_step(Step.NO_LEADER, refresh=md.refresh, leader_epoch=lambda: -1, epoch=-1, backoff_s=0.05, deadline=start + 60)
        return md.refreshes, time.monotonic() - start

    refreshes, took = asyncio.run(main())
    assert refreshes == 3 and took >= 0.15


def test_a_long_poll_is_late_only_after_its_parking_time() -> None:
    assert probing_after(0.5).first_s == pytest.approx(0.5 + PROBE_EVERY_S)
    assert probing_after().first_s == probing_after().every_s == PROBE_EVERY_S
