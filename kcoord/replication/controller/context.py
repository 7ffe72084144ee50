"""What the controller's parts share: the cluster metadata, what is known of each replica,
and how a decision is written (``persist``) and announced (``send_state``).
"""

from __future__ import annotations

from ...protocol.controller import HeartbeatResponse, LeaderAndIsrRequest
from ..controller_actions import ControllerAction, Persist, ReplicaId, SendLeaderAndIsr
from ..controller_config import ControllerConfig
from ..controller_metrics import ControllerMetrics
from ..owned_producers import OwnedProducer
from ..failure_detector import FailureDetector
from ..placement import BrokerBinding
from ..security_metadata import SecurityMetadata
from ..metadata import NO_LEADER, ClusterState, PartitionState, TopicState, partition_key
from ..trust import TrustLedger


class ControllerContext:
    """The cluster metadata the controller owns and what it knows of the replicas, shared
    by its parts (start-up and placement, topics, ISR changes, liveness and elections),
    with the primitives each of them uses to record and announce a decision."""

    def __init__(self, name: str, config: ControllerConfig | None = None, binding: dict[int, str] | None = None) -> None:
        """``binding``: the deploy-time broker -> node binding ({} on one node); a binding
        found in the store (re-bindings made since) takes precedence."""
        self.name = name
        self.config = config or ControllerConfig()
        self.placement = BrokerBinding(dict(binding or {}))
        self.cluster: ClusterState | None = None
        self.topics: dict[str, TopicState] = {}
        self.partitions: dict[tuple[str, int], PartitionState] = {}
        self.detector = FailureDetector(
            self.config.heartbeat_interval_ms,
            self.config.session_timeout_ms,
            self.heartbeat_interval,
            align_ms=self.config.heartbeat_interval_ms // 4,
            # vouches come with the leaders' rounds, every heartbeat_interval_ms
            vouch_grace_ms=self.config.heartbeat_interval_ms // 2,
        )
        self.metrics = ControllerMetrics()
        self.failover_started: dict[tuple[str, int], int] = {}
        self.next_ensure: dict[ReplicaId, int] = {}
        self.last_status: dict[ReplicaId, HeartbeatResponse] = {}
        # Who restarted, on which storage, and whom a lossy topic may elect (trust.py).
        self.trust = TrustLedger()
        self.next_rebalance_ms = 0
        # Replicas whose log reported an I/O error, with the reason (until they answer
        # healthy again, i.e. after a restart).
        self.offline_logs: dict[ReplicaId, str] = {}
        # Producer ids kept per owner (group coordinators' fencing, owned_producers.py).
        self.owned_producers: dict[str, OwnedProducer] = {}
        # SCRAM credentials and ACLs (security_metadata.py): their own keys and requests.
        self.security = SecurityMetadata()

    @property
    def controller_epoch(self) -> int:
        return self.cluster.controller_epoch if self.cluster else -1

    def sorted_partitions(self) -> list[PartitionState]:
        return [self.partitions[k] for k in sorted(self.partitions)]

    def persist(self, p: PartitionState) -> Persist:
        """``p``'s record with what is known of its replicas' processes: one write, so no
        reload finds an ISR or ELR without the trust it goes with (issue 32, finding 7)."""
        return Persist(partition_key(p.topic, p.partition), p.encode(self.trust.records(p)))

    def persist_trust(self, p: PartitionState) -> list[ControllerAction]:
        """``p``'s record again if what is known of its replicas changed (``p`` itself is
        as stored when this is called)."""
        return [self.persist(p)] if self.trust.changed(p) else []

    def effective_config(self, topic: TopicState) -> dict[str, str]:
        cfg = dict(self.config.default_topic_config)
        cfg.update(topic.config)
        return cfg

    def replica_config(self, topic: TopicState) -> dict[str, str]:
        """What a replica is told (CreateReplica, LeaderAndIsr): the broker configs and the
        topic's effective config."""
        cfg = dict(self.config.broker_config)
        cfg.update(self.effective_config(topic))
        return cfg

    def alive(self, p: PartitionState):
        return lambda b: self.detector.is_alive(ReplicaId(p.topic, p.partition, b))

    def heard(self, p: PartitionState):
        return lambda b: self.detector.has_answered(ReplicaId(p.topic, p.partition, b))

    def holds_data(self, p: PartitionState):
        return lambda b: self.trust.holds_data(ReplicaId(p.topic, p.partition, b))

    def send_state(self, p: PartitionState, brokers: list[int]) -> list[ControllerAction]:
        """LeaderAndIsr for ``brokers``, the leader first so followers find it ready."""
        topic = self.topics[p.topic]
        config = self.replica_config(topic)
        ordered = sorted(brokers, key=lambda b: (b != p.leader, p.replicas.index(b) if b in p.replicas else b))
        return [
            SendLeaderAndIsr(
                ReplicaId(p.topic, p.partition, b),
                LeaderAndIsrRequest(
                    controller_epoch=self.controller_epoch,
                    topic=p.topic,
                    partition=p.partition,
                    leader=p.leader,
                    leader_epoch=p.leader_epoch,
                    partition_epoch=p.partition_epoch,
                    isr=list(p.isr),
                    replicas=list(p.replicas),
                    config=config,
                    config_version=topic.config_version,
                    incarnation=self.trust.incarnation.get(ReplicaId(p.topic, p.partition, b), ""),
                    directory_id=self.trust.directory.get(ReplicaId(p.topic, p.partition, b), ""),
                ),
            )
            for b in ordered
        ]

    def heartbeat_interval(self, replica: ReplicaId) -> int:
        """Leaders (and every replica of a leaderless partition, whose return ends an
        outage) are beaten at the base interval; followers less often."""
        p = self.partitions.get((replica.topic, replica.partition))
        base = self.config.heartbeat_interval_ms
        if p is None or p.leader == NO_LEADER or p.leader == replica.broker:
            return base
        slow = min(self.config.follower_heartbeat_interval_ms, self.config.session_timeout_ms // 3)
        return max(base, slow)
