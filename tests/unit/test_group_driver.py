"""GroupCoordinatorDriver without Ray: a real partition leader (the Replica core on a
MemoryLog) behind a scripted transport and a manual clock.

Covers the load rule (never stop below the leader's log end), fencing of older incarnations
through producer epochs, and the persist pipeline's retry and epoch policy.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable

from kcoord import records
from kcoord.group import GroupConfig, GroupCoordinatorState
from kcoord.group.coordinator_driver import CoordinatorTimeouts, GroupCoordinatorDriver
from kcoord.group.records import OFFSETS_TOPIC, OffsetKey, OffsetValue, decode_record, offset_record
from kcoord.log import LogConfig, MemoryLog
from kcoord.protocol import names
from kcoord.protocol.controller import LeaderAndIsrRequest, MetadataResponse, PartitionMetadata, TopicMetadata
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.group import OffsetCommitPartition, OffsetCommitRequest, OffsetFetchRequest
from kcoord.protocol.replication import InternalProduceRequest, ProduceRequest
from kcoord.replication.controller import ControllerState, Persist
from kcoord.replication.replica import Replica
from kcoord.runtime import Outcome
from manual_clock import ManualClock

CLUSTER = "c"


class Leader:
    """Partition 0 of __consumer_offsets, led by broker 0, as the driver sees it: replies go
    through the clock (never inline), like any transport; parked requests (long polls,
    acks=all produces) are answered when the replica core says so."""

    def __init__(self, clock: ManualClock, log: Any = None) -> None:
        self.clock = clock
        log = MemoryLog(LogConfig(flush_messages=1)) if log is None else log
        self.replica = Replica(OFFSETS_TOPIC, 0, 0, log, now_ms=clock.now)
        self._tokens = itertools.count()
        self._pending: dict[int, Callable] = {}
        self.handle(LeaderAndIsrRequest(1, OFFSETS_TOPIC, 0, leader=0, leader_epoch=1, partition_epoch=1, isr=[0], replicas=[0]))
        self.produced: list[ProduceRequest] = []
        self.refuse: Callable[[ProduceRequest], int | None] = lambda req: None
        self.controller: ControllerState | None = None
        self.store: dict[str, bytes] = {}
        self._tick()

    def _tick(self) -> None:
        self.deliver(self.replica.tick(self.clock.now))
        self.clock.call_at(self.clock.now + 50, self._tick)

    def deliver(self, actions) -> None:
        for a in actions:
            done = self._pending.pop(getattr(a, "token", None), None)
            if done is not None:
                response = a.response
                self.clock.call_at(self.clock.now + 1, lambda done=done, response=response: done(response, Outcome.OK))

    def handle(self, request, on_done=None):
        token = next(self._tokens)
        if on_done is not None:
            self._pending[token] = on_done
        self.deliver(self.replica.handle(request, token, self.clock.now))

    def controller_answer(self, request):
        """The real controller core's answer (its store writes kept in ``self.store``)."""
        if self.controller is None:
            self.controller = ControllerState(CLUSTER)
            self.controller.start({}, [0], 1, self.clock.now)
        token = ("init", next(self._tokens))
        answer = None
        for a in self.controller.handle(request, token, self.clock.now):
            if isinstance(a, Persist):
                self.store[a.key] = a.value
            elif getattr(a, "token", None) == token:
                answer = a.response
        return answer

    def follower_fetch(self, broker: int = 1) -> None:
        from kcoord.protocol.replication import FetchRequest

        self.handle(FetchRequest(OFFSETS_TOPIC, 0, self.replica.log.log_end_offset, replica_id=broker, current_leader_epoch=1))

    def call(self, target, method, request, response_type, timeout_ms, on_done, *, probe_after_ms=None) -> None:
        if target == names.controller(CLUSTER):
            if method == "init_producer_id":
                answer = self.controller_answer(request)
            else:
                answer = MetadataResponse(topics=[TopicMetadata(OFFSETS_TOPIC, partitions=[PartitionMetadata(0, leader=0, leader_epoch=1)])])
            self.clock.call_at(self.clock.now + 1, lambda: on_done(answer, Outcome.OK))
            return
        assert target == names.replica(CLUSTER, OFFSETS_TOPIC, 0, 0), target
        if method == "produce_internal":
            self.produced.append(request)
            code = self.refuse(request)
            if code is not None:
                self.clock.call_at(self.clock.now + 1, lambda: on_done(response_type(code, "refused"), Outcome.OK))
                return
        self.handle(request, on_done)


