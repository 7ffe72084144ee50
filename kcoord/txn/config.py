"""Settings of a transaction coordinator (Kafka's ``transaction.*`` and
``transactional.id.*`` broker configs), kept apart from the state machine so a shell can build
one from a cluster config and tests can shrink every interval."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping


@dataclass(frozen=True)
class TxnConfig:
    # A producer's transaction.timeout.ms above this is refused with
    # INVALID_TRANSACTION_TIMEOUT (Kafka's default: 15 minutes).
    transaction_max_timeout_ms: int = 900_000
    # An id with no transaction in progress and no request for this long is removed
    # (a tombstone); its next InitProducerId starts over with a new producer id.
    transactional_id_expiration_ms: int = 604_800_000
    # KIP-939 two-phase transactions (no timeout; a new instance may keep one). Kafka's
    # default is false; kcoord's own transactional Spark and Ray Data writes need them, so
    # they are on unless the operator turns them off (then enable_two_phase is refused
    # with TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as in Kafka).
    transaction_two_phase_commit_enable: bool = True
    # Producer ids are taken from the controller in blocks of this many (Kafka's block).
    producer_id_block_size: int = 1_000
    # An allocation that got no outcome for this long may be asked for again.
    producer_id_request_timeout_ms: int = 30_000
    # A marker that failed is re-sent after this, doubling up to the max, until written.
    marker_retry_backoff_ms: int = 100
    marker_max_backoff_ms: int = 5_000
    # A write the coordinator makes on its own (completing a transaction, aborting a timed
    # out one, expiring an id) that failed is tried again after this.
    append_retry_backoff_ms: int = 500
    # At most one metadata refresh is asked for within this.
    metadata_refresh_backoff_ms: int = 500
    # An AddPartitionsToTxn / AddOffsetsToTxn that finds its id busy (the previous
    # transaction's markers being written, or another transition in flight) is held this
    # long and served once the id settles, instead of answered CONCURRENT_TRANSACTIONS at
    # once (it is, when the hold runs out). Keep it below the clients' request timeout
    # (30 s for Kafka's); 0: answer at once, as Kafka does.
    concurrent_transactions_hold_ms: int = 1_000

    def __post_init__(self) -> None:
        if self.transaction_max_timeout_ms < 1:
            raise ValueError("transaction_max_timeout_ms must be >= 1")
        if self.transactional_id_expiration_ms < 1:
            raise ValueError("transactional_id_expiration_ms must be >= 1")
        if not 1 <= self.producer_id_block_size <= 1_000_000:
            raise ValueError("producer_id_block_size must be in 1..1000000 (the controller's bound)")
        for name in (
            "producer_id_request_timeout_ms",
            "marker_retry_backoff_ms",
            "marker_max_backoff_ms",
            "append_retry_backoff_ms",
            "metadata_refresh_backoff_ms",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.concurrent_transactions_hold_ms < 0:
            raise ValueError("concurrent_transactions_hold_ms must be >= 0")
        if self.marker_max_backoff_ms < self.marker_retry_backoff_ms:
            raise ValueError("marker_max_backoff_ms must be >= marker_retry_backoff_ms")

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> "TxnConfig":
        """Build from Kafka-style names (``transaction.max.timeout.ms``) or field names;
        unknown keys are ignored so a whole broker config can be passed in."""
        kinds = {f.name: f.type for f in fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, value in props.items():
            name = key.replace(".", "_")
            if name not in kinds:
                continue
            if kinds[name] in (bool, "bool"):
                kwargs[name] = value if isinstance(value, bool) else str(value).strip().lower() == "true"
            else:
                kwargs[name] = int(value)
        return cls(**kwargs)
