"""Produce, Fetch and ListOffsets: Kafka's multi-partition requests fanned out to the
partition leaders (one kcoord replica actor per partition), answered per partition."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from kafka.protocol.consumer import FetchResponse, ListOffsetsResponse
from kafka.protocol.producer import ProduceResponse

from ... import record as R
from ...protocol.errors import ErrorCode
from ...protocol.replication import FetchRequest, ListOffsetsRequest, ProduceRequest
from ...record.conversion import to_kafka
from ...security.acl import ACLOperation as Op, ResourceType as RT
from ._base import ListenerContext

logger = logging.getLogger("kcoord.kafka")
E = ErrorCode


# -- Produce (0) ---------------------------------------------------------------------------


def _split_batches(data: bytes) -> tuple[list[bytes], int, str | None]:
    """The v2 batches of a Produce partition's records: (batches, error, message)."""
    if not data:
        return [], E.INVALID_RECORD, "no record batch"
    mv = memoryview(data)
    spans = []
    pos = 0
    while pos < len(data):
        if len(data) - pos < R.HEADER_SIZE:
            return [], E.CORRUPT_MESSAGE, f"truncated record batch at byte {pos}"
        h = R.read_header(mv, pos)
        if h.magic != R.KAFKA_FORMAT:
            return [], E.INVALID_RECORD, f"record batch magic {h.magic}: Produce v3+ carries v2 (magic 2) batches"
        if h.batch_length < R.HEADER_SIZE - R.LENGTH_PREFIX or pos + h.size > len(data):
            return [], E.CORRUPT_MESSAGE, f"record batch at byte {pos} has length {h.batch_length}, {len(data) - pos} bytes left"
        if h.attributes & R.CONTROL_BIT:
            return [], E.INVALID_RECORD, "a control batch from a client: only transaction coordinators write markers"
        spans.append((pos, pos + h.size))
        pos += h.size
    if len(spans) == 1 and isinstance(data, bytes):
        return [data], 0, None  # the usual case, one batch: no copy of up to a megabyte
    return [bytes(mv[a:b]) for a, b in spans], 0, None


_OUT_OF_ORDER_RETRIES = 20  # ~1 s in all
# Below this a produce call's argument travels inline with the call (Ray's
# max_direct_call_object_size is 100 KiB), which keeps calls from one caller in order.
INLINE_BYTES = 64 * 1024
STATS = {"out_of_order_resends": 0, "produce_requests": 0, "produce_ms_total": 0.0}


async def _ready(value: Any) -> Any:
    return value


async def _answer_in_time(ctx: ListenerContext, kreq: ProduceRequest, pending: Any) -> Any:
    """The answer to an idempotent batch sent ahead of its predecessor's answer. Ray may
    deliver calls to an actor out of order; a replica that sees a batch before the one
    before it answers OUT_OF_ORDER_SEQUENCE_NUMBER without appending, and it is sent again
    (its predecessor was sent first, so it lands in the meantime)."""
    resp = await pending
    for attempt in range(_OUT_OF_ORDER_RETRIES):
        if resp.error_code != E.OUT_OF_ORDER_SEQUENCE_NUMBER:
            break
        STATS["out_of_order_resends"] += 1
        await asyncio.sleep(0.005 * (attempt + 1))
        resp = await ctx.backend.produce(kreq)
    return resp


async def _append_in_order(ctx: ListenerContext, topic: str, index: int, batches: list[bytes], acks: int, timeout_ms: int, transactional_id: str | None) -> Any:
    """Append a partition's batches one after the other; the first error stops it. The
    answer carries the first batch's base offset."""
    first = None
    for batch in batches:
        resp = await ctx.backend.produce(ProduceRequest(topic=topic, partition=index, records=batch, acks=acks, timeout_ms=timeout_ms, transactional_id=transactional_id))
        if resp.error_code:
            return resp
        if first is None:
            first = resp
    return first


