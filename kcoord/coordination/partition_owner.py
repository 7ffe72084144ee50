"""The driver base of a coordinator that owns one partition of an internal topic.

:class:`PartitionOwnerDriver` is what the group coordinator's driver
(:mod:`kcoord.group.coordinator_driver`, ``__consumer_offsets``) and the transaction
coordinator's driver (:mod:`kcoord.txn.driver`, ``__transaction_state``) share. It owns one
sans-I/O core and everything it needs besides I/O, which goes through a
:class:`~kcoord.runtime.Transport` (the controller's Metadata and InitProducerId, the partition
leader's Fetch and Produce) and a :class:`~kcoord.runtime.Clock`. A subclass names the topic,
the records' decoder and the fence record, loads the core, and performs the actions of its own
kinds; the Ray actors and the simulation run the same subclasses.

The rules (docs/architecture.md, "Group coordinators"): **load** replays the partition from the log
start and never stops below the leader's log end (COORDINATOR_LOAD_IN_PROGRESS meanwhile), so
acknowledged state never goes back; **fence**: each incarnation writes with a producer epoch the
controller grants its owner ``<topic>-<i>`` once, starting with a coordinator-epoch record, so
no older incarnation's append can land after it (after an unknown outcome it asks for the next
epoch); **append** in emission order, one in flight, consecutive ones merged, each retried
until ``persist_ms``, outcomes reported in order.
"""

from __future__ import annotations

import logging
import traceback
import uuid
from collections import deque
from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable

from .. import records as batch_format
from ..protocol import names
from ..protocol.codec import Message
from ..protocol.controller import InitProducerIdRequest, InitProducerIdResponse, MetadataRequest, MetadataResponse
from ..protocol.errors import METADATA_REFRESH, RETRIABLE, DecodeError, ErrorCode, error_name
from ..protocol.replication import FetchRequest, FetchResponse, InternalProduceRequest, ProduceResponse
from ..protocol.services import error_response
from ..runtime import Alarm, Clock, Outcome, Transport
from ..runtime.actions import Action, AppendRecords, Reply
from ..runtime.serving import Serving
from .loading import Record, take_in, well_formed

E = ErrorCode


@dataclass
class CoordinatorTimeouts:
    persist_ms: int = 15_000  # an append is retried this long before it fails
    call_ms: int = 30_000  # a fetch/produce/metadata call without an answer
    probe_after_ms: int = 500  # ask the cluster whether the leader is gone after this
    backoff_ms: int = 50
    max_backoff_ms: int = 1_000
    settle_wait_ms: int = 200  # long-poll while waiting for the HW to reach the log end
    idle_wake_ms: int = 1_000
    fetch_max_bytes: int = 8 << 20
    max_records_per_append: int = 5_000


class LoadPhase(str, Enum):
    """What a loading coordinator is waiting for; the time spent in each is reported with
    the load (``load_info["phases_ms"]``), so a slow load says where it went."""

    LEADER = "leader"  # the controller's answer naming the partition leader
    FETCH = "fetch"  # the partition's records
    SETTLE = "settle"  # the HW to reach the log end, then past the fence record
    EPOCH = "epoch"  # the controller's grant of this incarnation's producer epoch
    FENCE = "fence"  # the coordinator-epoch record's append
    BACKOFF = "backoff"  # the pause after a failed step


