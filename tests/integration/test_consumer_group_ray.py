"""The Consumer with a group_id on real Ray: subscribe, rebalances under load, commits.

Consumers run on threads of this process (one Consumer per thread: it is not
thread-safe; its heartbeat thread is its own). The topic is shared by the tests and small
(4 partitions, RF 1): each partition replica is an actor.
"""

from __future__ import annotations

import collections
import threading
import uuid

import pytest

from waiting import wait_until
from kcoord.cluster.group_coordinators import configure_group_coordinators
from kcoord.client.admin import Admin
from kcoord.client.consumer import Consumer
from kcoord.client.producer import Producer
from kcoord.client.types import TopicPartition
from kcoord.protocol.errors import ErrorCode, KafkaError

pytestmark = pytest.mark.ray

FAST_GROUP_CONFIG = {"group.min.session.timeout.ms": 500, "group.initial.rebalance.delay.ms": 300}
FAST_MEMBER = {"heartbeat_interval_ms": 100, "session_timeout_ms": 5000}


@pytest.fixture(scope="module")
def groups(kcluster):
    configure_group_coordinators(kcluster, FAST_GROUP_CONFIG)
    return kcluster


@pytest.fixture(scope="module")
def topic4(groups):
    name = f"cgroups4-{uuid.uuid4().hex[:6]}"
    Admin(groups).create_topic(name, partitions=4, replication_factor=1)
    return name


@pytest.fixture
def group_id(request) -> str:
    return f"{request.node.name[:30]}-{uuid.uuid4().hex[:6]}"


def produce(cluster, topic, count, start=0):
    p = Producer(cluster, acks="all", linger_ms=1)
    try:
        futures = [p.send(topic, value=b"r%d" % i, key=b"k%d" % i) for i in range(start, start + count)]
        p.flush(timeout=60)
        return [f.get(timeout=60) for f in futures]
    finally:
        p.close()


class Worker:
    """A consumer-group member that processes (records) every record it polls and commits
    after processing; on_revoke commits before partitions move."""

    def __init__(self, cluster, topic, group_id, seen, lock, name):
        self.seen, self.lock, self.name = seen, lock, name
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.consumer = Consumer(
            cluster=cluster, group_id=group_id, auto_offset_reset="earliest", enable_auto_commit=False,
            max_poll_records=20, client_id=name, **FAST_MEMBER,
        )
        self.consumer.subscribe([topic], on_revoke=self._on_revoke)
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _on_revoke(self, partitions):
        self.consumer.commit()  # everything polled so far was processed: commit it before it moves

    def _run(self):
        try:
            while not self.stop.is_set():
                batch = self.consumer.poll(timeout_ms=100)
                if not batch:
                    continue
                with self.lock:
                    for tp, recs in batch.items():
                        for r in recs:
                            self.seen[(tp.partition, r.offset)] += 1
                self.consumer.commit()
        except BaseException as exc:  # surfaced by the test
            self.errors.append(exc)
        finally:
            self.consumer.close()

    def finish(self):
        self.stop.set()
        self.thread.join(timeout=60)
        assert not self.thread.is_alive(), f"{self.name} did not stop"


def test_group_reads_every_record_exactly_once_across_rebalances(groups, topic4, group_id):
    admin = Admin(groups)
    seen: collections.Counter = collections.Counter()
    lock = threading.Lock()
    workers: list[Worker] = []
    produced = 0

    def consumed():
        with lock:
            return len(seen)

    try:
        events = {1: "join", 3: "join", 5: "leave", 7: "join"}
        workers.append(Worker(groups, topic4, group_id, seen, lock, "w0"))
        for round_ in range(9):
            produce(groups, topic4, 60, start=produced)
            produced += 60
            # Membership changes while this round's records are still being consumed.
            event = events.get(round_)
            if event == "join":
                workers.append(Worker(groups, topic4, group_id, seen, lock, f"w{round_}"))
            elif event == "leave":
                workers.pop(0).finish()
            wait_until(lambda: consumed() >= produced - 30, timeout=60, what=f"round {round_} mostly consumed")
        ends = admin.list_offsets(topic4, "latest")
        total = sum(ends.values())  # other tests may have written to the topic too
        wait_until(lambda: consumed() >= total, timeout=60, what="every record consumed")
        # the last join's rebalance may still be completing when the last record is read
        d = wait_until(
            lambda: (g := admin.describe_group(group_id))["state"] == "Stable" and len(g["members"]) == 3 and g,
            timeout=30,
            what="the group Stable with its three members",
        )
        # 4 membership changes after generation 1; two may share a rebalance (a join that
        # arrives while the previous rebalance is still gathering members).
        assert d["generation"] >= 4, "the joins and the leave made new generations"
        wait_until(lambda: admin.describe_group(group_id)["lag"] == 0, timeout=30, what="all committed")
    finally:
        for w in workers:
            w.finish()
    errors = [e for w in workers for e in w.errors]
    assert not errors, errors
    expected = {(p, o) for p, end in ends.items() for o in range(end)}
    assert set(seen) == expected, "every record was read"
    duplicates = {k: n for k, n in seen.items() if n != 1}
    assert not duplicates, f"records read more than once: {sorted(duplicates)[:10]}"
    assert admin.describe_group(group_id)["state"] == "Empty"


