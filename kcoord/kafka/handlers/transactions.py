"""Transactions on the wire (docs/transactions.md section 4): InitProducerId with a
transactional id, AddPartitionsToTxn v0-3, AddOffsetsToTxn, EndTxn, TxnOffsetCommit,
DescribeTransactions, ListTransactions, DescribeProducers and WriteTxnMarkers (the partition leaders'), mapped onto kcoord's transaction coordinators
(``{cluster}/txn/{i}``, placed by ``kcoord.txn.coordinator_for``) and, for TxnOffsetCommit,
the group coordinators. (A transactional Produce's batches are verified by their partitions'
leaders, KIP-890 part 1: ``kcoord.replication.leader.txn_verification``.)

Every request carries ``wire_version``, the Kafka version it came at, so the coordinator
answers a client that predates PRODUCER_FENCED (KIP-588) with INVALID_PRODUCER_EPOCH.
EndTxn v0-3 never bumps the epoch (``bump_epoch=False``): Kafka's clients at those versions
keep one epoch for every transaction of an instance, which leaves the KAFKA-17754 window
(docs/kafka-wire.md). ACLs are Kafka's (KafkaApis): WRITE on the TRANSACTIONAL_ID for what
changes a transaction, DESCRIBE on it to find or describe one, READ on the GROUP and on each
TOPIC for TxnOffsetCommit, WRITE on each TOPIC for AddPartitionsToTxn, CLUSTER_ACTION on the
CLUSTER for WriteTxnMarkers.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kafka.protocol.admin.transactions import DescribeProducersResponse, DescribeTransactionsResponse, ListTransactionsResponse
from kafka.protocol.producer import (
    WriteTxnMarkersResponse,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    EndTxnResponse,
    InitProducerIdResponse,
    TxnOffsetCommitResponse,
)

from ...group.placement import coordinator_for as group_for
from ...protocol import names, txn as T
from ...protocol.group import OffsetCommitPartition
from ...protocol.errors import ErrorCode
from ...protocol.replication import DescribeProducersRequest as ReplicaDescribeProducers
from ...security.acl import CLUSTER_NAME, ACLOperation as Op, ResourceType as RT
from ...txn.placement import coordinator_for
from ...txn.state import TransactionState
from ._base import ListenerContext, coordinator_broker, error_name as _name

logger = logging.getLogger("kcoord.kafka")
E = ErrorCode


async def _txn_index(ctx: ListenerContext, transactional_id: str) -> int | None:
    count = await ctx.backend.transaction_coordinators()
    return None if count < 1 else coordinator_for(transactional_id, count)


async def txn_call(ctx: ListenerContext, method: str, req: Any, transactional_id: str) -> Any:
    """``method`` on the transaction coordinator of ``transactional_id``."""
    index = await _txn_index(ctx, transactional_id)
    if index is None:
        return T.error_response(req, E.COORDINATOR_NOT_AVAILABLE, "this kcoord cluster has no transaction coordinators")
    return await ctx.backend.txn_call(method, req, index)


# -- InitProducerId (22) with a transactional id -------------------------------------------


async def init_transactional_producer_id(ctx: ListenerContext, conn: Any, req: Any, version: int) -> Any:
    R = InitProducerIdResponse
    tid = req.transactional_id
    if not ctx.allowed(conn, Op.WRITE, RT.TRANSACTIONAL_ID, tid):
        return R(throttle_time_ms=0, error_code=E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, producer_id=-1, producer_epoch=-1)
    if tid == "":
        return R(throttle_time_ms=0, error_code=E.INVALID_REQUEST, producer_id=-1, producer_epoch=-1)
    kreq = T.TxnInitProducerIdRequest(
        transactional_id=tid,
        transaction_timeout_ms=req.transaction_timeout_ms,
        producer_id=req.producer_id if version >= 3 else T.NO_PRODUCER_ID,
        producer_epoch=req.producer_epoch if version >= 3 else T.NO_PRODUCER_EPOCH,
        wire_version=version,
    )
    resp = await txn_call(ctx, "init_producer_id", kreq, tid)
    _log(conn, "InitProducerId", tid, resp)
    return R(throttle_time_ms=0, error_code=resp.error_code, producer_id=resp.producer_id if not resp.error_code else -1, producer_epoch=resp.producer_epoch if not resp.error_code else -1)


# -- AddPartitionsToTxn (24), v0-3 -----------------------------------------------------------


async def add_partitions_to_txn(ctx: ListenerContext, conn: Any, req: Any, version: int) -> Any:
    """Kafka's order: WRITE on the transactional id (else every partition
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED), WRITE on each topic (else
    TOPIC_AUTHORIZATION_FAILED and the others OPERATION_NOT_ATTEMPTED); the coordinator checks
    that the partitions exist."""
    tid = req.v3_and_below_transactional_id
    wanted: dict[str, list[int]] = {}
    for t in req.v3_and_below_topics or []:
        wanted.setdefault(t.name, []).extend(t.partitions or [])
    if not ctx.allowed(conn, Op.WRITE, RT.TRANSACTIONAL_ID, tid):
        return _add_partitions_response({t: {p: E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED for p in ps} for t, ps in wanted.items()})
    refused = {t for t in wanted if not ctx.allowed(conn, Op.WRITE, RT.TOPIC, t)}
    if refused:
        return _add_partitions_response(
            {t: {p: E.TOPIC_AUTHORIZATION_FAILED if t in refused else E.OPERATION_NOT_ATTEMPTED for p in ps} for t, ps in wanted.items()}
        )
    kreq = T.AddPartitionsToTxnRequest(
        transactional_id=tid,
        producer_id=req.v3_and_below_producer_id,
        producer_epoch=req.v3_and_below_producer_epoch,
        topics={t: sorted(set(ps)) for t, ps in wanted.items()},
        wire_version=version,
    )
    resp = await txn_call(ctx, "add_partitions_to_txn", kreq, tid)
    _log(conn, "AddPartitionsToTxn", tid, resp)
    results = {t: {p: resp.results.get(t, {}).get(p, resp.error_code) for p in ps} for t, ps in kreq.topics.items()}
    return _add_partitions_response(results)


def _add_partitions_response(results: dict[str, dict[int, int]]) -> Any:
    R = AddPartitionsToTxnResponse
    TR = R.AddPartitionsToTxnTopicResult
    return R(
        throttle_time_ms=0,
        results_by_topic_v3_and_below=[
            TR(name=t, results_by_partition=[TR.AddPartitionsToTxnPartitionResult(partition_index=p, partition_error_code=int(c)) for p, c in sorted(ps.items())])
            for t, ps in results.items()
        ],
    )


def add_partitions_to_txn_error(req: Any, version: int, code: int, message: str | None) -> Any:
    topics = [] if req is None else (req.v3_and_below_topics or [])
    return _add_partitions_response({t.name: {p: code for p in t.partitions or []} for t in topics})


# -- AddOffsetsToTxn (25) --------------------------------------------------------------------


async def add_offsets_to_txn(ctx: ListenerContext, conn: Any, req: Any, version: int) -> Any:
    R = AddOffsetsToTxnResponse
    if not ctx.allowed(conn, Op.WRITE, RT.TRANSACTIONAL_ID, req.transactional_id):
        return R(throttle_time_ms=0, error_code=E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not ctx.allowed(conn, Op.READ, RT.GROUP, req.group_id):
        return R(throttle_time_ms=0, error_code=E.GROUP_AUTHORIZATION_FAILED)
    kreq = T.AddOffsetsToTxnRequest(
        transactional_id=req.transactional_id,
        producer_id=req.producer_id,
        producer_epoch=req.producer_epoch,
        group_id=req.group_id,
        wire_version=version,
    )
    resp = await txn_call(ctx, "add_offsets_to_txn", kreq, req.transactional_id)
    _log(conn, "AddOffsetsToTxn", req.transactional_id, resp)
    return R(throttle_time_ms=0, error_code=resp.error_code)


def add_offsets_to_txn_error(req: Any, version: int, code: int, message: str | None) -> Any:
    return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=code)


# -- EndTxn (26), v0-3 -----------------------------------------------------------------------


async def end_txn(ctx: ListenerContext, conn: Any, req: Any, version: int) -> Any:
    """``bump_epoch=False``: EndTxn v0-3 clients keep their epoch across transactions
    (Kafka's transaction version 1); v5's per-transaction bump is not served."""
    R = EndTxnResponse
    tid = req.transactional_id
    if not ctx.allowed(conn, Op.WRITE, RT.TRANSACTIONAL_ID, tid):
        return R(throttle_time_ms=0, error_code=E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    kreq = T.EndTxnRequest(
        transactional_id=tid,
        producer_id=req.producer_id,
        producer_epoch=req.producer_epoch,
        commit=bool(req.committed),
        bump_epoch=False,
        wire_version=version,
    )
    resp = await txn_call(ctx, "end_txn", kreq, tid)
    _log(conn, "EndTxn", tid, resp)
    return R(throttle_time_ms=0, error_code=resp.error_code)


def end_txn_error(req: Any, version: int, code: int, message: str | None) -> Any:
    return EndTxnResponse(throttle_time_ms=0, error_code=code)


# -- TxnOffsetCommit (28), v0-3 --------------------------------------------------------------


async def txn_offset_commit(ctx: ListenerContext, conn: Any, req: Any, version: int) -> Any:
    """Kafka's checks: WRITE on the transactional id, READ on the group (else every partition
    fails with that), then READ on each topic (TOPIC_AUTHORIZATION_FAILED) and its existence
    (UNKNOWN_TOPIC_OR_PARTITION); the rest goes to the group's coordinator, which keeps the
    offsets pending until the transaction's marker."""
    wanted = {t.name: {p.partition_index: p for p in t.partitions or []} for t in req.topics or []}

    def everywhere(code: int) -> Any:
        return _txn_offset_commit_response({t: {p: code for p in ps} for t, ps in wanted.items()})

    if not ctx.allowed(conn, Op.WRITE, RT.TRANSACTIONAL_ID, req.transactional_id):
        return everywhere(E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not ctx.allowed(conn, Op.READ, RT.GROUP, req.group_id):
        return everywhere(E.GROUP_AUTHORIZATION_FAILED)
    results: dict[str, dict[int, int]] = {}
    topics: dict[str, dict[int, OffsetCommitPartition]] = {}
    for name, parts in wanted.items():
        if not ctx.allowed(conn, Op.READ, RT.TOPIC, name):
            results[name] = {p: E.TOPIC_AUTHORIZATION_FAILED for p in parts}
            continue
        meta = await ctx.backend.topic(name)
        known = set() if meta is None else {p.partition for p in meta.partitions}
        for index, p in parts.items():
            if index not in known:
                results.setdefault(name, {})[index] = E.UNKNOWN_TOPIC_OR_PARTITION
                continue
            epoch = getattr(p, "committed_leader_epoch", -1)
            topics.setdefault(name, {})[index] = OffsetCommitPartition(
                offset=p.committed_offset, metadata=p.committed_metadata, leader_epoch=-1 if epoch is None else epoch
            )
    if topics:
        count = await ctx.backend.group_coordinators()
        kreq = T.TxnOffsetCommitRequest(
            transactional_id=req.transactional_id,
            group_id=req.group_id,
            producer_id=req.producer_id,
            producer_epoch=req.producer_epoch,
            generation_id=req.generation_id if version >= 3 else -1,
            member_id=(req.member_id or "") if version >= 3 else "",
            group_instance_id=req.group_instance_id if version >= 3 else None,
            topics=topics,
            wire_version=version,
        )
        if count < 1:
            resp = T.error_response(kreq, E.COORDINATOR_NOT_AVAILABLE, "this kcoord cluster has no group coordinators")
        else:
            resp = await ctx.backend.txn_offset_commit(kreq, group_for(req.group_id, count))
        _log(conn, "TxnOffsetCommit", req.transactional_id, resp)
        for name, parts in topics.items():
            for index in parts:
                results.setdefault(name, {})[index] = resp.topics.get(name, {}).get(index, resp.error_code)
    return _txn_offset_commit_response({t: results.get(t, {}) for t in wanted})


def _txn_offset_commit_response(results: dict[str, dict[int, int]]) -> Any:
    R = TxnOffsetCommitResponse
    TR = R.TxnOffsetCommitResponseTopic
    return R(
        throttle_time_ms=0,
        topics=[TR(name=t, partitions=[TR.TxnOffsetCommitResponsePartition(partition_index=p, error_code=int(c)) for p, c in sorted(ps.items())]) for t, ps in results.items()],
    )


def txn_offset_commit_error(req: Any, version: int, code: int, message: str | None) -> Any:
    topics = [] if req is None else (req.topics or [])
    return _txn_offset_commit_response({t.name: {p.partition_index: code for p in t.partitions or []} for t in topics})


# -- DescribeTransactions (65) ---------------------------------------------------------------


async def describe_transactions(ctx: ListenerContext, conn: Any, req: Any, version: int) -> Any:
    """Each id from its own coordinator, answered in request order; an id the principal may
    not DESCRIBE is TRANSACTIONAL_ID_AUTHORIZATION_FAILED, and a transaction's topics it may
    not DESCRIBE are left out (Kafka's rules)."""
    R = DescribeTransactionsResponse
    ids = list(req.transactional_ids or [])
    answers: dict[str, T.DescribedTransaction] = {}
    by_index: dict[int, list[str]] = {}
    count = await ctx.backend.transaction_coordinators()
    for tid in ids:
        if not ctx.allowed(conn, Op.DESCRIBE, RT.TRANSACTIONAL_ID, tid):
            answers[tid] = T.DescribedTransaction(tid, error_code=E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        elif count < 1:
            answers[tid] = T.DescribedTransaction(tid, error_code=E.COORDINATOR_NOT_AVAILABLE)
        else:
            by_index.setdefault(coordinator_for(tid, count), []).append(tid)

    async def ask(index: int, tids: list[str]) -> None:
        kreq = T.DescribeTransactionsRequest(transactional_ids=tids)
        resp = await ctx.backend.txn_call("describe_transactions", kreq, index)
        got = {d.transactional_id: d for d in resp.transactions}
        for tid in tids:
            answers[tid] = got.get(tid) or T.DescribedTransaction(tid, error_code=resp.error_code or E.UNKNOWN_SERVER_ERROR)

    await asyncio.gather(*(ask(i, tids) for i, tids in by_index.items()))
    S = R.TransactionState
    out = []
    for tid in ids:
        d = answers[tid]
        topics = [S.TopicData(topic=t, partitions=sorted(ps)) for t, ps in sorted(d.topics.items()) if ctx.allowed(conn, Op.DESCRIBE, RT.TOPIC, t)]
        out.append(
            S(
                error_code=d.error_code,
                transactional_id=tid,
                transaction_state=d.state,
                transaction_timeout_ms=d.timeout_ms,
                transaction_start_time_ms=d.start_time_ms,
                producer_id=d.producer_id,
                producer_epoch=d.producer_epoch,
                topics=topics,
            )
        )
    return R(throttle_time_ms=0, transaction_states=out)


def describe_transactions_error(req: Any, version: int, code: int, message: str | None) -> Any:
    R = DescribeTransactionsResponse
    ids = [] if req is None else (req.transactional_ids or [])
    return R(
        throttle_time_ms=0,
        transaction_states=[
            R.TransactionState(error_code=code, transactional_id=t, transaction_state="", transaction_timeout_ms=0, transaction_start_time_ms=-1, producer_id=-1, producer_epoch=-1, topics=[])
            for t in ids
        ],
    )


# -- ListTransactions (66), v0-1 -------------------------------------------------------------


async def list_transactions(ctx: ListenerContext, conn: Any, req: Any, version: int) -> Any:
    """The transactions of the coordinators FindCoordinator names as this connection's broker
    (an admin client asks every broker and merges), those the principal may DESCRIBE."""
    R = ListTransactionsResponse
    count = await ctx.backend.transaction_coordinators()
    view = await ctx.broker_view()
    kreq = T.ListTransactionsRequest(
        states_filter=list(req.state_filters or []) or None,
        producer_ids_filter=list(req.producer_id_filters or []) or None,
        duration_filter_ms=req.duration_filter if version >= 1 else -1,
    )
    mine = [i for i in range(count) if coordinator_broker(view, i) == conn.broker]
    answers = await asyncio.gather(*(ctx.backend.txn_call("list_transactions", kreq, i) for i in mine))
    code = 0
    unknown = sorted(set(kreq.states_filter or []) - {s.value for s in TransactionState})
    listed = []
    for resp in answers:
        if resp.error_code:
            code = resp.error_code
            continue
        listed += [
            R.TransactionState(transactional_id=t.transactional_id, producer_id=t.producer_id, transaction_state=t.state)
            for t in resp.transactions
            if ctx.allowed(conn, Op.DESCRIBE, RT.TRANSACTIONAL_ID, t.transactional_id)
        ]
    return R(throttle_time_ms=0, error_code=code, unknown_state_filters=unknown, transaction_states=listed)


def list_transactions_error(req: Any, version: int, code: int, message: str | None) -> Any:
    return ListTransactionsResponse(throttle_time_ms=0, error_code=code, unknown_state_filters=[], transaction_states=[])


# -- DescribeProducers (61) -----------------------------------------------------------------


async def describe_producers(ctx: ListenerContext, conn: Any, req: Any, version: int) -> Any:
    """Each partition's leader's producer state (KIP-664), READ on the topic (Kafka's rule).
    The last timestamp is the max timestamp of the producer's last batch (-1 once it is gone)."""
    R = DescribeProducersResponse
    TR = R.TopicResponse
    PR = TR.PartitionResponse

    async def one(topic: str, index: int) -> Any:
        if not ctx.allowed(conn, Op.READ, RT.TOPIC, topic):
            return PR(partition_index=index, error_code=E.TOPIC_AUTHORIZATION_FAILED, error_message=None, active_producers=[])
        resp = await ctx.backend.describe_producers(ReplicaDescribeProducers(topic=topic, partition=index))
        if resp.error_code:
            return PR(partition_index=index, error_code=resp.error_code, error_message=resp.error_message, active_producers=[])
        producers = [
            PR.ProducerState(
                producer_id=p.producer_id,
                producer_epoch=p.producer_epoch,
                last_sequence=p.last_sequence,
                last_timestamp=p.last_timestamp,
                coordinator_epoch=p.coordinator_epoch,
                current_txn_start_offset=p.current_txn_start_offset,
            )
            for p in resp.producers
        ]
        return PR(partition_index=index, error_code=0, error_message=None, active_producers=producers)

    wanted = [(t.name, list(t.partition_indexes or [])) for t in req.topics or []]
    answers = await asyncio.gather(*(asyncio.gather(*(one(t, i) for i in parts)) for t, parts in wanted))
    return R(throttle_time_ms=0, topics=[TR(name=t, partitions=list(ps)) for (t, _), ps in zip(wanted, answers)])


def describe_producers_error(req: Any, version: int, code: int, message: str | None) -> Any:
    R = DescribeProducersResponse
    TR = R.TopicResponse
    topics = [] if req is None else (req.topics or [])
    return R(
        throttle_time_ms=0,
        topics=[TR(name=t.name, partitions=[TR.PartitionResponse(partition_index=i, error_code=code, error_message=message, active_producers=[]) for i in t.partition_indexes or []]) for t in topics],
    )


# -- WriteTxnMarkers (27), v1-2 ------------------------------------------------------------


async def write_txn_markers(ctx: ListenerContext, conn: Any, req: Any, version: int) -> Any:
    """What Kafka's Admin.abortTransaction sends (KIP-664): each marker to each partition's
    leader, which checks the producer and coordinator epochs and answers once the marker is
    below the HW. CLUSTER_ACTION on the cluster or every partition fails
    CLUSTER_AUTHORIZATION_FAILED (Kafka's rule: only brokers and operators write markers).
    A marker for ``__consumer_offsets`` partition i goes to group coordinator i as its
    TxnOffsetMarker; other internal topics are refused by their leaders. v2's
    ``transaction_version`` is accepted and not used (kcoord's markers have one format)."""
    R = WriteTxnMarkersResponse
    markers = list(req.markers or [])
    if not ctx.allowed(conn, Op.CLUSTER_ACTION, RT.CLUSTER, CLUSTER_NAME):
        return write_txn_markers_error(req, version, E.CLUSTER_AUTHORIZATION_FAILED, None)
    offsets_topic = names.OFFSETS_TOPIC

    async def one(m: Any, topic: str, index: int) -> int:
        if topic == offsets_topic:
            count = await ctx.backend.group_coordinators()
            if not 0 <= index < count:
                return E.UNKNOWN_TOPIC_OR_PARTITION
            oreq = T.TxnOffsetMarkerRequest(m.producer_id, m.producer_epoch, m.coordinator_epoch, bool(m.transaction_result), index)
            resp = await ctx.backend.txn_offset_marker(oreq, index)
        else:
            kreq = T.WriteTxnMarkerRequest(m.producer_id, m.producer_epoch, m.coordinator_epoch, bool(m.transaction_result), topic, index)
            resp = await ctx.backend.write_txn_marker(kreq)
        if resp.error_code:
            logger.info(
                "[kafka %s] WriteTxnMarkers %s producer %d epoch %d to %s-%d: %s %s",
                conn.peer, "COMMIT" if m.transaction_result else "ABORT", m.producer_id, m.producer_epoch, topic, index, _name(resp.error_code), resp.error_message or "",
            )
        else:
            logger.warning(
                "[kafka %s] WriteTxnMarkers wrote %s for producer %d epoch %d (coordinator epoch %d) to %s-%d",
                conn.peer, "COMMIT" if m.transaction_result else "ABORT", m.producer_id, m.producer_epoch, m.coordinator_epoch, topic, index,
            )
        return int(resp.error_code)

    async def marker(m: Any) -> Any:
        topics = [(t.name, list(t.partition_indexes or [])) for t in m.topics or []]
        codes = await asyncio.gather(*(asyncio.gather(*(one(m, t, i) for i in parts)) for t, parts in topics))
        return _marker_result(m.producer_id, {t: dict(zip(parts, cs)) for (t, parts), cs in zip(topics, codes)})

    return R(markers=list(await asyncio.gather(*(marker(m) for m in markers))))


def _marker_result(producer_id: int, codes: dict[str, dict[int, int]]) -> Any:
    MR = WriteTxnMarkersResponse.WritableTxnMarkerResult
    TR = MR.WritableTxnMarkerTopicResult
    return MR(
        producer_id=producer_id,
        topics=[TR(name=t, partitions=[TR.WritableTxnMarkerPartitionResult(partition_index=p, error_code=int(c)) for p, c in ps.items()]) for t, ps in codes.items()],
    )


def write_txn_markers_error(req: Any, version: int, code: int, message: str | None) -> Any:
    markers = [] if req is None else (req.markers or [])
    return WriteTxnMarkersResponse(
        markers=[_marker_result(m.producer_id, {t.name: {p: code for p in t.partition_indexes or []} for t in m.topics or []}) for m in markers]
    )


def _log(conn: Any, api: str, tid: str, resp: Any) -> None:
    if resp.error_code and resp.error_code not in (E.CONCURRENT_TRANSACTIONS, E.COORDINATOR_LOAD_IN_PROGRESS):
        logger.info("[kafka %s] %s %r: %s %s", conn.peer, api, tid, _name(resp.error_code), resp.error_message or "")
