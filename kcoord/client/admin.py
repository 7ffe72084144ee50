"""Admin: topics, offsets, groups and cluster state (kafka-python's KafkaAdminClient).

kafka-python's names: ``create_topics([NewTopic(...)], validate_only=...)``,
``delete_topics``, ``create_partitions({topic: NewPartitions(n)})``,
``describe_configs([ConfigResource("topic", name)])``, ``alter_configs`` (incremental),
``delete_records({TopicPartition: offset})``, ``list_consumer_group_offsets``,
``alter_consumer_group_offsets``, ``describe_cluster``, ``list_topics``, ``close()`` (and
``with Admin(cluster) as admin``); kcoord's own, one topic or group at a time:
``create_topic``, ``delete_topic``, ``describe_topic``, ``describe_topic_config``,
``alter_topic_config``, ``list_offsets``, ``describe_group``, ``reset_offsets``...
Transactions (Kafka 4.0 Admin, KIP-664; admin_transactions.py): ``list_transactions``,
``describe_transactions``, ``describe_producers``, ``abort_transaction``,
``find_hanging_transactions``.
Users and ACLs (kafka-python's names): ``create_acls``, ``describe_acls``, ``delete_acls``,
``alter_user_scram_credentials``, ``describe_user_scram_credentials``.

Errors are raised as :class:`KafkaError` subclasses with Kafka's code and a message that
names the problem (InvalidTopicError, TopicAlreadyExistsError,
InvalidReplicationFactorError, ...).
"""

from __future__ import annotations

import time
from typing import Any, Iterable, Mapping, NamedTuple

from ..protocol.controller import (
    AlterConfigOp,
    ConfigEntry,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    MetadataRequest,
    MetadataResponse,
)
from ..calls import CallFailed
from ..protocol.errors import ErrorCode, KafkaError, raise_for_error
from ..protocol.replication import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, DeleteRecordsRequest, DeleteRecordsResponse
from . import security_admin
from .cluster import ClusterClient
from ..replication.topic_configs import AlterOp, ConfigSource
from ..replication.topic_plan import default_replication_factor, plan_topic
from .admin_groups import GroupAdmin
from .admin_transactions import (
    AbortTransactionSpec,
    HangingTransaction,
    PartitionProducerState,
    TransactionAdmin,
    TransactionDescription,
    TransactionListing,
)
from .types import OffsetAndMetadata, TopicPartition

_SPEC = {"earliest": EARLIEST_TIMESTAMP, "latest": LATEST_TIMESTAMP}


class NewTopic(NamedTuple):
    """A topic for :meth:`Admin.create_topics` (kafka-python's NewTopic).
    ``num_partitions`` -1 means 1; ``replication_factor`` -1 (or None) means
    ``min(3, brokers)``; ``replica_assignments`` is ``{partition: [broker, ...]}``."""

    name: str
    num_partitions: int = -1
    replication_factor: int | None = -1
    replica_assignments: Mapping[int, list[int]] | None = None
    topic_configs: Mapping[str, Any] | None = None


class NewPartitions(NamedTuple):
    """The partition count a topic should grow to, for :meth:`Admin.create_partitions`
    (kafka-python's NewPartitions). ``new_assignments`` lists the brokers of each new
    partition (the first leads); None places them as topic creation does."""

    total_count: int
    new_assignments: list[list[int]] | None = None


class ConfigResource(NamedTuple):
    """A config resource (kafka-python's ConfigResource). kcoord has topic configs only:
    ``resource_type`` is "topic" (or kafka-python's ConfigResourceType.TOPIC, or 2).
    ``configs``: for :meth:`Admin.alter_configs` ``{key: value}`` (None deletes the key,
    back to its default); for :meth:`Admin.describe_configs` the keys to describe (None:
    all)."""

    resource_type: Any
    name: str
    configs: Any = None


def _config_strings(config: Mapping[str, Any] | None) -> dict[str, str]:
    return {str(k): _config_string(v) for k, v in (config or {}).items()}


def _config_string(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _topic_resource(resource: Any) -> ConfigResource:
    if isinstance(resource, str):
        return ConfigResource("topic", resource)
    res = ConfigResource(*resource)
    kind = getattr(res.resource_type, "name", res.resource_type)
    if not (str(kind).lower() == "topic" or kind == 2):
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"kcoord has topic configs only, not {res.resource_type!r} configs ({res.name!r})")
    return res


