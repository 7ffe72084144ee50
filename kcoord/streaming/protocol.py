"""The micro-batch commit protocol of a streaming query, sans I/O (events in, actions out).

A query ``name`` consumes for the consumer group ``group`` in numbered micro-batches. Batch
``b`` is a transactional write (:mod:`kcoord.txn_write`) under the prefix ``{name}/{b}``:

1. **plan** -- per input partition, from the group's committed offset up to the end it sees
   now (at most ``max_records_per_trigger`` in all, shared out by lag as Spark's
   ``maxOffsetsPerTrigger`` is; :data:`DEFAULT_MAX_RECORDS_PER_TRIGGER` by default). A batch
   is planned only once the previous one committed: no read-ahead, so a slow transform
   slows the reads (back-pressure) and memory is bounded by one batch;
2. **run** -- the engine's tasks write the output, each task attempt in its own transaction
   left prepared;
3. **offsets** -- the driver prepares one more transaction of the prefix holding only the
   group's new offsets (AddOffsetsToTxn + TxnOffsetCommit; each offset's metadata names the
   query and ``b``): they become the group's committed offsets with its commit marker, so
   committing the decided transactions commits output and offsets together. (One offsets
   transaction rather than one per task: a transform may shuffle, so output tasks do not
   map to input partitions.)
4. **decide** -- the decision (the transactions to commit) is appended to the decision topic
   by the driver's own transactional producer (transactional id ``name``): the commit point;
5. **commit** -- every decided transaction is committed, the prefix's others aborted.

Fencing: a driver starts by fencing every older driver of the query (``init_transactions``
on the transactional id ``name``): a zombie's decision can then no longer be appended, and
a decision it appended before is visible to the new driver's lookup. A driver that fails
aborts only the transactions it created (never by prefix: a fenced zombie would abort its
successor's); only a driver holding the fence aborts by prefix, during recovery.

Recovery (every start): read the group's committed offsets; the last batch committed ``B``
is in their metadata. If ``B``'s decision is not marked done, finish it (its driver died
after the commit but before aborting the prefix's other transactions: a dead task
attempt's would stay open and hold back the LSO). Look up the decision of ``B + 1``: found (and not void) -> finish it
(idempotent), read the offsets again (they must now say ``B + 1``, else the group's offsets
were reset under the query: an error), and look again; not found -> abort the query's open
transactions (every batch's, but only those of older drivers: transaction ids carry their
driver's epoch, so a fenced driver still recovering cannot abort what its successor
writes) and plan ``B + 1`` from the committed offsets. (Every decided batch is finished by
then, so no open transaction of an older driver is still to be committed.) A decision whose transactions
were all aborted before it was appended (a zombie's, appended before the fence yet after
its successor's cleanup cannot happen; one appended by a driver whose prepared transactions
an operator aborted can) is *void*: treated as no decision.

The core holds no I/O: :class:`StreamCore` takes events (frozen dataclasses) and returns
actions; a driver (:mod:`kcoord.streaming.driver`) executes them. The unit model check
(tests/unit/test_stream_protocol.py) runs it against an in-memory world with crashes after
every step and a fenced second copy.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from ..client.types import OffsetRange

#: a topic partition: (topic, partition)
TP = tuple[str, int]

METADATA_PREFIX = "kcoord-stream"

#: The default bound on a micro-batch's records (``max_records_per_trigger``; None lifts it).
#: Spark's ``maxOffsetsPerTrigger`` has no default, so a backlog (a query started with
#: ``"earliest"`` on a full topic, or restarted after a day) becomes one batch; here a batch's
#: output is held until its transactions commit (Ray Data materializes it on the driver), so
#: an unbounded batch is unbounded memory and an ever longer transaction. Batches are planned
#: from the committed offsets after the previous batch commits, so nothing is read ahead: a
#: slow transform slows the reads, and a backlog drains in batches of at most this many.
DEFAULT_MAX_RECORDS_PER_TRIGGER = 100_000


class Phase(enum.Enum):
    FENCING = "fencing"  # fencing older drivers of the query
    RECOVERING = "recovering"  # reading the group's committed offsets
    LOOKING_UP = "looking_up"  # looking up the decision of the next batch
    CLOSING = "closing"  # finishing the cleanup of the last committed batch (aborts, DONE)
    FINISHING = "finishing"  # completing a decision found on recovery
    CLEANING = "cleaning"  # aborting the open transactions of an undecided batch
    IDLE = "idle"  # waiting for the next trigger
    PLANNING = "planning"  # reading the input's offsets
    RUNNING = "running"  # the tasks write and prepare
    OFFSETS = "offsets"  # the offsets transaction is prepared
    DECIDING = "deciding"  # the decision is appended
    COMMITTING = "committing"  # the decided transactions are committed
    ABORTING = "aborting"  # a failed batch's own transactions are aborted
    STOPPED = "stopped"
    FAILED = "failed"


# -- the plan ------------------------------------------------------------------------------
@dataclass(frozen=True)
class BatchPlan:
    """Batch ``batch`` of the query: one range per input partition (empty ranges included:
    their offsets are committed too, which makes a new partition's start durable)."""

    name: str
    batch: int
    ranges: tuple[OffsetRange, ...]

    @property
    def prefix(self) -> str:
        return batch_prefix(self.name, self.batch)

    @property
    def rows(self) -> int:
        return sum(r.size for r in self.ranges)

    @property
    def ends(self) -> dict[TP, int]:
        return {(r.topic, r.partition): r.end for r in self.ranges}

    @property
    def metadata(self) -> str:
        return offset_metadata(self.name, self.batch)


def attempt_tag(epoch: int, attempt: str) -> str:
    """A task attempt's name within its batch, tagged with its driver's epoch."""
    return f"e{int(epoch)}.{attempt}"


def epoch_of(transactional_id: str) -> int:
    """The driver epoch a transaction's id is tagged with (-1: none)."""
    attempt = transactional_id.rpartition("/")[2]
    head = attempt.split(".", 1)[0]
    return int(head[1:]) if head[:1] == "e" and head[1:].isdigit() else -1


def batch_prefix(name: str, batch: int) -> str:
    return f"{name}/{int(batch)}"


def offset_metadata(name: str, batch: int) -> str:
    """The metadata of the offsets batch ``batch`` of query ``name`` commits."""
    return f"{METADATA_PREFIX} {name} {int(batch)}"


def batch_of_metadata(name: str, metadata: str | None) -> int | None:
    """The batch an offset's metadata names for query ``name``, or None (another query's, a
    plain consumer's commit)."""
    parts = (metadata or "").split(" ")
    if len(parts) == 3 and parts[0] == METADATA_PREFIX and parts[1] == name and parts[2].isdigit():
        return int(parts[2])
    return None


def query_of_metadata(metadata: str | None) -> tuple[str, int] | None:
    """``(query name, batch)`` of an offset committed by a streaming query, or None."""
    parts = (metadata or "").split(" ")
    if len(parts) == 3 and parts[0] == METADATA_PREFIX and parts[2].isdigit():
        return parts[1], int(parts[2])
    return None


def last_batch(name: str, committed: dict[TP, tuple[int, str]]) -> int:
    """The last batch of ``name`` whose offsets are committed (-1: none)."""
    found = [b for _, m in committed.values() if (b := batch_of_metadata(name, m)) is not None]
    return max(found, default=-1)


def share_limit(lags: dict[TP, int], limit: int | None) -> dict[TP, int]:
    """Records to take per partition: all of its lag, or with ``limit`` at most ``limit`` in
    all, shared out in proportion to the lags (largest remainders first; Spark's
    ``maxOffsetsPerTrigger``)."""
    total = sum(lags.values())
    if limit is None or total <= limit:
        return dict(lags)
    take = {tp: lag * limit // total for tp, lag in lags.items()}
    rest = limit - sum(take.values())
    order = sorted(lags, key=lambda tp: (-((lags[tp] * limit) % total), tp))
    for tp in order[:rest]:
        take[tp] += 1
    return take


def plan_batch(
    name: str,
    batch: int,
    committed: dict[TP, int],
    earliest: dict[TP, int],
    latest: dict[TP, int],
    *,
    starting_offsets: str,
    fresh: bool,
    max_records: int | None,
) -> BatchPlan | None:
    """The plan of batch ``batch`` (None: nothing to do). Partitions without a committed
    offset start at ``starting_offsets`` (``"earliest"``/``"latest"``) when the group has
    no commit of the query yet (``fresh``), else at the earliest (a partition added later:
    Spark's rule). A committed offset below the log start (records deleted) starts at the
    log start; one above the end is an error (the topic was recreated?)."""
    starts: dict[TP, int] = {}
    for tp in sorted(latest):
        lo, hi = earliest[tp], latest[tp]
        if tp in committed:
            c = committed[tp]
            if c > hi:
                raise ValueError(f"{tp[0]}-{tp[1]}: the committed offset {c} is past the end of the log {hi} (was the topic recreated?)")
            starts[tp] = max(c, lo)
        else:
            starts[tp] = hi if (fresh and starting_offsets == "latest") else lo
    take = share_limit({tp: latest[tp] - s for tp, s in starts.items()}, max_records)
    ranges = tuple(OffsetRange(tp[0], tp[1], starts[tp], starts[tp] + take[tp]) for tp in sorted(starts))
    new_positions = any(tp not in committed or committed[tp] != starts[tp] for tp in starts)
    if not any(r.size for r in ranges) and not new_positions:
        return None
    return BatchPlan(name, batch, ranges)


# -- events (in) ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Start:
    now: float


@dataclass(frozen=True)
class Fenced:
    """The driver holds the query's fence (older drivers can no longer decide) at
    ``epoch``, which tags every transaction it creates (:func:`attempt_tag`)."""

    epoch: int


@dataclass(frozen=True)
class CommittedRead:
    """The group's committed offsets: ``{tp: (offset, metadata)}``."""

    offsets: dict[TP, tuple[int, str]]


@dataclass(frozen=True)
class DecisionFound:
    batch: int
    found: bool
    void: bool = False  # every decided transaction was aborted: no decision
    done: bool = False  # the decision's driver finished it (its prefix's others aborted)


@dataclass(frozen=True)
class Finished:
    batch: int


@dataclass(frozen=True)
class Cleaned:
    batch: int


@dataclass(frozen=True)
class Tick:
    now: float


@dataclass(frozen=True)
class OffsetsRead:
    """The input's partitions: log start and end (the LSO) each, read at ``now``."""

    earliest: dict[TP, int]
    latest: dict[TP, int]
    now: float


@dataclass(frozen=True)
class TasksPrepared:
    batch: int
    tasks: tuple[Any, ...]  # the engine's prepared transactions (kcoord.txn_write.PreparedTask)


@dataclass(frozen=True)
class OffsetsPrepared:
    batch: int
    task: Any


@dataclass(frozen=True)
class DecisionRecorded:
    batch: int


@dataclass(frozen=True)
class Failed:
    """An action failed with ``error``; ``created``: transactions the failed action
    prepared (its own, to abort)."""

    error: BaseException
    created: tuple[Any, ...] = ()
    refused: bool = False  # certainly not done (a fenced decision append), not an unknown outcome


@dataclass(frozen=True)
class StopRequested:
    pass


# -- actions (out) -------------------------------------------------------------------------
@dataclass(frozen=True)
class FenceOlder:
    name: str


@dataclass(frozen=True)
class ReadCommitted:
    group: str


@dataclass(frozen=True)
class LookUpDecision:
    batch: int
    prefix: str


@dataclass(frozen=True)
class FinishDecision:
    batch: int
    prefix: str


@dataclass(frozen=True)
class AbortOpen:
    """Abort every open transaction of every batch of query ``name`` (prefix
    ``{name}/<batch>``) created by a driver older than ``epoch`` (:func:`epoch_of`): a
    fenced driver that does not know it yet must not abort what its successor writes.
    Every batch, not only ``batch``: a fenced driver that died while aborting its own
    leaves them in a batch its successor has passed."""

    batch: int
    name: str
    epoch: int


@dataclass(frozen=True)
class ReadOffsets:
    pass


@dataclass(frozen=True)
class RunTasks:
    plan: BatchPlan


@dataclass(frozen=True)
class PrepareOffsets:
    plan: BatchPlan


@dataclass(frozen=True)
class RecordDecision:
    plan: BatchPlan
    tasks: tuple[Any, ...]


@dataclass(frozen=True)
class Commit:
    plan: BatchPlan
    tasks: tuple[Any, ...]


@dataclass(frozen=True)
class AbortOwn:
    """Abort these transactions (a failed batch's own), then the query stops."""

    batch: int
    tasks: tuple[Any, ...]


@dataclass(frozen=True)
class WaitUntil:
    at: float


@dataclass(frozen=True)
class BatchDone:
    """Batch committed: progress for ``lastProgress`` (``started``: when it was planned)."""

    plan: BatchPlan
    started: float


@dataclass(frozen=True)
class CaughtUp:
    """Nothing was left to read at ``at`` (``processAllAvailable``)."""

    at: float


@dataclass(frozen=True)
class Stop:
    error: BaseException | None = None


class StaleDecisionError(RuntimeError):
    """A decision of the query's next batch exists but the group's offsets do not follow it."""


# -- the core ------------------------------------------------------------------------------
@dataclass
class StreamCore:
    """One driver's run of a query (see the module doc). ``step(event)`` returns actions."""

    name: str
    group: str
    trigger_interval_s: float = 0.5
    starting_offsets: str = "latest"
    max_records_per_trigger: int | None = None
    phase: Phase = Phase.FENCING
    batch: int = 0  # the next batch (being recovered, planned or run)
    committed: dict[TP, int] = field(default_factory=dict)
    fresh: bool = True  # no batch of the query committed yet
    plan: BatchPlan | None = None
    tasks: tuple[Any, ...] = ()
    started: float = 0.0
    next_trigger: float = 0.0
    stop_requested: bool = False
    error: BaseException | None = None
    epoch: int = -1  # the fence this driver holds
    _finishing: int = -1  # the batch a recovery finished: the offsets must now name it

    def _stop(self, error: BaseException | None = None) -> list[Any]:
        self.phase = Phase.FAILED if error is not None else Phase.STOPPED
        self.error = error
        return [Stop(error)]

    def step(self, event: Any) -> list[Any]:
        p = self.phase
        if p in (Phase.STOPPED, Phase.FAILED):
            return []
        if isinstance(event, StopRequested):
            self.stop_requested = True
            return self._stop() if p is Phase.IDLE else []
        if isinstance(event, Failed):
            return self._failed(event)
        if isinstance(event, Start):
            self.phase = Phase.FENCING
            return [FenceOlder(self.name)]
        if isinstance(event, Fenced) and p is Phase.FENCING:
            self.epoch = event.epoch
            self.phase = Phase.RECOVERING
            return [ReadCommitted(self.group)]
        if isinstance(event, CommittedRead) and p is Phase.RECOVERING:
            b = last_batch(self.name, event.offsets)
            if self._finishing >= 0 and b < self._finishing:
                return self._stop(
                    StaleDecisionError(
                        f"query {self.name!r}: batch {self._finishing} is decided (in {batch_prefix(self.name, self._finishing)!r}) but the offsets "
                        f"of group {self.group!r} name batch {b}: the group's offsets were reset or deleted under the query; "
                        f"start it under a new name"
                    )
                )
            self.committed = {tp: o for tp, (o, _) in event.offsets.items()}
            self.fresh = b < 0
            self.batch = b + 1
            if b >= 0 and b != self._finishing:
                # Batch b's offsets are committed, but its driver may have died before
                # aborting the prefix's other transactions: finish it unless it says DONE.
                self.phase = Phase.CLOSING
                return [LookUpDecision(b, batch_prefix(self.name, b))]
            self.phase = Phase.LOOKING_UP
            return [LookUpDecision(self.batch, batch_prefix(self.name, self.batch))]
        if isinstance(event, DecisionFound) and p is Phase.CLOSING and event.batch == self.batch - 1:
            if event.found and not event.done:
                return [FinishDecision(event.batch, batch_prefix(self.name, event.batch))]
            self.phase = Phase.LOOKING_UP
            return [LookUpDecision(self.batch, batch_prefix(self.name, self.batch))]
        if isinstance(event, Finished) and p is Phase.CLOSING and event.batch == self.batch - 1:
            self.phase = Phase.LOOKING_UP
            return [LookUpDecision(self.batch, batch_prefix(self.name, self.batch))]
        if isinstance(event, DecisionFound) and p is Phase.LOOKING_UP and event.batch == self.batch:
            if event.found and not event.void:
                self.phase = Phase.FINISHING
                return [FinishDecision(self.batch, batch_prefix(self.name, self.batch))]
            self.phase = Phase.CLEANING
            return [AbortOpen(self.batch, self.name, self.epoch)]
        if isinstance(event, Finished) and event.batch == self.batch:
            if p is Phase.FINISHING:
                self._finishing = self.batch
                self.phase = Phase.RECOVERING
                return [ReadCommitted(self.group)]
            if p is Phase.COMMITTING:
                assert self.plan is not None
                done = BatchDone(self.plan, self.started)
                self.committed.update(self.plan.ends)
                self.fresh = False
                self.batch += 1
                self.plan, self.tasks = None, ()
                return [done] + self._idle()
        if isinstance(event, Cleaned) and p is Phase.CLEANING and event.batch == self.batch:
            self._finishing = -1
            return self._idle()
        if isinstance(event, Tick) and p is Phase.IDLE:
            if event.now < self.next_trigger:
                return [WaitUntil(self.next_trigger)]
            self.phase = Phase.PLANNING
            self.started = event.now
            return [ReadOffsets()]
        if isinstance(event, OffsetsRead) and p is Phase.PLANNING:
            try:
                plan = plan_batch(
                    self.name, self.batch, self.committed, event.earliest, event.latest,
                    starting_offsets=self.starting_offsets, fresh=self.fresh, max_records=self.max_records_per_trigger,
                )
            except ValueError as exc:
                return self._stop(exc)
            if plan is None:
                self.next_trigger = event.now + self.trigger_interval_s
                return [CaughtUp(event.now)] + self._idle()
            self.plan = plan
            self.phase = Phase.RUNNING
            return [RunTasks(plan)]
        if isinstance(event, TasksPrepared) and p is Phase.RUNNING and event.batch == self.batch:
            assert self.plan is not None
            self.tasks = tuple(event.tasks)
            self.phase = Phase.OFFSETS
            return [PrepareOffsets(self.plan)]
        if isinstance(event, OffsetsPrepared) and p is Phase.OFFSETS and event.batch == self.batch:
            assert self.plan is not None
            self.tasks = self.tasks + (event.task,)
            self.phase = Phase.DECIDING
            return [RecordDecision(self.plan, self.tasks)]
        if isinstance(event, DecisionRecorded) and p is Phase.DECIDING and event.batch == self.batch:
            assert self.plan is not None
            self.phase = Phase.COMMITTING
            return [Commit(self.plan, self.tasks)]
        raise ValueError(f"query {self.name!r}: event {type(event).__name__} in phase {p.name} (batch {self.batch})")

    def _idle(self) -> list[Any]:
        if self.stop_requested:
            return self._stop()
        self.phase = Phase.IDLE
        return [WaitUntil(self.next_trigger)]

    def _failed(self, event: Failed) -> list[Any]:
        # Before the decision: abort what this driver created (never by prefix: a fenced
        # driver would abort its successor's). From the decision on: never abort -- the
        # decision may be appended; a restart finishes it (or finds it void) -- unless the
        # append was refused (fenced): then nothing is decided and they are aborted too.
        if self.phase in (Phase.RUNNING, Phase.OFFSETS) or (self.phase is Phase.DECIDING and event.refused):
            own = self.tasks + tuple(event.created)
            self.phase = Phase.ABORTING
            self.error = event.error
            return [AbortOwn(self.batch, own)]
        if self.phase is Phase.ABORTING:  # the abort failed too: a restart cleans the prefix
            return self._stop(self.error)
        return self._stop(event.error)

    def aborted(self) -> list[Any]:
        """The driver aborted a failed batch's own transactions: the query stops."""
        return self._stop(self.error)


__all__ = [name for name in dir() if not name.startswith("_") and name not in ("annotations", "enum", "dataclass", "field", "Any")]
