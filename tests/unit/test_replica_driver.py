"""The replica driver's own rules, on a hand-moved clock and a transport that records calls:
its periodic shell work (metrics) rides on every step into the core, so an idle replica
that hears from its peers needs no timer wake-up of its own."""

from __future__ import annotations

from manual_clock import ManualClock
from replication_helpers import lai, make_replica

from kcoord.protocol.controller import HeartbeatRequest, HeartbeatResponse
from kcoord.replication.replica_driver import ReplicaDriver, ReplicaTimeouts


class RecordingTransport:
    def __init__(self) -> None:
        self.calls: list = []

    def call(self, target, method, request, response_type, timeout_ms, on_done, *, probe_after_ms=None) -> None:
        self.calls.append((target, method, request, on_done))


def test_the_shell_hears_every_step_and_an_idle_replica_naps_long() -> None:
    clock = ManualClock(1_000)
    steps: list[int] = []
    driver = ReplicaDriver(make_replica(1), cluster="c", transport=RecordingTransport(), clock=clock, after_step=steps.append)
    driver.start()
    answers: list = []
    driver.serve(lai(0, 1, [0, 1, 2]), answers.append)  # a follower now: it fetches
    assert steps == [1_000]
    clock.now = 1_200
    driver.serve(HeartbeatRequest(controller_epoch=1), answers.append)
    assert steps == [1_000, 1_200] and isinstance(answers[-1], HeartbeatResponse)
    assert [c[1] for c in driver._transport.calls] == ["fetch"]
    # with its fetch parked at the leader it has nothing timed: one wake-up per idle nap
    nap = ReplicaTimeouts().idle_wake_ms
    assert nap >= 10_000
    clock.run_until(1_000 + nap - 1)
    assert steps == [1_000, 1_200], "no wake-up before the nap ends"
    clock.run_until(1_000 + nap)
    assert steps == [1_000, 1_200, 1_000 + nap]