def commit_batch(group: str, offset: int, **producer) -> bytes:
    key, value = offset_record(OffsetKey(group, "t", 0), OffsetValue(offset, commit_timestamp_ms=1))
    return records.build_batch_columns([value], [key], **producer)


class Link:
    """One coordinator process's network: it may be cut off from the controller (calls time
    out), and the answers to its appends may be lost (the leader handles them)."""

    def __init__(self, leader: Leader) -> None:
        self.leader = leader
        self.cut_from_controller = False
        self.lose_answers = False

    def call(self, target, method, request, response_type, timeout_ms, on_done, *, probe_after_ms=None) -> None:
        clock = self.leader.clock
        if target == names.controller(CLUSTER) and self.cut_from_controller and method != "metadata":
            clock.call_at(clock.now + min(timeout_ms, 300), lambda: on_done(None, Outcome.TIMEOUT))
            return
        if method == "produce_internal" and self.lose_answers:
            self.leader.produced.append(request)
            self.leader.handle(request)
            clock.call_at(clock.now + min(timeout_ms, 300), lambda: on_done(None, Outcome.TIMEOUT))
            return
        self.leader.call(target, method, request, response_type, timeout_ms, on_done, probe_after_ms=probe_after_ms)


def driver_on(leader: Leader, clock: ManualClock, transport: Any = None) -> GroupCoordinatorDriver:
    core = GroupCoordinatorState(GroupConfig(), partition=0, num_partitions=1)
    t = leader if transport is None else transport
    d = GroupCoordinatorDriver(CLUSTER, core, transport=t, clock=clock, timeouts=CoordinatorTimeouts(persist_ms=2_000))
    d.start()
    return d


def commit(d: GroupCoordinatorDriver, clock: ManualClock, offset: int, group: str = "g") -> int:
    got = []
    d.serve(OffsetCommitRequest(group_id=group, generation_id=-1, member_id="", topics={"t": {0: OffsetCommitPartition(offset)}}), got.append)
    clock.run_until(clock.now + 10_000)
    return got[0].topics["t"][0]


def offsets_in_log(leader: Leader, group: str = "g") -> list[int]:
    values = [decode_record(rec.key, rec.value) for rec in records.iter_records(leader.replica.log.read(0, 1 << 24))]
    return [v[1].offset for v in values if v is not None and isinstance(v[0], OffsetKey) and v[0].group_id == group]


def fetch_offset(d: GroupCoordinatorDriver, clock: ManualClock, group: str) -> Any:
    out = []
    d.serve(OffsetFetchRequest(group_id=group), out.append)
    clock.run_until(clock.now + 10)
    return out[0]


def test_load_waits_while_the_hw_lags_the_log_end():
    """Issue 12 suspect: a restarting coordinator stopped loading at the HW after 15 s, so a
    commit above a lagging HW (a new leader whose HW had not caught up) was skipped and the
    group's offset went back. The driver waits, however long, and then loads it."""
    clock = ManualClock(1_000_000)
    leader = Leader(clock)
    r = leader.replica
    leader.handle(InternalProduceRequest(OFFSETS_TOPIC, 0, commit_batch("g", 10), acks=1))
    # broker 1 joins the ISR without having fetched: the HW stops below the next commit
    leader.handle(LeaderAndIsrRequest(1, OFFSETS_TOPIC, 0, 0, 1, 2, [0, 1], [0, 1]))
    leader.handle(InternalProduceRequest(OFFSETS_TOPIC, 0, commit_batch("g", 20), acks=1))
    assert (r.hw, r.log.log_end_offset) == (1, 2)
    d = driver_on(leader, clock)
    clock.run_until(clock.now + 60_000)
    assert not d.loaded, "loading must not stop at a HW below the log end"
    # the follower fetches everything: the HW reaches the log end
    leader.follower_fetch()
    assert r.hw == 2
    for _ in range(50):  # broker 1 keeps up from now on (the coordinator's own append needs it)
        clock.run_until(clock.now + 100)
        leader.follower_fetch()
    assert d.loaded
    answer = fetch_offset(d, clock, "g")
    assert answer.offsets["t"][0].offset == 20


