"""Handlers over a fake backend (no Ray): Produce ordering and pipelining, the resend of an
idempotent batch that arrived out of order, JoinGroup before KIP-394."""

from __future__ import annotations

import asyncio

import pytest
from kafka.protocol.consumer import JoinGroupRequest
from kafka.protocol.producer import ProduceRequest

from kcoord import records as R
from kcoord.kafka.batches import build_kafka_batch
from kcoord.kafka.handlers import ListenerContext, consumer_groups, data
from kcoord.kafka.server import Connection
from kcoord.protocol import group as G
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.replication import ProduceResponse

pytestmark = pytest.mark.kafka


class FakeBackend:
    def __init__(self, out_of_order_first: bool = False) -> None:
        self.log: list[tuple[str, int]] = []  # ("sent"|"done", base sequence)
        self.release: dict[int, asyncio.Event] = {}
        self.out_of_order_first = out_of_order_first
        self.resends = 0
        self.joins: list[str] = []

    def _seq(self, req) -> int:
        return R.read_header(req.records).base_sequence

    async def _answer(self, seq: int) -> ProduceResponse:
        await self.release.setdefault(seq, asyncio.Event()).wait()
        self.log.append(("done", seq))
        return ProduceResponse(base_offset=seq)

    async def submit_produce(self, req):
        seq = self._seq(req)
        self.log.append(("sent", seq))
        if self.out_of_order_first and seq == 1 and self.resends == 0:

            async def ooo():
                return ProduceResponse(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, "ahead")

            return ooo()
        return self._answer(seq)

    async def produce(self, req):
        seq = self._seq(req)
        if seq == 1 and self.out_of_order_first:
            self.resends += 1
        self.log.append(("sent", seq))
        return await self._answer(seq)

    async def group_coordinators(self):
        return 1

    async def group_call(self, method, req, index, timeout=330.0):
        assert method == "join_group"
        self.joins.append(req.member_id)
        if not req.member_id:
            return G.JoinGroupResponse(ErrorCode.MEMBER_ID_REQUIRED, member_id="m-1")
        return G.JoinGroupResponse(generation_id=1, protocol_name="range", leader="m-1", member_id=req.member_id, members=[G.JoinGroupMember("m-1", metadata=b"x")])


def produce_request(seq: int, producer_id: int) -> ProduceRequest:
    batch = build_kafka_batch([(None, b"v", [], 1)], producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1, base_sequence=seq if producer_id >= 0 else -1)
    if producer_id < 0:  # tag the batch so the fake can tell them apart
        batch = bytearray(batch)
        R._TAIL.pack_into(batch, 21, *R.read_header(bytes(batch))[5:8], *R.read_header(bytes(batch))[8:11], seq, 1)
        batch = bytes(batch)
    T = ProduceRequest.TopicProduceData
    return ProduceRequest(transactional_id=None, acks=-1, timeout_ms=1000, topic_data=[T(name="t", partition_data=[T.PartitionProduceData(index=0, records=batch)])])


async def two_produces(backend: FakeBackend, producer_id: int) -> list:
    ctx = ListenerContext(backend=backend, host="127.0.0.1")
    conn = Connection()
    first = asyncio.ensure_future(data.produce(ctx, conn, produce_request(0, producer_id), 8))
    second = asyncio.ensure_future(data.produce(ctx, conn, produce_request(1, producer_id), 8))
    for _ in range(20):
        await asyncio.sleep(0)
    backend.release.setdefault(1, asyncio.Event()).set()
    for _ in range(20):
        await asyncio.sleep(0)
    backend.release.setdefault(0, asyncio.Event()).set()
    return await asyncio.gather(first, second)


def test_idempotent_batches_are_sent_in_order_and_replicate_together():
    backend = FakeBackend()
    a, b = asyncio.run(two_produces(backend, producer_id=7))
    # both sent before the first was answered; answers in any order
    assert backend.log[:2] == [("sent", 0), ("sent", 1)]
    assert backend.log[2:] == [("done", 1), ("done", 0)]
    assert a.responses[0].partition_responses[0].base_offset == 0 and b.responses[0].partition_responses[0].base_offset == 1


def test_other_batches_wait_for_the_one_before():
    backend = FakeBackend()
    asyncio.run(two_produces(backend, producer_id=-1))
    assert backend.log == [("sent", 0), ("done", 0), ("sent", 1), ("done", 1)]


def test_a_batch_that_arrived_out_of_order_is_sent_again():
    backend = FakeBackend(out_of_order_first=True)
    _, b = asyncio.run(two_produces(backend, producer_id=7))
    assert backend.resends == 1
    assert b.responses[0].partition_responses[0].error_code == 0


def test_join_group_v3_rejoins_with_the_assigned_member_id():
    backend = FakeBackend()
    ctx = ListenerContext(backend=backend, host="127.0.0.1")
    req = JoinGroupRequest(group_id="g", session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="", protocol_type="consumer", protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"x")])
    resp = asyncio.run(consumer_groups.join_group(ctx, Connection(client_id="c"), req, 3))
    assert backend.joins == ["", "m-1"] and resp.error_code == 0 and resp.member_id == "m-1" and resp.leader == "m-1"
    backend.joins.clear()
    resp = asyncio.run(consumer_groups.join_group(ctx, Connection(client_id="c"), req, 4))
    assert backend.joins == [""] and resp.error_code == ErrorCode.MEMBER_ID_REQUIRED and resp.member_id == "m-1"


def test_a_large_idempotent_batch_is_not_overtaken():
    backend = FakeBackend()

    async def main():
        ctx = ListenerContext(backend=backend, host="127.0.0.1")
        conn = Connection()
        T = ProduceRequest.TopicProduceData
        big = build_kafka_batch([(None, bytes(200_000), [], 1)], producer_id=7, producer_epoch=0, base_sequence=0)
        first = asyncio.ensure_future(
            data.produce(ctx, conn, ProduceRequest(transactional_id=None, acks=-1, timeout_ms=1000, topic_data=[T(name="t", partition_data=[T.PartitionProduceData(index=0, records=big)])]), 8)
        )
        second = asyncio.ensure_future(data.produce(ctx, conn, produce_request(1, 7), 8))
        for _ in range(20):
            await asyncio.sleep(0)
        assert backend.log == [("sent", 0)]  # the small one waits for the large one
        backend.release.setdefault(0, asyncio.Event()).set()
        backend.release.setdefault(1, asyncio.Event()).set()
        await asyncio.gather(first, second)

    asyncio.run(main())
    assert backend.log == [("sent", 0), ("done", 0), ("sent", 1), ("done", 1)]


def test_split_batches_keeps_one_batch_as_it_came_and_cuts_several_apart():
    a = build_kafka_batch([(None, b"a" * 100, [], 1)], producer_id=7, producer_epoch=0, base_sequence=0)
    b = build_kafka_batch([(None, b"b" * 50, [], 2)], producer_id=7, producer_epoch=0, base_sequence=1)
    one, code, _ = data._split_batches(a)
    assert code == 0 and one == [a] and one[0] is a  # no copy
    two, code, _ = data._split_batches(a + b)
    assert code == 0 and two == [a, b]
    cut, code, message = data._split_batches(a + b[:-1])
    assert cut == [] and code == ErrorCode.CORRUPT_MESSAGE and "length" in message
