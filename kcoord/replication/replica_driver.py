"""The one driver of a partition replica: everything the core does not do, besides I/O.

:class:`ReplicaDriver` owns the :class:`~kcoord.replication.replica.Replica` core and
performs its actions through a :class:`~kcoord.runtime.Transport` and a
:class:`~kcoord.runtime.Clock`. The Ray actor (``actors/replica.py``) is a thin shell that
decodes requests and awaits replies; the simulation (``tests/sim``) runs this same class on
a fake network and clock. What lives here, once:

* the serve loop (:class:`~kcoord.runtime.serving.Serving`): tokens, waiters, replies;
* the order actions are performed in (as returned) and the calls they make: Fetch and
  OffsetsForLeaderEpoch to the leader, AlterPartition to the controller, a leader's
  transaction verification (KIP-890) to the transactional id's transaction coordinator
  (``add_partitions_to_txn`` with ``verify_only``; which coordinator: Kafka's placement over
  the partitions of ``__transaction_state``, asked of the controller once), each with its
  timeout, each outcome fed back to the core (``None`` for no answer);
* reading a same-node leader's file hint (or fetching the bytes when the hint went stale);
* the single timer, re-armed from ``next_deadline()`` after every call into the core.
"""

from __future__ import annotations

import dataclasses
import logging
import traceback
from typing import Any, Callable

from ..protocol import names
from ..protocol.codec import Message
from ..protocol.controller import AlterPartitionRequest, AlterPartitionResponse, MetadataRequest, MetadataResponse
from ..protocol.errors import ErrorCode
from ..protocol.replication import FetchResponse, OffsetsForLeaderEpochResponse
from ..protocol.services import REPLICA, error_response
from ..runtime import Alarm, Clock, Outcome, ReplyFn, Transport
from ..runtime.actions import Action
from ..protocol.txn import AddPartitionsToTxnResponse
from ..runtime.serving import Serving
from ..txn.placement import TRANSACTION_STATE_TOPIC, coordinator_for
from .actions import Reply, SendAlterPartition, SendFetch, SendOffsetsForLeaderEpoch, VerifyTxn
from .replica import Replica

logger = logging.getLogger("kcoord.replica")


HintReader = Callable[[list, int], "bytes | None"]


@dataclasses.dataclass
class ReplicaTimeouts:
    """How long the driver waits for its own calls. A follower's fetch may be parked at the
    leader for ``replica.fetch.wait.max.ms`` on top of ``call_ms``. ``idle_wake_ms`` bounds
    the timer's nap when the core has no timed work (an idle follower with its fetch
    parked): the core reports every deadline it has, so the nap is only a backstop, and
    each wake costs an idle replica CPU (issue 17; the shell's metrics ride on every step,
    not on the nap).

    ``alter_partition_ms``: a leader's AlterPartition has its own, shorter timeout. Only one
    is in flight per partition, so a lost request or answer holds every ISR change --
    a caught-up follower's return, and with it the HW under ``min.insync.replicas`` --
    until it times out; the core then proposes again after
    ``alter_partition_backoff_ms`` (Kafka's AlterPartitionManager retries likewise). A
    resend is safe: the controller answers a copy of a change it applied with that change
    (issue 32: the chaos run's follower caught up but outside the ISR for ~11 s)."""

    call_ms: int = 10_000
    idle_wake_ms: int = 30_000
    alter_partition_ms: int = 2_000


