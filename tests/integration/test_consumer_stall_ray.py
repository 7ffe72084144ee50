"""Issue 13: clients never wait on an actor that does not answer longer than their request
timeout, and look the actor up again afterwards.

* A reader that drains its buffered records slowly: answers that landed are taken in at
  once (they used to wait in Ray until every partition's buffer ran dry, and after
  fetch_max_wait_ms + request_timeout_ms were dropped as "unanswered" and fetched again --
  the warnings of the report, for every partition, including one read to the end).
* A leader that hangs (SIGSTOP: alive per Ray, silent) while the consumer's fetch is parked
  on it: the consumer follows the controller's failover within seconds, not after 31 s.
* A cached handle whose calls are never answered (what a stale handle looks like to the
  caller): consumer, producer and admin give it up after their timeout and look the actor
  up again (before, the consumer retried the same handle every 31 s, for ever).
* Leaders killed and restarted by Ray, over and over, while a consumer reads: it reads
  everything to the high watermark within a bounded time.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time

import pytest
import ray

from kcoord.client.admin import Admin
from kcoord.client.cluster import ClusterClient
from kcoord.client.consumer import Consumer
from kcoord.client.producer import Producer
from kcoord.client.types import TopicPartition
from waiting import wait_until

pytestmark = pytest.mark.ray


@ray.remote(num_cpus=0, max_concurrency=1000)
class Silent:
    """Stands in for a replica actor whose calls never come back: alive per Ray, no answer."""

    async def fetch(self, data: bytes) -> bytes:
        await asyncio.Event().wait()

    async def produce(self, data: bytes) -> bytes:
        await asyncio.Event().wait()

    async def list_offsets(self, data: bytes) -> bytes:
        await asyncio.Event().wait()

    async def describe(self) -> dict:
        await asyncio.Event().wait()

    async def ping(self) -> str:
        return "pong"


@pytest.fixture(scope="module")
def silent(kcluster):
    actor = Silent.remote()
    ray.get(actor.ping.remote(), timeout=60)
    yield actor
    ray.kill(actor)


def own_client(kcluster) -> ClusterClient:
    """A ClusterClient of its own, so that a handle planted in its cache does not leak into
    the other tests' shared client."""
    return ClusterClient(kcluster.name, namespace=kcluster.namespace, address=None)


def make_topic(kcluster, name: str, partitions: int = 1, rf: int = 3) -> str:
    Admin(kcluster).create_topic(name, partitions=partitions, replication_factor=rf, config={"min.insync.replicas": 2} if rf == 3 else {})
    Admin(kcluster).wait_for_leaders(name)
    return name


def fill(kcluster, topic: str, per_partition: int, partitions: int) -> None:
    with Producer(kcluster, batch_size=16 << 10) as p:
        for part in range(partitions):
            p.send_batch(topic, values=[b"p%d-%06d-" % (part, i) + b"x" * 80 for i in range(per_partition)], partition=part)


def read_until(consumer: Consumer, want: int, timeout: float) -> list:
    out: list = []
    deadline = time.monotonic() + timeout
    while len(out) < want and time.monotonic() < deadline:
        for recs in consumer.poll(timeout_ms=200).values():
            out += recs
    return out


def test_slow_reader_takes_answers_in_and_calls_none_unanswered(kcluster, topic_name, caplog):
    """Small fetches and a reader that takes 2x longer to drain the buffered chunks than the
    old "unanswered" limit (fetch_max_wait_ms + request_timeout_ms = 1.1 s here)."""
    topic = make_topic(kcluster, topic_name, partitions=3, rf=1)
    per = 1200
    fill(kcluster, topic, per, 3)
    caplog.set_level(logging.INFO, logger="kcoord.consumer")
    c = Consumer(
        cluster=kcluster,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=24 << 10,  # ~200 records a chunk
        max_poll_records=40,
        fetch_max_wait_ms=100,
        request_timeout_ms=1000,
    )
    c.assign([TopicPartition(topic, p) for p in range(3)])
    seen = {p: 0 for p in range(3)}
    first_polls: list[set] = []
    deadline = time.monotonic() + 40
    try:
        while sum(seen.values()) < 3 * per and time.monotonic() < deadline:
            batch = c.poll(timeout_ms=500)
            for tp, recs in batch.items():
                seen[tp.partition] += len(recs)
            if batch and len(first_polls) < 15:
                first_polls.append({tp.partition for tp in batch})
            time.sleep(0.1)  # the user's work on 40 records (not synchronisation)
    finally:
        c.close()
    assert seen == {p: per for p in range(3)}
    unanswered = [r.getMessage() for r in caplog.records if "unanswered" in r.getMessage()]
    assert not unanswered, unanswered
    # Every partition's first chunk is taken in when it lands: the first polls rotate over all
    # three (before, one partition's buffered records held the others' answers back).
    assert set().union(*first_polls[:6]) == {0, 1, 2}, first_polls


