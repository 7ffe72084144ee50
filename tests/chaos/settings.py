"""Names and settings a chaos run's modules share, and its log line."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from kcoord.cluster.local import LOCAL_RAY_ENV

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "kcoord"
TOPIC = "chaos"
CALM = "calm"
GROUP = "chaos-group"
OFFSETS = "__consumer_offsets"
PARTITIONS = 3
MIN_ISR = 2
READS = 3  # catch-up reads of each topic; the median counts

# kcoord's own Ray settings for many small actors on a small machine, without usage stats.
RAY_ENV = {**LOCAL_RAY_ENV, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled")}

T0 = time.monotonic()


def log(msg: str) -> None:
    """A progress line on stderr, with the seconds since the run's process started."""
    print(f"[chaos {time.monotonic() - T0:7.1f}s] {msg}", file=sys.stderr, flush=True)
