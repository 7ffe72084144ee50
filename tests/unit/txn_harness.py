"""A tiny in-memory driver for TransactionCoordinatorState, shared by the test_txn_* modules.

It plays the driver's part: hands out tokens and collects Replies (each token answered exactly
once), performs the actions in the order returned (outcomes come back after the actions
already queued, as from a real transport), keeps the ``__transaction_state`` log (an append's
records land only when it is acknowledged), plays the controller's producer-id allocator and
the cluster's metadata, records the markers written, and moves an explicit clock. Each kind of
outcome is reported at once or held for the test to settle. No Ray, no sleeps.
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import Any

from kcoord.protocol.codec import Message
from kcoord.protocol.errors import ErrorCode as E
from kcoord.protocol.txn import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    TxnInitProducerIdRequest,
)
from kcoord.txn import (
    AllocateProducerIds,
    AppendRecords,
    RefreshMetadata,
    Reply,
    SendTxnOffsetMarker,
    SendWriteTxnMarker,
    TransactionCoordinatorState,
    TxnConfig,
    replay,
)

T0 = 1_700_000_000_000
TIMEOUT = 10_000
FAST = TxnConfig(
    transaction_max_timeout_ms=60_000,
    transactional_id_expiration_ms=3_600_000,
    producer_id_block_size=10,
    marker_retry_backoff_ms=100,
    marker_max_backoff_ms=1_000,
    append_retry_backoff_ms=500,
    metadata_refresh_backoff_ms=100,
    # answered at once, as Kafka does (test_txn_hold.py covers holding)
    concurrent_transactions_hold_ms=0,
)
TOPICS = {"out": 4, "side": 2}
OFFSETS_PARTITIONS = 3
FIRST_PID = 1000


class Shell:
    def __init__(
        self,
        config: TxnConfig = FAST,
        *,
        auto_persist: bool = True,
        auto_markers: bool = True,
        auto_ids: bool = True,
        auto_metadata: bool = True,
        partition: int = 0,
        num_partitions: int = 1,
        topics: dict[str, int] | None = None,
        now: int = T0,
        coordinator_epoch: int = 5,
        log: list | None = None,
        next_pid: int = FIRST_PID,
        topics_known: bool = True,
    ) -> None:
        """``topics_known``: the core is told the topics at once (as a driver does right
        after the load); otherwise only when it asks (RefreshMetadata) and ``auto_metadata``."""
        self.config = config
        self.auto_persist = auto_persist
        self.auto_markers = auto_markers
        self.auto_ids = auto_ids
        self.auto_metadata = auto_metadata
        self.now = now
        self.topics = dict(TOPICS if topics is None else topics)
        self.core = TransactionCoordinatorState(
            config,
            partition=partition,
            num_partitions=num_partitions,
            offsets_partitions=OFFSETS_PARTITIONS,
            coordinator_epoch=coordinator_epoch,
        )
        self.log: list[tuple[bytes, bytes | None]] = list(log or [])
        self.appends: list[AppendRecords] = []  # held AppendRecords, in emission order
        self.markers: list[SendWriteTxnMarker | SendTxnOffsetMarker] = []  # held marker sends
        self.written: list[Message] = []  # markers acknowledged, in order
        self.sent: list[Message] = []  # every marker request sent
        self.allocations: list[AllocateProducerIds] = []  # held
        self.refreshes = 0
        self.next_pid = next_pid
        self.replies: dict[int, Message] = {}
        self._tokens = itertools.count(1)
        self._queue: deque = deque()
        self._running = False
        self.run(self.core.load(self.log, self.now))
        if topics_known:
            self.run(self.core.on_metadata(self.topics, self.now))

    # -- the driver's loop -----------------------------------------------------------------

    def run(self, actions: list) -> None:
        self._queue.extend(actions)
        if self._running:
            return
        self._running = True
        try:
            while self._queue:
                self._perform(self._queue.popleft())
        finally:
            self._running = False

    def _perform(self, a: Any) -> None:
        if isinstance(a, Reply):
            assert a.token not in self.replies, f"token {a.token} answered twice"
            self.replies[a.token] = a.response
        elif isinstance(a, AppendRecords):
            if self.auto_persist:
                self.log.extend(a.records)
                self.run(self.core.on_persisted(a.persist_id, E.NONE, self.now))
            else:
                self.appends.append(a)
        elif isinstance(a, (SendWriteTxnMarker, SendTxnOffsetMarker)):
            self.sent.append(a.request)
            if self.auto_markers:
                self.written.append(a.request)
                self.run(self.core.on_marker_written(a.marker_id, E.NONE, self.now))
            else:
                self.markers.append(a)
        elif isinstance(a, AllocateProducerIds):
            if self.auto_ids:
                self._allocate(a)
            else:
                self.allocations.append(a)
        elif isinstance(a, RefreshMetadata):
            self.refreshes += 1
            if self.auto_metadata:
                self.run(self.core.on_metadata(self.topics, self.now))
        else:  # pragma: no cover - a new action the harness must learn
            raise TypeError(f"unknown action {a!r}")

    def _allocate(self, a: AllocateProducerIds, error: int = E.NONE) -> None:
        first = self.next_pid if error == E.NONE else -1
        if error == E.NONE:
            self.next_pid += a.count
        self.run(self.core.on_producer_ids(first, a.count if error == E.NONE else 0, error, self.now))

    # -- settling held outcomes ------------------------------------------------------------

    def complete(self, error: int = E.NONE, n: int | None = None) -> None:
        """Report the oldest ``n`` (all) held appends with ``error``; acknowledged ones land."""
        take = self.appends[: len(self.appends) if n is None else n]
        del self.appends[: len(take)]
        for a in take:
            if error == E.NONE:
                self.log.extend(a.records)
            self.run(self.core.on_persisted(a.persist_id, error, self.now))

    def ack_markers(self, error: int = E.NONE, *, topic: str | None = None) -> int:
        """Report the held marker sends (those to ``topic`` only, if given) with ``error``."""
        take = [m for m in self.markers if topic is None or getattr(m.request, "topic", None) == topic]
        self.markers = [m for m in self.markers if m not in take]
        for m in take:
            if error == E.NONE:
                self.written.append(m.request)
            self.run(self.core.on_marker_written(m.marker_id, error, self.now))
        return len(take)

    def allocate(self, error: int = E.NONE) -> None:
        take, self.allocations = self.allocations, []
        for a in take:
            self._allocate(a, error)

    def advance(self, ms: int) -> None:
        self.now += ms
        self.run(self.core.tick(self.now))

    # -- requests --------------------------------------------------------------------------

    def request(self, req: Message) -> int:
        token = next(self._tokens)
        self.run(self.core.handle(req, token, self.now))
        return token

    def reply(self, token: int) -> Any:
        return self.replies.get(token)

    def ask(self, req: Message) -> Any:
        """Send ``req`` and return its answer, which must have come."""
        token = self.request(req)
        assert token in self.replies, f"{type(req).__name__} not answered yet"
        return self.replies[token]

    def init(self, tid: str = "t", timeout_ms: int = TIMEOUT, pid: int = -1, epoch: int = -1, **kw: Any) -> Any:
        return self.ask(TxnInitProducerIdRequest(tid, timeout_ms, pid, epoch, **kw))

    def add(self, tid: str, pid: int, epoch: int, topics: dict[str, list[int]] | None = None, **kw: Any) -> Any:
        return self.ask(AddPartitionsToTxnRequest(tid, pid, epoch, topics if topics is not None else {"out": [0]}, **kw))

    def add_offsets(self, tid: str, pid: int, epoch: int, group: str = "g", **kw: Any) -> Any:
        return self.ask(AddOffsetsToTxnRequest(tid, pid, epoch, group, **kw))

    def end(self, tid: str, pid: int, epoch: int, commit: bool = True, bump: bool = True, **kw: Any) -> Any:
        return self.ask(EndTxnRequest(tid, pid, epoch, commit, bump_epoch=bump, **kw))

    # -- views -----------------------------------------------------------------------------

    def state(self, tid: str = "t") -> Any:
        meta = self.core.transaction(tid)
        return None if meta is None or meta.value is None else meta.value

    def restart(self, advance_ms: int = 0, **kw: Any) -> "Shell":
        """A new coordinator incarnation loading this one's log (what the actor does after a
        failover), with the next producer ids the controller would hand out."""
        kw.setdefault("coordinator_epoch", self.core.coordinator_epoch + 1)
        return Shell(
            self.config,
            now=self.now + advance_ms,
            log=self.log,
            topics=self.topics,
            next_pid=self.next_pid,
            auto_persist=kw.pop("auto_persist", self.auto_persist),
            auto_markers=kw.pop("auto_markers", self.auto_markers),
            **kw,
        )

    def reload(self) -> None:
        """Replace the core by a new incarnation loading the log, in this same shell (the
        controller's allocator carries on). The old core is closed first, answering what waits
        on it, as a driver giving up the partition does; its held outcomes are dropped (a
        failed append never lands)."""
        self.run(self.core.close(self.now))
        self.appends.clear()
        self.markers.clear()
        self.allocations.clear()
        self.core = TransactionCoordinatorState(
            self.config,
            partition=self.core.partition,
            num_partitions=self.core.num_partitions,
            offsets_partitions=OFFSETS_PARTITIONS,
            coordinator_epoch=self.core.coordinator_epoch + 1,
        )
        self.run(self.core.load(self.log, self.now))
        self.run(self.core.on_metadata(self.topics, self.now))

    def assert_replay_equal(self) -> None:
        """The coordinator's memory is what a replay of its log rebuilds."""
        assert replay(self.log) == self.core.snapshot()


def began(s: Shell, tid: str = "t", topics: dict[str, list[int]] | None = None, **init_kw: Any) -> tuple[int, int]:
    """Init ``tid`` and start a transaction on ``topics``; returns (producer id, epoch)."""
    r = s.init(tid, **init_kw)
    assert r.error_code == E.NONE, r
    a = s.add(tid, r.producer_id, r.producer_epoch, topics)
    assert a.error_code == E.NONE, a
    return r.producer_id, r.producer_epoch
