"""FailureDetector rules with an explicit clock: a replica fails only after the session
timeout (never from one slow beat), at once when Ray reports it dead, and an answer from a
new incarnation counts as failed-then-recovered."""

from __future__ import annotations

import pytest

from kcoord.replication.failure_detector import OK, RECOVERED, RESTARTED, FailureDetector

INTERVAL = 200
TIMEOUT = 3000


def detector(*members: str, now: int = 0, grace_ms: int = 0) -> FailureDetector:
    fd = FailureDetector(INTERVAL, TIMEOUT)
    for m in members:
        fd.add(m, now, grace_ms)
    return fd


def beat(fd: FailureDetector, member: str, sent: int, answered: int, incarnation: str | None = "a") -> str | None:
    """One heartbeat round trip: sent at ``sent``, answered at ``answered``."""
    fd.on_sent(member, sent)
    return fd.on_ok(member, answered, incarnation)


def test_session_timeout_must_exceed_interval():
    with pytest.raises(ValueError):
        FailureDetector(200, 200)


def test_one_slow_beat_is_not_a_failure():
    fd = detector("r")
    assert fd.due(0) == ["r"]
    fd.on_sent("r", 0)
    assert fd.due(INTERVAL * 5) == [], "at most one heartbeat in flight per member"
    # the answer takes 2.5 s -- slow, but inside the session timeout
    assert fd.check(2500) == []
    assert fd.on_ok("r", 2500, "a") == OK
    assert fd.check(2500 + TIMEOUT) == [] and fd.is_alive("r")


def test_fails_only_after_session_timeout_without_answers():
    fd = detector("r")
    assert beat(fd, "r", 0, 10) == OK
    fd.on_sent("r", 200)
    fd.on_no_answer("r", 1000)  # a timed-out call is not a failure by itself
    assert fd.is_alive("r")
    assert fd.check(10 + TIMEOUT) == [], "exactly at the timeout is still alive"
    assert fd.check(10 + TIMEOUT + 1) == ["r"]
    assert not fd.is_alive("r") and fd.failed_since("r") == 10 + TIMEOUT + 1
    assert fd.check(10 + TIMEOUT + 500) == [], "reported once, not on every check"
    assert fd.failed_members() == ["r"]


def test_startup_grace_delays_the_first_timeout():
    fd = detector("r", grace_ms=5000)
    assert fd.check(5000 + TIMEOUT) == []
    assert fd.check(5000 + TIMEOUT + 1) == ["r"]


def test_dead_is_immediate_and_reported_once():
    fd = detector("r")
    beat(fd, "r", 0, 1)
    fd.on_sent("r", 200)
    assert fd.on_dead("r", 250) is True
    assert not fd.is_alive("r") and fd.failed_since("r") == 250
    assert fd.on_dead("r", 260) is False
    assert fd.check(10_000) == []
    assert fd.due(200 + INTERVAL) == ["r"], "the in-flight beat ended with the death; keep probing"


def test_new_incarnation_is_restarted():
    fd = detector("r")
    assert beat(fd, "r", 0, 1, "inc-1") == OK
    assert beat(fd, "r", 200, 201, "inc-1") == OK
    assert beat(fd, "r", 400, 401, "inc-2") == RESTARTED
    assert fd.is_alive("r")
    assert beat(fd, "r", 600, 601, "inc-2") == OK


def test_first_incarnation_seen_is_not_a_restart():
    fd = detector("r")
    assert beat(fd, "r", 0, 1, None) == OK
    assert beat(fd, "r", 200, 201, "inc-1") == OK


def test_recovery_after_failure():
    fd = detector("r")
    beat(fd, "r", 0, 0, "inc-1")
    assert fd.check(TIMEOUT + 1) == ["r"]
    # it answers again (with a new incarnation, or the same one after a partition heals)
    assert beat(fd, "r", TIMEOUT + 100, TIMEOUT + 101, "inc-2") == RECOVERED
    assert fd.is_alive("r") and fd.failed_since("r") == -1
    assert fd.check(TIMEOUT + 101 + TIMEOUT) == []
    assert beat(fd, "r", 7000, 7001, "inc-2") == OK


