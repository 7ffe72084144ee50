"""A leader's AlterPartition has its own, short timeout: a request (or its answer) lost on
the way costs an ISR change a few seconds, not the driver's 10 s call timeout, after which
the core proposes again (issue 32: in the chaos run a caught-up follower stayed outside the
ISR for ~11 s, holding the HW of a min.insync.replicas=2 partition). The driver is run on a
hand-moved clock and a transport that loses chosen calls: they end TIMEOUT when their
timeout runs out, as a Ray call with no answer does."""

from __future__ import annotations

from manual_clock import ManualClock
from replication_helpers import TOPIC, batch, lai, make_replica

from kcoord.protocol.controller import AlterPartitionResponse
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.replication import FetchRequest, ProduceRequest
from kcoord.replication.replica_driver import ReplicaDriver, ReplicaTimeouts
from kcoord.runtime import Outcome


class LossyTransport:
    """Records every call; a call is answered by the test (``answer``) or, if it is lost,
    ends TIMEOUT once its timeout has run out on the clock."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.calls: list[dict] = []

    def call(self, target, method, request, response_type, timeout_ms, on_done, *, probe_after_ms=None) -> None:
        call = {"method": method, "request": request, "at": self.clock.now, "timeout_ms": timeout_ms, "on_done": on_done, "ended": False}
        self.calls.append(call)

        def timed_out() -> None:
            if not call["ended"]:
                call["ended"] = True
                on_done(None, Outcome.TIMEOUT)

        self.clock.call_at(self.clock.now + timeout_ms, timed_out)

    def answer(self, call: dict, response) -> None:
        assert not call["ended"]
        call["ended"] = True
        call["on_done"](response, Outcome.OK)

    def of(self, method: str) -> list[dict]:
        return [c for c in self.calls if c["method"] == method]


def test_a_lost_alter_partition_is_proposed_again_within_a_few_seconds() -> None:
    clock = ManualClock(1_000)
    transport = LossyTransport(clock)
    driver = ReplicaDriver(make_replica(0), cluster="c", transport=transport, clock=clock)
    driver.start()
    answers: list = []
    driver.serve(lai(0, 1, [0]), answers.append)  # leader of [0, 1, 2] with ISR [0]
    driver.serve(ProduceRequest(TOPIC, 0, batch(3), acks=1, timeout_ms=1000), answers.append)
    leo = driver.replica.log.log_end_offset
    # follower 1 fetches at the leader's log end: caught up, the leader proposes ISR [0, 1]
    driver.serve(FetchRequest(TOPIC, 0, leo, max_wait_ms=0, replica_id=1, current_leader_epoch=1, replica_incarnation="p1", replica_log_start_offset=0), answers.append)
    (lost,) = transport.of("alter_partition")
    assert lost["request"].new_isr == [0, 1]
    # ... and that request never reaches the controller: it stays unanswered.
    started = clock.now
    clock.run_until(started + 3_000)
    sent = transport.of("alter_partition")
    assert len(sent) >= 2, f"one lost AlterPartition holds the ISR change for its whole {lost['timeout_ms']} ms timeout"
    again = sent[1]
    assert again["request"].new_isr == [0, 1] and again["at"] - started <= 2_500
    assert lost["timeout_ms"] == ReplicaTimeouts().alter_partition_ms < ReplicaTimeouts().call_ms
    transport.answer(again, AlterPartitionResponse(ErrorCode.NONE, None, 0, 1, 2, [0, 1]))
    assert driver.replica.isr == [0, 1]
    driver.close()


def test_an_alter_partition_answered_late_is_not_resent_before_its_timeout() -> None:
    """A slow controller (a store write, a pause shorter than the timeout) is waited for:
    one request in flight, its answer adopted."""
    clock = ManualClock(1_000)
    transport = LossyTransport(clock)
    driver = ReplicaDriver(make_replica(0), cluster="c", transport=transport, clock=clock)
    driver.start()
    answers: list = []
    driver.serve(lai(0, 1, [0]), answers.append)
    driver.serve(ProduceRequest(TOPIC, 0, batch(3), acks=1, timeout_ms=1000), answers.append)
    leo = driver.replica.log.log_end_offset
    driver.serve(FetchRequest(TOPIC, 0, leo, max_wait_ms=0, replica_id=1, current_leader_epoch=1, replica_incarnation="p1", replica_log_start_offset=0), answers.append)
    (first,) = transport.of("alter_partition")
    clock.run_until(clock.now + first["timeout_ms"] - 1)
    assert len(transport.of("alter_partition")) == 1, "one AlterPartition in flight at a time"
    transport.answer(first, AlterPartitionResponse(ErrorCode.NONE, None, 0, 1, 2, [0, 1]))
    assert driver.replica.isr == [0, 1]
    driver.close()
