"""A group member's heartbeat thread, as in Kafka's Java client: it only heartbeats. It
learns that a rebalance started (REBALANCE_IN_PROGRESS) and flags it for the poll thread,
and it leaves the group when the poll thread has not polled within ``max_poll_interval_ms``
(a stuck consumer must not hold partitions)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from ...protocol.errors import ErrorCode, KafkaError, error_name
from ...protocol.group import GroupHeartbeatRequest, GroupHeartbeatResponse
from .coordinators import COORDINATOR_RETRIABLE, GroupCoordinators
from .state import STABLE, UNJOINED, MemberState

logger = logging.getLogger("kcoord.consumer.group")

E = ErrorCode


class HeartbeatThread:
    """Heartbeats for one member (``state``) every ``heartbeat_interval_ms`` while it is
    stable. ``leave(reason)`` makes the member leave its group; ``wake()`` returns the
    host's hook to call when the poll thread must rejoin (None: none)."""

    def __init__(
        self,
        state: MemberState,
        coordinators: GroupCoordinators,
        *,
        group_instance_id: str | None,
        heartbeat_interval_ms: int,
        session_timeout_ms: int,
        request_timeout_ms: int,
        max_poll_interval_ms: int,
        leave: Callable[[str], None],
        wake: Callable[[], Callable[[], None] | None],
    ) -> None:
        self.state = state
        self.coordinators = coordinators
        self.group_instance_id = group_instance_id
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.session_timeout_ms = session_timeout_ms
        self.request_timeout_ms = request_timeout_ms
        self.max_poll_interval_ms = max_poll_interval_ms
        self._leave = leave
        self._wake = wake
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread (once)."""
        with self.state.lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=f"kcoord-heartbeat-{self.state.group_id}", daemon=True)
                self._thread.start()

    def stop(self, timeout_s: float) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=timeout_s)

    def _loop(self) -> None:
        interval = self.heartbeat_interval_ms / 1000
        while not self._stop.wait(interval):
            try:
                self.beat()
            except Exception:
                logger.exception("%s heartbeat failed unexpectedly", self.state.tag())

    def beat(self) -> None:
        """One heartbeat (or, past ``max_poll_interval_ms`` without a poll, leaving)."""
        st = self.state
        with st.lock:
            if st.state != STABLE or st.closed:
                return
            generation, member_id = st.generation, st.member_id
            idle_ms = (time.monotonic() - st.last_poll) * 1000
        if idle_ms > self.max_poll_interval_ms:
            self._on_poll_timeout(idle_ms)
            return
        try:
            response = self.coordinators.call_group(
                st.group_id,
                "heartbeat",
                GroupHeartbeatRequest(st.group_id, generation, member_id, self.group_instance_id),
                GroupHeartbeatResponse,
                timeout_s=min(self.request_timeout_ms, self.session_timeout_ms) / 1000,
            )
        except KafkaError as exc:
            logger.debug("%s heartbeat got no answer: %s", st.tag(), exc)
            return
        code = response.error_code
        if code == E.NONE or code in COORDINATOR_RETRIABLE:
            return
        with st.lock:
            if st.generation != generation or st.member_id != member_id or st.state != STABLE:
                return  # a rebalance already moved on
            if code == E.REBALANCE_IN_PROGRESS:
                # Keep heartbeating (we are still in the group) until the poll thread rejoins.
                st.rejoin_needed = True
            elif code == E.FENCED_INSTANCE_ID:
                st.fatal = KafkaError(code, f"another consumer with group_instance_id={self.group_instance_id!r} joined group {st.group_id!r}")
                st.state = UNJOINED
            else:
                st.on_group_error("Heartbeat", code, response.error_message)
        logger.debug("%s heartbeat: %s", st.tag(), error_name(code))
        wake = self._wake()
        if wake is not None:
            try:
                wake()
            except Exception:
                logger.exception("%s on_rejoin_needed hook raised", st.tag())

    def _on_poll_timeout(self, idle_ms: float) -> None:
        logger.warning(
            "%s no poll() for %.0f ms, more than max_poll_interval_ms=%d: leaving the group so its "
            "partitions move to live members; the next poll() rejoins. Poll more often, process "
            "less per poll, or raise max_poll_interval_ms.",
            self.state.tag(), idle_ms, self.max_poll_interval_ms,
        )
        self._leave("max_poll_interval_ms expired")
        with self.state.lock:
            self.state.rejoin_needed = True
