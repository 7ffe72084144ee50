"""The driver of a streaming query: executes :class:`~kcoord.streaming.protocol.StreamCore`'s
actions against a kcoord cluster, for an engine (Spark, Ray Data) that runs a batch's tasks.

* the fence: a transactional producer of the query (transactional id
  ``kcoord-stream.<name>``) whose ``init_transactions`` fences older drivers; it appends a
  fence record to the decision topic, whose offset is this driver's epoch (offsets only
  grow, producer epochs wrap), and every decision is appended in one of its transactions;
* the group: the driver is the group's one member, statically (``group.instance.id`` =
  the query's name): a second copy of the query takes the membership over (the first's
  offsets commits are then refused, FENCED_INSTANCE_ID), a member of another name is an
  error; the offsets transaction carries the membership (KIP-447); a stopped query leaves
  the group (see :meth:`StreamDriver.close`). The join runs on a thread of its own from the
  start, overlapping fencing, recovery and the first batch's tasks (a new group's first
  join waits out ``group.initial.rebalance.delay.ms``); the membership is required --
  waited for, and checked for other members -- only before the first offsets are
  prepared (or earlier, at the first trigger after the join completed);
* decisions and commits: :class:`kcoord.txn_write.TransactionalWrite` under the batch's
  prefix ``{name}/{batch}``.

Engine-neutral: no Spark or Ray Data import.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol

import msgpack

from ..client.admin import Admin
from ..client.cluster import ClusterClient
from ..client.consumer import Consumer
from ..client.coordinator.txn_coordinators import TransactionCoordinators
from ..client.producer import Producer
from ..client.types import OffsetAndMetadata, TopicPartition
from ..protocol.errors import ErrorCode, KafkaError
from ..protocol.replication import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, READ_COMMITTED
from ..txn_write import COMMIT, DONE, OFFSETS_ONLY, Decision, PreparedTask, TransactionalWrite, task_transactional_id
from . import protocol as P

if TYPE_CHECKING:
    from .state import StateCounts

#: The task number of a batch's offsets transaction (output tasks are numbered from 0).
OFFSETS_TASK = 999_999
FENCE_ERRORS = (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.FENCED_INSTANCE_ID)
#: Transaction states that mean a decided transaction may still (or did) commit.
LIVE_STATES = ("Ongoing", "PrepareCommit", "CompleteCommit")


class StreamingQueryException(RuntimeError):
    """What stopped a query (PySpark's name); ``__cause__`` holds the original error."""


class Engine(Protocol):
    def run_tasks(self, plan: P.BatchPlan, attempt_tag: str) -> tuple[list[PreparedTask], int, StateCounts | None]:
        """Read the plan's ranges, transform, write each output task in a prepared
        transaction of ``plan.prefix`` whose attempt names start with ``attempt_tag``;
        returns the prepared transactions, the output rows and, for a stateful query whose
        state tasks ran, what they did to the state (None otherwise)."""


@dataclass
class Batch:
    """What a committed batch did, for progress."""

    plan: P.BatchPlan
    output_rows: int
    started: float
    ended: float
    latest: dict[P.TP, int]  # each input partition's end (read committed) when the batch was planned
    state: StateCounts | None = None  # what the state tasks did (a stateful query's batch with rows)
    durations_ms: dict[str, int] | None = None  # per phase, PySpark's ``durationMs`` keys (see PHASES)


#: Each batch action's phase in ``lastProgress["durationMs"]``: PySpark's keys where one
#: means the same step (the offsets of the source, the batch's tasks, the write-ahead
#: decision, the commit), ``prepareOffsets`` for the offsets transaction Spark has not.
PHASES = {P.ReadOffsets: "latestOffset", P.RunTasks: "addBatch", P.PrepareOffsets: "prepareOffsets", P.RecordDecision: "walCommit", P.Commit: "commitOffsets"}


def source_partitions(cluster: ClusterClient, topics: list[str] | None, pattern: str | None) -> list[TopicPartition]:
    """The partitions of ``topics`` or of every topic ``pattern`` (a regex) matches fully."""
    if pattern is not None:
        regex = re.compile(pattern)
        topics = [t for t in Admin(cluster).list_topics() if regex.fullmatch(t)]
    out = []
    for t in topics or []:
        out.extend(TopicPartition(t, p) for p in cluster.partitions_for(t))
    return sorted(out)


class StreamDriver:
    """Runs one query's core against the cluster (see the module doc); ``run()`` loops until
    stopped or failed. ``on_batch(Batch)`` and ``on_caught_up(t)`` report progress."""

    def __init__(
        self,
        cluster: ClusterClient,
        core: P.StreamCore,
        engine: Engine,
        *,
        topics: list[str] | None,
        pattern: str | None,
        sink: str,
        stop: threading.Event,
        on_batch: Callable[[Batch], None],
        on_caught_up: Callable[[float], None],
        timeout_s: float = 120.0,
    ) -> None:
        self.cluster = cluster
        self.core = core
        self.engine = engine
        self.topics = topics
        self.pattern = pattern
        self.sink = sink
        self.stop_event = stop
        self.on_batch = on_batch
        self.on_caught_up = on_caught_up
        self.timeout_s = timeout_s
        self.name = core.name
        self.group = core.group
        self._fence: Producer | None = None
        self._member: Consumer | None = None
        self._joiner: threading.Thread | None = None
        self._join_error: BaseException | None = None
        self._member_ready = False  # joined, and checked that no one else is a member
        self._closing = threading.Event()
        self._join_deadline = 0.0
        self._output_rows = 0
        self._state: StateCounts | None = None
        self._partitions: list[TopicPartition] = []
        self._latest: dict[P.TP, int] = {}
        self._durations: dict[str, int] = {}  # the running batch's phases, ms
        self.epoch = -1
        self.error: BaseException | None = None
        self._txn_coordinators = TransactionCoordinators(cluster)  # their count is asked once
        self._decision_partitions: int | None = None
        self._query_ids = re.compile(re.escape(self.name) + r"/\d+/\d+/[^/]+")  # every batch's transactions

    # -- the loop ---------------------------------------------------------------------------
    def run(self) -> None:
        queue: list[Any] = self.core.step(P.Start(time.monotonic()))
        try:
            while queue:
                action = queue.pop(0)
                if self.stop_event.is_set() and not self.core.stop_requested:
                    queue.extend(self.core.step(P.StopRequested()))
                phase = PHASES.get(type(action))
                t0 = time.monotonic()
                try:
                    event = self.execute(action)
                except KafkaError as exc:
                    refused = isinstance(action, P.RecordDecision) and exc.code in FENCE_ERRORS
                    event = P.Failed(self._explain(exc), tuple(getattr(exc, "created", ())), refused=refused)
                except Exception as exc:  # noqa: BLE001 - the user's transform, the engine: the query stops with it
                    event = P.Failed(exc, tuple(getattr(exc, "created", ())))
                if phase is not None:
                    if phase == "latestOffset":
                        self._durations = {}
                    self._durations[phase] = int((time.monotonic() - t0) * 1000)
                if event is not None:
                    queue.extend(self.core.step(event))
        finally:
            self.close()

    def _explain(self, exc: KafkaError) -> BaseException:
        if exc.code in FENCE_ERRORS:
            return KafkaError(exc.code, f"query {self.name!r} was fenced: another copy of it started (on group {self.group!r}); this one stops ({exc})")
        return exc

    def close(self) -> None:
        """Leave the group and close the fence producer. The member leaves even though it
        is static (LeaveGroup with its instance id, KIP-345's removal of a static member):
        a stopped query is gone, not restarting, so another query may take the group at
        once instead of being refused for the session timeout; a restart under the same
        name resumes from the committed offsets all the same. A member whose instance a
        newer copy of the query took over is refused (FENCED_INSTANCE_ID) and removes
        nothing. A killed driver cannot leave: its seat expires after the session timeout."""
        self._closing.set()
        if self._joiner is not None:
            self._joiner.join(self.timeout_s)  # the member is the joiner's until it returns
        if self._member is not None:
            try:
                self._member.close(leave_group=True)
            except Exception:  # noqa: BLE001 - a fenced member may fail to leave; the session timeout removes it
                pass
        if self._fence is not None:
            try:
                self._fence.close()
            except Exception:  # noqa: BLE001 - closing a fenced producer may fail; nothing to keep
                pass
        self._member = self._fence = None

    def _write(self, prefix: str) -> TransactionalWrite:
        return TransactionalWrite(
            self.cluster, prefix, topic=self.sink, timeout_s=self.timeout_s, batch=True, record=self._append,
            isolation_level="read_committed", strays=(self._query_ids, self._is_stray),
            coordinators=self._txn_coordinators, decision_partitions=self._decision_partitions,
        )

    def _is_stray(self, transactional_id: str) -> bool:
        """A transaction of an earlier batch than the one being finished, by this driver or
        an older one: every such batch is finished (committed, the rest aborted) before the
        next is planned, so one open now is a zombie attempt's. A newer driver's are not
        touched (it may be running a later batch)."""
        batch = transactional_id[len(self.name) + 1 :].split("/", 1)[0]
        return batch.isdigit() and int(batch) < self.core.batch and P.epoch_of(transactional_id) <= self.epoch

    def _append(self, tp: TopicPartition, key: bytes, value: bytes) -> None:
        """Append a record to the decision topic in a transaction of the fencing producer:
        refused (PRODUCER_FENCED) once a newer driver of the query started."""
        assert self._fence is not None
        self._fence.begin_transaction()
        try:
            self._fence.send(tp.topic, key=key, value=value, partition=tp.partition).get(timeout=self.timeout_s)
        except BaseException:
            try:
                self._fence.abort_transaction()
            except Exception:  # noqa: BLE001 - fenced: the transaction is aborted by the newer driver
                pass
            raise
        self._fence.commit_transaction()

    # -- actions ----------------------------------------------------------------------------
    def execute(self, action: Any) -> Any:
        core = self.core
        if isinstance(action, P.FenceOlder):
            self._start_join()
            self._fence = Producer(self.cluster, transactional_id=f"kcoord-stream.{self.name}", acks="all", linger_ms=0)
            self._fence.init_transactions()
            tw = self._write(P.batch_prefix(self.name, 0))
            tp = tw._decisions_partition()
            self._decision_partitions = tw.decision_partitions  # fixed: every later batch reuses it
            self._fence.begin_transaction()
            meta = self._fence.send(tp.topic, key=f"query:{self.name}".encode(), value=msgpack.packb({"fence": self.name}), partition=tp.partition).get(timeout=self.timeout_s)
            self._fence.commit_transaction()
            self.epoch = meta.offset
            return P.Fenced(self.epoch)
        if isinstance(action, P.ReadCommitted):
            return P.CommittedRead(self._committed())
        if isinstance(action, P.LookUpDecision):
            tw = self._write(action.prefix)
            d = tw.last_decision()
            if d is None:
                return P.DecisionFound(action.batch, False)
            void = d.state == COMMIT and not any(tw.transaction_state(t.transactional_id) in LIVE_STATES for t in d.tasks if t.written)
            return P.DecisionFound(action.batch, True, void, d.state == DONE)
        if isinstance(action, P.FinishDecision):
            tw = self._write(action.prefix)
            d = tw.last_decision()
            if d is None:
                raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"the decision of {action.prefix!r} disappeared")
            tw.finish(d)
            return P.Finished(action.batch)
        if isinstance(action, P.AbortOpen):
            tw = self._write(P.batch_prefix(self.name, action.batch))
            tw.abort_ids(t for t in tw.open_transactions(self._query_ids) if P.epoch_of(t) < action.epoch)
            return P.Cleaned(action.batch)
        if isinstance(action, P.WaitUntil):
            while True:
                self._keep_membership()
                now = time.monotonic()
                if now >= action.at or self.stop_event.is_set():
                    break
                self.stop_event.wait(min(0.25, action.at - now))
            if self.stop_event.is_set():
                return P.StopRequested()
            return P.Tick(time.monotonic())
        if isinstance(action, P.ReadOffsets):
            self._partitions = source_partitions(self.cluster, self.topics, self.pattern)
            now = time.monotonic()
            earliest = self.cluster.list_offsets(self._partitions, EARLIEST_TIMESTAMP)
            latest = self.cluster.list_offsets(self._partitions, LATEST_TIMESTAMP, isolation_level=READ_COMMITTED)
            self._latest = {(tp.topic, tp.partition): o for tp, o in latest.items()}
            return P.OffsetsRead({(tp.topic, tp.partition): o for tp, o in earliest.items()}, dict(self._latest), now)
        if isinstance(action, P.RunTasks):
            self._membership(wait=False)  # a group in use stops the query before its tasks run, if known by now
            tasks, self._output_rows, self._state = self.engine.run_tasks(action.plan, P.attempt_tag(self.epoch, ""))
            return P.TasksPrepared(action.plan.batch, tuple(tasks))
        if isinstance(action, P.PrepareOffsets):
            self._membership(wait=True)  # the offsets carry the membership (KIP-447)
            return P.OffsetsPrepared(action.plan.batch, self._prepare_offsets(action.plan))
        if isinstance(action, P.RecordDecision):
            self._write(action.plan.prefix)._record(Decision(action.plan.prefix, self.sink, COMMIT, tuple(sorted(action.tasks, key=lambda t: t.task))))
            return P.DecisionRecorded(action.plan.batch)
        if isinstance(action, P.Commit):
            decision = Decision(action.plan.prefix, self.sink, COMMIT, tuple(sorted(action.tasks, key=lambda t: t.task)))
            tw = self._write(action.plan.prefix)
            tw.complete(decision, prepared_here=True)  # this driver prepared them: no look-up
            tw.record_done(decision)
            return P.Finished(action.plan.batch)
        if isinstance(action, P.AbortOwn):
            # Its own: those it knows of, and any other of the batch tagged with its epoch
            # (a task attempt that prepared in a job that failed as a whole).
            try:
                tw = self._write(P.batch_prefix(self.name, action.batch))
                mine = {t.transactional_id for t in action.tasks} | {t for t in tw.open_transactions() if P.epoch_of(t) == self.epoch}
                tw.abort_ids(sorted(mine))
            finally:
                for a in core.aborted():
                    self.execute(a)
            return None
        if isinstance(action, P.BatchDone):
            self.on_batch(Batch(action.plan, self._output_rows, action.started, time.monotonic(), dict(self._latest), self._state, dict(self._durations)))
            return None
        if isinstance(action, P.CaughtUp):
            self.on_caught_up(action.at)
            return None
        if isinstance(action, P.Stop):
            self.error = action.error
            return None
        raise AssertionError(f"unknown action {action!r}")

    # -- the group --------------------------------------------------------------------------
    def _start_join(self) -> None:
        """Subscribe as the group's static member ``name`` (fencing an older copy's
        membership) and join on a thread of its own (:meth:`_join`); :meth:`_membership`
        collects the outcome."""
        topics = sorted({tp.topic for tp in source_partitions(self.cluster, self.topics, self.pattern)})
        member = Consumer(
            cluster=self.cluster, group_id=self.group, group_instance_id=self.name, enable_auto_commit=False,
            session_timeout_ms=30_000, max_poll_interval_ms=3_600_000,
        )
        self._member = member
        member.subscribe(topics=topics)
        self._join_deadline = time.monotonic() + self.timeout_s
        self._joiner = threading.Thread(target=self._join, name=f"kcoord-stream-join-{self.name}", daemon=True)
        self._joiner.start()

    def _join(self) -> None:
        """The joiner thread: poll the member until it is in a generation (assigned or not:
        another member may hold every partition), within ``timeout_s``. Only this thread
        touches the member until it returns; an error is kept for :meth:`_membership`."""
        member = self._member
        assert member is not None
        try:
            while member.group_metadata().generation_id < 0 and not self._closing.is_set():
                if time.monotonic() > self._join_deadline:
                    raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"query {self.name!r}: joining group {self.group!r} took over {self.timeout_s:.0f} s")
                self._poll_member(timeout_ms=200)
        except BaseException as exc:  # noqa: BLE001 - reported by _membership on the driver's thread
            self._join_error = exc

    def _membership(self, *, wait: bool) -> bool:
        """True once the member is joined and alone in the group. ``wait``: until the
        joiner returns (it gives up after ``timeout_s``); else False while it runs. Raises
        the join's error, or :class:`StreamingQueryException` if anyone else is a member
        (another query, a consumer), checked once, after the join."""
        if self._member_ready:
            return True
        joiner = self._joiner
        if joiner is None:
            return False
        if joiner.is_alive():
            if not wait:
                return False
            # The joiner checks its deadline between polls; a poll blocked in a rebalance
            # that never completes is given a margin, then the query stops.
            joiner.join(max(0.0, self._join_deadline - time.monotonic()) + 30.0)
            if joiner.is_alive():
                raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"query {self.name!r}: joining group {self.group!r} took over {self.timeout_s:.0f} s")
        if self._join_error is not None:
            raise self._join_error
        if self._member is None or self._member.group_metadata().generation_id < 0:
            raise StreamingQueryException(f"query {self.name!r} closed its membership of group {self.group!r} before it joined")
        others = [m for m in Admin(self.cluster).describe_group(self.group)["members"] if m.get("group_instance_id") != self.name]
        if others:
            names = ", ".join(f"{m['member_id']} (instance {m.get('group_instance_id')})" for m in others)
            raise StreamingQueryException(
                f"group {self.group!r} is in use by other members: {names}. A streaming query must be its group's only member "
                f"(another running query or consumer would read the same records); stop them or use another group_id"
            )
        self._member_ready = True
        return True

    def _keep_membership(self) -> None:
        """Heartbeat-side duties of the member between batches (rebalances, liveness), once
        the joiner handed it over; checks the membership as soon as the join completed."""
        if self._membership(wait=False):
            self._poll_member(timeout_ms=0)

    def _poll_member(self, timeout_ms: int) -> None:
        member = self._member
        if member is None:
            return
        member.pause(*member.assignment())  # the engine reads; the member only holds the group
        member.poll(timeout_ms=timeout_ms)
        member.pause(*member.assignment())

    def _committed(self) -> dict[P.TP, tuple[int, str]]:
        from ..spark.offsets import group_offsets

        try:
            found = group_offsets(self.cluster, self.group)
        except KafkaError as exc:
            if exc.code == ErrorCode.GROUP_ID_NOT_FOUND:
                return {}
            raise
        return {(t, p): om for t, parts in found.items() for p, om in parts.items()}

    def _prepare_offsets(self, plan: P.BatchPlan) -> PreparedTask:
        tid = task_transactional_id(plan.prefix, OFFSETS_TASK, P.attempt_tag(self.epoch, "offsets"))
        offsets = {TopicPartition(r.topic, r.partition): OffsetAndMetadata(r.end, plan.metadata) for r in plan.ranges}
        assert self._member is not None
        producer = Producer(self.cluster, transactional_id=tid, enable_two_phase_commit=True, acks="all")
        try:
            producer.init_transactions()
            producer.begin_transaction()
            try:
                producer.send_offsets_to_transaction(offsets, self._member.group_metadata())
                state = producer.prepare_transaction()
            except BaseException as exc:
                try:
                    producer.abort_transaction()
                except Exception:  # noqa: BLE001 - a newer driver's recovery aborts what is left
                    pass
                raise exc
        finally:
            producer.close(timeout=30)
        return PreparedTask(OFFSETS_TASK, tid, state.producer_id, state.epoch, {OFFSETS_ONLY: 0})


__all__ = ["Batch", "Engine", "OFFSETS_TASK", "StreamDriver", "StreamingQueryException", "source_partitions"]
