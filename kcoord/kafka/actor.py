"""The Kafka listener's Ray actor shell lives in :mod:`kcoord.actors.kafka_listener` with the
other shells. Listeners deployed before it moved were created from this path, and Ray
restarts them by it: keep it importable."""

from __future__ import annotations

from kcoord.actors.kafka_listener import KafkaListener

__all__ = ["KafkaListener"]