async def _chained(ctx: ListenerContext, kreqs: list[ProduceRequest], before: tuple | None, after_answer: bool, sent: asyncio.Future) -> Any:
    """One link of a partition's chain: wait for the batch before it (its sending, or its
    answer when ``after_answer``), send, then wait for the answer."""
    try:
        if before is not None:
            await asyncio.wait([before[2] if after_answer else before[1]])
        if len(kreqs) == 1 and not after_answer:
            pending = await ctx.backend.submit_produce(kreqs[0])
            sent.set_result(True)
            return await _answer_in_time(ctx, kreqs[0], pending)
        sent.set_result(True)
        if len(kreqs) == 1:
            return await _answer_in_time(ctx, kreqs[0], await ctx.backend.submit_produce(kreqs[0]))
        return await _append_in_order(ctx, kreqs[0].topic, kreqs[0].partition, [k.records for k in kreqs], kreqs[0].acks, kreqs[0].timeout_ms, kreqs[0].transactional_id)
    finally:
        if not sent.done():
            sent.set_result(False)


async def produce(ctx: ListenerContext, conn: Any, req: Any, version: int) -> Any:
    """Each partition's batches reach its leader in the order the requests came on this
    connection (as a Kafka broker takes them), through a chain per partition that is joined
    before this handler first awaits anything. An idempotent batch (producer id set) waits
    only for the one before it to be *sent*; its answer (acks=all: after replication) comes
    when it comes, so a client's max.in.flight requests replicate at once. A batch without
    a producer id waits for the one before it to be answered (never reordered). Ray passes
    arguments over 64 KiB through its object store and may then deliver a later call first,
    so a large batch, and the batch after one, also wait for the answer before them."""
    P = ProduceResponse
    acks = req.acks
    tid = req.transactional_id
    started = time.perf_counter()
    STATS["produce_requests"] += 1
    split: dict[tuple[str, int], tuple[list[bytes], int, str | None]] = {}
    for td in req.topic_data:
        for pd in td.partition_data:
            split[(td.name, pd.index)] = _split_batches(pd.records or b"")
    # Kafka: a request with transactional batches needs WRITE on its transactional id. Each
    # partition's leader verifies a transaction's first batch there with the transaction
    # coordinator (KIP-890 part 1), so the id goes with every batch.
    transactional = any(not code and any(R.read_header(b).attributes & R.TRANSACTIONAL_BIT for b in bs) for bs, code, _ in split.values())
    if transactional and (tid is None or not ctx.allowed(conn, Op.WRITE, RT.TRANSACTIONAL_ID, tid)):
        return produce_error(req, version, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "transactional batches need the request's transactional id and WRITE on it")
    slots: list[tuple[str, int, Any]] = []
    for td in req.topic_data:
        if not ctx.allowed(conn, Op.WRITE, RT.TOPIC, td.name):
            slots += [(td.name, pd.index, _ready((E.TOPIC_AUTHORIZATION_FAILED, None))) for pd in td.partition_data]
            continue
        for pd in td.partition_data:
            batches, code, message = split[(td.name, pd.index)]
            if not code and acks not in (0, 1, -1):
                code, message = E.INVALID_REQUIRED_ACKS, f"acks must be 0, 1 or -1, got {acks}"
            if code:
                slots.append((td.name, pd.index, _ready((code, message))))
                continue
            key = (td.name, pd.index)
            before = conn.in_flight.get(key)
            if before is not None and before[2].done():
                before = None
            large = any(len(b) > INLINE_BYTES for b in batches)
            idempotent = len(batches) == 1 and R.read_header(batches[0]).producer_id >= 0
            after_answer = not idempotent or large or (before is not None and before[0])
            kreqs = [ProduceRequest(topic=td.name, partition=pd.index, records=b, acks=acks, timeout_ms=req.timeout_ms, transactional_id=tid) for b in batches]
            sent = asyncio.get_running_loop().create_future()
            answer = asyncio.ensure_future(_chained(ctx, kreqs, before, after_answer, sent))
            conn.in_flight[key] = (large or not idempotent, sent, answer)
            slots.append((td.name, pd.index, answer))
    answers = await asyncio.gather(*(aw for _, _, aw in slots))
    STATS["produce_ms_total"] += (time.perf_counter() - started) * 1000
    if acks == 0:
        return None
    by_topic: dict[str, list] = {}
    for (topic, index, _), resp in zip(slots, answers):
        if isinstance(resp, tuple):
            code, message = resp
            base = append_time = log_start = -1
        else:
            code, message = resp.error_code, resp.error_message
            base, append_time, log_start = resp.base_offset, resp.log_append_time, resp.log_start_offset
        if code and code not in (E.NOT_LEADER_OR_FOLLOWER, E.NOT_ENOUGH_REPLICAS, E.REQUEST_TIMED_OUT, E.LEADER_NOT_AVAILABLE):
            logger.info("[kafka %s] produce to %s-%d: %s %s", conn.peer, topic, index, code, message)
        by_topic.setdefault(topic, []).append(
            P.TopicProduceResponse.PartitionProduceResponse(
                index=index,
                error_code=code,
                base_offset=base if not code else -1,
                log_append_time_ms=append_time,
                log_start_offset=log_start,
                record_errors=[],
                error_message=message if code else None,
            )
        )
    return P(responses=[P.TopicProduceResponse(name=t, partition_responses=ps) for t, ps in by_topic.items()], throttle_time_ms=0)