def test_a_load_reports_where_its_time_went():
    """A load held up by a lagging HW, then by a controller that does not answer, says so
    while it waits (``load_progress``) and afterwards (``load_info["phases_ms"]``), its
    phases adding up to its duration."""
    clock = ManualClock(1_000_000)
    leader = Leader(clock)
    leader.handle(InternalProduceRequest(OFFSETS_TOPIC, 0, commit_batch("g", 10), acks=1))
    leader.handle(LeaderAndIsrRequest(1, OFFSETS_TOPIC, 0, 0, 1, 2, [0, 1], [0, 1]))
    leader.handle(InternalProduceRequest(OFFSETS_TOPIC, 0, commit_batch("g", 20), acks=1))
    link = Link(leader)
    link.cut_from_controller = True
    d = driver_on(leader, clock, link)
    clock.run_until(clock.now + 20_000)
    stuck = d.load_progress()
    assert stuck["phase"] == "settle" and stuck["phases_ms"]["settle"] >= 19_000 and stuck["ms"] >= 20_000
    leader.follower_fetch()  # the HW reaches the log end: now the epoch is what it waits for
    clock.run_until(clock.now + 10_000)
    assert not d.loaded and d.load_progress()["phase"] == "epoch"
    link.cut_from_controller = False
    for _ in range(50):
        clock.run_until(clock.now + 100)
        leader.follower_fetch()
    assert d.loaded and d.load_progress() == {}
    phases = d.load_info["phases_ms"]
    assert phases["settle"] >= 19_000 and phases["epoch"] >= 9_000 and phases["fence"] > 0, phases
    assert sum(phases.values()) == d.load_info["load_ms"]


def test_a_new_incarnation_fences_the_old_one():
    clock = ManualClock(1_000_000)
    leader = Leader(clock)
    first = driver_on(leader, clock)
    clock.run_until(clock.now + 1_000)
    assert first.loaded and first.producer_epoch == 0
    fence = leader.produced[0]
    (h,) = [h for _, h in records.iter_headers(fence.records)]
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (0, 0, 0)
    second = driver_on(leader, clock)
    clock.run_until(clock.now + 1_000)
    assert second.loaded and second.producer_epoch == 1
    # the old incarnation's commit is refused by the leader, and it stops serving
    got = []
    first.serve(OffsetCommitRequest(group_id="g", generation_id=-1, member_id="", topics={"t": {0: OffsetCommitPartition(5)}}), got.append)
    clock.run_until(clock.now + 1_000)
    assert got and got[0].topics["t"][0] == ErrorCode.NOT_COORDINATOR
    assert first.fenced and first.closed
    later = []
    first.serve(OffsetFetchRequest(group_id="g"), later.append)
    assert later[0].error_code == ErrorCode.NOT_COORDINATOR
    # the new one's commits land and stay
    got = []
    second.serve(OffsetCommitRequest(group_id="g", generation_id=-1, member_id="", topics={"t": {0: OffsetCommitPartition(7)}}), got.append)
    clock.run_until(clock.now + 1_000)
    assert got[0].topics["t"][0] == ErrorCode.NONE
    assert fetch_offset(second, clock, "g").offsets["t"][0].offset == 7
    values = [decode_record(rec.key, rec.value) for rec in records.iter_records(leader.replica.log.read(0, 1 << 20))]
    assert [v[1].offset for v in values if v is not None] == [7], "the fenced commit never reached the log"


def test_an_append_with_an_unknown_outcome_moves_to_a_new_epoch():
    clock = ManualClock(1_000_000)
    leader = Leader(clock)
    d = driver_on(leader, clock)
    clock.run_until(clock.now + 1_000)
    epoch = d.producer_epoch
    leader.refuse = lambda req: ErrorCode.REQUEST_TIMED_OUT
    got = []
    d.serve(OffsetCommitRequest(group_id="g", generation_id=-1, member_id="", topics={"t": {0: OffsetCommitPartition(5)}}), got.append)
    clock.run_until(clock.now + 5_000)
    assert got and got[0].topics["t"][0] != ErrorCode.NONE, "retried until persist_ms, then failed"
    attempts = [req for req in leader.produced[1:]]
    assert len(attempts) > 1 and len({bytes(req.records) for req in attempts}) == 1, "retries resend the same batch"
    assert d.producer_epoch == epoch + 1
    leader.refuse = lambda req: None
    got = []
    d.serve(OffsetCommitRequest(group_id="g", generation_id=-1, member_id="", topics={"t": {0: OffsetCommitPartition(6)}}), got.append)
    clock.run_until(clock.now + 1_000)
    assert got[0].topics["t"][0] == ErrorCode.NONE
    (h,) = [h for _, h in records.iter_headers(leader.produced[-1].records)]
    assert (h.producer_epoch, h.base_sequence) == (epoch + 1, 0)


