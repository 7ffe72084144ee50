"""A partition leader is killed while a Kafka client produces with acks=all and
idempotence: every acknowledged record is in the log exactly once, in order."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
import ray

from kcoord.client.admin import Admin

from waiting import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.kafka, pytest.mark.chaos]


def test_leader_killed_while_an_idempotent_confluent_producer_writes(kcluster, kafka_bootstrap):
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = f"kw-fail-{uuid.uuid4().hex[:6]}"
    Admin(kcluster).create_topic(topic, partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
    md = kcluster.partition_metadata(topic, 0, refresh=True)
    producer = Producer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 2,
            "message.timeout.ms": 120000,
            "retry.backoff.ms": 50,
        }
    )
    acked: list[int] = []
    failed: list = []

    def on_delivery(err, msg):
        if err:
            failed.append(err)
        else:
            acked.append(int(msg.value()))

    stop = threading.Event()

    def produce():
        i = 0
        while not stop.is_set():
            producer.produce(topic, value=b"%d" % i, partition=0, on_delivery=on_delivery)
            producer.poll(0)
            i += 1
            time.sleep(0.002)
        producer.flush(120)

    writer = threading.Thread(target=produce)
    writer.start()
    try:
        wait_until(lambda: len(acked) > 300, timeout=60, what="300 acknowledged records before the kill")
        ray.kill(kcluster.replica(topic, 0, md.leader, fresh=True), no_restart=False)
        wait_until(lambda: kcluster.partition_metadata(topic, 0, refresh=True).leader_epoch > md.leader_epoch, timeout=60, what="a new leader")
        count = len(acked)
        wait_until(lambda: len(acked) > count + 300, timeout=90, what="300 more records acknowledged by the new leader")
    finally:
        stop.set()
        writer.join(180)
    assert not failed, failed[:5]
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"f-{topic}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen: list[int] = []
    deadline = time.monotonic() + 60
    while len(seen) < len(acked) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            seen.append(int(msg.value()))
    consumer.close()
    assert len(seen) == len(set(seen)), "duplicates in the log"
    assert set(acked) <= set(seen), f"{len(set(acked) - set(seen))} acknowledged records lost"
    assert seen == sorted(seen), "records out of order"
