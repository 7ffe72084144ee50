"""Model check of the streaming commit protocol (kcoord.streaming.protocol), no Ray.

The core runs against an in-memory world with the semantics the driver relies on:
transactions open -> prepared -> committed/aborted (records and group offsets visible only
when committed), ListTransactions by prefix, a decision topic whose appends are fenced by
the query's driver epoch, and input partitions that grow while the query runs. Every
action the driver executes is cut into its world mutations; between any two of them a
driver may crash (its work is dropped, a new driver starts) or a second copy of the query
may start while the first keeps running (the first is fenced). Every run ends with a
driver that runs alone until it is caught up, then the invariants: each input record's
output exactly once, in input order per partition; the group's offsets at the input's
end; no transaction left open.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Iterator

import pytest

from kcoord.streaming import protocol as P

NAME, GROUP = "q", "g"
PARTS = (("in", 0), ("in", 1))


class FencedError(Exception):
    pass


class AbortedByOthers(Exception):
    pass


@dataclass
class Txn:
    state: str = "open"  # open, prepared, committed, aborted
    records: list = field(default_factory=list)  # (out partition, value)
    offsets: dict | None = None


@dataclass
class World:
    inputs: dict = field(default_factory=lambda: {tp: [] for tp in PARTS})
    txns: dict = field(default_factory=dict)
    decisions: list = field(default_factory=list)  # (prefix, state, tids)
    epoch: int = 0
    group: dict = field(default_factory=dict)  # tp -> (offset, metadata)
    output: dict = field(default_factory=lambda: {0: [], 1: []})
    arrivals: list = field(default_factory=list)  # what arrives later: (tp, value)
    next_value: int = 0

    def arrive(self, n: int) -> None:
        for _ in range(n):
            tp = PARTS[self.next_value % 2]
            self.inputs[tp].append(f"{tp[1]}-{self.next_value}")
            self.next_value += 1

    def last_decision(self, prefix: str) -> tuple | None:
        found = [d for d in self.decisions if d[0] == prefix]
        return found[-1] if found else None

    def commit(self, tid: str) -> None:
        t = self.txns[tid]
        if t.state == "committed":
            return
        if t.state != "prepared":
            raise AbortedByOthers(f"{tid} is {t.state}")
        t.state = "committed"
        for p, v in t.records:
            self.output[p].append(v)
        if t.offsets:
            self.group.update(t.offsets)

    def abort(self, tid: str) -> None:
        t = self.txns[tid]
        if t.state in ("open", "prepared"):
            t.state = "aborted"

    def open_of(self, prefix: str) -> list[str]:
        return sorted(tid for tid, t in self.txns.items() if t.state in ("open", "prepared") and tid.startswith(prefix + "/"))


class Driver:
    """The model's driver: executes the core's actions as generators of world steps."""

    serial = 0

    def __init__(self, world: World, rng: random.Random, max_records: int | None) -> None:
        Driver.serial += 1
        self.id = Driver.serial
        self.world = world
        self.rng = rng
        self.core = P.StreamCore(NAME, GROUP, trigger_interval_s=1.0, starting_offsets="earliest", max_records_per_trigger=max_records)
        self.epoch = -1
        self.now = 0.0
        self.queue: list = list(self.core.step(P.Start(0.0)))
        self.current: Iterator | None = None
        self.stopped = False
        self.caught_up = False
        self.error: BaseException | None = None

    # one world mutation per call
    def step(self) -> None:
        if self.current is None:
            if not self.queue:
                self.stopped = True
                return
            self.current = self.run(self.queue.pop(0))
        try:
            next(self.current)
        except StopIteration as done:
            self.current = None
            event = done.value
            if event is not None:
                self.queue.extend(self.core.step(event))
        except (FencedError, AbortedByOthers) as exc:
            self.current = None
            self.queue = list(self.core.step(P.Failed(exc, self._created, refused=isinstance(exc, FencedError))))

    _created: tuple = ()

    def run(self, action: Any) -> Iterator[None]:
        w = self.world
        yield
        if isinstance(action, P.FenceOlder):
            w.epoch += 1
            self.epoch = w.epoch
            return P.Fenced(self.epoch)
        if isinstance(action, P.ReadCommitted):
            return P.CommittedRead(dict(w.group))
        if isinstance(action, P.LookUpDecision):
            d = w.last_decision(action.prefix)
            void = d is not None and d[1] == "commit" and all(w.txns[t].state == "aborted" for t in d[2])
            return P.DecisionFound(action.batch, d is not None, void, d is not None and d[1] == "done")
        if isinstance(action, (P.FinishDecision, P.Commit)):
            prefix = action.prefix if isinstance(action, P.FinishDecision) else action.plan.prefix
            batch = action.batch if isinstance(action, P.FinishDecision) else action.plan.batch
            d = w.last_decision(prefix)
            for tid in d[2]:
                w.commit(tid)
                yield
            for tid in w.open_of(prefix):
                if tid not in d[2]:
                    w.abort(tid)
                    yield
            if d[1] != "done":
                self._record(prefix, "done", d[2])
            return P.Finished(batch)
        if isinstance(action, P.AbortOpen):
            for tid in w.open_of(action.name):
                if P.epoch_of(tid) < action.epoch:
                    w.abort(tid)
                    yield
            return P.Cleaned(action.batch)
        if isinstance(action, P.ReadOffsets):
            return P.OffsetsRead({tp: 0 for tp in PARTS}, {tp: len(w.inputs[tp]) for tp in PARTS}, self.now)
        if isinstance(action, P.RunTasks):
            self._created = ()
            reported = []
            for i, r in enumerate(action.plan.ranges):
                if not r.size:
                    continue
                attempts = 2 if self.rng.random() < 0.2 else 1  # a failed attempt leaves its transaction open
                for a in range(attempts):
                    tid = f"{action.plan.prefix}/{i}/{P.attempt_tag(self.epoch, f'{self.id}.{a}')}"
                    w.txns[tid] = Txn()
                    self._created += (tid,)
                    yield
                    for v in w.inputs[(r.topic, r.partition)][r.start : r.end]:
                        if w.txns[tid].state != "open":
                            raise AbortedByOthers(tid)
                        w.txns[tid].records.append((r.partition, v + "!"))
                    yield
                    if a < attempts - 1:
                        continue  # this attempt "died" after writing
                    if w.txns[tid].state != "open":
                        raise AbortedByOthers(tid)
                    w.txns[tid].state = "prepared"
                    reported.append(tid)
                    yield
            return P.TasksPrepared(action.plan.batch, tuple(reported))
        if isinstance(action, P.PrepareOffsets):
            tid = f"{action.plan.prefix}/999999/{P.attempt_tag(self.epoch, str(self.id))}"
            w.txns[tid] = Txn(offsets={tp: (o, action.plan.metadata) for tp, o in action.plan.ends.items()})
            self._created += (tid,)
            yield
            if w.txns[tid].state != "open":
                raise AbortedByOthers(tid)
            w.txns[tid].state = "prepared"
            return P.OffsetsPrepared(action.plan.batch, tid)
        if isinstance(action, P.RecordDecision):
            self._record(action.plan.prefix, "commit", action.tasks)
            return P.DecisionRecorded(action.plan.batch)
        if isinstance(action, P.AbortOwn):
            for tid in action.tasks:
                w.abort(tid)
                yield
            self.queue.extend(self.core.aborted())
            return None
        if isinstance(action, P.WaitUntil):
            self.now = max(self.now, action.at)
            return P.Tick(self.now)
        if isinstance(action, P.BatchDone):
            return None
        if isinstance(action, P.CaughtUp):
            self.caught_up = True
            self.queue.append(P.StopRequested())
            return None
        if isinstance(action, P.Stop):
            self.error = action.error
            self.stopped = True
            return None
        if isinstance(action, P.StopRequested):
            return action
        raise AssertionError(action)

    def _record(self, prefix: str, state: str, tids: tuple) -> None:
        if self.epoch < self.world.epoch:
            raise FencedError(f"driver {self.id} (epoch {self.epoch}) is fenced by epoch {self.world.epoch}")
        self.world.decisions.append((prefix, state, tuple(tids)))


def explore(seed: int, *, crashes: int, copies: int, max_records: int | None) -> World:
    rng = random.Random(seed)
    w = World()
    w.arrive(rng.randrange(0, 6))
    pending = rng.randrange(0, 8)
    drivers = [Driver(w, rng, max_records)]
    for _ in range(4000):
        live = [d for d in drivers if not d.stopped]
        if not live:
            break
        if pending and rng.random() < 0.05:
            w.arrive(1)
            pending -= 1
        roll = rng.random()
        if crashes and roll < 0.03:
            crashes -= 1
            victim = rng.choice(live)
            victim.stopped = True  # SIGKILL: its generators are dropped
            drivers.append(Driver(w, rng, max_records))
            continue
        if copies and roll < 0.06:
            copies -= 1
            drivers.append(Driver(w, rng, max_records))  # a second copy; the first keeps running
            continue
        rng.choice(live).step()
    w.arrive(pending)
    # The last driver runs alone until it is caught up (and stops).
    final = Driver(w, rng, max_records)
    for _ in range(20000):
        if final.stopped:
            break
        final.step()
    assert final.stopped and final.error is None, final.error
    return w


def check(w: World) -> None:
    for p in (0, 1):
        expected = [v + "!" for v in w.inputs[("in", p)]]
        assert w.output[p] == expected, f"partition {p}: output {w.output[p]} != {expected}"
    assert {tp: o for tp, (o, _) in w.group.items()} == {tp: len(w.inputs[tp]) for tp in PARTS}
    assert [t for t, x in w.txns.items() if x.state in ("open", "prepared")] == []


@pytest.mark.parametrize("max_records", [None, 3])
def test_model_single_driver_with_crashes(max_records):
    for seed in range(200):
        check(explore(seed, crashes=3, copies=0, max_records=max_records))


@pytest.mark.parametrize("max_records", [None, 2])
def test_model_fenced_second_copy_with_crashes(max_records):
    fenced = 0
    for seed in range(200):
        w = explore(seed, crashes=1, copies=2, max_records=max_records)
        check(w)
        fenced += w.epoch > 2
    assert fenced > 30  # the copies did start while others ran


def test_crash_after_every_step_of_a_run():
    """Deterministic: one driver killed after its k-th world step, for every k up to the
    end of its run, then a new one."""
    steps = 0
    w = World()
    w.arrive(5)
    d = Driver(w, random.Random(0), 2)
    while not d.stopped and steps < 10000:
        d.step()
        steps += 1
        if d.caught_up:
            break
    assert w.output[0] and w.output[1]
    for k in range(steps):
        w = World()
        w.arrive(5)
        rng = random.Random(k)
        d = Driver(w, rng, 2)
        for _ in range(k):
            if d.stopped:
                break
            d.step()
        w.arrive(3)
        final = Driver(w, rng, 2)
        while not final.stopped:
            final.step()
        assert final.error is None
        check(w)


def test_a_void_decision_is_no_decision():
    """A decision whose transactions were all aborted before it was appended (here: by an
    operator) is ignored by recovery, which replans the batch."""
    w = World()
    w.arrive(4)
    d = Driver(w, random.Random(1), None)
    while not isinstance(d.queue[0] if d.queue else None, P.RecordDecision) or d.current is not None:
        d.step()
    for tid in w.open_of(P.batch_prefix(NAME, 0)):
        w.abort(tid)
    d.step()  # appends the decision naming aborted transactions
    d.step()
    assert w.last_decision(P.batch_prefix(NAME, 0))[1] == "commit"
    final = Driver(w, random.Random(2), None)
    while not final.stopped:
        final.step()
    check(w)


def test_plan_shares_the_limit_by_lag_and_commits_new_partitions_positions():
    a, b = ("t", 0), ("t", 1)
    plan = P.plan_batch("q", 0, {}, {a: 0, b: 0}, {a: 90, b: 10}, starting_offsets="earliest", fresh=True, max_records=10)
    assert [(r.start, r.end) for r in plan.ranges] == [(0, 9), (0, 1)]
    # latest on a fresh group: an empty batch that commits the current ends
    plan = P.plan_batch("q", 0, {}, {a: 5, b: 0}, {a: 90, b: 10}, starting_offsets="latest", fresh=True, max_records=None)
    assert plan.rows == 0 and plan.ends == {a: 90, b: 10}
    assert P.plan_batch("q", 1, {a: 90, b: 10}, {a: 5, b: 0}, {a: 90, b: 10}, starting_offsets="latest", fresh=False, max_records=None) is None
    # a partition added later starts at the earliest
    plan = P.plan_batch("q", 1, {a: 90}, {a: 5, b: 3}, {a: 90, b: 10}, starting_offsets="latest", fresh=False, max_records=None)
    assert plan.ends == {a: 90, b: 10} and plan.rows == 7
    with pytest.raises(ValueError, match="past the end"):
        P.plan_batch("q", 1, {a: 95}, {a: 0}, {a: 90}, starting_offsets="latest", fresh=False, max_records=None)


def test_offset_metadata_names_query_and_batch():
    assert P.batch_of_metadata("q", P.offset_metadata("q", 12)) == 12
    assert P.batch_of_metadata("other", P.offset_metadata("q", 12)) is None
    assert P.last_batch("q", {("t", 0): (5, P.offset_metadata("q", 3)), ("t", 1): (1, "")}) == 3


def test_a_stale_decision_after_a_group_reset_is_an_error():
    w = World()
    w.arrive(4)
    d = Driver(w, random.Random(0), None)
    while not d.caught_up:
        d.step()
    w.group.clear()  # an operator deleted the group's offsets
    final = Driver(w, random.Random(1), None)
    while not final.stopped:
        final.step()
    assert isinstance(final.error, P.StaleDecisionError) and "new name" in str(final.error)


def test_a_backlog_drains_in_bounded_batches_each_planned_after_the_previous_commit():
    """Back-pressure: with 10 records waiting and at most 3 a batch, every batch holds at
    most 3, and the core never reads the offsets (plans) while a batch is between its
    tasks and its commit -- records arriving during a slow batch wait for the next plan."""
    w = World()
    w.arrive(10)
    d = Driver(w, random.Random(0), 3)
    trace: list = []
    run = d.run

    def traced(action):
        trace.append(action)
        if isinstance(action, P.RunTasks) and w.next_value < 14:
            w.arrive(1)  # a record arrives while the batch runs
        return run(action)

    d.run = traced
    while not d.stopped:
        d.step()
    assert d.error is None
    check(w)
    sizes = [a.plan.rows for a in trace if isinstance(a, P.RunTasks)]
    assert sizes[:4] == [3, 3, 3, 3] and max(sizes) <= 3 and sum(sizes) == 14
    kinds = [type(a).__name__ for a in trace]
    for i, kind in enumerate(kinds):
        if kind == "RunTasks":
            after = kinds[i + 1 :]
            assert "BatchDone" in after and ("ReadOffsets" not in after or after.index("BatchDone") < after.index("ReadOffsets"))


def test_the_default_bounds_a_batch():
    import inspect

    from kcoord.spark.stream import stream

    assert P.DEFAULT_MAX_RECORDS_PER_TRIGGER == 100_000
    assert inspect.signature(stream).parameters["max_records_per_trigger"].default == P.DEFAULT_MAX_RECORDS_PER_TRIGGER
    plan = P.plan_batch("q", 0, {}, {("t", 0): 0}, {("t", 0): 250_000}, starting_offsets="earliest", fresh=True, max_records=P.DEFAULT_MAX_RECORDS_PER_TRIGGER)
    assert plan.rows == 100_000


def test_stream_metrics_count_batches_and_keep_the_last_lag():
    from kcoord.streaming.metrics import StreamMetrics, lag_of

    a, b = ("t", 0), ("t", 1)
    assert lag_of({a: 10, b: 4}, {a: 25, b: 4}) == {a: 15, b: 0}
    m = StreamMetrics()
    m.record(0, 14, 7, 0.5, 28.0, {a: 15, b: 0})
    m.record(1, 15, 15, 0.25, 60.0, {a: 0, b: 0})
    snap = m.snapshot()
    assert (snap["batches"], snap["input_rows"], snap["output_rows"], snap["last_batch_id"]) == (2, 29, 22, 1)
    assert snap["processed_rows_per_second"] == 60.0 and snap["batch_duration_ms"] == 250.0 and snap["lag_total"] == 0


def test_a_streaming_querys_offsets_name_it():
    assert P.query_of_metadata(P.offset_metadata("etl", 7)) == ("etl", 7)
    assert P.query_of_metadata("") is None and P.query_of_metadata("kcoord-stream etl x") is None and P.query_of_metadata(None) is None