class ReplicaDriver(Serving):
    service = REPLICA

    def __init__(
        self,
        replica: Replica,
        *,
        cluster: str,
        transport: Transport,
        clock: Clock,
        timeouts: ReplicaTimeouts | None = None,
        read_hint: HintReader | None = None,
        trace: Callable[[str], None] | None = None,
        after_step: Callable[[int], None] | None = None,
        txn_coordinators: int | None = None,
    ) -> None:
        """``trace(message)`` hears role changes, truncations and ISR changes (the shell
        logs them); ``after_step(now_ms)`` runs after every call into the core -- a
        request, an answer, a timer -- for the shell's periodic work (metrics), which
        thus needs no wake-up of its own on a replica that hears from its peers.
        ``txn_coordinators``: how many transaction coordinators the cluster runs, when the
        caller knows (else the controller is asked, at the first verification)."""
        self.replica = replica
        self._after_step = after_step
        self.cluster = cluster
        self._transport = transport
        self._clock = clock
        self.timeouts = timeouts or ReplicaTimeouts()
        self._read_hint = read_hint
        self._trace = trace
        self._init_serving()
        self._alarm = Alarm(clock, self._on_alarm, idle_ms=self.timeouts.idle_wake_ms)
        self._controller = names.controller(cluster)
        # How many transaction coordinators (partitions of __transaction_state): asked of the
        # controller at the first verification, kept once known (it never changes); the
        # verifications waiting for the answer.
        self._txn_coordinators: int | None = txn_coordinators
        self._verifications_waiting: list[VerifyTxn] | None = None
        self.closed = False
        self.hinted_fetches = 0
        self.internal_errors = 0
        self._spins = 0
        self.max_timer_spins = 0

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        """Start the timer (before any request arrives: after a restart nobody may call us
        for a while, yet a follower must start fetching)."""
        self._rearm()

    def close(self) -> None:
        """Stop: every pending request gets an answer, the timer stops, the log closes."""
        if self.closed:
            return
        self.closed = True
        self._alarm.close()
        self._fail_waiting(ErrorCode.NOT_LEADER_OR_FOLLOWER, "replica stopped")
        self.replica.close(self._clock.now_ms())

    # -- incoming requests ------------------------------------------------------------------
    def _admit(self, request: Message, reply: ReplyFn) -> bool:
        if self.closed:
            reply(error_response(request, ErrorCode.NOT_LEADER_OR_FOLLOWER, "replica stopped"))
            return False
        return True

    def _handle(self, request: Message, token: int) -> list[Action]:
        r = self.replica
        before = (r.role, r.leader_epoch, tuple(r.isr))
        actions = r.handle(request, token, self._clock.now_ms())
        if self._trace is not None and before != (r.role, r.leader_epoch, tuple(r.isr)):
            self._trace(f"now {r.role} (leader {r.leader}, epoch {r.leader_epoch}, ISR {r.isr}, LEO {r.log.log_end_offset}, HW {r.hw})")
        return actions

    # -- the core's actions -----------------------------------------------------------------
    def _run(self, fn: Callable[..., list], *args: Any) -> None:
        """Call a core entry point and perform its actions; a bug in the core is logged
        and must not take the process down."""
        if self.closed:
            return
        try:
            actions = fn(*args)
        except Exception:
            self._internal_error()
            return
        self._perform(actions)

    def _internal_error(self, where: str = "") -> None:
        self.internal_errors += 1
        r = self.replica
        logger.error("[%s-%d broker=%d] internal error%s:\n%s", r.topic, r.partition, r.broker, f" {where}" if where else "", traceback.format_exc())

    def _perform(self, actions: list) -> None:
        self._execute(actions)
        self._rearm()
        self._stepped()

    def _stepped(self) -> None:
        if self._after_step is not None and not self.closed:
            try:
                self._after_step(self._clock.now_ms())
            except Exception:
                self._internal_error()

    def _execute(self, actions: list) -> None:
        for action in actions:
            if isinstance(action, Reply):
                self._complete(action)
            elif isinstance(action, SendFetch):
                self._send_fetch(action)
            elif isinstance(action, SendOffsetsForLeaderEpoch):
                self._send_offsets_for_epoch(action)
            elif isinstance(action, SendAlterPartition):
                self._send_alter_partition(action)
            elif isinstance(action, VerifyTxn):
                self._verify_txn(action)
            else:  # pragma: no cover - a new action kind this driver must learn
                raise TypeError(f"unknown replica action {action!r}")

    def _rearm(self) -> None:
        if not self.closed:
            self._alarm.arm(self.replica.next_deadline(self._clock.now_ms()))

    def _on_alarm(self, now_ms: int) -> None:
        if self.closed:
            return
        try:
            actions = self.replica.tick(now_ms)
        except Exception:
            self._internal_error()
            actions = []
        self._execute(actions)
        if self.closed:
            return
        self._stepped()
        if self._alarm.rearm_after_fire(self.replica.next_deadline(now_ms), now_ms):
            self._spins = 0
        else:
            # The core reported timed work that tick() did not do: a busy loop in the
            # making (the alarm naps instead). Counted so tests and the simulation see it.
            self._spins += 1
            self.max_timer_spins = max(self.max_timer_spins, self._spins)

    # -- outgoing calls ---------------------------------------------------------------------
    def _replica_name(self, broker: int) -> str:
        r = self.replica
        return names.replica(self.cluster, r.topic, r.partition, broker)

    def _send_fetch(self, action: SendFetch) -> None:
        req = action.request
        target = self._replica_name(action.leader)

        def done(response: FetchResponse | None, outcome: Outcome) -> None:
            if response is not None and response.file_hint:
                data = self._read_hint(response.file_hint, req.fetch_offset) if self._read_hint is not None else None
                if data is None:
                    # The leader's files moved under us (or we cannot read them): ask for
                    # the bytes themselves, at once.
                    plain = dataclasses.replace(req, node_id="", max_wait_ms=0)
                    self._transport.call(target, "fetch", plain, FetchResponse, self.timeouts.call_ms, answered)
                    return
                self.hinted_fetches += 1
                response = dataclasses.replace(response, records=data, file_hint=None)
            answered(response, outcome)

        def answered(response: FetchResponse | None, outcome: Outcome) -> None:
            if response is not None and response.file_hint:
                response = None  # a plain fetch must not answer with a hint
            self._run(self.replica.on_fetch_response, req, response, self._clock.now_ms())

        self._transport.call(target, "fetch", req, FetchResponse, req.max_wait_ms + self.timeouts.call_ms, done)

    def _send_offsets_for_epoch(self, action: SendOffsetsForLeaderEpoch) -> None:
        req = action.request
        r = self.replica

        def done(response: OffsetsForLeaderEpochResponse | None, outcome: Outcome) -> None:
            before = r.log.log_end_offset if r.role != "offline" else -1
            self._run(r.on_offsets_for_leader_epoch_response, req, response, self._clock.now_ms())
            if self._trace is not None and r.role != "offline" and r.log.log_end_offset < before:
                self._trace(f"truncated log from {before} to {r.log.log_end_offset} to match leader {action.leader}")

        self._transport.call(self._replica_name(action.leader), "offsets_for_leader_epoch", req, OffsetsForLeaderEpochResponse, self.timeouts.call_ms, done)

    def _send_alter_partition(self, action: SendAlterPartition) -> None:
        req: AlterPartitionRequest = action.request
        r = self.replica

        def done(response: AlterPartitionResponse | None, outcome: Outcome) -> None:
            old = list(r.isr)
            self._run(r.on_alter_partition_response, req, response, self._clock.now_ms())
            if self._trace is not None and r.isr != old:
                self._trace(f"ISR changed {old} -> {r.isr} (partition epoch {r.partition_epoch})")

        self._transport.call(self._controller, "alter_partition", req, AlterPartitionResponse, self.timeouts.alter_partition_ms, done)

    def _verify_txn(self, action: VerifyTxn) -> None:
        """Ask ``action.request.transactional_id``'s coordinator; first learn how many there
        are (the partitions of ``__transaction_state``), once."""
        if self._txn_coordinators is not None:
            self._send_verify_txn(action)
            return
        if self._verifications_waiting is not None:
            self._verifications_waiting.append(action)
            return
        self._verifications_waiting = [action]

        def done(response: MetadataResponse | None, outcome: Outcome) -> None:
            waiting, self._verifications_waiting = self._verifications_waiting or [], None
            topic = next((t for t in response.topics if t.name == TRANSACTION_STATE_TOPIC), None) if response is not None else None
            if topic is not None and not topic.error_code and topic.partitions:
                self._txn_coordinators = len(topic.partitions)
            for a in waiting:
                if self._txn_coordinators is not None:
                    self._send_verify_txn(a)
                else:  # no coordinators known: the produce hears a retriable error
                    self._run(self.replica.on_txn_verified, a.verify_id, None, self._clock.now_ms())

        self._transport.call(self._controller, "metadata", MetadataRequest([TRANSACTION_STATE_TOPIC]), MetadataResponse, self.timeouts.call_ms, done)

    def _send_verify_txn(self, action: VerifyTxn) -> None:
        req = action.request
        target = names.transaction_coordinator(self.cluster, coordinator_for(req.transactional_id, self._txn_coordinators or 1))

        def done(response: AddPartitionsToTxnResponse | None, outcome: Outcome) -> None:
            self._run(self.replica.on_txn_verified, action.verify_id, response, self._clock.now_ms())

        self._transport.call(target, "add_partitions_to_txn", req, AddPartitionsToTxnResponse, self.timeouts.call_ms, done)
