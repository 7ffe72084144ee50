"""When to fsync: Kafka's flush.messages / flush.ms policy.

By default kcoord, like Kafka, leaves flushing to the OS and relies on replication for
durability; a topic can ask for an fsync every N records or every T ms instead. Both the
file log and the in-memory log count with this class, so the simulation crashes a log
exactly where a real one would lose data.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class FlushPolicy:
    flush_messages: int | None
    flush_ms: int | None
    last_flush_ms: int = 0
    unflushed_records: int = 0

    def configure(self, flush_messages: int | None, flush_ms: int | None) -> None:
        self.flush_messages = flush_messages
        self.flush_ms = flush_ms

    def record_append(self, records: int, now_ms: int) -> bool:
        """Count an append; True when the policy wants an fsync now."""
        self.unflushed_records += records
        if self.flush_messages is not None and self.unflushed_records >= self.flush_messages:
            return True
        return self.flush_ms is not None and now_ms - self.last_flush_ms >= self.flush_ms

    def time_due(self, now_ms: int) -> bool:
        return (
            self.flush_ms is not None
            and self.unflushed_records > 0
            and now_ms - self.last_flush_ms >= self.flush_ms
        )

    def flushed(self, now_ms: int) -> None:
        self.unflushed_records = 0
        self.last_flush_ms = now_ms
