"""Admin's consumer-group operations: list, describe (members, assignments, committed
offsets and lag), read and set committed offsets of inactive groups, delete. They talk to
the group coordinator actors, not the controller, through
:mod:`kcoord.client.coordinator`; :class:`~kcoord.client.admin.Admin` exposes them under
kafka-python's names."""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

from ..protocol.errors import DecodeError, ErrorCode, KafkaError, raise_for_error
from ..protocol.group import (
    CONSUMER_PROTOCOL_TYPE,
    Assignment,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from .cluster import ClusterClient
from .coordinator.commits import commit_offsets_outside_group, normalize_offsets, require_inactive_group
from .coordinator.coordinators import GroupCoordinators
from .types import OffsetAndMetadata, TopicPartition


class GroupAdmin:
    """The consumer-group half of an :class:`~kcoord.client.admin.Admin`."""

    def __init__(self, cluster: ClusterClient, list_offsets: Callable[[str, str, list[int]], dict[int, int]]) -> None:
        """``list_offsets(topic, "latest", partitions)``: log-end offsets (Admin's)."""
        self.cluster = cluster
        self.coordinators = GroupCoordinators(cluster)
        self._list_offsets = list_offsets

    def _timeout_s(self) -> float:
        return self.cluster.request_timeout_ms / 1000

    def list_groups(self, states: list[str] | None = None) -> list[dict]:
        """Every group of every coordinator: ``{"group_id", "state", "protocol_type",
        "coordinator"}``, sorted by group id. ``states`` filters by state name."""
        gc = self.coordinators
        out = []
        for index in range(gc.count()):
            response = gc.call(index, "list_groups", ListGroupsRequest(states), ListGroupsResponse, self._timeout_s())
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
        g = self.coordinators.describe_group(group_id, self._timeout_s())
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
        committed = self.coordinators.committed_offsets(group_id, None, self._timeout_s())
        keys = {(t, p) for t, parts in committed.items() for p, o in parts.items() if o.offset >= 0} | set(owner)
        log_end: dict[tuple[str, int], int] = {}
        for topic in sorted({t for t, _ in keys}):
            try:
                for p, off in self._list_offsets(topic, "latest", sorted(p for t, p in keys if t == topic)).items():
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
            "coordinator": self.coordinators.index_for(group_id),
            "members": members,
            "offsets": partitions,
            "lag": total_lag,
        }

    def list_consumer_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets (kafka-python's ``list_consumer_group_offsets``):
        ``{TopicPartition: OffsetAndMetadata}`` for every partition it committed, or for
        ``partitions`` (those without a commit are left out)."""
        topics: dict[str, list[int]] | None = None
        if partitions is not None:
            topics = {}
            for tp in partitions:
                tp = TopicPartition(*tp)
                topics.setdefault(tp.topic, []).append(tp.partition)
        committed = self.coordinators.committed_offsets(group_id, topics, self._timeout_s())
        return {
            TopicPartition(t, int(p)): OffsetAndMetadata(o.offset, o.metadata or "", getattr(o, "leader_epoch", -1))
            for t, parts in sorted(committed.items())
            for p, o in sorted(parts.items())
            if o.offset >= 0
        }

    def alter_consumer_group_offsets(self, group_id: str, offsets: Mapping[Any, Any]) -> dict[TopicPartition, OffsetAndMetadata]:
        """:meth:`kcoord.Admin.alter_consumer_group_offsets`."""
        normalized = normalize_offsets(offsets)
        wanted: dict[str, dict[int, tuple[int, str]]] = {}
        for tp, om in normalized.items():
            wanted.setdefault(tp.topic, {})[tp.partition] = (om.offset, om.metadata or "")
        commit_offsets_outside_group(self.cluster, group_id, wanted, coordinators=self.coordinators)
        return dict(sorted(normalized.items()))

    def reset_offsets(self, group_id: str, topic: str, to: str | Mapping[int, int] = "earliest") -> dict[int, int]:
        """Set the group's committed offsets of ``topic`` to ``"earliest"`` (log start),
        ``"latest"`` (the HW) or ``{partition: offset}`` (each within [log start, HW]).

        Refused while the group has members (NON_EMPTY_GROUP, or REBALANCE_IN_PROGRESS
        mid-rebalance): a live consumer would overwrite the reset with its next commit.
        Returns {partition: new offset}."""
        if isinstance(to, str):
            if to not in ("earliest", "latest"):
                raise ValueError(f"to must be 'earliest', 'latest' or {{partition: offset}}, got {to!r}")
            require_inactive_group(self.coordinators, group_id, self._timeout_s())
            targets = self._list_offsets(topic, to, None)  # UNKNOWN_TOPIC_OR_PARTITION if missing
        elif isinstance(to, Mapping):
            if not to:
                raise ValueError("to={} names no partition")
            targets = {}
            for p, off in to.items():
                if not isinstance(p, int) or isinstance(p, bool):
                    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic!r} has no partition {p!r}")
                if not isinstance(off, int) or isinstance(off, bool):
                    raise ValueError(f"offset for partition {p} must be an integer, got {off!r}")
                targets[p] = off
        else:
            raise ValueError(f"to must be 'earliest', 'latest' or {{partition: offset}}, got {to!r}")
        done = commit_offsets_outside_group(
            self.cluster, group_id, {topic: {p: (off, "") for p, off in targets.items()}},
            from_log_start=True, coordinators=self.coordinators,
        )
        return done[topic]

    def delete_group(self, group_id: str) -> None:
        """Delete an inactive group and its committed offsets (NON_EMPTY_GROUP while it has
        members, GROUP_ID_NOT_FOUND if there is no such group)."""
        if not isinstance(group_id, str) or not group_id:
            raise KafkaError(ErrorCode.INVALID_GROUP_ID, f"group id must be a non-empty string, got {group_id!r}")
        response = self.coordinators.call_group(
            group_id, "delete_groups", DeleteGroupsRequest([group_id]), DeleteGroupsResponse, self._timeout_s()
        )
        code = response.results.get(group_id, response.error_code)
        if code == ErrorCode.NON_EMPTY_GROUP:
            raise KafkaError(code, f"cannot delete group {group_id!r}: it has active members; close its consumers first")
        if code == ErrorCode.GROUP_ID_NOT_FOUND:
            raise KafkaError(code, f"group {group_id!r} does not exist")
        raise_for_error(code, f"deleting group {group_id!r} failed: {response.error_message or ''}")