def test_consumer_follows_failover_away_from_a_hung_leader(kcluster, topic_name):
    topic = make_topic(kcluster, topic_name)
    fill(kcluster, topic, 20, 1)
    md = kcluster.partition_metadata(topic, 0, refresh=True)
    pid = ray.get(kcluster.replica(topic, 0, md.leader, fresh=True).describe.remote(), timeout=30)["pid"]
    c = Consumer(cluster=kcluster, auto_offset_reset="earliest")
    c.assign([TopicPartition(topic, 0)])
    try:
        assert len(read_until(c, 20, 30)) == 20
        st = c._subscriptions.assigned[TopicPartition(topic, 0)]
        wait_until(lambda: c.poll(timeout_ms=50) == {} and st.in_flight is not None, timeout=10, what="a fetch parked at the end")
        os.kill(pid, signal.SIGSTOP)  # the leader hangs with the consumer's fetch parked on it
        stopped = time.monotonic()
        try:
            new = wait_until(
                lambda: (m := kcluster.partition_metadata(topic, 0, refresh=True)).leader not in (-1, md.leader) and m,
                timeout=30,
                what="the controller to elect another leader",
            )
            with Producer(kcluster) as p:
                for i in range(5):
                    p.send(topic, b"after-%d" % i, partition=0)
            got = read_until(c, 5, 20)
            took = time.monotonic() - stopped
        finally:
            os.kill(pid, signal.SIGCONT)
        assert [r.value for r in got] == [b"after-%d" % i for i in range(5)]
        # ~session timeout (2 s) + one metadata check (1 s); it was 31 s.
        assert took < 15, f"the consumer took {took:.1f} s to leave the hung leader {md.leader} for {new.leader}"
    finally:
        c.close()


def test_consumer_looks_up_a_leader_whose_handle_never_answers(kcluster, topic_name, silent, caplog):
    topic = make_topic(kcluster, topic_name)
    fill(kcluster, topic, 50, 1)
    tp = TopicPartition(topic, 0)
    client = own_client(kcluster)
    md = client.partition_metadata(topic, 0, refresh=True)
    name = client.replica_name(topic, 0, md.leader)
    caplog.set_level(logging.INFO, logger="kcoord.consumer")

    client._handles[name] = silent  # the cached handle of the leader goes nowhere
    c = Consumer(cluster=client, request_timeout_ms=3000)
    c.assign([tp])
    c.seek(tp, 0)  # the position is known: the first call to the leader is a fetch
    start = time.monotonic()
    try:
        got = read_until(c, 50, 25)
    finally:
        c.close()
    took = time.monotonic() - start
    assert len(got) == 50
    # one fetch timeout (fetch_max_wait_ms + min(request_timeout_ms, 5 s) = 3.5 s), then a
    # fresh ray.get_actor; the old consumer waited 31 s and then used the same handle again
    assert took < 12, took
    assert any("unanswered" in r.getMessage() and name in r.getMessage() for r in caplog.records)
    assert client._handles.get(name) is not silent

    # ListOffsets, to find a position, takes the same way out (it used to wait the whole
    # request timeout on the handle, then call_leader waited another on the same handle).
    client._handles[name] = silent
    c = Consumer(cluster=client, auto_offset_reset="latest", request_timeout_ms=3000)
    c.assign([tp])
    start = time.monotonic()
    try:
        assert c.position(tp) == 50
    finally:
        c.close()
    assert time.monotonic() - start < 12
    assert client._handles.get(name) is not silent


