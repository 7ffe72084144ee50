"""Kafka's ConsumerProtocol payloads (what Kafka clients put in group assignments)."""

from __future__ import annotations


def decode_assignment(data: bytes) -> dict[str, list[int]] | None:
    """A Kafka client's ConsumerProtocolAssignment as ``{topic: [partitions]}``, or None
    when ``data`` is not one."""
    try:
        from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment

        out: dict[str, list[int]] = {}
        for tp in ConsumerProtocolAssignment.decode(bytes(data)).partitions():
            out.setdefault(tp.topic, []).append(tp.partition)
        return {t: sorted(ps) for t, ps in out.items()}
    except Exception:
        return None
