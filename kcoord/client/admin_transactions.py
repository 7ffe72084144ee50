"""Admin's transaction operations (KIP-664, Kafka 4.0's Admin and kafka-transactions.sh):
list and describe transactions at their coordinators, describe the producers a partition
leader knows, find hanging transactions and abort one with a marker written straight to its
partition. :class:`~kcoord.client.admin.Admin` exposes them; the result types carry Kafka's
(and kafka-python 3's) names.

A *hanging* transaction is one open at a partition (the leader holds its first offset, so
the LSO cannot pass it and read_committed readers stop there) that no coordinator will ever
end: its producer is not in an ongoing transaction with that partition at its coordinator
(a write that landed after its transaction ended, or one that never had a coordinator).
Only an operator's ABORT marker ends it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Iterable, NamedTuple

from ..protocol.errors import ErrorCode, KafkaError, raise_for_error
from ..protocol.replication import DescribeProducersRequest, DescribeProducersResponse
from ..protocol.txn import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
    WriteTxnMarkerRequest,
    WriteTxnMarkerResponse,
)
from ..txn.config import TxnConfig
from ..txn.state import TransactionState
from .cluster import ClusterClient
from .coordinator.txn_coordinators import TransactionCoordinators
from .types import TopicPartition

STATES = tuple(s.value for s in TransactionState)
_RUNNING = {TransactionState.ONGOING.value, TransactionState.PREPARE_COMMIT.value, TransactionState.PREPARE_ABORT.value}


class TransactionListing(NamedTuple):
    """One ListTransactions row (and the coordinator that holds it)."""

    transactional_id: str
    producer_id: int
    state: str
    coordinator: int


class TransactionDescription(NamedTuple):
    """One transactional id as its coordinator describes it (DescribeTransactions)."""

    coordinator_id: int
    state: str
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_start_time_ms: int  # -1: no transaction since its InitProducerId
    topic_partitions: frozenset[TopicPartition]


class ProducerState(NamedTuple):
    """One producer a partition leader knows (DescribeProducers)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int  # max timestamp of its last batch; -1 when that is gone
    coordinator_epoch: int  # of the last marker it got here; -1: none
    current_transaction_start_offset: int  # first offset of its open transaction here; -1: none


class PartitionProducerState(NamedTuple):
    active_producers: list[ProducerState]


class AbortTransactionSpec(NamedTuple):
    """What :meth:`TransactionAdmin.abort_transaction` writes (Kafka's AbortTransactionSpec)."""

    topic_partition: TopicPartition
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int


class HangingTransaction(NamedTuple):
    """An open transaction at a partition that its coordinator does not know as ongoing there."""

    topic_partition: TopicPartition
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    start_offset: int
    last_timestamp: int
    duration_ms: int  # now - last_timestamp; -1 when the timestamp is unknown
    transactional_id: str | None  # None: no coordinator knows this producer id
    reason: str