def test_a_refused_fence_bids_a_higher_epoch_even_when_the_log_shows_none():
    """The leader's producer state may hold an epoch no batch of the log shows any more; a
    fence refused at epoch e is retried at e + 1 rather than at e forever."""
    clock = ManualClock(1_000_000)
    leader = Leader(clock)
    leader.refuse = lambda req: ErrorCode.INVALID_PRODUCER_EPOCH if next(records.iter_headers(req.records))[1].producer_epoch < 3 else None
    d = driver_on(leader, clock)
    clock.run_until(clock.now + 2_000)
    assert d.loaded and d.producer_epoch == 3
    assert [next(records.iter_headers(req.records))[1].producer_epoch for req in leader.produced] == [0, 1, 2, 3]


def test_a_client_write_to_the_offsets_topic_is_refused_and_a_restarted_coordinator_loads_unharmed():
    """Issue 32, finding 9: any client could write into ``__consumer_offsets``, and every
    coordinator replays what is there. A client's Produce (here: a commit record rolling
    the group's offset back, and bytes that are no record at all) is refused at the leader;
    the next incarnation loads the group as its coordinator left it."""
    clock = ManualClock(1_000_000)
    leader = Leader(clock)
    first = driver_on(leader, clock)
    clock.run_until(clock.now + 1_000)
    got = []
    first.serve(OffsetCommitRequest(group_id="g", generation_id=-1, member_id="", topics={"t": {0: OffsetCommitPartition(42)}}), got.append)
    clock.run_until(clock.now + 1_000)
    assert got[0].topics["t"][0] == ErrorCode.NONE
    end = leader.replica.log.log_end_offset
    answers = []
    for data in (commit_batch("g", 3), records.build_batch_columns([b"\xc1garbage"], [b"\xc1"], timestamp_ms=1)):
        leader.handle(ProduceRequest(OFFSETS_TOPIC, 0, data, acks=1), lambda resp, outcome: answers.append(resp))
    clock.run_until(clock.now + 100)
    assert [a.error_code for a in answers] == [ErrorCode.INVALID_TOPIC_EXCEPTION] * 2
    assert leader.replica.log.log_end_offset == end
    second = driver_on(leader, clock)
    clock.run_until(clock.now + 1_000)
    assert second.loaded
    assert fetch_offset(second, clock, "g").offsets["t"][0].offset == 42


def test_an_older_incarnation_cut_off_from_the_controller_neither_fences_the_new_one_nor_acks_what_is_not_in_the_log():
    """Issue 32, finding 6: an older process of a coordinator, cut off from Ray's control
    plane but still reaching the partition leader, bumped its own producer epoch after an
    append with an unknown outcome: onto the new incarnation's epoch, where its commit was
    taken for a duplicate of the new one's fence and acknowledged without being written, or
    one higher, which fenced the new incarnation out. Epochs come from the controller now,
    which hands each incarnation a higher one once and refuses older incarnations."""
    clock = ManualClock(1_000_000)
    leader = Leader(clock)
    old_link = Link(leader)
    old = driver_on(leader, clock, old_link)
    clock.run_until(clock.now + 1_000)
    assert old.loaded and commit(old, clock, 5) == ErrorCode.NONE
    new = driver_on(leader, clock, Link(leader))
    clock.run_until(clock.now + 1_000)
    assert new.loaded and new.producer_epoch > old.producer_epoch
    # the old process is cut off from the controller and its appends' answers are lost
    old_link.cut_from_controller = True
    old_link.lose_answers = True
    acked = {}
    for offset in (6, 7):
        acked[offset] = commit(old, clock, offset)
    old_link.lose_answers = False
    for offset in (8, 9):
        acked[offset] = commit(old, clock, offset)
    in_log = offsets_in_log(leader)
    assert all(o in in_log for o, code in acked.items() if code == ErrorCode.NONE), (acked, in_log)
    assert not new.fenced and not new.closed
    assert commit(new, clock, 20) == ErrorCode.NONE and offsets_in_log(leader)[-1] == 20
    # back in touch with the controller, the old process learns it was replaced, and stops
    old_link.cut_from_controller = False
    commit(old, clock, 30)
    clock.run_until(clock.now + 10_000)
    assert old.closed and 30 not in offsets_in_log(leader)
    assert not new.fenced and fetch_offset(new, clock, "g").offsets["t"][0].offset == 20