def produce_error(req: Any, version: int, code: int, message: str | None) -> Any:
    P = ProduceResponse
    if req is None:
        return P(responses=[], throttle_time_ms=0)
    if req.acks == 0:
        return None
    return P(
        responses=[
            P.TopicProduceResponse(
                name=td.name,
                partition_responses=[
                    P.TopicProduceResponse.PartitionProduceResponse(index=pd.index, error_code=code, base_offset=-1, log_append_time_ms=-1, log_start_offset=-1, record_errors=[], error_message=message)
                    for pd in td.partition_data
                ],
            )
            for td in req.topic_data
        ],
        throttle_time_ms=0,
    )


# -- Fetch (1) -----------------------------------------------------------------------------


async def fetch(ctx: ListenerContext, conn: Any, req: Any, version: int) -> Any:
    """Sessionless (session id 0) fetch. First every partition is read at once; if that
    found nothing, every partition long-polls and the response goes out when the first
    has data (or at max_wait), the others answered from the first round."""
    F = FetchResponse
    refused = [(t.topic, p.partition) for t in req.topics if not ctx.allowed(conn, Op.READ, RT.TOPIC, t.topic) for p in t.partitions]
    wanted = [
        (t.topic, p.partition, p.fetch_offset, p.partition_max_bytes, getattr(p, "current_leader_epoch", -1))
        for t in req.topics
        if not refused or ctx.allowed(conn, Op.READ, RT.TOPIC, t.topic)
        for p in t.partitions
    ]

    isolation = getattr(req, "isolation_level", 0) or 0  # Fetch v4+: 1 is read_committed

    def kreq(topic: str, part: int, offset: int, max_bytes: int, epoch: int, wait_ms: int) -> FetchRequest:
        return FetchRequest(
            topic=topic, partition=part, fetch_offset=offset, max_bytes=max(1, max_bytes), min_bytes=1, max_wait_ms=wait_ms,
            current_leader_epoch=epoch if epoch is not None else -1, isolation_level=isolation,
        )

    first = await asyncio.gather(*(ctx.backend.fetch(kreq(*w, 0)) for w in wanted))
    results = dict(zip(range(len(wanted)), first))
    have_data = any(r.records for r in first)
    if not have_data and req.max_wait_ms > 0 and wanted:
        polls = {
            asyncio.ensure_future(ctx.backend.fetch(kreq(*w, req.max_wait_ms))): i
            for i, w in enumerate(wanted)
            if first[i].error_code == 0
        }
        if polls:
            done, pending = await asyncio.wait(polls, timeout=req.max_wait_ms / 1000 + 1, return_when=asyncio.FIRST_COMPLETED)
            if done:
                await asyncio.sleep(0)  # let answers that arrived together land
                done = {t for t in polls if t.done()}
            for t in done:
                try:
                    r = t.result()
                except Exception:
                    continue
                if r.error_code == 0:
                    results[polls[t]] = r
            for t in polls:
                if not t.done():
                    t.cancel()  # the replica answers its parked fetch at max_wait; ignored
    total = 0
    by_topic: dict[str, list] = {}
    for i, (topic, part, _offset, _mb, _epoch) in enumerate(wanted):
        r = results[i]
        records = r.records or b""
        if records and total >= req.max_bytes > 0:
            records = b""  # over the response's max_bytes: this partition waits for the next fetch
        if records:
            records = to_kafka(records)
            total += len(records)
        hw = r.high_watermark
        PD = F.FetchableTopicResponse.PartitionData
        aborted = [PD.AbortedTransaction(producer_id=pid, first_offset=first) for pid, first in r.aborted_transactions or ()]
        by_topic.setdefault(topic, []).append(
            PD(
                partition_index=part,
                error_code=r.error_code,
                high_watermark=hw,
                last_stable_offset=r.last_stable_offset if r.last_stable_offset >= 0 else hw,
                log_start_offset=r.log_start_offset,
                aborted_transactions=None if r.error_code else aborted,
                preferred_read_replica=-1,
                records=records,
            )
        )
    for topic, part in refused:
        by_topic.setdefault(topic, []).append(
            F.FetchableTopicResponse.PartitionData(
                partition_index=part, error_code=E.TOPIC_AUTHORIZATION_FAILED, high_watermark=-1, last_stable_offset=-1, log_start_offset=-1, aborted_transactions=None, preferred_read_replica=-1, records=b""
            )
        )
    return F(
        throttle_time_ms=0,
        error_code=0,
        session_id=0,  # fetch sessions declined: clients send full fetches
        responses=[F.FetchableTopicResponse(topic=t, partitions=ps) for t, ps in by_topic.items()],
    )