class TransactionAdmin:
    """The transaction half of an :class:`~kcoord.client.admin.Admin`."""

    def __init__(self, cluster: ClusterClient, list_topics: Callable[[], list[str]]) -> None:
        """``list_topics()``: the cluster's topics, internal ones left out (Admin's)."""
        self.cluster = cluster
        self.coordinators = TransactionCoordinators(cluster)
        self._list_topics = list_topics

    def _timeout_s(self) -> float:
        return self.cluster.request_timeout_ms / 1000

    # -- coordinators ---------------------------------------------------------------------
    def list_transactions(
        self, states: Iterable[str] | None = None, producer_ids: Iterable[int] | None = None, duration_filter_ms: int | None = None
    ) -> list[TransactionListing]:
        states = None if states is None else [str(s) for s in states]
        unknown = sorted(set(states or ()) - set(STATES))
        if unknown:
            raise ValueError(f"unknown transaction state(s) {unknown}: the states are {list(STATES)}")
        pids = None if producer_ids is None else [int(p) for p in producer_ids]
        if duration_filter_ms is not None and (not isinstance(duration_filter_ms, int) or duration_filter_ms < 0):
            raise ValueError(f"duration_filter_ms must be an int >= 0, got {duration_filter_ms!r}")
        request = ListTransactionsRequest(states or None, pids or None, -1 if duration_filter_ms is None else duration_filter_ms)
        tc = self.coordinators
        out = []
        for index in range(tc.count()):
            resp = tc.call(index, "list_transactions", request, ListTransactionsResponse, self._timeout_s())
            raise_for_error(resp.error_code, resp.error_message or f"ListTransactions on transaction coordinator {index} failed")
            out += [TransactionListing(t.transactional_id, t.producer_id, t.state, index) for t in resp.transactions]
        return sorted(out)

    def describe_transactions(self, transactional_ids: Iterable[str]) -> dict[str, TransactionDescription]:
        if isinstance(transactional_ids, str):
            raise TypeError("describe_transactions takes a list of transactional ids, not one str")
        ids = list(dict.fromkeys(transactional_ids))
        for tid in ids:
            if not isinstance(tid, str) or not tid:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"a transactional id must be a non-empty str, got {tid!r}")
        tc = self.coordinators
        by_index: dict[int, list[str]] = {}
        for tid in ids:
            by_index.setdefault(tc.index_for(tid), []).append(tid)
        out: dict[str, TransactionDescription] = {}
        for index, tids in sorted(by_index.items()):
            resp = tc.call(index, "describe_transactions", DescribeTransactionsRequest(tids), DescribeTransactionsResponse, self._timeout_s())
            raise_for_error(resp.error_code, resp.error_message or f"DescribeTransactions on transaction coordinator {index} failed")
            got = {d.transactional_id: d for d in resp.transactions}
            for tid in tids:
                d = got.get(tid)
                if d is None:
                    raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"transaction coordinator {index} did not describe {tid!r}")
                if d.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
                    raise KafkaError(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, f"transactional id {tid!r} is not known to its coordinator ({index})")
                raise_for_error(d.error_code, f"describing transactional id {tid!r} failed")
                out[tid] = TransactionDescription(
                    index,
                    d.state,
                    d.producer_id,
                    d.producer_epoch,
                    d.timeout_ms,
                    d.start_time_ms,
                    frozenset(TopicPartition(t, p) for t, ps in d.topics.items() for p in ps),
                )
        return out

    # -- partition leaders ----------------------------------------------------------------
    def describe_producers(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, PartitionProducerState]:
        tps = [_tp(tp) for tp in partitions]
        return self.cluster.calls.run(self._adescribe_producers(tps))

    async def _acheck_partitions(self, tps: list[TopicPartition]) -> None:
        """UNKNOWN_TOPIC_OR_PARTITION at once for a topic or partition that does not exist
        (fresh metadata), rather than the leader calls' retries until their deadline."""
        for topic in sorted({tp.topic for tp in tps}):
            count = len((await self.cluster.atopic(topic, refresh=True)).partitions)
            for tp in tps:
                if tp.topic == topic and not 0 <= tp.partition < count:
                    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic!r} has no partition {tp.partition} (it has {count})")

    async def _adescribe_producers(self, tps: list[TopicPartition]) -> dict[TopicPartition, PartitionProducerState]:
        await self._acheck_partitions(tps)

        def one(tp: TopicPartition) -> Any:
            return self.cluster.acall_leader(
                tp.topic, tp.partition, "describe_producers", lambda epoch: DescribeProducersRequest(tp.topic, tp.partition, current_leader_epoch=epoch), DescribeProducersResponse
            )

        answers = await asyncio.gather(*(one(tp) for tp in tps), return_exceptions=True)
        out = {}
        for tp, resp in zip(tps, answers):
            if isinstance(resp, BaseException):
                raise resp
            raise_for_error(resp.error_code, resp.error_message or f"DescribeProducers on {tp.topic}-{tp.partition} failed")
            out[tp] = PartitionProducerState(
                [
                    ProducerState(p.producer_id, p.producer_epoch, p.last_sequence, p.last_timestamp, p.coordinator_epoch, p.current_txn_start_offset)
                    for p in resp.producers
                ]
            )
        return out

    def abort_transaction(
        self, spec: AbortTransactionSpec | TopicPartition, producer_id: int | None = None, producer_epoch: int | None = None, coordinator_epoch: int | None = None
    ) -> int:
        """Write an ABORT marker for ``producer_id``'s transaction straight to the partition
        (KIP-664's abort of a hanging transaction); returns the marker's offset. The leader
        checks the epochs: an older producer epoch than the producer's there is
        INVALID_PRODUCER_EPOCH, an older coordinator epoch than its last marker's
        TRANSACTION_COORDINATOR_FENCED. ``coordinator_epoch`` None: the one the leader reports
        for the producer (what kafka-transactions.sh uses). Raises KafkaError."""
        if isinstance(spec, AbortTransactionSpec):
            if (producer_id, producer_epoch, coordinator_epoch) != (None, None, None):
                raise TypeError("give an AbortTransactionSpec or (topic_partition, producer_id, producer_epoch[, coordinator_epoch]), not both")
            tp, producer_id, producer_epoch, coordinator_epoch = spec
        else:
            tp = spec
        tp = _tp(tp)
        for name, value in (("producer_id", producer_id), ("producer_epoch", producer_epoch)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be an int >= 0, got {value!r}")
        self.cluster.calls.run(self._acheck_partitions([tp]))
        if coordinator_epoch is None:
            coordinator_epoch = 0
            for p in self.describe_producers([tp])[tp].active_producers:
                if p.producer_id == producer_id:
                    coordinator_epoch = max(0, p.coordinator_epoch)
        resp = self.cluster.call_leader(
            tp.topic,
            tp.partition,
            "write_txn_marker",
            lambda epoch: WriteTxnMarkerRequest(producer_id, producer_epoch, coordinator_epoch, False, tp.topic, tp.partition, current_leader_epoch=epoch),
            WriteTxnMarkerResponse,
        )
        raise_for_error(resp.error_code, resp.error_message or f"abort of producer {producer_id}'s transaction at {tp.topic}-{tp.partition} failed")
        return resp.offset

    # -- kafka-transactions.sh find-hanging -----------------------------------------------
    def find_hanging_transactions(
        self, topics: Iterable[str] | None = None, partitions: Iterable[TopicPartition] | None = None, max_transaction_timeout_ms: int | None = None
    ) -> list[HangingTransaction]:
        """Kafka's find-hanging: every transaction open at the partitions (``partitions``, or
        every partition of ``topics``, or of every topic) whose last write is older than
        ``max_transaction_timeout_ms`` (default ``transaction.max.timeout.ms``, 15 min; 0: any
        age), and whose producer id no coordinator holds in an ongoing transaction with that
        partition at that epoch. A transaction its coordinator knows is not hanging: the
        coordinator ends it (at the latest when it times out)."""
        if max_transaction_timeout_ms is None:
            max_transaction_timeout_ms = TxnConfig().transaction_max_timeout_ms
        if not isinstance(max_transaction_timeout_ms, int) or max_transaction_timeout_ms < 0:
            raise ValueError(f"max_transaction_timeout_ms must be an int >= 0, got {max_transaction_timeout_ms!r}")
        if partitions is not None:
            tps = [_tp(tp) for tp in partitions]
        else:
            if isinstance(topics, str):
                raise TypeError("topics is a list of topic names, not one str")
            wanted = list(topics) if topics is not None else self._list_topics()
            tps = [TopicPartition(t, p) for t in wanted for p in self.cluster.partitions_for(t)]
        candidates = open_transactions(self.describe_producers(tps), max_transaction_timeout_ms, int(time.time() * 1000))
        if not candidates:
            return []
        listed: dict[int, list[str]] = {}
        for t in self.list_transactions(producer_ids=sorted({c[1].producer_id for c in candidates})):
            listed.setdefault(t.producer_id, []).append(t.transactional_id)
        described = self.describe_transactions(sorted({tid for tids in listed.values() for tid in tids})) if listed else {}
        return hanging_among(candidates, listed, described)


def open_transactions(
    producers: dict[TopicPartition, PartitionProducerState], max_transaction_timeout_ms: int, now_ms: int
) -> list[tuple[TopicPartition, ProducerState, int]]:
    """``(tp, producer, age_ms)`` of every transaction open at a partition whose last write is
    older than ``max_transaction_timeout_ms`` (0: any age; age -1 when the last timestamp is
    unknown, which counts as old)."""
    out = []
    for tp, state in sorted(producers.items()):
        for p in state.active_producers:
            if p.current_transaction_start_offset < 0:
                continue
            age = now_ms - p.last_timestamp if p.last_timestamp >= 0 else -1
            if max_transaction_timeout_ms == 0 or age < 0 or age > max_transaction_timeout_ms:
                out.append((tp, p, age))
    return out


def hanging_among(
    candidates: list[tuple[TopicPartition, ProducerState, int]], listed: dict[int, list[str]], described: dict[str, TransactionDescription]
) -> list[HangingTransaction]:
    """The candidates no coordinator holds: hanging unless one of the transactional ids
    listed for the producer id is Ongoing/PrepareCommit/PrepareAbort with that partition, at
    the producer's epoch or a later one (a bumped epoch still owns the transaction; the
    coordinator ends it)."""
    out = []
    for tp, p, age in candidates:
        tids = [t for t in listed.get(p.producer_id, []) if t in described]
        if any(
            described[t].state in _RUNNING and described[t].producer_id == p.producer_id and tp in described[t].topic_partitions and described[t].producer_epoch >= p.producer_epoch
            for t in tids
        ):
            continue
        if not tids:
            reason = "no transaction coordinator knows this producer id"
        else:
            d = described[tids[0]]
            reason = f"its coordinator has {tids[0]!r} {d.state} at epoch {d.producer_epoch}" + ("" if tp in d.topic_partitions else f", without {tp.topic}-{tp.partition}")
        out.append(HangingTransaction(tp, p.producer_id, p.producer_epoch, p.coordinator_epoch, p.current_transaction_start_offset, p.last_timestamp, age, tids[0] if tids else None, reason))
    return sorted(out)


def _tp(tp: Any) -> TopicPartition:
    if isinstance(tp, tuple) and len(tp) == 2 and isinstance(tp[0], str) and isinstance(tp[1], int) and not isinstance(tp[1], bool):
        return TopicPartition(tp[0], tp[1])
    raise TypeError(f"a partition is a TopicPartition(topic, partition), got {tp!r}")
