"""Transactional writes from many tasks, committed once per task by a driver (KIP-939).

A write is named by a ``transactional_id`` prefix and runs as tasks, one per input
partition (a Spark partition, a Ray Data block). Every *attempt* of task ``i`` writes its
rows in its own transaction under the transactional id ``{prefix}/{i}/{attempt}``, leaves it
prepared (two-phase: no timeout, it outlives the task's process) and returns a
:class:`PreparedTask`. Attempts never fence one another, so a retried, speculative or
killed attempt cannot undo the one the engine reported. The driver then
(:meth:`TransactionalWrite.commit`):

1. appends the *decision* -- the one prepared transaction per task it will commit -- to the
   compacted topic :data:`DECISIONS_TOPIC` under the key ``prefix`` (acks=all): the commit
   point;
2. commits each chosen transaction through a new instance of its transactional id
   (``init_transactions(keep_prepared_txn=True)`` then ``complete_transaction``) and waits
   until its markers are written (CompleteCommit), so that the output is readable
   (read_committed) once the write returns;
3. aborts every other transaction of the prefix still open (attempts that failed after
   writing, lost to another attempt, or were killed), found with ListTransactions on every
   transaction coordinator;
4. appends that the write is done.

A driver starting a write first looks its prefix up (:meth:`TransactionalWrite.start`): a
decision found means the write already happened -- steps 2-4 are finished (a driver that
died after step 1) and nothing is written again; no decision means the transactions of the
prefix still open belong to a run that died before deciding: they are aborted and the
write runs. So a prefix names one logical write: run it again under the same prefix and it
is written exactly once; a new write needs a new prefix (the streaming engine uses one per
micro-batch).

Engine-neutral (no Spark or Ray Data import): :mod:`kcoord.spark` and
:mod:`kcoord.ray_data` run :func:`prepare_task` in their tasks and the rest on the driver.
"""

from __future__ import annotations

import asyncio
import functools
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, TypeVar

import msgpack

from .client.cluster import ClusterClient
from .client.coordinator.txn_coordinators import TransactionCoordinators
from .client.producer import Producer
from .client.producer.partitioner import partition_for_key
from .client.producer.transaction_manager import PreparedTxnState
from .client.types import TopicPartition
from .protocol import names
from .protocol.errors import ErrorCode, KafkaError
from .protocol.txn import DescribeTransactionsRequest, DescribeTransactionsResponse, ListTransactionsRequest, ListTransactionsResponse

T = TypeVar("T")

#: Where drivers record their decisions: compacted, one key per write prefix.
DECISIONS_TOPIC = names.TXN_WRITE_DECISIONS_TOPIC  # its partition count cannot change (names.FIXED_PARTITION_TOPICS)
#: Its partitions when a driver creates it (a key's records are read from its partition's
#: start: compaction keeps that to about one record per prefix).
DECISION_PARTITIONS = 1
DECISION_VERSION = 1

#: ``PreparedTask.written`` of a transaction that holds group offsets and no records
#: (``{OFFSETS_ONLY: 0}``): the driver commits it although it wrote nothing.
OFFSETS_ONLY = -1
#: ``PreparedTask.written`` of a transaction that wrote no record to the topic but some to
#: a streaming query's state changelog (``{STATE_ONLY: 0}``): committed like OFFSETS_ONLY.
STATE_ONLY = -2

COMMIT = "commit"  # decided: these transactions are to be committed
DONE = "done"  # committed, and the others of the prefix aborted


class TxnWriteError(KafkaError):
    """A transactional write cannot be completed as decided (a prepared transaction the
    decision names was aborted by someone else, e.g. an operator)."""


@dataclass(frozen=True)
class PreparedTask:
    """What a task attempt returns: its prepared transaction (``transactional_id``, and the
    producer id and epoch its records carry) and the records it wrote per topic partition."""

    task: int
    transactional_id: str
    producer_id: int
    epoch: int
    written: dict[int, int] = field(default_factory=dict)

    @property
    def records(self) -> int:
        return sum(self.written.values())

    def to_list(self) -> list:
        return [self.task, self.transactional_id, self.producer_id, self.epoch, {int(p): int(n) for p, n in self.written.items()}]

    @classmethod
    def from_list(cls, item: list) -> "PreparedTask":
        task, tid, pid, epoch, written = item
        return cls(int(task), str(tid), int(pid), int(epoch), {int(p): int(n) for p, n in written.items()})