def test_due_respects_interval():
    fd = detector("a", "b")
    assert fd.due(0) == ["a", "b"]
    beat(fd, "a", 0, 5)
    assert fd.due(INTERVAL - 1) == ["b"]
    assert fd.due(INTERVAL) == ["a", "b"]


def test_next_deadline_covers_timeout_and_next_beat():
    fd = detector("r")
    assert fd.next_deadline(0) == 0, "never probed: due now"
    beat(fd, "r", 0, 10)
    assert fd.next_deadline(10) == INTERVAL
    fd.on_sent("r", INTERVAL)
    assert fd.next_deadline(INTERVAL) == 10 + TIMEOUT + 1, "in flight: only the timeout is pending"


def test_unknown_and_removed_members():
    fd = detector("r")
    assert fd.on_ok("x", 0) is None and fd.on_dead("x", 0) is False
    fd.remove("r")
    assert "r" not in fd and fd.members() == [] and not fd.is_alive("r")


def test_members_can_be_beaten_at_their_own_interval():
    slow = {"follower": 1000}
    fd = FailureDetector(INTERVAL, TIMEOUT, lambda m: slow.get(m, INTERVAL))
    for m in ("leader", "follower"):
        fd.add(m, 0)
    assert sorted(fd.due(0)) == ["follower", "leader"]
    beat(fd, "leader", 0, 1)
    beat(fd, "follower", 0, 1)
    assert fd.due(INTERVAL) == ["leader"], "the follower is not due before its own interval"
    assert fd.next_deadline(1) == INTERVAL
    beat(fd, "leader", INTERVAL, INTERVAL + 1)
    assert fd.next_deadline(INTERVAL + 1) == 2 * INTERVAL
    assert sorted(fd.due(1000)) == ["follower", "leader"]
    # a role change takes effect on the next beat: the follower became a leader
    slow.clear()
    beat(fd, "follower", 1000, 1001)
    assert "follower" in fd.due(1000 + INTERVAL)


def test_a_member_interval_is_capped_below_the_session_timeout():
    fd = FailureDetector(INTERVAL, TIMEOUT, lambda m: 10 * TIMEOUT)
    fd.add("r", 0)
    beat(fd, "r", 0, 0)
    assert fd.due(TIMEOUT - 1) == ["r"], "beaten before the session timeout runs out"


# -- vouching: another member heard from it ----------------------------------------------


def test_a_vouched_member_is_not_beaten_until_vouches_stop():
    fd = detector("f")
    assert beat(fd, "f", 0, 5) == OK
    # a leader vouches for it every interval: its own heartbeat never comes due
    for now in range(100, 4000, INTERVAL):
        assert fd.vouch("f", now, now, "a") == OK
        assert fd.due(now + INTERVAL - 1) == []
        assert fd.check(now) == [] and fd.is_alive("f")
    # the vouches stop at 3900: beaten again one interval later
    assert fd.due(3900 + INTERVAL - 1) == [] and fd.due(3900 + INTERVAL) == ["f"]
    assert fd.next_deadline(3900) == 3900 + INTERVAL


def test_a_vouch_keeps_a_member_alive_from_when_it_was_heard():
    fd = detector("f")
    beat(fd, "f", 0, 0)
    assert fd.vouch("f", heard_ms=2500, now_ms=2600, incarnation="a") == OK
    assert fd.check(2500 + TIMEOUT) == [] and fd.check(2500 + TIMEOUT + 1) == ["f"], "the session counts from the fetch, not the report"


def test_a_vouch_older_than_an_answer_or_a_failure_says_nothing():
    fd = detector("f")
    beat(fd, "f", 0, 500)
    assert fd.vouch("f", heard_ms=400, now_ms=600, incarnation="a") is None, "the answer at 500 is fresher"
    assert fd.due(600 + INTERVAL - 1) == [], "still, someone heard from it: its own beat waits"
    assert fd.on_dead("f", 1000)
    # a fetch from before the death does not bring the process back, nor defer a beat
    assert fd.vouch("f", heard_ms=900, now_ms=1100, incarnation="a") is None
    assert not fd.is_alive("f") and fd.due(1100) == ["f"]
    # a fetch after it by the same process: it is back (its session had timed out)
    fd = detector("f")
    beat(fd, "f", 0, 500)
    assert fd.check(500 + TIMEOUT + 1) == ["f"]
    assert fd.vouch("f", heard_ms=4000, now_ms=4050, incarnation="a") == RECOVERED and fd.is_alive("f")


