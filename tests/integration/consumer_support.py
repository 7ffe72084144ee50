"""What consumer tests share: polling until enough records arrived, with a deadline."""

from __future__ import annotations

import time


def drain(consumer, expected: int, timeout: float = 60) -> list:
    """Poll until ``expected`` records arrived or ``timeout`` seconds passed; the records."""
    out: list = []
    deadline = time.monotonic() + timeout
    while len(out) < expected and time.monotonic() < deadline:
        for recs in consumer.poll(timeout_ms=200).values():
            out += recs
    return out