def prepared_from_rows(rows: Iterable[Any]) -> dict[int, PreparedTask]:
    """The engines' task results -- one row per (task, partition written; -1 for a task that
    wrote nothing) with ``task``, ``transactional_id``, ``producer_id``, ``producer_epoch``,
    ``partition`` and ``records`` -- gathered into one :class:`PreparedTask` per task."""
    prepared: dict[int, PreparedTask] = {}
    for r in rows:
        p = prepared.get(r.task) or PreparedTask(r.task, r.transactional_id, r.producer_id, r.producer_epoch, {})
        if r.partition >= 0:
            p.written[r.partition] = r.records
        prepared[r.task] = p
    return prepared


@dataclass(frozen=True)
class Decision:
    """A write's record in :data:`DECISIONS_TOPIC`: the transactions chosen, one per task,
    the topic written, and whether the driver finished (``state`` DONE) or only decided."""

    prefix: str
    topic: str
    state: str
    tasks: tuple[PreparedTask, ...]

    def encode(self) -> bytes:
        return msgpack.packb({"v": DECISION_VERSION, "state": self.state, "topic": self.topic, "tasks": [t.to_list() for t in self.tasks]})

    @classmethod
    def decode(cls, prefix: str, value: bytes) -> "Decision":
        try:
            m = msgpack.unpackb(value, strict_map_key=False)
            if m.get("v") != DECISION_VERSION:
                raise ValueError(f"version {m.get('v')!r}")
            return cls(prefix, m["topic"], m["state"], tuple(PreparedTask.from_list(t) for t in m["tasks"]))
        except Exception as exc:  # noqa: BLE001 - any malformed record is the same error
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"{DECISIONS_TOPIC}: the record of write {prefix!r} cannot be read: {exc}") from None

    def with_state(self, state: str) -> "Decision":
        return Decision(self.prefix, self.topic, state, self.tasks)


def stable_ends(cluster: ClusterClient, partitions: list[TopicPartition], timeout_s: float = 120.0) -> dict[TopicPartition, int]:
    """Each partition's high watermark as of now, returned once its last stable offset has
    reached it: every transaction with a record below it is decided and its marker written,
    so a read_committed read up to it sees all it will ever see there. (The LSO alone is
    not enough: an open transaction holds it back, and what a read up to it misses may
    commit later.) A REQUEST_TIMED_OUT KafkaError after ``timeout_s``."""
    from .protocol.replication import LATEST_TIMESTAMP, READ_COMMITTED

    if not partitions:
        return {}
    timeout_ms = int(timeout_s * 1000)
    hw = cluster.list_offsets(partitions, LATEST_TIMESTAMP, timeout_ms=timeout_ms)
    for _ in _polls(timeout_s):  # a marker is a round trip away
        lso = cluster.list_offsets(partitions, LATEST_TIMESTAMP, timeout_ms=timeout_ms, isolation_level=READ_COMMITTED)
        behind = {tp: (lso[tp], hw[tp]) for tp in partitions if lso[tp] < hw[tp]}
        if not behind:
            return hw
    tp, (low, high) = next(iter(behind.items()))
    raise KafkaError(
        ErrorCode.REQUEST_TIMED_OUT,
        f"{tp.topic}-{tp.partition}: the last stable offset stayed at {low}, below {high}, for {timeout_s:.0f} s "
        f"(a transaction open there: `kcoord transactions list`)",
    )


def _polls(timeout_s: float) -> Iterator[None]:
    """Yield at once, then after each pause while the next pause ends within ``timeout_s``:
    a poll of what the transaction coordinator is completing. Every 5 ms for the first
    150 ms (markers take tens of ms, and a poll costs far less than an overshoot would),
    then doubling to 200 ms."""
    start = time.monotonic()
    deadline = start + timeout_s
    pause = 0.005
    yield
    while time.monotonic() + pause <= deadline:
        time.sleep(pause)
        if time.monotonic() - start > 0.15:
            pause = min(pause * 2, 0.2)
        yield