def fetch_error(req: Any, version: int, code: int, message: str | None) -> Any:
    F = FetchResponse
    topics = [] if req is None else req.topics
    return F(
        throttle_time_ms=0,
        error_code=code,
        session_id=0,
        responses=[
            F.FetchableTopicResponse(
                topic=t.topic,
                partitions=[
                    F.FetchableTopicResponse.PartitionData(partition_index=p.partition, error_code=code, high_watermark=-1, last_stable_offset=-1, log_start_offset=-1, aborted_transactions=None, preferred_read_replica=-1, records=b"")
                    for p in t.partitions
                ],
            )
            for t in topics
        ],
    )


# -- ListOffsets (2) -----------------------------------------------------------------------


async def list_offsets(ctx: ListenerContext, conn: Any, req: Any, version: int) -> Any:
    L = ListOffsetsResponse
    PR = L.ListOffsetsTopicResponse.ListOffsetsPartitionResponse

    async def one(topic: str, p: Any) -> Any:
        epoch = getattr(p, "current_leader_epoch", -1)
        r = await ctx.backend.list_offsets(
            ListOffsetsRequest(
                topic=topic, partition=p.partition_index, timestamp=p.timestamp, current_leader_epoch=-1 if epoch is None else epoch,
                isolation_level=getattr(req, "isolation_level", 0) or 0,  # v2+: 1 answers latest with the LSO
            )
        )
        if r.error_code:
            return PR(partition_index=p.partition_index, error_code=r.error_code, timestamp=-1, offset=-1, leader_epoch=-1)
        ts = r.timestamp if p.timestamp >= 0 else -1
        return PR(partition_index=p.partition_index, error_code=0, timestamp=ts, offset=r.offset, leader_epoch=r.leader_epoch)

    topics = []
    for t in req.topics:
        if not ctx.allowed(conn, Op.DESCRIBE, RT.TOPIC, t.name):
            parts = [PR(partition_index=p.partition_index, error_code=E.TOPIC_AUTHORIZATION_FAILED, timestamp=-1, offset=-1, leader_epoch=-1) for p in t.partitions]
            topics.append(L.ListOffsetsTopicResponse(name=t.name, partitions=parts))
            continue
        parts = await asyncio.gather(*(one(t.name, p) for p in t.partitions))
        topics.append(L.ListOffsetsTopicResponse(name=t.name, partitions=list(parts)))
    return L(throttle_time_ms=0, topics=topics)


def list_offsets_error(req: Any, version: int, code: int, message: str | None) -> Any:
    L = ListOffsetsResponse
    PR = L.ListOffsetsTopicResponse.ListOffsetsPartitionResponse
    topics = [] if req is None else req.topics
    return L(
        throttle_time_ms=0,
        topics=[L.ListOffsetsTopicResponse(name=t.name, partitions=[PR(partition_index=p.partition_index, error_code=code, timestamp=-1, offset=-1, leader_epoch=-1) for p in t.partitions]) for t in topics],
    )