def test_an_older_incarnation_still_in_touch_with_the_controller_is_refused_a_new_epoch():
    clock = ManualClock(1_000_000)
    leader = Leader(clock)
    old_link = Link(leader)
    old = driver_on(leader, clock, old_link)
    clock.run_until(clock.now + 1_000)
    new = driver_on(leader, clock, Link(leader))
    clock.run_until(clock.now + 1_000)
    old_link.lose_answers = True
    assert commit(old, clock, 6) != ErrorCode.NONE
    old_link.lose_answers = False
    assert commit(old, clock, 7) != ErrorCode.NONE
    clock.run_until(clock.now + 10_000)
    assert old.closed and 7 not in offsets_in_log(leader)
    assert not new.fenced and commit(new, clock, 8) == ErrorCode.NONE


def test_an_out_of_order_answer_fails_the_commit_retriably_and_moves_to_a_new_epoch():
    """OUT_OF_ORDER_SEQUENCE_NUMBER to a coordinator's append means its own sequence stream
    broke: the client hears COORDINATOR_NOT_AVAILABLE (it retries), and the coordinator
    asks the controller for the next epoch, where sequences start again at 0."""
    clock = ManualClock(1_000_000)
    leader = Leader(clock)
    d = driver_on(leader, clock)
    clock.run_until(clock.now + 1_000)
    epoch = d.producer_epoch
    leader.refuse = lambda req: ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert commit(d, clock, 5) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    leader.refuse = lambda req: None
    assert commit(d, clock, 6) == ErrorCode.NONE and d.producer_epoch == epoch + 1
    (h,) = [h for _, h in records.iter_headers(leader.produced[-1].records)]
    assert (h.producer_epoch, h.base_sequence) == (epoch + 1, 0)
    assert offsets_in_log(leader) == [6]


def test_transactional_offsets_through_the_driver_survive_a_new_incarnation():
    """TxnOffsetCommit and TxnOffsetMarker are served by the driver (the actor's methods); the
    pending offset is in the partition, so the next incarnation loads it pending and commits
    it when the marker arrives there."""
    from kcoord.protocol.errors import ErrorCode
    from kcoord.protocol.txn import TxnOffsetCommitRequest, TxnOffsetMarkerRequest

    clock = ManualClock(1_700_000_000_000)
    leader = Leader(clock)
    first = driver_on(leader, clock)
    clock.run_until(clock.now + 1_000)
    got: list = []
    first.serve(TxnOffsetCommitRequest("tx", "g", 42, 0, topics={"t": {0: OffsetCommitPartition(17)}}), got.append)
    clock.run_until(clock.now + 1_000)
    assert got[0].topics == {"t": {0: ErrorCode.NONE}}
    first.close()
    second = driver_on(leader, clock)
    clock.run_until(clock.now + 1_000)
    assert second.loaded
    stable: list = []
    second.serve(OffsetFetchRequest("g", {"t": [0]}, require_stable=True), stable.append)
    clock.run_until(clock.now + 10)
    assert stable[0].offsets["t"][0].error_code == ErrorCode.UNSTABLE_OFFSET_COMMIT
    answered: list = []
    second.serve(TxnOffsetMarkerRequest(42, 1, 0, True, 0), answered.append)
    clock.run_until(clock.now + 1_000)
    assert answered[0].error_code == ErrorCode.NONE
    assert fetch_offset(second, clock, "g").offsets["t"][0].offset == 17


def test_transactional_requests_while_loading_or_stopped_get_their_own_error_responses():
    """Found by the groups simulation with --transactions: the driver answered a
    TxnOffsetCommit arriving while it loaded with the group protocol's error_response, which
    raised TypeError for a transaction message."""
    from kcoord.protocol.errors import ErrorCode
    from kcoord.protocol.txn import TxnOffsetCommitRequest, TxnOffsetCommitResponse, TxnOffsetMarkerRequest, TxnOffsetMarkerResponse

    clock = ManualClock(1_000_000)
    d = driver_on(Leader(clock), clock)  # not loaded yet: no time has passed
    got: list = []
    d.serve(TxnOffsetCommitRequest("tx", "g", 1, 0, topics={"t": {0: OffsetCommitPartition(1)}}), got.append)
    d.serve(TxnOffsetMarkerRequest(1, 1, 0, True, 0), got.append)
    assert isinstance(got[0], TxnOffsetCommitResponse) and got[0].topics == {"t": {0: ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}}
    assert isinstance(got[1], TxnOffsetMarkerResponse) and got[1].error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    d.close()
    d.serve(TxnOffsetMarkerRequest(1, 1, 0, True, 0), got.append)
    assert got[2].error_code == ErrorCode.NOT_COORDINATOR
