"""Bad input to the Kafka listener, without Ray: a KafkaServer over a fake backend.

Garbage, truncated and oversized frames and unknown API keys close the connection with a
log line; unsupported versions and unserved APIs get error answers; the server keeps
serving other connections throughout."""

from __future__ import annotations

import asyncio
import logging
import struct

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse

from kcoord.kafka.handlers import ListenerContext, build_apis
from kcoord.kafka.server import KafkaServer
from kcoord.protocol.controller import DescribeClusterResponse, MetadataResponse as KMetadata, PartitionMetadata, TopicMetadata

pytestmark = pytest.mark.kafka


class FakeBackend:
    async def describe_cluster(self):
        return DescribeClusterResponse(cluster="fake", brokers=[0, 1, 2], group_coordinators=1)

    async def broker_nodes(self):
        return {}

    async def metadata(self, topics):
        t = TopicMetadata("t", partitions=[PartitionMetadata(0, leader=1, leader_epoch=3, replicas=[1, 2, 0], isr=[1, 2, 0])])
        return KMetadata(brokers=[0, 1, 2], topics=[t] if topics in (None, ["t"]) else [TopicMetadata(n, error_code=3) for n in topics])

    async def group_coordinators(self):
        return 1


def frame(req, version: int, corr: int = 7) -> bytes:
    req.with_header(correlation_id=corr, client_id="test")
    return req.encode(version=version, header=True, framed=True)


async def roundtrip(port: int, data: bytes, read: bool = True) -> bytes | None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    try:
        if not read:
            writer.write_eof()
        size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 5))[0]
        return await asyncio.wait_for(reader.readexactly(size), 5)
    except asyncio.IncompleteReadError:
        return None  # closed by the server
    finally:
        writer.close()


def serve(test):
    async def main():
        ctx = ListenerContext(backend=FakeBackend(), host="127.0.0.1")
        server = KafkaServer(build_apis(ctx), "127.0.0.1", {0: 0, 1: 0, 2: 0}, max_frame_bytes=1 << 20)
        ctx.ports = await server.start()
        try:
            await test(server, ctx.ports[0])
            # and the server still answers a good request afterwards
            body = await roundtrip(ctx.ports[0], frame(ApiVersionsRequest(), 3))
            assert ApiVersionsResponse.decode(body[4:], version=3).error_code == 0
        finally:
            await server.close()

    asyncio.run(main())


def test_api_versions_and_metadata():
    async def t(server, port):
        body = await roundtrip(port, frame(ApiVersionsRequest(), 3))
        assert struct.unpack(">i", body[:4])[0] == 7
        resp = ApiVersionsResponse.decode(body[4:], version=3)
        served = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        assert served[0] == (3, 8) and served[1] == (4, 11) and served[3] == (1, 8) and served[18] == (0, 3)
        body = await roundtrip(port, frame(MetadataRequest(topics=None, allow_auto_topic_creation=False), 8))
        meta = MetadataResponse.decode(body[4:], version=8)
        assert [(b.node_id, b.port) for b in meta.brokers] == [(b, p) for b, p in sorted(server.endpoints.items())]
        assert len({b.port for b in meta.brokers}) == 3  # Kafka clients tell brokers apart by address
        assert meta.topics[0].partitions[0].leader_id == 1 and meta.topics[0].partitions[0].leader_epoch == 3

    serve(t)


def test_api_versions_unknown_version_gets_error_35_with_a_v0_body():
    async def t(server, port):
        body = await roundtrip(port, frame(ApiVersionsRequest(), 4)[:6] + struct.pack(">h", 99) + frame(ApiVersionsRequest(), 4)[8:])
        resp = ApiVersionsResponse.decode(body[4:], version=0)
        assert resp.error_code == 35 and any(k.api_key == 18 for k in resp.api_keys)

    serve(t)


def test_unsupported_version_of_a_served_api_is_answered():
    async def t(server, port):
        body = await roundtrip(port, frame(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="t")]), 0))
        meta = MetadataResponse.decode(body[4:], version=0)
        assert meta.topics[0].error_code == 35

    serve(t)


def test_unserved_api_gets_unsupported_version():
    from kafka.protocol.admin import DescribeClusterRequest, DescribeClusterResponse

    async def t(server, port):
        body = await roundtrip(port, frame(DescribeClusterRequest(), 0))
        assert DescribeClusterResponse.decode(body[5:], version=0).error_code == 35  # flexible: header v1

    serve(t)


@pytest.mark.parametrize(
    "data, log",
    [
        (b"\x00\x00\x00\x05hello", "cannot parse request header"),  # garbage
        (struct.pack(">i", 100) + b"\x00\x12" * 5, "truncated frame"),  # cut short
        (struct.pack(">i", 50 << 20) + b"xx", "frame size"),  # over max_frame_bytes
        (struct.pack(">i", -3), "frame size"),
        (struct.pack(">ihhih", 10, 999, 0, 1, -1), "unknown API key 999"),
        (struct.pack(">ihhih", 10, 3, 99, 1, -1), "has no schema"),
    ],
)
def test_bad_frames_close_the_connection_with_a_log_line(data, log, caplog):
    async def t(server, port):
        with caplog.at_level(logging.WARNING, logger="kcoord.kafka"):
            assert await roundtrip(port, data, read=False) is None
            await asyncio.sleep(0.05)
        assert log in caplog.text
        assert server.stats["closed_bad_frames"] >= 1

    serve(t)


def test_pipelined_requests_are_answered_in_order():
    async def t(server, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        reqs = b"".join(frame(MetadataRequest(topics=None), 8, corr=i) if i % 2 else frame(ApiVersionsRequest(), 3, corr=i) for i in range(20))
        writer.write(reqs)
        await writer.drain()
        corrs = []
        for _ in range(20):
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            corrs.append(struct.unpack(">i", (await reader.readexactly(size))[:4])[0])
        writer.close()
        assert corrs == list(range(20))

    serve(t)