def test_producer_and_admin_look_up_a_leader_whose_handle_never_answers(kcluster, topic_name, silent):
    topic = make_topic(kcluster, topic_name)
    client = own_client(kcluster)
    md = client.partition_metadata(topic, 0, refresh=True)
    name = client.replica_name(topic, 0, md.leader)

    client._handles[name] = silent
    start = time.monotonic()
    with Producer(client, request_timeout_ms=1000, delivery_timeout_ms=25_000) as p:
        meta = p.send(topic, b"through", partition=0).get(timeout=30)
    assert meta.offset == 0
    assert time.monotonic() - start < 15  # one attempt (request timeout + 5 s), then a fresh lookup
    assert client._handles.get(name) is not silent

    client._handles[name] = silent
    start = time.monotonic()
    assert Admin(client).list_offsets(topic, "latest") == {0: 1}
    assert time.monotonic() - start < 12  # one attempt (5 s), then a fresh lookup; was 30 s, then REQUEST_TIMED_OUT
    assert client._handles.get(name) is not silent


def test_consumer_reads_to_the_end_while_leaders_are_killed_and_restarted(kcluster, topic_name, caplog):
    """The report in miniature: Ray restarts (ray.kill(no_restart=False)) partition leaders
    again and again while a producer writes and a consumer reads."""
    topic = make_topic(kcluster, topic_name, partitions=3)
    caplog.set_level(logging.INFO, logger="kcoord.consumer")
    acked: list = []
    stop = threading.Event()

    def produce():
        with Producer(kcluster) as p:
            i = 0
            while not stop.is_set():
                futs = [p.send(topic, b"%08d" % (i + j)) for j in range(100)]
                i += 100
                acked.extend(f.get(timeout=120) for f in futs)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    c = Consumer(cluster=kcluster, auto_offset_reset="earliest")
    c.assign([TopicPartition(topic, p) for p in range(3)])
    seen: list = []
    longest = 0.0

    def pump():
        nonlocal longest
        for recs in c.poll(timeout_ms=100).values():
            seen.extend(recs)
        now = time.monotonic()
        longest = max([longest] + [now - st.in_flight_since for st in c._subscriptions.assigned.values() if st.in_flight is not None])

    try:
        for k in range(6):
            part = k % 3
            md = kcluster.partition_metadata(topic, part, refresh=True)
            wait_until(lambda: pump() or len(acked) > (k + 1) * 200, timeout=60, what="records acked between kills")
            ray.kill(ray.get_actor(kcluster.replica_name(topic, part, md.leader), namespace=kcluster.namespace), no_restart=False)
            wait_until(
                lambda: pump() or kcluster.partition_metadata(topic, part, refresh=True).leader_epoch > md.leader_epoch,
                timeout=60,
                what=f"a new leader epoch of partition {part}",
            )
    finally:
        stop.set()
        producer.join(timeout=120)
    ends = Admin(kcluster).list_offsets(topic, "latest")
    want = sum(ends.values())
    start = time.monotonic()
    wait_until(lambda: pump() or len(seen) >= want, timeout=30, what=f"the consumer to read all {want} records")
    c.close()
    assert time.monotonic() - start < 20
    assert sorted(r.value for r in seen) == sorted(set(r.value for r in seen))  # no duplicates
    by_partition = {p: [r.offset for r in seen if r.partition == p] for p in range(3)}
    assert all(offs == list(range(ends[p])) for p, offs in by_partition.items())
    assert {(m.partition, m.offset) for m in acked} <= {(r.partition, r.offset) for r in seen}
    assert not [r.getMessage() for r in caplog.records if "unanswered" in r.getMessage()]
    assert longest < 10, longest  # no fetch waited anywhere near the old 31 s


def test_spark_range_read_looks_up_a_leader_whose_handle_never_answers(kcluster, topic_name, silent):
    from kcoord import records
    from kcoord.spark.tasks import RangeReader

    topic = make_topic(kcluster, topic_name)
    fill(kcluster, topic, 30, 1)
    client = own_client(kcluster)
    md = client.partition_metadata(topic, 0, refresh=True)
    name = client.replica_name(topic, 0, md.leader)
    client._handles[name] = silent
    reader = RangeReader(client, topic, 0, 0, 30, timeout_s=60)
    start = time.monotonic()
    offsets = [rec.offset for data, _ in reader.chunks() for rec in records.iter_records(data)]
    assert offsets[:30] == list(range(30))
    # one fetch timeout (0.5 s + min(request_timeout_ms, 5 s)), then a fresh lookup; it used
    # to wait the whole request timeout (30 s) and then call the same handle again
    assert time.monotonic() - start < 12
    assert reader.retries == 1 and client._handles.get(name) is not silent
