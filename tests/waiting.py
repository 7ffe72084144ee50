"""Waiting on a condition with a deadline: tests never sleep to synchronise."""

from __future__ import annotations

import time
from typing import Callable


def wait_until(predicate: Callable[[], object], timeout: float = 30.0, interval: float = 0.02, what: str = "condition"):
    """Poll ``predicate`` until it returns a truthy value; fail with ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # keep polling through transient errors
            last_exc = exc
        if time.monotonic() >= deadline:
            extra = f" (last error: {last_exc!r})" if last_exc else ""
            raise AssertionError(f"timed out after {timeout} s waiting for {what}{extra}")
        time.sleep(interval)