def test_a_vouch_for_another_process_makes_it_no_current_one_and_gets_the_member_beaten():
    """Incarnations have no order: the process a voucher names may be a restart, or an
    older one whose fetch it still holds. Only the member's own answer makes a process
    current (issue 32, finding 2)."""
    fd = detector("f")
    beat(fd, "f", 0, 5, incarnation="a")
    assert fd.vouch("f", 100, 100, "b") is None
    assert fd.due(100) == ["f"], "beaten at once"
    assert beat(fd, "f", 100, 120, "b") == RESTARTED, "its own answer is the restart"
    # the older process, still named by a voucher, says nothing, and costs a beat only when
    # it is news (heard after the last answer: a fetch still parked)
    assert fd.vouch("f", 110, 130, "a") is None and fd.due(130) == []
    assert fd.vouch("f", 130, 130, "a") is None and fd.due(130) == ["f"]
    fd.on_sent("f", 130)
    assert fd.vouch("f", 140, 140, "a") is None, "a beat in flight is not touched"
    assert fd.on_ok("f", 150, "b") == OK
    # nor does a vouch count before the member has answered at all (a controller that just
    # started knows no process; one its predecessor recorded may have died since)
    fd = detector("g")
    assert fd.vouch("g", 10, 10, "a") is None and fd.due(10) == ["g"]
    assert beat(fd, "g", 10, 11, "a") == OK and fd.vouch("g", 20, 20, "a") == OK


def test_expedite_overrides_a_vouch():
    fd = detector("f")
    beat(fd, "f", 0, 0)
    fd.vouch("f", 100, 100, "a")
    assert fd.due(150) == []
    assert fd.expedite("f") and fd.due(150) == ["f"]


def test_members_due_close_together_are_beaten_in_one_round():
    fd = FailureDetector(INTERVAL, TIMEOUT, align_ms=50)
    for i, m in enumerate("abcd"):
        fd.add(m, 0)
        fd.on_sent(m, i * 30)  # added and first beaten at 0, 30, 60, 90
        fd.on_ok(m, i * 30 + 1, "x")
    assert fd.due(199) == [], "nobody's interval has passed: nobody is pulled forward"
    assert fd.due(200) == ["a", "b"], "b is due within 50 ms of a; c (60 ms) is not"
    for m in "ab":
        beat(fd, m, 200, 201)
    assert fd.next_deadline(201) == 260
    assert fd.due(260) == ["c", "d"]
    for m in "cd":
        beat(fd, m, 260, 261)
    # two rounds per interval from now on instead of four
    assert fd.due(400) == ["a", "b"]
    for m in "ab":
        beat(fd, m, 400, 401)
    assert fd.next_deadline(401) == 460


def test_a_vouched_member_comes_due_a_grace_after_its_interval_and_within_its_session():
    fd = FailureDetector(INTERVAL, TIMEOUT, vouch_grace_ms=100)
    fd.add("f", 0)
    beat(fd, "f", 0, 5)
    fd.vouch("f", 1000, 1000, "a")
    assert fd.due(1000 + INTERVAL + 99) == [] and fd.due(1000 + INTERVAL + 100) == ["f"]
    assert fd.next_deadline(1000) == 1000 + INTERVAL + 100
    beat(fd, "f", 1300, 1301)
    assert fd.due(1300 + INTERVAL) == ["f"], "beaten since the vouch: no grace"
    # a grace that would leave a beat no time to be answered within the session is cut
    fd = FailureDetector(1000, 3000, vouch_grace_ms=5000)
    fd.add("f", 0)
    beat(fd, "f", 0, 0)
    fd.vouch("f", heard_ms=100, now_ms=900, incarnation="a")
    assert fd.next_deadline(900) == 100 + 3000 - 1000