def check_prefix(prefix: Any, *, batch: bool = False) -> str:
    """A write's ``transactional_id`` prefix: a non-empty str without ``/`` (the separator
    of the tasks' transactional ids); ``batch``: a streaming query's batch prefix
    ``{name}/{batch}`` (:mod:`kcoord.streaming`), whose task ids cannot be taken for a
    plain write's (those have three parts, these four)."""
    if not isinstance(prefix, str) or not prefix.strip():
        raise ValueError(f"transactional_id must be a non-empty string (the prefix of the tasks' transactional ids), got {prefix!r}")
    if batch:
        name, _, number = prefix.partition("/")
        if not name or "/" in name or not number.isdigit():
            raise ValueError(f"a streaming batch's prefix is '<query name>/<batch>', got {prefix!r}")
        return prefix
    if "/" in prefix:
        raise ValueError(f"transactional_id {prefix!r} must not contain '/': the tasks' ids are '<transactional_id>/<task>/<attempt>'")
    return prefix


def task_transactional_id(prefix: str, task: int, attempt: str) -> str:
    """The transactional id of one attempt of task ``task``: ``{prefix}/{task}/{attempt}``
    (``attempt``: unique per attempt, e.g. Spark's ``"{attempt number}.{task attempt id}"``)."""
    if "/" in attempt:
        raise ValueError(f"attempt {attempt!r} must not contain '/'")
    return f"{prefix}/{int(task)}/{attempt}"


def prepare_task(
    cluster: ClusterClient, transactional_id: str, task: int, write: Callable[[Producer], T], **producer_config: Any
) -> tuple[PreparedTask, T]:
    """Run in a task: ``write(producer)`` inside a new transaction of ``transactional_id``
    (two-phase; fencing any older instance of that id), then prepare it. ``write`` returns
    ``{partition: [records, ...]}`` (what it wrote; the first number is the records) or
    ``send_batch``'s ``{partition: PartitionWrite}``; it is returned too. If ``write`` raises, the
    transaction is aborted. The transaction is left prepared for the driver."""
    producer = Producer(cluster, transactional_id=transactional_id, enable_two_phase_commit=True, acks="all", **producer_config)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        try:
            result = write(producer)
            state = producer.prepare_transaction()
        except BaseException:
            try:
                producer.abort_transaction()
            except Exception:  # noqa: BLE001 - the driver aborts what is left open
                pass
            raise
    finally:
        producer.close(timeout=30)
    written = {int(p): _records_of(v) for p, v in dict(result).items()}  # type: ignore[call-overload]
    return PreparedTask(task, transactional_id, state.producer_id, state.epoch, written), result


def _records_of(v: Any) -> int:
    """Records written to one partition: a PartitionWrite (``send_batch``), a list whose first
    item is the count (``produce_batches``), or the count."""
    if "count" in getattr(v, "_fields", ()):
        return int(v.count)
    return int(v[0] if isinstance(v, (list, tuple)) else v)


