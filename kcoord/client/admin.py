"""Admin: topics, offsets and cluster state (kafka-python's KafkaAdminClient, simplified).

Errors are raised as :class:`KafkaError` with Kafka's code and a message that names the
problem (INVALID_TOPIC_EXCEPTION, TOPIC_ALREADY_EXISTS, INVALID_REPLICATION_FACTOR, ...).
"""

from __future__ import annotations

import time
from typing import Any, Mapping

import ray

from ..protocol.controller import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    MetadataRequest,
    MetadataResponse,
)
from ..protocol.errors import ErrorCode, KafkaError, raise_for_error
from ..protocol.replication import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, ListOffsetsRequest, ListOffsetsResponse
from .cluster import ClusterClient

_SPEC = {"earliest": EARLIEST_TIMESTAMP, "latest": LATEST_TIMESTAMP}


class Admin:
    def __init__(self, cluster: ClusterClient) -> None:
        self.cluster = cluster

    # -- topics ---------------------------------------------------------------------------
    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int = 1,
        config: Mapping[str, Any] | None = None,
        assignment: Mapping[int, list[int]] | None = None,
        timeout_ms: int = 120_000,
    ) -> dict:
        """Create a topic and wait until every partition's leader accepts writes."""
        if not isinstance(partitions, int) or isinstance(partitions, bool):
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"partitions must be an integer, got {partitions!r}")
        if not isinstance(replication_factor, int) or isinstance(replication_factor, bool):
            raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR, f"replication_factor must be an integer, got {replication_factor!r}")
        request = CreateTopicsRequest(
            name=name,
            partitions=partitions,
            replication_factor=replication_factor,
            config={str(k): (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in (config or {}).items()},
            assignment={int(k): [int(b) for b in v] for k, v in assignment.items()} if assignment else None,
        )
        response = self.cluster.call_controller("create_topic", request, CreateTopicsResponse, timeout_ms=timeout_ms)
        raise_for_error(response.error_code, response.error_message or "")
        self.cluster.invalidate(name)
        self.wait_for_leaders(name, timeout_ms=timeout_ms)
        return self.describe_topic(name)

    def wait_for_leaders(self, topic: str, timeout_ms: int = 60_000) -> None:
        """Block until every partition of ``topic`` has a leader that says it leads."""
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            md = self.cluster.topic(topic, refresh=True)
            pending = []
            for p in md.partitions:
                if p.leader < 0:
                    pending.append(p.partition)
                    continue
                try:
                    info = ray.get(self.cluster.replica(topic, p.partition, p.leader).describe.remote(), timeout=10)
                    if info["role"] != "leader" or info["leader_epoch"] != p.leader_epoch:
                        pending.append(p.partition)
                except Exception:
                    pending.append(p.partition)
            if not pending:
                return
            if time.monotonic() >= deadline:
                raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"partitions {pending} of {topic!r} have no ready leader")
            time.sleep(0.05)

    def delete_topic(self, name: str, timeout_ms: int = 60_000) -> None:
        response = self.cluster.call_controller("delete_topic", DeleteTopicsRequest(name=name), DeleteTopicsResponse, timeout_ms=timeout_ms)
        raise_for_error(response.error_code, response.error_message or "")
        self.cluster.invalidate(name)

    def list_topics(self, internal: bool = False) -> list[str]:
        response = self.cluster.call_controller("metadata", MetadataRequest(topics=None), MetadataResponse)
        return sorted(t.name for t in response.topics if internal or not t.internal)

    def describe_topic(self, name: str) -> dict:
        """Per partition: leader, leader epoch, replicas, ISR, HW and LEO (from the leader)."""
        md = self.cluster.topic(name, refresh=True)
        refs = {}
        for p in md.partitions:
            if p.leader >= 0:
                try:
                    refs[p.partition] = self.cluster.replica(name, p.partition, p.leader).describe.remote()
                except KafkaError:
                    pass
        partitions = []
        for p in md.partitions:
            info: dict = {}
            ref = refs.get(p.partition)
            if ref is not None:
                try:
                    info = ray.get(ref, timeout=10)
                except Exception:
                    info = {}
            partitions.append(
                {
                    "partition": p.partition,
                    "leader": p.leader,
                    "leader_epoch": p.leader_epoch,
                    "replicas": list(p.replicas),
                    "isr": list(p.isr),
                    "offline_replicas": list(p.offline_replicas),
                    "high_watermark": info.get("high_watermark", -1),
                    "log_end_offset": info.get("log_end_offset", -1),
                    "log_start_offset": info.get("log_start_offset", -1),
                }
            )
        return {"topic": name, "internal": md.internal, "config": dict(md.config), "partitions": partitions}

    # -- offsets --------------------------------------------------------------------------
    def list_offsets(self, topic: str, spec: str | int = "latest", partitions: list[int] | None = None) -> dict[int, int]:
        """{partition: offset} for ``"earliest"``, ``"latest"`` (the HW) or a timestamp in ms
        (the first offset whose record timestamp is >= it, or -1)."""
        if isinstance(spec, str):
            if spec not in _SPEC:
                raise ValueError(f"offset spec must be 'earliest', 'latest' or a timestamp in ms, got {spec!r}")
            ts = _SPEC[spec]
        elif isinstance(spec, int) and not isinstance(spec, bool) and spec >= 0:
            ts = spec
        else:
            raise ValueError(f"offset spec must be 'earliest', 'latest' or a timestamp in ms >= 0, got {spec!r}")
        if partitions is None:
            partitions = self.cluster.partitions_for(topic)
        out = {}
        for p in partitions:
            response = self.cluster.call_leader(
                topic,
                p,
                "list_offsets",
                lambda epoch, p=p: ListOffsetsRequest(topic=topic, partition=p, timestamp=ts, current_leader_epoch=epoch),
                ListOffsetsResponse,
            )
            raise_for_error(response.error_code, response.error_message or "")
            out[p] = response.offset
        return out

    # -- cluster --------------------------------------------------------------------------
    def describe_cluster(self) -> dict:
        response = self.cluster.call_controller("describe_cluster", DescribeClusterRequest(), DescribeClusterResponse)
        raise_for_error(response.error_code, response.error_message or "")
        return {
            "cluster": response.cluster,
            "controller_epoch": response.controller_epoch,
            "brokers": list(response.brokers),
            "group_coordinators": response.group_coordinators,
            "metrics": dict(response.metrics),
        }