class PartitionOwnerDriver(Serving):
    """The shared driver of a coordinator owning partition ``core.partition`` of ``topic``
    (see the module docstring). A subclass sets ``service``, ``topic``, ``role`` (its name in
    log lines) and ``logger``, and fills in the hooks at the end."""

    topic: str
    role: str = "coordinator"
    logger: logging.Logger = logging.getLogger("kcoord.coordination")

    def __init__(
        self,
        cluster: str,
        core: Any,
        *,
        transport: Transport,
        clock: Clock,
        timeouts: CoordinatorTimeouts | None = None,
        on_change: Callable[[str | None], None] | None = None,
        after_tick: Callable[[int], None] | None = None,
        incarnation: str | None = None,
    ) -> None:
        """``on_change(key or None)`` runs after the core handled something (the shell
        logs state changes; the key is a subclass's, e.g. a group id); ``after_tick(now_ms)``
        after every timer wake-up;
        ``incarnation``: this process's id (None: a random one), what the controller hands
        producer epochs to."""
        self.cluster = cluster
        self.incarnation = incarnation or uuid.uuid4().hex
        self.core = core
        self.index = core.partition
        self._transport = transport
        self._clock = clock
        self.timeouts = timeouts or CoordinatorTimeouts()
        self._on_change = on_change
        self._after_tick = after_tick
        self._alarm = Alarm(clock, self._on_alarm, idle_ms=self.timeouts.idle_wake_ms)
        self._controller = names.controller(cluster)
        self._init_serving()
        self.closed = False
        self.loaded = False
        self.fenced = False
        self.load_info: dict[str, Any] = {}
        # the partition leader as last learned: (broker, leader epoch)
        self.leader: tuple[int, int] | None = None
        # our producer identity in the partition, from the controller (-1: none yet; the
        # id is the one coordinators used before the controller kept it)
        self.owner = f"{self.topic}-{self.index}"
        self.producer_id = self._first_producer_id()
        self.producer_epoch = -1
        self._epoch_ready = False  # whether appends may use producer_epoch
        self._renewing = False
        self._renew_attempts = 0
        self._next_sequence = 0
        # load state
        self._load_started_ms = 0
        self._load_offset = 0
        self._loaded_records: list[Record] = []
        self._max_epoch_seen = -1
        self._fence_offset: int | None = None
        self._load_attempts = 0
        self._load_error = ""
        self._phase: LoadPhase | None = None
        self._phase_since_ms = 0
        self._phase_ms: dict[str, int] = {}
        # persist pipeline
        self._queue: deque[AppendRecords] = deque()
        self._writing = False
        self.appends = 0
        self.appended_records = 0
        self._on_loaded: list[Callable[[], None]] = []

    # ======================================================================================
    # lifecycle
    # ======================================================================================
    def start(self) -> None:
        self._load_started_ms = self._clock.now_ms()
        self._load_step()

    def _enter(self, phase: LoadPhase | None) -> None:
        """Account the time since the last phase change to that phase; ``None`` ends the load."""
        now = self._clock.now_ms()
        if self._phase is not None:
            self._phase_ms[self._phase.value] = self._phase_ms.get(self._phase.value, 0) + now - self._phase_since_ms
        self._phase, self._phase_since_ms = phase, now

    def load_progress(self) -> dict[str, Any]:
        """Where a load in progress stands: its phase, attempts, last error and the time per
        phase so far ({} once loaded: see ``load_info``)."""
        if self.loaded:
            return {}
        spent = dict(self._phase_ms)
        if self._phase is not None:
            spent[self._phase.value] = spent.get(self._phase.value, 0) + self._clock.now_ms() - self._phase_since_ms
        return {
            "phase": None if self._phase is None else self._phase.value,
            "attempts": self._load_attempts,
            "error": self._load_error,
            "ms": self._clock.now_ms() - self._load_started_ms,
            "phases_ms": spent,
        }

    def when_loaded(self, callback: Callable[[], None]) -> None:
        """Run ``callback()`` once the partition is loaded (at once if it is)."""
        if self.loaded:
            callback()
        else:
            self._on_loaded.append(callback)

    def close(self, error_code: int = E.NOT_COORDINATOR) -> None:
        if self.closed:
            return
        self.closed = True
        self._alarm.close()
        self._perform(self.core.close(self._clock.now_ms(), error_code))
        self._fail_waiting(error_code, f"coordinator {self.index} stopped")

    def _later(self, delay_ms: int, fn: Callable[[], None]) -> None:
        def run() -> None:
            if not self.closed:
                fn()

        self._clock.call_at(self._clock.now_ms() + delay_ms, run)

    def _backoff_ms(self, attempt: int) -> int:
        return min(self.timeouts.max_backoff_ms, self.timeouts.backoff_ms * max(1, attempt))

    # ======================================================================================
    # the partition leader
    # ======================================================================================
    def _replica_name(self, broker: int) -> str:
        return names.replica(self.cluster, self.topic, self.index, broker)

    def _with_leader(self, then: Callable[[], None], failed: Callable[[int], None]) -> None:
        """Run ``then()`` once the partition leader is known (asks the controller)."""
        if self.leader is not None:
            then()
            return
        if not self.loaded:
            self._enter(LoadPhase.LEADER)

        def answered(response: MetadataResponse | None, outcome: Outcome) -> None:
            if self.closed:
                return
            code = E.LEADER_NOT_AVAILABLE
            if response is not None and response.error_code == E.NONE and response.topics:
                topic = response.topics[0]
                if topic.error_code != E.NONE:
                    code = topic.error_code
                elif self.index >= len(topic.partitions):
                    code = E.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    p = topic.partitions[self.index]
                    if p.leader >= 0:
                        self.leader = (p.leader, p.leader_epoch)
                        then()
                        return
            failed(code)

        self._transport.call(self._controller, "metadata", MetadataRequest([self.topic]), MetadataResponse, self.timeouts.call_ms, answered)

    # ======================================================================================
    # load
    # ======================================================================================
    def _load_step(self, max_wait_ms: int = 0) -> None:
        if self.closed or self.loaded:
            return

        def fetch() -> None:
            assert self.leader is not None
            broker, epoch = self.leader
            self._enter(LoadPhase.SETTLE if max_wait_ms else LoadPhase.FETCH)
            req = FetchRequest(
                self.topic,
                self.index,
                self._load_offset,
                max_bytes=self.timeouts.fetch_max_bytes,
                max_wait_ms=max_wait_ms,
                current_leader_epoch=epoch,
            )
            self._transport.call(
                self._replica_name(broker),
                "fetch",
                req,
                FetchResponse,
                max_wait_ms + self.timeouts.call_ms,
                self._on_load_fetch,
                probe_after_ms=max_wait_ms + self.timeouts.probe_after_ms,
            )

        self._with_leader(fetch, self._load_failed)

    def _load_failed(self, code: int, detail: str = "") -> None:
        self._load_attempts += 1
        self._load_error = f"{error_name(code)}{f' {detail}' if detail else ''}"[:200]
        self._enter(LoadPhase.BACKOFF)
        self.leader = None
        level = logging.INFO if self._load_attempts < 5 else logging.WARNING
        self.logger.log(level, "[%s %d] loading %s-%d: %s%s (attempt %d)", self.role, self.index, self.topic, self.index, error_name(code), f" {detail}" if detail else "", self._load_attempts)
        self._later(self._backoff_ms(self._load_attempts), self._load_step)

    def _on_load_fetch(self, resp: FetchResponse | None, outcome: Outcome) -> None:
        if self.closed or self.loaded:
            return
        if resp is None:
            self._load_failed(E.NOT_LEADER_OR_FOLLOWER if outcome == Outcome.DEAD else E.REQUEST_TIMED_OUT)
            return
        if resp.error_code == E.OFFSET_OUT_OF_RANGE and self._load_offset < resp.log_start_offset:
            self._load_offset = resp.log_start_offset  # retention removed the head
            self._load_step()
            return
        if resp.error_code != E.NONE:
            self._load_failed(resp.error_code, resp.error_message or "")
            return
        if resp.records:
            try:
                self._take_in(resp.records)
            except DecodeError as exc:
                self._load_failed(E.CORRUPT_MESSAGE, str(exc))
                return
            self._load_step()
            return
        if self._load_offset < resp.high_watermark:
            self._load_failed(E.CORRUPT_MESSAGE, f"empty read at offset {self._load_offset} below HW {resp.high_watermark}")
            return
        if resp.high_watermark < resp.log_end_offset:
            # Caught up to the HW, but the leader holds more (a new leader whose HW has not
            # caught up, or appends still being replicated): wait for them to commit.
            self._load_step(max_wait_ms=self.timeouts.settle_wait_ms)
            return
        # At the log end, everything committed.
        if self._fence_offset is None:
            self._fence()
        elif self._load_offset > self._fence_offset:
            self._finish_load()
        else:
            self._load_step(max_wait_ms=self.timeouts.settle_wait_ms)

    def _take_in(self, data: bytes) -> None:
        """Add the records of fetched batches (from the load offset on) to the replay, and
        note the newest producer epoch our producer id has used."""
        records, self._load_offset, epoch = take_in(data, self._load_offset, self.producer_id)
        self._loaded_records.extend(records)
        self._max_epoch_seen = max(self._max_epoch_seen, epoch)

    def _fence(self) -> None:
        """Take over the partition: append a coordinator-epoch record at an epoch the
        controller handed this incarnation; older incarnations' appends are refused from
        then on."""
        if not self._epoch_ready:
            self._enter(LoadPhase.EPOCH)
            self._renew_epoch(self._fence)
            return
        self._enter(LoadPhase.FENCE)
        epoch = self.producer_epoch
        record = self._epoch_record(epoch)
        read_up_to = self._load_offset

        def fenced(code: int, base_offset: int, sent: tuple[int, int] | None) -> None:
            if self.closed:
                return
            if code == E.NONE and base_offset >= read_up_to:
                self._fence_offset = base_offset
                self._load_step()
            elif code in (E.INVALID_PRODUCER_EPOCH, E.OUT_OF_ORDER_SEQUENCE_NUMBER, E.NONE):
                # The leader knows our producer id at this epoch or a newer one from batches
                # the replay did not see (written before the controller kept epochs, or a
                # newer incarnation's: then the controller refuses us). An acknowledgement
                # below what we read is the leader taking the record for a duplicate of such
                # a batch. Either way ask for an epoch above this one, then fence again.
                self._max_epoch_seen = max(self._max_epoch_seen, epoch)
                self._epoch_ready = False
                self._load_step()
            else:
                self._load_failed(code, "writing the coordinator epoch")

        self._append([record], fenced)

    def _renew_epoch(self, then: Callable[[], None]) -> None:
        """Ask the controller for this incarnation's (next) producer epoch, presenting the
        one it holds; retried until it answers. ``then()`` runs once granted; refused
        (another incarnation holds the producer now), this one stops serving."""
        if self._renewing or self.closed:
            return
        self._renewing = True
        req = InitProducerIdRequest(
            owner=self.owner,
            incarnation=self.incarnation,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            min_epoch=self._max_epoch_seen + 1,
        )

        def answered(response: InitProducerIdResponse | None, outcome: Outcome) -> None:
            self._renewing = False
            if self.closed:
                return
            if response is not None and response.error_code == E.NONE:
                self._renew_attempts = 0
                self.producer_id, self.producer_epoch = response.producer_id, response.producer_epoch
                self._next_sequence = 0
                self._epoch_ready = True
                self._epoch_granted()
                then()
            elif response is not None and response.error_code == E.PRODUCER_FENCED:
                self._fenced_out(response.error_message or "")
            else:
                self._renew_attempts += 1
                code = E.REQUEST_TIMED_OUT if response is None else response.error_code
                level = logging.INFO if self._renew_attempts < 5 else logging.WARNING
                self.logger.log(level, "[%s %d] asking the controller for a producer epoch: %s (attempt %d)", self.role, self.index, error_name(code), self._renew_attempts)
                self._later(self._backoff_ms(self._renew_attempts), lambda: self._renew_epoch(then))

        self._transport.call(self._controller, "init_producer_id", req, InitProducerIdResponse, self.timeouts.call_ms, answered)

    def _finish_load(self) -> None:
        def malformed(exc: DecodeError) -> None:
            self.logger.error("[%s %d] skipping a malformed record of %s-%d: %s", self.role, self.index, self.topic, self.index, exc)

        good = well_formed(self._loaded_records, self._decode_record, malformed)
        now = self._clock.now_ms()
        self._enter(None)
        load_actions = self._load_core(good, now)
        self._loaded_records = []
        self.loaded = True
        self.load_info = {
            "records": len(good),
            "end_offset": self._load_offset,
            "load_ms": now - self._load_started_ms,
            "producer_epoch": self.producer_epoch,
            "attempts": self._load_attempts,
            "phases_ms": dict(self._phase_ms),
        }
        self.logger.info(
            "[%s %d] loaded %d records of %s-%d up to offset %d in %d ms: %s (producer epoch %d)",
            self.role, self.index, len(good), self.topic, self.index, self._load_offset, self.load_info["load_ms"], self._loaded_what(), self.producer_epoch,
        )
        if load_actions:
            self._perform(load_actions)
        self._run(self.core.tick, now)
        callbacks, self._on_loaded = self._on_loaded, []
        for callback in callbacks:
            callback()

    # ======================================================================================
    # appends
    # ======================================================================================
    def _append(self, records: list[Record], done: Callable[[int, int, tuple[int, int] | None], None]) -> None:
        """Append ``records`` as one idempotent batch with acks=all, retrying retriable
        failures (and a moved leader) until ``persist_ms``; ``done(code, base_offset,
        sent)``, ``sent`` the (producer id, epoch) the batch went out with (None: never
        sent; it waited for an epoch). The batch is built at its first send, once this
        incarnation holds an epoch, and every retry sends the same bytes."""
        deadline = self._clock.now_ms() + self.timeouts.persist_ms
        attempts = [0]
        built: list = []  # [batch bytes, (producer id, epoch)] once built

        def attempt() -> None:
            attempts[0] += 1
            if not built and not self._epoch_ready:
                # An epoch is being asked for (after an append with an unknown outcome).
                if self._clock.now_ms() >= deadline:
                    done(E.COORDINATOR_NOT_AVAILABLE, -1, None)
                else:
                    self._later(self._backoff_ms(attempts[0]), attempt)
                return
            if not built:
                built.append(
                    batch_format.build_batch_columns(
                        [v for _, v in records],
                        [k for k, _ in records],
                        timestamp_ms=self._clock.now_ms(),
                        producer_id=self.producer_id,
                        producer_epoch=self.producer_epoch,
                        base_sequence=self._next_sequence,
                    )
                )
                built.append((self.producer_id, self.producer_epoch))
                self._next_sequence += len(records)
            self._with_leader(send, retry_or_fail)

        def send() -> None:
            assert self.leader is not None
            batch = built[0]
            broker, epoch = self.leader
            remaining = max(500, deadline - self._clock.now_ms())
            req = InternalProduceRequest(self.topic, self.index, batch, acks=-1, timeout_ms=remaining, current_leader_epoch=epoch)
            self._transport.call(
                self._replica_name(broker),
                "produce_internal",
                req,
                ProduceResponse,
                remaining + self.timeouts.call_ms,
                answered,
                probe_after_ms=self.timeouts.probe_after_ms,
            )

        def answered(response: ProduceResponse | None, outcome: Outcome) -> None:
            if self.closed:
                return
            if response is None:
                retry_or_fail(E.NOT_LEADER_OR_FOLLOWER if outcome == Outcome.DEAD else E.REQUEST_TIMED_OUT)
            elif response.error_code == E.NONE:
                done(E.NONE, response.base_offset, built[1])
            else:
                retry_or_fail(response.error_code)

        def retry_or_fail(code: int) -> None:
            if self.closed:
                return
            if code in METADATA_REFRESH or code == E.REQUEST_TIMED_OUT:
                self.leader = None
            retriable = code in RETRIABLE or code in METADATA_REFRESH
            if not retriable or self._clock.now_ms() >= deadline:
                done(code, -1, built[1] if built else None)
                return
            self._later(self._backoff_ms(attempts[0]), attempt)

        attempt()

    def _pump(self) -> None:
        """The single writer: the next merged batch of queued AppendRecords actions."""
        if self._writing or not self._queue or self.closed or not self.loaded or self.fenced:
            return
        taken: list[AppendRecords] = []
        records: list[Record] = []
        limit = self.timeouts.max_records_per_append
        while self._queue and (not taken or len(records) + len(self._queue[0].records) <= limit):
            p = self._queue.popleft()
            taken.append(p)
            records.extend(p.records)
        if not records:
            for p in taken:
                self._run(self.core.on_persisted, p.persist_id, E.NONE, self._clock.now_ms())
            self._pump()
            return
        self._writing = True

        def done(code: int, base_offset: int, sent: tuple[int, int] | None) -> None:
            self._writing = False
            self.appends += 1
            self.appended_records += len(records)
            if code == E.INVALID_PRODUCER_EPOCH:
                self._fenced_out(f"the leader refused producer epoch {self.producer_epoch}")
                return
            if code != E.NONE:
                self.logger.warning("[%s %d] persist failed (%s): %s", self.role, self.index, error_name(code), "; ".join(p.reason for p in taken))
                if sent is not None and sent == (self.producer_id, self.producer_epoch) and self._epoch_ready:
                    # The append may still land later: a new epoch makes sure it cannot land
                    # behind the appends that follow (they wait for it).
                    self._epoch_ready = False
                    self._renew_epoch(self._pump)
            now = self._clock.now_ms()
            for p in taken:
                self._run(self.core.on_persisted, p.persist_id, code, now)
            self._pump()

        self._append(records, done)

    def _fenced_out(self, why: str) -> None:
        """A newer incarnation of this coordinator took the partition over: stop."""
        self.fenced = True
        self.logger.warning("[%s %d] fenced by a newer incarnation (%s); no longer serving", self.role, self.index, why)
        self.close(E.NOT_COORDINATOR)

    # ======================================================================================
    # driving the core
    # ======================================================================================
    def _run(self, fn: Callable[..., list], *args: Any, changed: str | None = None) -> None:
        if self.closed:
            return
        try:
            actions = fn(*args)
        except Exception:
            self.logger.error("[%s %d] internal error:\n%s", self.role, self.index, traceback.format_exc())
            return
        self._perform(actions)
        if self._on_change is not None:
            self._on_change(changed)

    def _perform(self, actions: list) -> None:
        for action in actions:
            if isinstance(action, Reply):
                self._complete(action)
            elif isinstance(action, AppendRecords):
                self._queue.append(action)
            else:
                self._perform_other(action)
        self._pump()
        if self.loaded and not self.closed:
            self._alarm.arm(self.core.next_deadline(self._clock.now_ms()))

    def _on_alarm(self, now_ms: int) -> None:
        if self.closed or not self.loaded:
            return
        self._run(self.core.tick, now_ms)
        if self._after_tick is not None:
            try:
                self._after_tick(now_ms)
            except Exception:
                self.logger.warning("[%s %d] after-tick hook failed:\n%s", self.role, self.index, traceback.format_exc())
        if not self.closed:
            self._alarm.arm(self.core.next_deadline(self._clock.now_ms()))

    # ======================================================================================
    # requests
    # ======================================================================================
    def _admit(self, request: Message, reply: Any) -> bool:
        """Nothing is served while stopped or loading (a subclass may let some requests
        through while loading, as the group coordinator does FindCoordinator)."""
        if self.closed:
            reply(self._error_response(request, E.NOT_COORDINATOR, f"{self.role} {self.index} is not serving"))
            return False
        if not self.loaded and not self._serves_while_loading(request):
            reply(self._error_response(request, E.COORDINATOR_LOAD_IN_PROGRESS, f"{self.role} {self.index} is loading {self.topic}-{self.index}"))
            return False
        return True

    def _handle(self, request: Message, token: int) -> list[Action]:
        return self.core.handle(request, token, self._clock.now_ms())

    def _internal_error(self, where: str) -> None:
        self.logger.error("[%s %d] internal error %s:\n%s", self.role, self.index, where, traceback.format_exc())

    # ======================================================================================
    # what a subclass fills in
    # ======================================================================================
    def _decode_record(self, key: bytes, value: bytes | None) -> Any:
        """Decode one record of the topic (DecodeError: malformed, skipped on load)."""
        raise NotImplementedError

    def _epoch_record(self, epoch: int) -> Record:
        """The record an incarnation appends first, at its new producer epoch."""
        raise NotImplementedError

    def _load_core(self, records: list[Record], now_ms: int) -> list[Action]:
        """Hand the replayed records to the core; returns actions to perform once loaded."""
        raise NotImplementedError

    def _loaded_what(self) -> str:
        """What the load found, for its log line ("3 groups")."""
        return f"{len(self._loaded_records)} records"

    def _first_producer_id(self) -> int:
        """The producer id to name when the controller keeps none for the owner yet (ids
        below 1000 are never handed to producers: group coordinator ``i`` uses ``i``)."""
        return self.index

    def _epoch_granted(self) -> None:
        """The controller granted this incarnation a (new) producer epoch."""

    def _perform_other(self, action: Action) -> None:
        """An action of the subclass's own kinds (the base performs Reply and AppendRecords)."""
        raise TypeError(f"unknown {self.role} action {action!r}")

    def _serves_while_loading(self, request: Message) -> bool:
        return False

    def _error_response(self, request: Message, code: int, message: str) -> Message:
        return error_response(request, code, message)

    # -- views ------------------------------------------------------------------------------
    @property
    def held_producer(self) -> tuple[int, int] | None:
        """The (producer id, epoch) the controller handed this incarnation, while it holds
        one to append with (None before the first grant and while asking for the next)."""
        return (self.producer_id, self.producer_epoch) if self._epoch_ready else None

    @property
    def queued_persists(self) -> int:
        return len(self._queue) + (1 if self._writing else 0)
