"""The state of a consumer's group membership, as the client sees it, shared by the parts
of a :class:`~kcoord.client.coordinator.member.GroupMember`: the member itself (poll thread),
its :class:`~.joining.JoinRound` and its :class:`~.heartbeat.HeartbeatThread`.

The client's view is coarser than the coordinator's group states: it only needs to know
whether it holds a generation (``STABLE``), is in the middle of getting one
(``REBALANCING``) or has none (``UNJOINED``).
"""

from __future__ import annotations

import logging
import threading
import time

from ...protocol.errors import ErrorCode, KafkaError, error_name
from ...protocol.group import NO_GENERATION, NO_MEMBER_ID

UNJOINED = "unjoined"
REBALANCING = "rebalancing"
STABLE = "stable"

E = ErrorCode
logger = logging.getLogger("kcoord.consumer.group")

# JoinGroup/SyncGroup errors no retry can fix.
FATAL_JOIN_ERRORS = frozenset(
    {
        E.FENCED_INSTANCE_ID,
        E.INVALID_SESSION_TIMEOUT,
        E.INCONSISTENT_GROUP_PROTOCOL,
        E.GROUP_MAX_SIZE_REACHED,
        E.INVALID_GROUP_ID,
        E.INVALID_REQUEST,
        E.UNSUPPORTED_VERSION,
    }
)


class MemberState:
    """One member's identity in its group and where it is in the protocol; every field is
    read and written under ``lock`` (the poll, heartbeat and commit threads share it)."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.lock = threading.RLock()
        self.member_id = NO_MEMBER_ID
        self.generation = NO_GENERATION
        self.protocol: str | None = None
        self.leader = ""
        self.state = UNJOINED
        self.rejoin_needed = False  # the poll thread must rejoin
        self.fatal: KafkaError | None = None  # no retry can fix it: every call raises it
        self.closed = False
        self.last_poll = time.monotonic()  # the poll thread's last poll (max_poll_interval_ms)

    def tag(self) -> str:
        return f"[group={self.group_id} member={self.member_id or '-'} generation={self.generation}]"

    def check_open(self) -> None:
        if self.fatal is not None:
            raise self.fatal
        if self.closed:
            raise KafkaError(E.INVALID_REQUEST, f"the consumer of group {self.group_id!r} is closed")

    def on_group_error(self, what: str, code: int, message: str | None) -> None:
        """React to a Join/Sync/Heartbeat error: reset what it invalidates and ask for a
        rejoin, or go fatal (raises it)."""
        name = error_name(code)
        with self.lock:
            if code in FATAL_JOIN_ERRORS:
                self.fatal = KafkaError(code, f"{what} for group {self.group_id!r} failed: {message or name}")
                self.state = UNJOINED
                logger.error("%s %s failed fatally: %s %s", self.tag(), what, name, message or "")
                raise self.fatal
            if code == E.UNKNOWN_MEMBER_ID:
                self.member_id = NO_MEMBER_ID
                self.generation = NO_GENERATION
            elif code == E.ILLEGAL_GENERATION:
                self.generation = NO_GENERATION
            self.state = UNJOINED
            self.rejoin_needed = True
        level = logging.DEBUG if code in (E.REBALANCE_IN_PROGRESS, E.ILLEGAL_GENERATION) else logging.INFO
        logger.log(level, "%s %s: %s %s; rejoining", self.tag(), what, name, message or "")

    def drop_generation(self) -> tuple[str, int]:
        """Forget the member id and generation (leaving); returns what they were."""
        with self.lock:
            member_id, generation = self.member_id, self.generation
            self.member_id, self.generation, self.state = NO_MEMBER_ID, NO_GENERATION, UNJOINED
        return member_id, generation