def test_a_vouch_for_the_process_ray_reported_dead_says_nothing():
    """A leader may hold a fetch the dead process sent before it died (delayed in the
    network, or parked) and report it as heard just now; the process cannot be alive."""
    fd = detector("f")
    beat(fd, "f", 0, 5, incarnation="a")
    assert fd.on_dead("f", 1000)
    assert fd.vouch("f", heard_ms=1200, now_ms=1200, incarnation="a") is None
    assert not fd.is_alive("f") and fd.due(1200) == ["f"], "still beaten: Ray's answer decides"
    assert fd.vouch("f", heard_ms=1300, now_ms=1300, incarnation="b") is None and fd.due(1300) == ["f"], "its next process answers itself"
    assert fd.on_ok("f", 1310, "b") == RECOVERED
    # a late DEAD (a call that reached the old process) names the live one; its own answer
    # to a heartbeat clears that
    fd.on_dead("f", 2000)
    assert fd.vouch("f", heard_ms=2050, now_ms=2050, incarnation="b") is None
    assert fd.on_ok("f", 2100, "b") == RECOVERED
    assert fd.vouch("f", heard_ms=2200, now_ms=2200, incarnation="b") == OK


def _exact_next_deadline(fd: FailureDetector, now: int) -> int | None:
    """The next deadline by a scan of every member (what next_deadline bounds)."""
    best = None
    for m, h in fd._health.items():
        at = fd._deadline_of(m, h)
        if at is not None:
            at = now if at < -(2**61) else at
            best = at if best is None else min(best, at)
    return best


def test_next_deadline_is_never_later_than_any_members_and_exact_after_a_round():
    import random

    rnd = random.Random(17)
    fd = FailureDetector(INTERVAL, TIMEOUT, align_ms=50, vouch_grace_ms=100)
    members = [f"m{i}" for i in range(12)]
    now = 0
    for step in range(4000):
        now += rnd.choice((0, 1, 5, 20, 60))
        m = rnd.choice(members)
        op = rnd.random()
        if op < 0.1:
            fd.add(m, now)
        elif m not in fd:
            continue
        elif op < 0.35:
            fd.on_sent(m, now)
        elif op < 0.6:
            fd.on_ok(m, now, rnd.choice("ab"))
        elif op < 0.75:
            fd.vouch(m, now - rnd.choice((0, 30, 600)), now, rnd.choice("ab"))
        elif op < 0.8:
            fd.on_no_answer(m, now)
        elif op < 0.83:
            fd.on_dead(m, now)
        elif op < 0.86:
            fd.expedite(m)
        elif op < 0.88:
            fd.remove(m)
        elif op < 0.95:
            fd.check(now)
        else:
            fd.due(now)
            exact, bound = _exact_next_deadline(fd, now), fd.next_deadline(now)
            assert (bound is None and exact is None) or max(bound, now) == max(exact, now), f"exact after a round (step {step})"
        # (a deadline already past means "due now", whichever past time it names)
        exact, bound = _exact_next_deadline(fd, now), fd.next_deadline(now)
        assert (bound is None) == (exact is None), f"step {step}"
        assert bound is None or max(bound, now) <= max(exact, now), f"step {step}: {bound} later than {exact}"


def test_an_answer_costs_the_detector_one_member_not_all():
    fd = FailureDetector(1000, 3000)
    for i in range(2000):
        fd.add(i, 0)
    for i in range(2000):
        fd.on_sent(i, 0)
    fd.next_deadline(1)
    looked: list = []
    original = fd._deadline_of
    fd._deadline_of = lambda m, h: looked.append(m) or original(m, h)
    for i in range(100):
        fd.on_ok(i, 5)
        assert fd.next_deadline(5) == 1000
    assert len(looked) == 100, "one member per answer, not a scan of 2,000"


def test_end_grace_gives_a_member_alive_only_by_its_grace_one_session_from_now():
    fd = FailureDetector(heartbeat_interval_ms=100, session_timeout_ms=1000)
    fd.add("m", 0, grace_ms=30_000)
    fd.add("heard", 0, grace_ms=30_000)
    fd.on_sent("heard", 0)
    fd.on_ok("heard", 1000)
    fd.end_grace("m", 500)
    fd.end_grace("heard", 500)
    assert fd.check(1500) == []
    assert fd.check(1501) == ["m"], "one session timeout after the grace ended"
    assert fd.is_alive("heard"), "a member that answered itself keeps its own session"
    fd.end_grace("m", 2000)
    assert fd.failed_since("m") == 1501, "a failed member stays failed from when it failed"
