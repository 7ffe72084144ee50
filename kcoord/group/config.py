"""Settings of a group coordinator (Kafka's ``group.*`` and ``offsets.*`` broker configs).

Kept apart from the state machine so the actor shell can build one from a cluster config
and tests can shrink every timeout to a few milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping


@dataclass(frozen=True)
class GroupConfig:
    # Bounds on a member's session timeout; outside them JoinGroup fails with
    # INVALID_SESSION_TIMEOUT (protects the coordinator from absurd timers).
    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    # How long the first join into an Empty group waits for more members before the
    # generation forms (extended while members keep arriving, up to the rebalance timeout).
    group_initial_rebalance_delay_ms: int = 3_000
    # Members beyond this are refused with GROUP_MAX_SIZE_REACHED.
    group_max_size: int = 2**31 - 1
    # Committed offsets of an Empty group expire this long after it became empty; offsets
    # of a group that never had members expire this long after their commit.
    offsets_retention_minutes: int = 10_080
    # Longest metadata string accepted with a committed offset.
    offset_metadata_max_bytes: int = 4_096
    # How long an Empty group with no offsets and no members lingers before it is dropped
    # (Kafka's offsets.retention.check.interval.ms plays this role).
    offsets_retention_check_interval_ms: int = 600_000
    # A transactional producer's fencing record (``[5, producer_id]``, KIP-447) is removed
    # once the producer has had no transactional offsets here for this long and has none
    # pending: the transaction coordinator's horizon for idle transactional ids (Kafka's
    # transactional.id.expiration.ms, 7 days), so one broker config sets both.
    transactional_id_expiration_ms: int = 604_800_000

    def __post_init__(self) -> None:
        if self.group_min_session_timeout_ms < 0 or (
            self.group_max_session_timeout_ms < self.group_min_session_timeout_ms
        ):
            raise ValueError("need 0 <= group_min_session_timeout_ms <= group_max_session_timeout_ms")
        if self.group_initial_rebalance_delay_ms < 0:
            raise ValueError("group_initial_rebalance_delay_ms must be >= 0")
        if self.group_max_size < 1:
            raise ValueError("group_max_size must be >= 1")
        if self.offsets_retention_minutes < 1:
            raise ValueError("offsets_retention_minutes must be >= 1")
        if self.offset_metadata_max_bytes < 0:
            raise ValueError("offset_metadata_max_bytes must be >= 0")
        if self.offsets_retention_check_interval_ms < 0:
            raise ValueError("offsets_retention_check_interval_ms must be >= 0")
        if self.transactional_id_expiration_ms < 1:
            raise ValueError("transactional_id_expiration_ms must be >= 1")

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * 60_000

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> "GroupConfig":
        """Build from Kafka-style names (``group.initial.rebalance.delay.ms``) or field
        names; unknown keys are ignored so a whole broker config can be passed in."""
        known = {f.name for f in fields(cls)}
        kwargs = {}
        for key, value in props.items():
            name = key.replace(".", "_")
            if name in known:
                kwargs[name] = int(value)
        return cls(**kwargs)
