"""The one driver of a transaction coordinator: partition ``i`` of ``__transaction_state``.

:class:`TransactionCoordinatorDriver` owns one
:class:`~kcoord.txn.coordinator.TransactionCoordinatorState`. Loading the partition, fencing
older incarnations, the one-in-flight append pipeline and the timer are
:class:`~kcoord.coordination.PartitionOwnerDriver`'s, exactly as for the group coordinators
(its docstring states the rules). The producer epoch the controller hands this incarnation is
the core's ``coordinator_epoch`` (stamped on markers), raised whenever the epoch is renewed.

What this driver adds is the transaction core's own actions:

* ``SendWriteTxnMarker``: the replica actor's ``write_txn_marker`` at the partition's leader,
  found in the controller's metadata and kept until a call says it moved. No leader:
  LEADER_NOT_AVAILABLE; UNKNOWN_TOPIC_OR_PARTITION only when the metadata just read lacks the
  partition; no answer: REQUEST_TIMED_OUT (NOT_LEADER_OR_FOLLOWER when the replica is gone).
* ``SendTxnOffsetMarker``: group coordinator ``request.partition``'s ``txn_offset_marker``.
  Any failure to call it (gone, no answer, a coordinator without that method) is
  COORDINATOR_NOT_AVAILABLE, which the core retries.
* ``AllocateProducerIds``: the controller's ``init_producer_id`` with ``count``, the one
  allocator idempotent producers use too (persisted before it answers, never reused).
* ``RefreshMetadata``: the controller's metadata of every topic; its partition counts go to the
  core (one refresh in flight at a time), its leaders to the marker cache.

The Ray actor (``actors/txn_coordinator.py``) and the tests run this same class.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable

from ..coordination.partition_owner import CoordinatorTimeouts, PartitionOwnerDriver
from ..protocol import names
from ..protocol.controller import InitProducerIdRequest, InitProducerIdResponse, MetadataRequest, MetadataResponse, TopicMetadata
from ..protocol.errors import METADATA_REFRESH, ErrorCode
from ..protocol.codec import Message
from ..protocol.services import TRANSACTION_COORDINATOR
from ..protocol.txn import AddPartitionsToTxnRequest, TxnOffsetMarkerResponse, WriteTxnMarkerResponse
from ..runtime import Outcome
from ..runtime.actions import Action
from .actions import AllocateProducerIds, RefreshMetadata, SendTxnOffsetMarker, SendWriteTxnMarker
from .coordinator import TransactionCoordinatorState
from .placement import TRANSACTION_STATE_TOPIC
from .records import Record, coordinator_epoch_record, decode_record

logger = logging.getLogger("kcoord.txn")

E = ErrorCode

# Transaction coordinator i writes __transaction_state-i as producer 500 + i (at most 500
# coordinators): below the controller's first allocated id, apart from group coordinators'.
FIRST_PRODUCER_ID = 500
MAX_COORDINATORS = 500


class TransactionCoordinatorDriver(PartitionOwnerDriver):
    service = TRANSACTION_COORDINATOR
    topic = TRANSACTION_STATE_TOPIC
    role = "txn coordinator"
    logger = logger
    core: TransactionCoordinatorState

    def __init__(self, cluster: str, core: TransactionCoordinatorState, **kwargs: Any) -> None:
        super().__init__(cluster, core, **kwargs)
        # (topic, partition) -> (broker, leader epoch) of the partitions markers go to
        self._leaders: dict[tuple[str, int], tuple[int, int]] = {}
        self._refreshing = False
        self._after_refresh: list[Callable[[], None]] = []
        self._read_topics_for: set[int] = set()  # requests held for a metadata read
        self.markers_sent = 0
        self.markers_failed = 0

    # -- the partition machinery's hooks -----------------------------------------------------
    def _decode_record(self, key: bytes, value: bytes | None) -> object:
        return decode_record(key, value)

    def _epoch_record(self, epoch: int) -> Record:
        return coordinator_epoch_record(self.index, epoch)

    def _first_producer_id(self) -> int:
        # Below the allocator's first id (1000), apart from the group coordinators' 0..N-1.
        return FIRST_PRODUCER_ID + self.index

    def _epoch_granted(self) -> None:
        # Markers carry the incarnation's epoch: a leader that saw a newer one refuses ours.
        if self.producer_epoch > self.core.coordinator_epoch:
            self.core.coordinator_epoch = self.producer_epoch

    def _load_core(self, records: list[Record], now_ms: int) -> list[Action]:
        return self.core.load(records, now_ms)

    def _loaded_what(self) -> str:
        return f"{len(self.core.transactional_ids())} transactional ids"

    def _perform_other(self, action: Action) -> None:
        if isinstance(action, SendWriteTxnMarker):
            self._send_write_marker(action)
        elif isinstance(action, SendTxnOffsetMarker):
            self._send_offset_marker(action)
        elif isinstance(action, AllocateProducerIds):
            self._allocate(action.count)
        elif isinstance(action, RefreshMetadata):
            self._refresh_metadata()
        else:  # pragma: no cover - a new action kind this driver must learn
            raise TypeError(f"unknown transaction coordinator action {action!r}")

    # -- requests ------------------------------------------------------------------------------
    def _admit(self, request: Message, reply: Any) -> bool:
        """An AddPartitionsToTxn naming a partition the core has not seen (a topic created
        since the last read) waits for one metadata read first, as a Kafka broker's metadata
        cache would already know it; the core then decides on what exists."""
        if not super()._admit(request, reply):
            return False
        if isinstance(request, AddPartitionsToTxnRequest) and not request.verify_only:
            key = id(request)
            if key in self._read_topics_for:
                self._read_topics_for.discard(key)
            elif any(not self.core.partition_exists(t, p) for t, ps in request.topics.items() for p in ps):
                self._read_topics_for.add(key)
                self._refresh_metadata(lambda: self.serve(request, reply))
                return False
        return True

    # -- markers -------------------------------------------------------------------------------
    def _marker_done(self, marker_id: int, code: int) -> None:
        if code != E.NONE:
            self.markers_failed += 1
        self._run(self.core.on_marker_written, marker_id, code, self._clock.now_ms())

    def _send_write_marker(self, action: SendWriteTxnMarker) -> None:
        req = action.request
        tp = (req.topic, req.partition)
        self.markers_sent += 1

        def send(leader: tuple[int, int]) -> None:
            broker, epoch = leader
            self._transport.call(
                names.replica(self.cluster, req.topic, req.partition, broker),
                "write_txn_marker",
                dataclasses.replace(req, current_leader_epoch=epoch),
                WriteTxnMarkerResponse,
                req.timeout_ms + self.timeouts.call_ms,
                answered,
                probe_after_ms=self.timeouts.probe_after_ms,
            )

        def answered(response: WriteTxnMarkerResponse | None, outcome: Outcome) -> None:
            if self.closed:
                return
            if response is None:
                code = E.NOT_LEADER_OR_FOLLOWER if outcome == Outcome.DEAD else E.REQUEST_TIMED_OUT
            else:
                code = response.error_code
            if code in METADATA_REFRESH or code == E.REQUEST_TIMED_OUT or code == E.UNKNOWN_TOPIC_OR_PARTITION:
                self._leaders.pop(tp, None)
                if code == E.UNKNOWN_TOPIC_OR_PARTITION:
                    code = E.NOT_LEADER_OR_FOLLOWER  # only the metadata may say it is gone
            self._marker_done(action.marker_id, code)

        leader = self._leaders.get(tp)
        if leader is not None:
            send(leader)
        else:
            self._find_leader(tp, send, lambda code: self._marker_done(action.marker_id, code))

    def _find_leader(self, tp: tuple[str, int], then: Callable[[tuple[int, int]], None], failed: Callable[[int], None]) -> None:
        topic, partition = tp

        def answered(response: MetadataResponse | None, outcome: Outcome) -> None:
            if self.closed:
                return
            if response is None or response.error_code != E.NONE:
                failed(E.LEADER_NOT_AVAILABLE)
                return
            found = next((t for t in response.topics if t.name == topic), None)
            if found is None or found.error_code == E.UNKNOWN_TOPIC_OR_PARTITION or (found.error_code == E.NONE and partition >= len(found.partitions)):
                failed(E.UNKNOWN_TOPIC_OR_PARTITION)
                return
            self._learn_leaders(found)
            leader = self._leaders.get(tp)
            if leader is None:
                failed(E.LEADER_NOT_AVAILABLE)
            else:
                then(leader)

        self._transport.call(names.controller(self.cluster), "metadata", MetadataRequest([topic]), MetadataResponse, self.timeouts.call_ms, answered)

    def _learn_leaders(self, topic: TopicMetadata) -> None:
        if topic.error_code != E.NONE:
            return
        for p in topic.partitions:
            if p.leader >= 0:
                self._leaders[(topic.name, p.partition)] = (p.leader, p.leader_epoch)
            else:
                self._leaders.pop((topic.name, p.partition), None)

    def _send_offset_marker(self, action: SendTxnOffsetMarker) -> None:
        req = action.request
        self.markers_sent += 1

        def answered(response: TxnOffsetMarkerResponse | None, outcome: Outcome) -> None:
            if self.closed:
                return
            # Gone, silent, or a coordinator that does not serve the method yet: retriable.
            self._marker_done(action.marker_id, E.COORDINATOR_NOT_AVAILABLE if response is None else response.error_code)

        self._transport.call(
            names.group_coordinator(self.cluster, req.partition),
            "txn_offset_marker",
            req,
            TxnOffsetMarkerResponse,
            self.timeouts.persist_ms + self.timeouts.call_ms,
            answered,
            probe_after_ms=self.timeouts.probe_after_ms,
        )

    # -- producer ids and metadata ----------------------------------------------------------
    def _allocate(self, count: int) -> None:
        def answered(response: InitProducerIdResponse | None, outcome: Outcome) -> None:
            if self.closed:
                return
            if response is None:
                self._run(self.core.on_producer_ids, -1, 0, E.REQUEST_TIMED_OUT, self._clock.now_ms())
            else:
                self._run(self.core.on_producer_ids, response.producer_id, response.count, response.error_code, self._clock.now_ms())

        self._transport.call(names.controller(self.cluster), "init_producer_id", InitProducerIdRequest(count=count), InitProducerIdResponse, self.timeouts.call_ms, answered)

    def _refresh_metadata(self, then: Callable[[], None] | None = None) -> None:
        """Read every topic (one read in flight; ``then()`` runs once it ended, read or not)."""
        if then is not None:
            self._after_refresh.append(then)
        if self._refreshing:
            return
        self._refreshing = True

        def answered(response: MetadataResponse | None, outcome: Outcome) -> None:
            self._refreshing = False
            waiting, self._after_refresh = self._after_refresh, []
            if not self.closed and response is not None and response.error_code == E.NONE:
                counts = {}
                for t in response.topics:
                    if t.error_code == E.NONE:
                        counts[t.name] = len(t.partitions)
                        self._learn_leaders(t)
                self._run(self.core.on_metadata, counts, self._clock.now_ms())
            # else: the core asks again when it needs to
            for then in waiting:  # held requests: answered by the core, or refused if closed
                then()

        self._transport.call(names.controller(self.cluster), "metadata", MetadataRequest(None), MetadataResponse, self.timeouts.call_ms, answered)


__all__ = ["CoordinatorTimeouts", "TransactionCoordinatorDriver"]