def test_consumer_group_api(groups, topic4, group_id):
    admin = Admin(groups)
    produce(groups, topic4, 40)
    ends = admin.list_offsets(topic4, "latest")
    c = Consumer(topic4, cluster=groups, group_id=group_id, auto_offset_reset="earliest", enable_auto_commit=False,
                 client_id="api-test", **FAST_MEMBER)
    try:
        assert c.subscription() == {topic4}
        got: dict = collections.defaultdict(list)

        def read_all():
            for tp, recs in c.poll(timeout_ms=200).items():
                got[tp] += recs
            return sum(map(len, got.values())) >= sum(ends.values())

        wait_until(read_all, timeout=60, what="all records")
        assert c.assignment() == {TopicPartition(topic4, p) for p in range(4)}
        tp0 = TopicPartition(topic4, 0)
        assert c.committed(tp0) is None
        c.commit()
        assert all(c.committed(tp) == c.position(tp) == ends[tp.partition] for tp in c.assignment())
        c.commit({tp0: 1})
        assert c.committed(tp0) == 1
        calls = []
        fut = c.commit_async({tp0: 2}, callback=lambda offsets, exc: calls.append((offsets, exc)))
        fut.result(timeout=30)
        assert c.committed(tp0) == 2 and calls and calls[0][1] is None
        with pytest.raises(KafkaError) as info:
            c.assign([tp0])
        assert info.value.code == ErrorCode.INVALID_REQUEST
        d = admin.describe_group(group_id)
        assert d["state"] == "Stable" and [m["client_id"] for m in d["members"]] == ["api-test"]
        row0 = next(x for x in d["offsets"] if x["partition"] == 0)
        assert row0["committed_offset"] == 2 and row0["lag"] == ends[0] - 2
        c.unsubscribe()
        assert c.assignment() == set()
        assert admin.describe_group(group_id)["state"] == "Empty"
        # Subscribing again rejoins and resumes from the committed offsets.
        c.subscribe(topic4)
        again = wait_until(lambda: c.poll(timeout_ms=200).get(tp0), timeout=60, what="re-read partition 0")
        assert again[0].offset == 2
    finally:
        c.close()
    assert admin.describe_group(group_id)["state"] == "Empty", "close() leaves the group"


def test_auto_commit_and_commit_on_close(groups, topic4, group_id):
    admin = Admin(groups)
    produce(groups, topic4, 20)
    ends = admin.list_offsets(topic4, "latest")
    c = Consumer(topic4, cluster=groups, group_id=group_id, auto_offset_reset="earliest", enable_auto_commit=True,
                 auto_commit_interval_ms=200, **FAST_MEMBER)
    try:
        count = [0]

        def read_all():
            count[0] += sum(map(len, c.poll(timeout_ms=200).values()))
            return count[0] >= sum(ends.values())

        wait_until(read_all, timeout=60, what="all records")

        def auto_committed():
            c.poll(timeout_ms=50)  # auto-commit runs inside poll
            return all(c.committed(TopicPartition(topic4, p)) == end for p, end in ends.items())

        wait_until(auto_committed, timeout=30, what="auto-commit of the positions")
    finally:
        c.close()
    d = admin.describe_group(group_id)
    assert d["state"] == "Empty" and d["lag"] == 0


def test_subscribe_without_group_and_bad_ids(groups, topic4):
    c = Consumer(cluster=groups)
    try:
        with pytest.raises(KafkaError) as info:
            c.subscribe([topic4])
        assert info.value.code == ErrorCode.INVALID_GROUP_ID
    finally:
        c.close()
    with pytest.raises(KafkaError) as info:
        Consumer(topic4, cluster=groups, group_id="")
    assert info.value.code == ErrorCode.INVALID_GROUP_ID
    with pytest.raises(ValueError):
        Consumer(topic4, cluster=groups, group_id="g", partition_assignment_strategy="no-such-assignor")
