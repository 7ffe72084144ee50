"""Transactions: the transaction coordinator's pure (sans-I/O, Ray-free) core (issue 34)."""

from .placement import TRANSACTION_STATE_TOPIC, coordinator_for

__all__ = ["TRANSACTION_STATE_TOPIC", "coordinator_for"]
