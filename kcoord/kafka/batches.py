"""Compatibility: Kafka v2 record batches and their conversion moved to
:mod:`kcoord.record.kafka_v2` and :mod:`kcoord.record.conversion`; re-exported here for
code and processes that import them by this name."""

from __future__ import annotations

from ..record.conversion import kcoord_to_kafka, to_kafka
from ..record.kafka_v2 import build_kafka_batch, decode_kafka_batch, set_offsets

__all__ = ["build_kafka_batch", "decode_kafka_batch", "kcoord_to_kafka", "set_offsets", "to_kafka"]