class TransactionalWrite:
    """The driver's side of one transactional write named ``prefix`` (see the module doc).

        tw = TransactionalWrite(cluster, "nightly-2026-11-27", topic="out")
        done = tw.start()            # a Decision if the write already happened: nothing to do
        if done is None:
            prepared = run_tasks()   # each task: prepare_task(...), attempt ids from task_transactional_id
            done = tw.commit(prepared)

    ``timeout_s`` bounds each call to a coordinator or leader. ``batch``: ``prefix`` is a
    streaming batch's (see :func:`check_prefix`). ``record``: appends a decision instead of
    a plain producer (a streaming driver's fenced transactional one); ``isolation_level``:
    how :meth:`last_decision` reads the decision topic (``"read_committed"`` with such a
    ``record``). ``strays``: ``(ids, is_stray)`` -- the open transactions ``ids`` matches
    for which ``is_stray(id)`` holds are aborted whenever this write aborts its own open
    ones: a zombie task attempt of an earlier, finished write (an attempt still running after
    its write was decided, e.g. on an executor taken for lost) prepares a transaction no
    later step of that write looks for, and with no timeout (two-phase) it would hold the
    partitions' last stable offset back for good. A streaming query passes its earlier
    batches'.
    """

    def __init__(
        self,
        cluster: ClusterClient,
        prefix: str,
        *,
        topic: str = "",
        timeout_s: float = 120.0,
        batch: bool = False,
        record: Callable[[TopicPartition, bytes, bytes], None] | None = None,
        isolation_level: str = "read_uncommitted",
        strays: "tuple[re.Pattern[str], Callable[[str], bool]] | None" = None,
        coordinators: TransactionCoordinators | None = None,
        decision_partitions: int | None = None,
    ) -> None:
        self.cluster = cluster
        self.prefix = check_prefix(prefix, batch=batch)
        self._append = record
        self.isolation_level = isolation_level
        self.topic = topic
        self.timeout_s = timeout_s
        # Both never change in a cluster's life: a caller making one write after another
        # (a streaming query, per batch) passes them on instead of asking the controller.
        self._coordinators = coordinators or TransactionCoordinators(cluster)
        self.decision_partitions = decision_partitions
        self._ids = re.compile(re.escape(self.prefix) + r"/\d+/[^/]+")
        self._strays = strays

    # -- the decision topic ---------------------------------------------------------------
    def _decisions_partition(self) -> TopicPartition:
        if self.decision_partitions is None:
            self.decision_partitions = self._find_decisions_topic()
        return TopicPartition(DECISIONS_TOPIC, partition_for_key(self.prefix.encode(), self.decision_partitions))

    def _find_decisions_topic(self) -> int:
        """The partition count of :data:`DECISIONS_TOPIC`, created if it does not exist."""
        from .client.admin import Admin

        try:
            md = self.cluster.topic(DECISIONS_TOPIC, refresh=True)
        except KafkaError as exc:
            if exc.code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise
            admin = Admin(self.cluster)
            rf = admin.default_replication_factor()
            try:
                admin.create_topic(
                    DECISIONS_TOPIC,
                    partitions=DECISION_PARTITIONS,
                    replication_factor=rf,
                    config={"cleanup.policy": "compact", "min.insync.replicas": min(2, rf)},
                    timeout_ms=int(self.timeout_s * 1000),
                )
            except KafkaError as exc2:
                if exc2.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                    raise
                admin.wait_for_leaders(DECISIONS_TOPIC, timeout_ms=int(self.timeout_s * 1000))
            md = self.cluster.topic(DECISIONS_TOPIC, refresh=True)
        return len(md.partitions)

    def last_decision(self) -> Decision | None:
        """The newest record of this prefix in :data:`DECISIONS_TOPIC`, or None."""
        from .client.consumer import Consumer

        tp = self._decisions_partition()
        key = self.prefix.encode()
        found: bytes | None = None
        with Consumer(cluster=self.cluster, auto_offset_reset="earliest", enable_auto_commit=False, isolation_level=self.isolation_level) as consumer:
            consumer.assign([tp])
            consumer.seek_to_beginning(tp)
            if self.isolation_level == "read_committed":
                # Up to a stable end: a decision appended in a transaction still open when
                # the lookup began would be missed by a read up to the LSO, yet commit later.
                end = stable_ends(self.cluster, [tp], self.timeout_s)[tp]
            else:
                end = consumer.end_offsets([tp])[tp]
            deadline = time.monotonic() + self.timeout_s
            while consumer.position(tp) < end:
                if time.monotonic() > deadline:
                    raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"reading {DECISIONS_TOPIC} up to offset {end} took over {self.timeout_s:.0f} s")
                for records in consumer.poll(timeout_ms=500).values():
                    for r in records:
                        if r.key == key:
                            found = r.value  # a tombstone (None) forgets the write
        return Decision.decode(self.prefix, found) if found is not None else None

    def _record(self, decision: Decision) -> None:
        tp = self._decisions_partition()
        if self._append is not None:
            self._append(tp, self.prefix.encode(), decision.encode())
            return
        with Producer(self.cluster, acks="all", linger_ms=0) as producer:
            producer.send(tp.topic, key=self.prefix.encode(), value=decision.encode(), partition=tp.partition).get(timeout=self.timeout_s)

    # -- the transaction coordinators -------------------------------------------------------
    def open_transactions(self, ids: "re.Pattern[str] | None" = None) -> list[str]:
        """The transactional ids of this prefix's tasks (or those ``ids`` matches) whose
        transaction is open (Ongoing: prepared, or still being written), from every
        transaction coordinator."""
        match = ids or self._ids
        out: list[str] = []
        coordinators = self._coordinators

        async def ask_all() -> list:
            request = ListTransactionsRequest(states_filter=["Ongoing"])
            calls = [coordinators.acall(i, "list_transactions", request, ListTransactionsResponse, self.timeout_s) for i in range(await coordinators.acount())]
            return list(await asyncio.gather(*calls))

        for i, response in enumerate(self.cluster.calls.run(ask_all())):
            if response.error_code:
                raise KafkaError(response.error_code, response.error_message or f"ListTransactions on transaction coordinator {i} failed")
            out.extend(t.transactional_id for t in response.transactions if match.fullmatch(t.transactional_id))
        return sorted(out)

    def _state(self, transactional_id: str) -> str:
        response = self.cluster.calls.run(
            self._coordinators.acall_txn(transactional_id, DescribeTransactionsRequest([transactional_id]), self.timeout_s)
        )
        assert isinstance(response, DescribeTransactionsResponse)
        if response.error_code:
            raise KafkaError(response.error_code, response.error_message or f"DescribeTransactions of {transactional_id!r} failed")
        d = response.transactions[0]
        if d.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
            return ""
        if d.error_code:
            raise KafkaError(d.error_code, f"DescribeTransactions of {transactional_id!r} failed")
        return d.state

    def _abort(self, transactional_id: str) -> None:
        # A new instance fences the old one and aborts its open transaction.
        with Producer(self.cluster, transactional_id=transactional_id, enable_two_phase_commit=True, acks="all") as producer:
            producer.init_transactions()

    def _commit_one(self, task: PreparedTask, state: str | None = None) -> None:
        """Commit ``task``'s prepared transaction and wait for its markers; ``state``: its
        state if the caller knows it (it prepared it), else it is looked up."""
        if not task.written:
            return  # a task with no rows: its transaction never reached the coordinator
        # (a transaction with offsets and no records says written={OFFSETS_ONLY: 0})
        if state is None:
            state = self._state(task.transactional_id)
        if state == "Ongoing":
            with Producer(self.cluster, transactional_id=task.transactional_id, enable_two_phase_commit=True, acks="all") as producer:
                producer.init_transactions(keep_prepared_txn=True)
                if producer.complete_transaction(PreparedTxnState(task.producer_id, task.epoch)):
                    state = "PrepareCommit"
        if state not in ("PrepareCommit", "CompleteCommit"):  # else committed already (a driver died before DONE)
            raise self._not_there(task, state)
        self._await_complete(task, state)

    def _not_there(self, task: PreparedTask, state: str) -> TxnWriteError:
        return TxnWriteError(
            ErrorCode.INVALID_TXN_STATE,
            f"write {self.prefix!r}: the prepared transaction of task {task.task} ({task.transactional_id!r}, {task.producer_id}:{task.epoch}) "
            f"was not there to commit (state {state or 'unknown'}: aborted by someone else?); its {task.records} records are not written. "
            f"Run the write again under a new transactional_id",
        )

    def _await_complete(self, task: PreparedTask, state: str) -> None:
        """Wait until the committed transaction (in ``state`` now) has its markers written
        (CompleteCommit): the coordinator answers a commit once it is decided, and a
        read_committed reader sees the records only after their partition's marker, which a
        leader change can delay by seconds. A write is done -- and a streaming batch's
        output readable -- only then."""
        polls = _polls(self.timeout_s)
        next(polls)  # the first look is the caller's
        while state == "PrepareCommit":
            if next(polls, StopIteration) is StopIteration:
                raise KafkaError(
                    ErrorCode.REQUEST_TIMED_OUT,
                    f"write {self.prefix!r}: the commit of task {task.task} ({task.transactional_id!r}) is decided but its markers "
                    f"were not all written within {self.timeout_s:.0f} s (`kcoord transactions describe {task.transactional_id}`)",
                )
            state = self._state(task.transactional_id)
        if state not in ("CompleteCommit", "Empty", ""):  # Empty/unknown: completed, then reused or expired
            raise self._not_there(task, state)

    def _parallel(self, fn: Callable[[Any], None], items: list) -> None:
        if not items:
            return
        with ThreadPoolExecutor(max_workers=min(8, len(items)), thread_name_prefix="kcoord-txn-write") as pool:
            for f in [pool.submit(fn, x) for x in items]:
                f.result()

    def transaction_state(self, transactional_id: str) -> str:
        """DescribeTransactions' state of ``transactional_id`` ("" when unknown)."""
        return self._state(transactional_id)

    def abort_ids(self, ids: Iterable[str]) -> None:
        """Abort the open transactions of ``ids`` (a new instance of each fences it)."""
        self._parallel(self._abort, list(ids))

    # -- the protocol -----------------------------------------------------------------------
    def abort_open(self, keep: Iterable[str] = ()) -> list[str]:
        """Abort every open transaction of this prefix but ``keep``, and the strays (see the
        class doc); returns their ids."""
        skip = set(keep)
        if self._strays is None:
            ids = [t for t in self.open_transactions() if t not in skip]
        else:
            family, stray = self._strays
            ids = [t for t in self.open_transactions(family) if t not in skip and (self._ids.fullmatch(t) or stray(t))]
        self._parallel(self._abort, ids)
        return ids

    def finish(self, decision: Decision) -> Decision:
        """Steps 2-4 of a recorded decision: commit its transactions, abort the prefix's
        others, record DONE. Idempotent: a driver that died anywhere in here runs it again."""
        self.complete(decision)
        return self.record_done(decision)

    def complete(self, decision: Decision, *, prepared_here: bool = False) -> None:
        """Steps 2-3 of a recorded decision: commit its transactions (each until its markers
        are written), then abort the prefix's others. ``prepared_here``: the caller prepared
        every transaction of the decision and has seen it prepared (no look-up of its state)."""
        state = "Ongoing" if prepared_here else None
        self._parallel(functools.partial(self._commit_one, state=state), list(decision.tasks))
        self.abort_open(keep=(t.transactional_id for t in decision.tasks))

    def record_done(self, decision: Decision) -> Decision:
        """Step 4: record the decision DONE (after :meth:`complete`; a recovery finds it
        finished and leaves it). Nothing to record if it says DONE already."""
        if decision.state != DONE:
            decision = decision.with_state(DONE)
            self._record(decision)
        return decision

    def start(self) -> Decision | None:
        """Before the tasks run: the write's finished decision if it already happened
        (completed here if its driver died after deciding; write nothing then), else None
        after aborting the prefix's open transactions (a run that died before deciding)."""
        decision = self.last_decision()
        if decision is not None:
            return self.finish(decision)
        self.abort_open()
        return None

    def commit(self, prepared: Iterable[PreparedTask]) -> Decision:
        """After the tasks ran: record the decision (one transaction per task; a task given
        twice is an error), then :meth:`finish` it."""
        tasks: dict[int, PreparedTask] = {}
        for p in prepared:
            if p.task in tasks and tasks[p.task] != p:
                raise ValueError(f"write {self.prefix!r}: two prepared transactions for task {p.task}: {tasks[p.task].transactional_id!r} and {p.transactional_id!r}")
            tasks[p.task] = p
        decision = Decision(self.prefix, self.topic, COMMIT, tuple(tasks[t] for t in sorted(tasks)))
        self._record(decision)
        return self.finish(decision)


__all__ = [
    "COMMIT",
    "DECISIONS_TOPIC",
    "DONE",
    "Decision",
    "OFFSETS_ONLY",
    "STATE_ONLY",
    "PreparedTask",
    "TransactionalWrite",
    "TxnWriteError",
    "check_prefix",
    "prepare_task",
    "stable_ends",
    "task_transactional_id",
]
