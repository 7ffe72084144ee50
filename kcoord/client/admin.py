"""Admin: topics, offsets and cluster state (kafka-python's KafkaAdminClient, simplified).

Errors are raised as :class:`KafkaError` with Kafka's code and a message that names the
problem (INVALID_TOPIC_EXCEPTION, TOPIC_ALREADY_EXISTS, INVALID_REPLICATION_FACTOR, ...).
"""

from __future__ import annotations

import time
from typing import Any, Mapping

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
from ..calls import get_probing
from ..protocol.errors import ErrorCode, KafkaError, raise_for_error
from ..protocol.replication import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from .cluster import ClusterClient
from .coordinator.commits import commit_inactive_group, require_inactive_group
from .coordinator.coordinators import GroupCoordinators
from .types import TopicPartition

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
                name = self.cluster.replica_name(topic, p.partition, p.leader)
                try:
                    handle = self.cluster.handle(name)
                    wait = min(self.cluster.attempt_timeout_s, max(0.05, deadline - time.monotonic()))
                    info = get_probing(handle.describe.remote(), handle, wait)
                    if info["role"] != "leader" or info["leader_epoch"] != p.leader_epoch:
                        pending.append(p.partition)
                except Exception:
                    self.cluster.forget(name)  # dead, restarting, recreated or silent: look it up again
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
                actor = self.cluster.replica_name(name, p.partition, p.leader)
                try:
                    handle = self.cluster.handle(actor)
                    refs[p.partition] = (handle.describe.remote(), handle, actor)
                except KafkaError:
                    pass
        partitions = []
        deadline = time.monotonic() + self.cluster.attempt_timeout_s
        for p in md.partitions:
            info: dict = {}
            sent = refs.get(p.partition)
            if sent is not None:
                ref, handle, actor = sent
                try:
                    info = get_probing(ref, handle, max(0.0, deadline - time.monotonic()))
                except Exception:
                    self.cluster.forget(actor)  # dead, restarting, recreated or silent: look it up again
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
        found = self.cluster.list_offsets([TopicPartition(topic, p) for p in partitions], ts)
        return {tp.partition: offset for tp, offset in found.items()}

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

    # -- consumer groups --------------------------------------------------------------------
    # These talk to the GroupCoordinatorActors (not the controller) through
    # kcoord.client.coordinator.

    @property
    def _group_coordinators(self) -> GroupCoordinators:
        gc = self.__dict__.get("_gc")
        if gc is None:
            gc = self.__dict__["_gc"] = GroupCoordinators(self.cluster)
        return gc

    def _group_timeout_s(self) -> float:
        return self.cluster.request_timeout_ms / 1000

    def list_groups(self, states: list[str] | None = None) -> list[dict]:
        """Every group of every coordinator: ``{"group_id", "state", "protocol_type",
        "coordinator"}``, sorted by group id. ``states`` filters by state name."""
        from ..protocol.group import ListGroupsRequest, ListGroupsResponse

        gc = self._group_coordinators
        out = []
        for index in range(gc.count()):
            response = gc.call(index, "list_groups", ListGroupsRequest(states), ListGroupsResponse, self._group_timeout_s())
            raise_for_error(response.error_code, response.error_message or f"list_groups on coordinator {index} failed")
            out += [
                {"group_id": g.group_id, "state": g.state, "protocol_type": g.protocol_type, "coordinator": index}
                for g in response.groups
            ]
        return sorted(out, key=lambda g: g["group_id"])


    def describe_group(self, group_id: str) -> dict:
        """State, generation, protocol, leader and members (id, instance id, client id/host,
        assignment) of a group, and per partition (committed or assigned) its committed
        offset, log-end offset (the HW) and lag. Raises GROUP_ID_NOT_FOUND for an unknown
        group."""
        from ..protocol.errors import DecodeError
        from ..protocol.group import CONSUMER_PROTOCOL_TYPE, Assignment

        g = self._group_coordinators.describe_group(group_id, self._group_timeout_s())
        if g.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"group {group_id!r} does not exist")
        raise_for_error(g.error_code, f"describing group {group_id!r} failed")
        members = []
        owner: dict[tuple[str, int], str] = {}
        for m in g.members:
            assignment: dict[str, list[int]] = {}
            if m.assignment and g.protocol_type == CONSUMER_PROTOCOL_TYPE:
                try:
                    assignment = {t: sorted(ps) for t, ps in Assignment.decode(m.assignment).partitions.items()}
                except DecodeError:  # a Kafka client's member (through kcoord.kafka)
                    from ..kafka.consumer_protocol import decode_assignment

                    assignment = decode_assignment(m.assignment) or {}
            for t, ps in assignment.items():
                for p in ps:
                    owner[(t, p)] = m.member_id
            members.append(
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "assignment": assignment,
                }
            )
        committed = self._group_coordinators.committed_offsets(group_id, None, self._group_timeout_s())
        keys = {(t, p) for t, parts in committed.items() for p, o in parts.items() if o.offset >= 0} | set(owner)
        log_end: dict[tuple[str, int], int] = {}
        for topic in sorted({t for t, _ in keys}):
            try:
                for p, off in self.list_offsets(topic, "latest", sorted(p for t, p in keys if t == topic)).items():
                    log_end[(topic, p)] = off
            except KafkaError:
                pass  # topic deleted or offline: no log end
        partitions = []
        total_lag = 0
        for topic, p in sorted(keys):
            c = committed.get(topic, {}).get(p)
            offset = c.offset if c is not None and c.offset >= 0 else None
            end = log_end.get((topic, p))
            lag = max(0, end - offset) if offset is not None and end is not None else None
            total_lag += lag or 0
            partitions.append(
                {
                    "topic": topic,
                    "partition": p,
                    "committed_offset": offset,
                    "metadata": (c.metadata or "") if c is not None else "",
                    "log_end_offset": end,
                    "lag": lag,
                    "member_id": owner.get((topic, p)),
                }
            )
        return {
            "group_id": group_id,
            "state": g.state,
            "generation": g.generation_id,
            "protocol_type": g.protocol_type,
            "protocol": g.protocol,
            "leader": g.leader,
            "coordinator": self._group_coordinators.index_for(group_id),
            "members": members,
            "offsets": partitions,
            "lag": total_lag,
        }

    def reset_offsets(self, group_id: str, topic: str, to: str | Mapping[int, int] = "earliest") -> dict[int, int]:
        """Set the group's committed offsets of ``topic`` to ``"earliest"`` (log start),
        ``"latest"`` (the HW) or ``{partition: offset}`` (each within [log start, HW]).

        Refused while the group has members (NON_EMPTY_GROUP, or REBALANCE_IN_PROGRESS
        mid-rebalance): a live consumer would overwrite the reset with its next commit.
        Returns {partition: new offset}."""
        require_inactive_group(self._group_coordinators, group_id, self._group_timeout_s())
        partitions = self.cluster.partitions_for(topic)  # UNKNOWN_TOPIC_OR_PARTITION if missing
        if isinstance(to, str):
            if to not in ("earliest", "latest"):
                raise ValueError(f"to must be 'earliest', 'latest' or {{partition: offset}}, got {to!r}")
            targets = self.list_offsets(topic, to)
        elif isinstance(to, Mapping):
            if not to:
                raise ValueError("to={} names no partition")
            wanted = {}
            for p, off in to.items():
                if not isinstance(p, int) or isinstance(p, bool) or p not in partitions:
                    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic!r} has no partition {p!r} (it has {len(partitions)})")
                if not isinstance(off, int) or isinstance(off, bool):
                    raise ValueError(f"offset for partition {p} must be an integer, got {off!r}")
                wanted[p] = off
            earliest = self.list_offsets(topic, "earliest", sorted(wanted))
            latest = self.list_offsets(topic, "latest", sorted(wanted))
            for p, off in sorted(wanted.items()):
                if not earliest[p] <= off <= latest[p]:
                    raise KafkaError(
                        ErrorCode.OFFSET_OUT_OF_RANGE,
                        f"offset {off} for {topic}-{p} is outside [{earliest[p]}, {latest[p]}] (log start, high watermark)",
                    )
            targets = wanted
        else:
            raise ValueError(f"to must be 'earliest', 'latest' or {{partition: offset}}, got {to!r}")
        commit_inactive_group(
            self._group_coordinators, group_id, {topic: {p: (off, "") for p, off in targets.items()}}, self._group_timeout_s()
        )
        return dict(sorted(targets.items()))

    def delete_group(self, group_id: str) -> None:
        """Delete an inactive group and its committed offsets (NON_EMPTY_GROUP while it has
        members, GROUP_ID_NOT_FOUND if there is no such group)."""
        from ..protocol.group import DeleteGroupsRequest, DeleteGroupsResponse

        if not isinstance(group_id, str) or not group_id:
            raise KafkaError(ErrorCode.INVALID_GROUP_ID, f"group id must be a non-empty string, got {group_id!r}")
        response = self._group_coordinators.call_group(
            group_id, "delete_groups", DeleteGroupsRequest([group_id]), DeleteGroupsResponse, self._group_timeout_s()
        )
        code = response.results.get(group_id, response.error_code)
        if code == ErrorCode.NON_EMPTY_GROUP:
            raise KafkaError(code, f"cannot delete group {group_id!r}: it has active members; close its consumers first")
        if code == ErrorCode.GROUP_ID_NOT_FOUND:
            raise KafkaError(code, f"group {group_id!r} does not exist")
        raise_for_error(code, f"deleting group {group_id!r} failed: {response.error_message or ''}")