def _described(entries: list[ConfigEntry]) -> dict[str, dict]:
    return {
        e.name: {
            "value": e.value,
            "source": ConfigSource(e.source).name if e.source in ConfigSource._value2member_map_ else str(e.source),
            "is_default": e.source != ConfigSource.DYNAMIC_TOPIC_CONFIG,
            "read_only": e.read_only,
        }
        for e in entries
    }


class Admin:
    """Topics, offsets, groups and cluster state. Holds no connection or thread of its own
    (it calls the cluster's actors through the ClusterClient): ``close()`` only marks it
    closed, and later calls raise RuntimeError, as with kafka-python's client."""

    def __init__(self, cluster: ClusterClient) -> None:
        self.cluster = cluster
        self._groups = GroupAdmin(cluster, self.list_offsets)
        self._transactions = TransactionAdmin(cluster, self.list_topics)
        self._closed = False

    def __enter__(self) -> "Admin":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this Admin is closed")

    # -- topics ---------------------------------------------------------------------------
    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int | None = None,
        config: Mapping[str, Any] | None = None,
        assignment: Mapping[int, list[int]] | None = None,
        timeout_ms: int = 120_000,
    ) -> dict:
        """Create a topic and wait until every partition's leader accepts writes.
        ``replication_factor`` defaults to ``min(3, brokers)``, as ``kcoord topics create``.
        Returns :meth:`describe_topic`."""
        self._check_open()
        if replication_factor is None:
            replication_factor = len(next(iter(assignment.values()))) if assignment else self.default_replication_factor()
        if not isinstance(partitions, int) or isinstance(partitions, bool):
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"partitions must be an integer, got {partitions!r}")
        if not isinstance(replication_factor, int) or isinstance(replication_factor, bool):
            raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR, f"replication_factor must be an integer, got {replication_factor!r}")
        request = self._create_request(name, partitions, replication_factor, config, assignment)
        response = self.cluster.call_controller("create_topic", request, CreateTopicsResponse, timeout_ms=timeout_ms)
        raise_for_error(response.error_code, response.error_message or "")
        self.cluster.invalidate(name)
        self.wait_for_leaders(name, timeout_ms=timeout_ms)
        return self.describe_topic(name)

    @staticmethod
    def _create_request(
        name: str, partitions: int, replication_factor: int, config: Mapping[str, Any] | None, assignment: Mapping[int, list[int]] | None
    ) -> CreateTopicsRequest:
        return CreateTopicsRequest(
            name=name,
            partitions=partitions,
            replication_factor=replication_factor,
            config=_config_strings(config),
            assignment={int(k): [int(b) for b in v] for k, v in assignment.items()} if assignment else None,
        )

    def default_replication_factor(self) -> int:
        """``min(3, brokers)``: the replication factor of a topic created without one."""
        return default_replication_factor(len(self.cluster.brokers))

    def create_topics(self, new_topics: Iterable[NewTopic], timeout_ms: int | None = None, validate_only: bool = False) -> dict[str, dict]:
        """Create each :class:`NewTopic` in order (kafka-python's ``create_topics``) and wait
        for their leaders. Raises the first topic's error (TopicAlreadyExistsError, ...);
        the topics before it stay created. With ``validate_only`` nothing is created: each
        topic is checked as the controller would check it (name, partitions, replication
        factor against the brokers, configs, assignment, whether it exists) and the answer
        is ``{name: {"num_partitions", "replication_factor"}}``; otherwise ``{name:
        describe_topic(name)}``."""
        self._check_open()
        topics = [t if isinstance(t, NewTopic) else NewTopic(*t) for t in new_topics]
        timeout = 120_000 if timeout_ms is None else timeout_ms
        out: dict[str, dict] = {}
        if validate_only:
            brokers = list(self.cluster.brokers)
            existing = set(self.list_topics(internal=True))
            for t in topics:
                partitions = t.num_partitions if t.num_partitions and t.num_partitions > 0 else 1
                rf = t.replication_factor if t.replication_factor and t.replication_factor > 0 else None
                if rf is None:
                    rf = len(next(iter(t.replica_assignments.values()))) if t.replica_assignments else self.default_replication_factor()
                request = self._create_request(t.name, partitions, rf, t.topic_configs, t.replica_assignments)
                topic, _ = plan_topic(request, brokers, existing, {}, 0)
                existing.add(t.name)
                out[t.name] = {"num_partitions": topic.num_partitions, "replication_factor": topic.replication_factor}
            return out
        for t in topics:
            partitions = t.num_partitions if t.num_partitions and t.num_partitions > 0 else 1
            rf = t.replication_factor if t.replication_factor and t.replication_factor > 0 else None
            out[t.name] = self.create_topic(t.name, partitions, rf, t.topic_configs, t.replica_assignments, timeout_ms=timeout)
        return out

    def delete_topics(self, topics: Iterable[str], timeout_ms: int | None = None) -> None:
        """Delete each topic in order (kafka-python's ``delete_topics``); raises the first
        error (UnknownTopicOrPartitionError for a topic that does not exist)."""
        self._check_open()
        for name in topics:
            self.delete_topic(name, timeout_ms=60_000 if timeout_ms is None else timeout_ms)

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
                    wait = min(self.cluster.attempt_timeout_s, max(0.05, deadline - time.monotonic()))
                    info = self.cluster.call(name, "describe", timeout=wait)
                    if info["role"] != "leader" or info["leader_epoch"] != p.leader_epoch:
                        pending.append(p.partition)
                except CallFailed:  # dead, restarting, recreated or silent: looked up again next time
                    pending.append(p.partition)
            if not pending:
                return
            if time.monotonic() >= deadline:
                raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"partitions {pending} of {topic!r} have no ready leader")
            time.sleep(0.05)

    def delete_topic(self, name: str, timeout_ms: int = 60_000) -> None:
        self._check_open()
        response = self.cluster.call_controller("delete_topic", DeleteTopicsRequest(name=name), DeleteTopicsResponse, timeout_ms=timeout_ms)
        raise_for_error(response.error_code, response.error_message or "")
        self.cluster.invalidate(name)

    # -- changing topics ---------------------------------------------------------------------
    def create_partitions(
        self, topic_partitions: Mapping[str, NewPartitions | int], timeout_ms: int | None = None, validate_only: bool = False
    ) -> dict[str, dict]:
        """Grow each topic to ``NewPartitions(total_count)`` partitions (kafka-python's
        ``create_partitions``; a plain int is the total count too). The count only grows
        (INVALID_PARTITIONS otherwise); new partitions are placed as creation places them
        and have leaders when this returns. Producers and consumers see them after their
        next metadata refresh. Returns ``{topic: describe_topic(topic)}`` (with
        ``validate_only``: ``{topic: {"num_partitions"}}``, nothing changed)."""
        self._check_open()
        timeout = 120_000 if timeout_ms is None else timeout_ms
        out: dict[str, dict] = {}
        for topic, spec in topic_partitions.items():
            if not isinstance(spec, NewPartitions):
                spec = NewPartitions(spec) if isinstance(spec, int) and not isinstance(spec, bool) else NewPartitions(*spec)
            if not isinstance(spec.total_count, int) or isinstance(spec.total_count, bool):
                raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"total_count must be an integer, got {spec.total_count!r}")
            assignment = [[int(b) for b in reps] for reps in spec.new_assignments] if spec.new_assignments is not None else None
            request = CreatePartitionsRequest(topic=topic, count=spec.total_count, assignment=assignment, validate_only=validate_only)
            response = self.cluster.call_controller("create_partitions", request, CreatePartitionsResponse, timeout_ms=timeout)
            raise_for_error(response.error_code, response.error_message or "")
            if validate_only:
                assert response.topic is not None
                out[topic] = {"num_partitions": len(response.topic.partitions)}
                continue
            self.cluster.invalidate(topic)
            self.wait_for_leaders(topic, timeout_ms=timeout)
            out[topic] = self.describe_topic(topic)
        return out

    def describe_topic_config(self, topic: str, keys: Iterable[str] | None = None) -> dict[str, dict]:
        """``{key: {"value", "source", "is_default", "read_only"}}`` for every topic config
        key (or ``keys``): ``source`` is Kafka's DYNAMIC_TOPIC_CONFIG (set on the topic),
        STATIC_BROKER_CONFIG (the cluster's default topic config) or DEFAULT_CONFIG."""
        self._check_open()
        request = DescribeConfigsRequest(topic=topic, keys=None if keys is None else [str(k) for k in keys])
        response = self.cluster.call_controller("describe_configs", request, DescribeConfigsResponse)
        raise_for_error(response.error_code, response.error_message or "")
        return _described(response.configs)

    def describe_configs(self, config_resources: Iterable[Any], include_synonyms: bool = False) -> dict[str, dict[str, dict]]:
        """kafka-python's ``describe_configs`` for topic resources (``ConfigResource("topic",
        name)`` or a topic name): ``{topic: describe_topic_config(topic)}``.
        ``include_synonyms`` is accepted and ignored (kcoord has no config synonyms)."""
        out: dict[str, dict[str, dict]] = {}
        for resource in config_resources:
            res = _topic_resource(resource)
            keys = None if res.configs is None else list(res.configs)
            out[res.name] = self.describe_topic_config(res.name, keys)
        return out

    def alter_topic_config(
        self, topic: str, set: Mapping[str, Any] | None = None, delete: Iterable[str] = (), validate_only: bool = False
    ) -> dict[str, dict]:
        """Change some of a topic's config keys (Kafka's IncrementalAlterConfigs): ``set``
        gives keys new values, ``delete`` puts keys back to their default; other keys stay
        as they are. Validated like a creation config (INVALID_CONFIG naming the key),
        persisted by the controller, then applied by every live replica without a restart
        before this returns. Returns :meth:`describe_topic_config` after the change."""
        self._check_open()
        ops = [AlterConfigOp(name=str(k), op=AlterOp.SET, value=None if v is None else _config_string(v)) for k, v in (set or {}).items()]
        ops += [AlterConfigOp(name=str(k), op=AlterOp.DELETE) for k in delete]
        request = IncrementalAlterConfigsRequest(topic=topic, ops=ops, validate_only=validate_only)
        response = self.cluster.call_controller("alter_configs", request, IncrementalAlterConfigsResponse)
        raise_for_error(response.error_code, response.error_message or "")
        self.cluster.invalidate(topic)
        return _described(response.configs)

    def alter_configs(self, config_resources: Iterable[Any], validate_only: bool = False) -> dict[str, dict[str, dict]]:
        """kafka-python's ``alter_configs`` with *incremental* semantics (as Kafka's
        IncrementalAlterConfigs): each ``ConfigResource("topic", name, {key: value})`` sets
        those keys, a value of None deletes the key (back to its default), and keys not named
        keep their value -- unlike Kafka's legacy AlterConfigs, which replaced the whole set.
        Returns ``{topic: describe_topic_config(topic)}`` after the change."""
        out: dict[str, dict[str, dict]] = {}
        for resource in config_resources:
            res = _topic_resource(resource)
            changes = dict(res.configs or {})
            out[res.name] = self.alter_topic_config(
                res.name,
                set={k: v for k, v in changes.items() if v is not None},
                delete=[k for k, v in changes.items() if v is None],
                validate_only=validate_only,
            )
        return out

    def delete_records(self, records_to_delete: Mapping[Any, int], timeout_ms: int | None = None) -> dict[TopicPartition, dict]:
        """Kafka's DeleteRecords (kafka-python's ``delete_records``): for each
        ``{TopicPartition: offset}`` the partition leader makes ``offset`` the log start
        offset (-1: the high watermark); records below it are no longer readable and
        consumers positioned there get OFFSET_OUT_OF_RANGE (then auto_offset_reset). An
        offset above the high watermark is OFFSET_OUT_OF_RANGE. Each partition is answered
        once its low watermark -- the smallest log start offset over the replicas that
        could lead it -- has reached the offset, so no failover brings the records back;
        until then (its followers move theirs with their next fetch) the leader holds the
        request, and KafkaError REQUEST_TIMED_OUT comes after ``timeout_ms`` (default
        ``request_timeout_ms``). Returns ``{TopicPartition: {"low_watermark": ...}}``."""
        self._check_open()
        # the leader answers REQUEST_TIMED_OUT (retried) before a call attempt gives up
        hold_ms = max(100, int(self.cluster.attempt_timeout_s * 1000) - 500)
        out: dict[TopicPartition, dict] = {}
        for tp, offset in records_to_delete.items():
            tp = TopicPartition(*tp)
            if not isinstance(offset, int) or isinstance(offset, bool):
                raise ValueError(f"offset for {tp.topic}-{tp.partition} must be an integer (-1: the high watermark), got {offset!r}")
            self.cluster.partition_metadata(tp.topic, tp.partition, refresh=True)  # UNKNOWN_TOPIC_OR_PARTITION at once
            response = self.cluster.call_leader(
                tp.topic,
                tp.partition,
                "delete_records",
                lambda epoch, tp=tp, offset=offset: DeleteRecordsRequest(
                    tp.topic, tp.partition, offset, current_leader_epoch=epoch, timeout_ms=hold_ms
                ),
                DeleteRecordsResponse,
                timeout_ms=timeout_ms,
            )
            raise_for_error(response.error_code, response.error_message or f"DeleteRecords on {tp.topic}-{tp.partition} failed")
            out[tp] = {"low_watermark": response.low_watermark}
        return out

    def list_topics(self, internal: bool = False) -> list[str]:
        self._check_open()
        response = self.cluster.call_controller("metadata", MetadataRequest(topics=None), MetadataResponse)
        return sorted(t.name for t in response.topics if internal or not t.internal)

    def describe_topic(self, name: str) -> dict:
        """Per partition: leader, leader epoch, replicas, ISR, HW and LEO (from the leader)."""
        md = self.cluster.topic(name, refresh=True)
        wait = self.cluster.attempt_timeout_s
        sent = {
            p.partition: self.cluster.submit(self.cluster.replica_name(name, p.partition, p.leader), "describe", timeout=wait)
            for p in md.partitions
            if p.leader >= 0
        }
        partitions = []
        for p in md.partitions:
            info: dict = {}
            if p.partition in sent:
                try:
                    info = sent[p.partition].result()
                except CallFailed:  # dead, restarting, recreated or silent: looked up again next time
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

    # -- consumer groups (admin_groups.py: the group coordinators, not the controller) -------
    def list_groups(self, states: list[str] | None = None) -> list[dict]:
        """Every group of every coordinator: ``{"group_id", "state", "protocol_type",
        "coordinator"}``, sorted by group id. ``states`` filters by state name."""
        return self._groups.list_groups(states)

    def describe_group(self, group_id: str) -> dict:
        """State, generation, protocol, leader and members (id, instance id, client id/host,
        assignment) of a group, and per partition (committed or assigned) its committed
        offset, log-end offset (the HW) and lag. Raises GROUP_ID_NOT_FOUND for an unknown
        group."""
        return self._groups.describe_group(group_id)

    def list_consumer_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets (kafka-python's ``list_consumer_group_offsets``):
        ``{TopicPartition: OffsetAndMetadata}`` for every partition it committed, or for
        ``partitions`` (those without a commit are left out)."""
        self._check_open()
        return self._groups.list_consumer_group_offsets(group_id, partitions)

    def alter_consumer_group_offsets(self, group_id: str, offsets: Mapping[Any, Any]) -> dict[TopicPartition, OffsetAndMetadata]:
        """Set the group's committed offsets, across topics (kafka-python's
        ``alter_consumer_group_offsets``): ``{TopicPartition: offset | OffsetAndMetadata}``.
        Each offset must lie within [0, high watermark] (OFFSET_OUT_OF_RANGE) of an
        existing partition (UNKNOWN_TOPIC_OR_PARTITION); refused while the group has
        members (NON_EMPTY_GROUP). The same standalone commit as ``kcoord.spark.commit`` and
        :meth:`reset_offsets`. Returns what was committed."""
        self._check_open()
        return self._groups.alter_consumer_group_offsets(group_id, offsets)

    def reset_offsets(self, group_id: str, topic: str, to: str | Mapping[int, int] = "earliest") -> dict[int, int]:
        """Set the group's committed offsets of ``topic`` to ``"earliest"`` (log start),
        ``"latest"`` (the HW) or ``{partition: offset}`` (each within [log start, HW]).

        Refused while the group has members (NON_EMPTY_GROUP, or REBALANCE_IN_PROGRESS
        mid-rebalance): a live consumer would overwrite the reset with its next commit.
        Returns {partition: new offset}."""
        self._check_open()
        return self._groups.reset_offsets(group_id, topic, to)

    def delete_group(self, group_id: str) -> None:
        """Delete an inactive group and its committed offsets (NON_EMPTY_GROUP while it has
        members, GROUP_ID_NOT_FOUND if there is no such group)."""
        self._groups.delete_group(group_id)

    # -- users and ACLs (security_admin.py; the controller over Ray: see docs/security.md) --
    # -- transactions (admin_transactions.py, KIP-664) ----------------------------------------
    def list_transactions(
        self, states: Iterable[str] | None = None, producer_ids: Iterable[int] | None = None, duration_filter_ms: int | None = None
    ) -> list[TransactionListing]:
        """Every transactional id of every transaction coordinator, sorted: ``TransactionListing
        (transactional_id, producer_id, state, coordinator)``. Filters as Kafka's: ``states``
        by name (Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort;
        an unknown name is a ValueError), ``producer_ids``, ``duration_filter_ms`` (only
        transactions running longer than that, KIP-994)."""
        self._check_open()
        return self._transactions.list_transactions(states, producer_ids, duration_filter_ms)

    def describe_transactions(self, transactional_ids: Iterable[str]) -> dict[str, TransactionDescription]:
        """``{transactional_id: TransactionDescription(coordinator_id, state, producer_id,
        producer_epoch, transaction_timeout_ms, transaction_start_time_ms,
        topic_partitions)}`` from each id's coordinator. An unknown id raises
        TRANSACTIONAL_ID_NOT_FOUND (KafkaError) naming it."""
        self._check_open()
        return self._transactions.describe_transactions(transactional_ids)

    def describe_producers(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, PartitionProducerState]:
        """Each partition leader's producers: ``{tp: PartitionProducerState(active_producers=
        [ProducerState(producer_id, producer_epoch, last_sequence, last_timestamp,
        coordinator_epoch, current_transaction_start_offset)])}``. A partition that does not
        exist raises UNKNOWN_TOPIC_OR_PARTITION."""
        self._check_open()
        return self._transactions.describe_producers(partitions)

    def abort_transaction(
        self, spec: AbortTransactionSpec | TopicPartition, producer_id: int | None = None, producer_epoch: int | None = None, coordinator_epoch: int | None = None
    ) -> int:
        """Abort a hanging transaction (KIP-664): an ABORT marker for ``producer_id`` at
        ``producer_epoch`` written straight to the partition, whose leader checks the epochs
        (INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED). Takes an
        ``AbortTransactionSpec(topic_partition, producer_id, producer_epoch,
        coordinator_epoch)`` or the same as arguments (``coordinator_epoch`` None: the one the
        leader reports for the producer). Returns the marker's offset."""
        self._check_open()
        return self._transactions.abort_transaction(spec, producer_id, producer_epoch, coordinator_epoch)

    def find_hanging_transactions(
        self, topics: Iterable[str] | None = None, partitions: Iterable[TopicPartition] | None = None, max_transaction_timeout_ms: int | None = None
    ) -> list[HangingTransaction]:
        """Transactions open at a partition that their coordinator does not hold as ongoing
        there (kafka-transactions.sh find-hanging), among those whose last write is older than
        ``max_transaction_timeout_ms`` (default 15 min; 0: any age). Each a
        ``HangingTransaction`` with what :meth:`abort_transaction` needs."""
        self._check_open()
        return self._transactions.find_hanging_transactions(topics, partitions, max_transaction_timeout_ms)

    def create_acls(self, acls: Iterable[Any]) -> dict[str, list]:
        """kafka-python's ``create_acls``: ``{"succeeded": [ACL], "failed": [KafkaError]}``.
        An ACL that exists already succeeds without a change."""
        self._check_open()
        return security_admin.create_acls(self.cluster, acls)

    def describe_acls(self, acl_filter: Any) -> tuple[list, type]:
        """kafka-python's ``describe_acls``: ``(the ACLs the ACLFilter matches, NoError)``."""
        self._check_open()
        return security_admin.describe_acls(self.cluster, acl_filter)

    def delete_acls(self, acl_filters: Iterable[Any]) -> list[tuple]:
        """kafka-python's ``delete_acls``: ``[(filter, ACLs deleted, NoError or error class)]``."""
        self._check_open()
        return security_admin.delete_acls(self.cluster, acl_filters)

    def alter_user_scram_credentials(self, alterations: Iterable[Any]) -> dict[str, str | None]:
        """kafka-python's ``alter_user_scram_credentials`` (KIP-554) with
        ``UserScramCredentialUpsertion``/``UserScramCredentialDeletion``: ``{user: error
        message or None}``. Listeners apply a change to open connections within a second:
        a session whose credential was replaced or deleted is closed."""
        self._check_open()
        return security_admin.alter_user_scram_credentials(self.cluster, alterations)

    def describe_user_scram_credentials(self, users: Iterable[str] | None = None) -> dict[str, dict]:
        """``{user: {"error", "credential_infos": [{"mechanism", "iterations"}]}}``."""
        self._check_open()
        return security_admin.describe_user_scram_credentials(self.cluster, users)
