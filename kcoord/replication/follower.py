"""Follower-side replication state: which leader, which phase, what is in flight.

A follower first finds where its log diverges from the new leader's (OffsetsForLeaderEpoch,
KIP-101 with KIP-279's iteration), truncates there, then fetches in a loop. Any error backs
off and retries; the controller's next LeaderAndIsr moves it to another leader if needed.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any


class Phase(str, enum.Enum):
    TRUNCATING = "truncating"
    FETCHING = "fetching"


TRUNCATING = Phase.TRUNCATING
FETCHING = Phase.FETCHING


@dataclass
class FollowerState:
    leader: int
    epoch: int
    phase: Phase = Phase.TRUNCATING
    # The request whose answer we wait for (None: nothing in flight). Answers are matched
    # to it by identity, so a late answer to an older request is never taken for it.
    in_flight: Any = None
    backoff_until_ms: int = 0
    # The epoch of our own log we last asked the leader about (TRUNCATING).
    asked_epoch: int = -1
    consecutive_errors: int = 0
    fetches: int = 0
    last_fetch_ms: int = -1
    leader_log_end_offset: int = -1

    def ready(self, now_ms: int) -> bool:
        return self.in_flight is None and now_ms >= self.backoff_until_ms

    def back_off(self, now_ms: int, backoff_ms: int) -> None:
        self.in_flight = None
        self.consecutive_errors += 1
        # Grow gently (x1, x2, x4, ... up to x8) so a dead leader is not hammered.
        factor = min(8, 1 << min(3, self.consecutive_errors - 1))
        self.backoff_until_ms = now_ms + backoff_ms * factor
