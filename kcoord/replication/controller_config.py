"""The controller's settings: heartbeats and the session timeout, replica start-up and
replacement, leader rebalancing, and the configs every topic and replica start from."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ControllerConfig:
    # How often partition leaders are heartbeaten: their loss stops writes, so it bounds
    # failover time where nothing faster tells (the shell beats a replica at once when its
    # direct-call connection breaks, which is how a process on the controller's node dies;
    # elsewhere Ray's answer to the next beat tells). Followers (and replicas of offline
    # partitions' ex-leaders) are beaten every follower_heartbeat_interval_ms instead --
    # each beat costs CPU on both ends, the largest share of an idle partition's cost.
    # Capped at a third of the session timeout so that a follower still gets several
    # chances before it is failed.
    heartbeat_interval_ms: int = 1000
    follower_heartbeat_interval_ms: int = 1000
    session_timeout_ms: int = 3000
    # A follower that fetches is vouched for by its leader's heartbeat answer (a fetch is
    # as good a sign of life as a heartbeat answer, and carries the same status) and is
    # not beaten itself: an idle partition costs one heartbeat per interval, not three.
    # The leader's word counts when it heard from the follower at most vouch_max_age_ms
    # ago (a fetch parked at the leader counts as now); an older one makes the controller
    # beat the follower at once.
    leader_vouches: bool = True
    vouch_max_age_ms: int = 500
    # A heartbeat unanswered this long makes the shell ask Ray's GCS whether the actor is
    # gone; a slow but live replica is not failed until session_timeout_ms.
    liveness_probe_ms: int = 50
    ensure_replica_interval_ms: int = 1000
    # A new replica actor may take seconds to start on a busy node; not a failure.
    replica_startup_grace_ms: int = 30_000
    # A failed replica that Ray still reports RESTARTING this long after the failure is
    # replaced by a new actor (same name, same log directory) instead of waited for.
    restart_stuck_ms: int = 30_000
    auto_leader_rebalance: bool = True
    leader_rebalance_interval_ms: int = 5000
    # Like Kafka's leader.imbalance.per.broker.percentage: the periodic check moves a
    # broker's preferred partitions back only when more than this share of them is led
    # elsewhere (the admin rebalance always moves every one it can).
    leader_imbalance_per_broker_percentage: int = 10
    # Topic config every topic starts from (a topic's own config overrides it).
    default_topic_config: dict[str, str] = field(default_factory=dict)
    # Cluster-wide broker configs (replication.config.BROKER_KEYS: retention check interval,
    # the cleaner's settings), delivered to every replica with its topic's config.
    broker_config: dict[str, str] = field(default_factory=dict)
