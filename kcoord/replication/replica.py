"""One partition replica as a sans-I/O state machine.

The :class:`~kcoord.replication.replica_driver.ReplicaDriver` is its one driver, used
unchanged by the Ray actor (actors/replica.py) and by the deterministic simulation
(tests/sim): it hands every request to :meth:`Replica.handle` with ``now_ms`` and a token
for the pending reply, performs the returned actions (reply, send a Fetch to the leader,
send AlterPartition to the controller), feeds each call's outcome back
(``on_fetch_response`` and friends) and calls :meth:`Replica.tick` at
:meth:`Replica.next_deadline`.

The replica holds what the controller told it (role, epochs, assignment) and plays one role
at a time: a :class:`~kcoord.replication.leader.Leader` or a
:class:`~kcoord.replication.follower.Follower`, each built with the
:class:`~kcoord.replication.context.ReplicaContext` they share with it.

Every entry point takes its input and ``now_ms`` and returns the actions it decided; they
are collected as they are decided, so an entry point that fails half way (a storage error)
still returns the ones decided before the failure.

The replica owns its log object (:class:`kcoord.log.Log`, on a real or a simulated file
system, or :class:`kcoord.log.MemoryLog`); local storage is the one side effect the core
performs itself, because it is synchronous and deterministic. An I/O error from the log
takes the replica OFFLINE (Kafka's KIP-112): it answers KAFKA_STORAGE_ERROR to everything,
its heartbeat says so, and the controller moves leadership away. A restart (a new Replica
on a reopened log) is the only way back.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from ..log.config import LogConfig
from ..protocol.codec import Message
from ..protocol.controller import HeartbeatRequest, HeartbeatResponse, LeaderAndIsrRequest, LeaderAndIsrResponse
from ..protocol.errors import ErrorCode, KafkaError
from ..protocol.replication import (
    DeleteRecordsRequest,
    DescribeProducersRequest,
    FetchRequest,
    FetchResponse,
    InternalProduceRequest,
    ListOffsetsRequest,
    OffsetsForLeaderEpochRequest,
    OffsetsForLeaderEpochResponse,
    ProduceRequest,
)
from ..protocol.services import REPLICA, RESPONSE_FOR
from ..protocol.txn import WriteTxnMarkerRequest
from ..runtime.actions import Action, Handlers
from .config import ReplicationConfig
from .entry import entry_point, is_storage_error
from .follower import Follower
from .isr import IsrState
from .leader import Leader
from .roles import FOLLOWER, LEADER, NONE, OFFLINE, Role
from .context import ReplicaContext

__all__ = ["FOLLOWER", "LEADER", "NONE", "OFFLINE", "Replica", "Role", "is_storage_error"]


class Replica:
    def __init__(
        self,
        topic: str,
        partition: int,
        broker: int,
        log: Any,
        config: ReplicationConfig | None = None,
        now_ms: int = 0,
        node_id: str = "",
        incarnation: str = "",
        storage: str = "",
        config_version: int = -1,
    ) -> None:
        """``config_version``: the version of ``config`` and the log's config, if known
        current (-1: a creation-time config, see :meth:`config_known`)."""
        hw = min(max(log.high_watermark, log.log_start_offset), log.log_end_offset)
        self.state = ReplicaContext(
            topic=topic,
            partition=partition,
            broker=broker,
            log=log,
            config=config or ReplicationConfig(),
            node_id=node_id,
            incarnation=incarnation,
            # the machine's page cache, and how often an I/O error may have emptied part
            # of it for this log (Log.storage_generation)
            storage=f"{storage}~{log.storage_generation}" if storage and log.storage_generation else storage,
            hw=hw,
            config_version=config_version,
            # A config of unknown age cannot vouch that every append was fsynced: the topic
            # may have been altered to flush.messages unset before this process's
            # predecessor died.
            may_have_lost_data=(config_version < 0 or log.config.flush_messages != 1)
            and (
                log.log_end_offset > log.log_start_offset
                or len(log.epoch_cache) > 0
                or log.checkpointed_high_watermark > log.log_start_offset
            ),
        )
        self.leading: Leader | None = None
        self.following: Follower | None = None
        self._hw_checkpointed = hw
        self._last_hw_checkpoint_ms = now_ms
        # storage upkeep: segment.ms rolls and retention, the log cleaner
        self._next_retention_ms = now_ms + self.state.config.log_retention_check_interval_ms
        self._next_clean_ms = now_ms + self.state.config.log_cleaner_backoff_ms
        self.last_clean: Any = None  # the cleaner's last CleanResult (metrics, tests)
        self._handlers = Handlers(
            REPLICA.name,
            {
                LeaderAndIsrRequest: self._leader_and_isr_request,
                HeartbeatRequest: self._heartbeat,
                ProduceRequest: self._as_leader(Leader.produce),
                InternalProduceRequest: self._as_leader(Leader.produce),
                FetchRequest: self._as_leader(Leader.fetch),
                ListOffsetsRequest: self._as_leader(Leader.list_offsets),
                DeleteRecordsRequest: self._as_leader(Leader.delete_records),
                DescribeProducersRequest: self._as_leader(Leader.describe_producers),
                WriteTxnMarkerRequest: self._as_leader(Leader.write_txn_marker),
                OffsetsForLeaderEpochRequest: self._as_leader(Leader.offsets_for_leader_epoch),
            },
        )

    # ------------------------------------------------------------------------------------
    # the shared state, read-only for everyone else (drivers, metrics, tests)
    # ------------------------------------------------------------------------------------
    topic = property(lambda self: self.state.topic)
    partition = property(lambda self: self.state.partition)
    broker = property(lambda self: self.state.broker)
    log = property(lambda self: self.state.log)
    config = property(lambda self: self.state.config)
    node_id = property(lambda self: self.state.node_id)
    incarnation = property(lambda self: self.state.incarnation)
    role = property(lambda self: self.state.role)
    offline_reason = property(lambda self: self.state.offline_reason)
    leader = property(lambda self: self.state.leader, doc="the leader's broker id (-1: none)")
    leader_epoch = property(lambda self: self.state.leader_epoch)
    partition_epoch = property(lambda self: self.state.partition_epoch)
    controller_epoch = property(lambda self: self.state.controller_epoch)
    replicas = property(lambda self: self.state.replicas)
    config_version = property(lambda self: self.state.config_version)
    isr = property(lambda self: self.state.isr)
    metrics = property(lambda self: self.state.metrics)

    @property
    def hw(self) -> int:
        return self.state.hw

    @hw.setter
    def hw(self, value: int) -> None:
        self.state.hw = value

    @property
    def leader_state(self) -> IsrState | None:
        """The leader's ISR bookkeeping while this replica leads (introspection)."""
        return self.leading.isr if self.leading is not None else None

    @property
    def follower_state(self) -> Follower | None:
        """The follower role while this replica follows (introspection)."""
        return self.following

    def parked_fetches(self) -> dict[str, int]:
        return self.leading.parked_fetches() if self.leading is not None else {"followers": 0, "consumers": 0}

    def _take(self) -> list[Action]:
        return self.state.take()

    # ------------------------------------------------------------------------------------
    # entry points
    # ------------------------------------------------------------------------------------
    @entry_point
    def handle(self, request: Message, token: Any, now_ms: int) -> None:
        """Any request a replica serves. Its Reply (carrying ``token``) is among the
        returned actions, or comes from a later call (long-poll fetch, acks=all produce)."""
        handler = self._handlers.of(request)
        st = self.state
        if st.role is OFFLINE:
            self._answer_offline(request, token)
            return
        try:
            handler(request, token, now_ms)
        except BaseException as exc:
            if not is_storage_error(exc):
                raise
            self._storage_failed(exc)
            if not st.replied(token):
                self._answer_offline(request, token)

    def _leader_and_isr_request(self, request: LeaderAndIsrRequest, token: Any, now_ms: int) -> None:
        self.state.reply(token, self._answer_leader_and_isr(request, now_ms))

    def _heartbeat(self, request: HeartbeatRequest, token: Any, now_ms: int) -> None:
        if self.leading is not None:
            self.leading.on_controller_epoch(request.controller_epoch, now_ms)
        self.state.reply(token, self.status(now_ms))

    def _as_leader(self, serve: Callable[[Leader, Any, Any, int], None]) -> Callable[[Any, Any, int], None]:
        """A request only the leader serves: ``serve(leader, request, token, now_ms)``, or
        NOT_LEADER_OR_FOLLOWER."""

        def handler(request: Any, token: Any, now_ms: int) -> None:
            if self.leading is None:
                self.state.reply(token, self._not_leader(request))
            else:
                serve(self.leading, request, token, now_ms)

        return handler

    # Typed shorthands for tests and tools; the driver uses handle().
    def produce(self, req: ProduceRequest, token: Any, now_ms: int) -> list[Action]:
        return self.handle(req, token, now_ms)

    def fetch(self, req: FetchRequest, token: Any, now_ms: int) -> list[Action]:
        return self.handle(req, token, now_ms)

    @entry_point
    def tick(self, now_ms: int) -> None:
        """Timers: produce and fetch deadlines, ISR proposals, the follower loop, HW
        checkpoints and the time-based flush."""
        if self.leading is not None:
            self.leading.tick(now_ms)
        if self.following is not None:
            self.following.step(now_ms)
        self._maybe_checkpoint_hw(now_ms)
        self.state.log.maybe_flush(now_ms)
        self._upkeep(now_ms)

    def _upkeep(self, now_ms: int) -> None:
        """Every log.retention.check.interval.ms: roll an idle segment past segment.ms and
        delete segments past retention (never above the HW, never the active one); every
        log.cleaner.backoff.ms on a compacted topic: one cleaner pass below the HW. Every
        replica does both on its own log; followers learn the leader's log start offset
        from fetch answers."""
        st = self.state
        if not self.config_known:
            return
        cfg = st.config
        log = st.log
        if now_ms >= self._next_retention_ms:
            self._next_retention_ms = now_ms + cfg.log_retention_check_interval_ms
            log.maybe_roll(now_ms)
            log.apply_retention(now_ms, st.hw)
            if st.hw < log.log_start_offset:
                st.hw = log.log_start_offset
        if now_ms >= self._next_clean_ms:
            self._next_clean_ms = now_ms + cfg.log_cleaner_backoff_ms
            if cfg.log_cleaner_enable and log.config.compact and log.supports_compaction:
                self.last_clean = log.clean(now_ms, st.hw)

    @property
    def config_known(self) -> bool:
        """Whether the config it runs is one the controller sent (a process starts on the
        one it was created with, which Ray replays on restart however old it is): until
        then nothing that acts on it irreversibly runs -- retention, the cleaner -- and no
        request is served, since every role comes with a LeaderAndIsr carrying the
        current config."""
        return self.state.config_version >= 0

    def update_config(self, log_config: Any, config: ReplicationConfig, now_ms: int) -> None:
        """A topic config changed (alter_configs): the log and the replication settings
        follow it from now on, without a restart."""
        self.state.log.update_config(log_config)
        self.state.config = config
        self._next_retention_ms = min(self._next_retention_ms, now_ms + config.log_retention_check_interval_ms)
        self._next_clean_ms = min(self._next_clean_ms, now_ms + config.log_cleaner_backoff_ms)

    def _apply_topic_config(self, config: dict[str, str], version: int, now_ms: int) -> None:
        """The topic config every LeaderAndIsr carries: a change (alter_configs) takes
        effect here, on the running replica, if its version is newer than the one it runs
        -- a late or duplicated LeaderAndIsr must not roll a config back, and epochs say
        nothing about configs. The controller validated it; a config this replica cannot
        parse leaves the one it runs with."""
        if version <= self.state.config_version:
            return
        try:
            log_config = LogConfig.from_topic_config(config)
            replication = ReplicationConfig.from_topic_config(config)
        except KafkaError:
            return
        self.state.config_version = version
        if log_config != self.state.log.config or replication != self.state.config:
            self.update_config(log_config, replication, now_ms)

    @entry_point
    def on_fetch_response(self, request: FetchRequest, response: FetchResponse | None, now_ms: int) -> None:
        """The leader's answer to our Fetch; None means it could not be reached."""
        f = self.following
        if f is not None and f.on_fetch_response(request, response, now_ms):
            self._maybe_checkpoint_hw(now_ms)

    @entry_point
    def on_offsets_for_leader_epoch_response(
        self, request: OffsetsForLeaderEpochRequest, response: OffsetsForLeaderEpochResponse | None, now_ms: int
    ) -> None:
        if self.following is not None:
            self.following.on_offsets_for_leader_epoch_response(request, response, now_ms)

    @entry_point
    def on_txn_verified(self, verify_id: int, response: Any, now_ms: int) -> None:
        """The transaction coordinator's answer to a leader's :class:`~.actions.VerifyTxn`
        (None: no answer); ignored once this replica no longer leads (its produce was
        answered when it stepped down)."""
        if self.leading is not None:
            self.leading.on_txn_verified(verify_id, response, now_ms)

    @entry_point
    def on_alter_partition_response(self, request: Any, response: Any, now_ms: int) -> None:
        if self.leading is not None:
            self.leading.on_alter_partition_response(request, response, now_ms)

    def _not_leader(self, request: Message) -> Message:
        st = self.state
        where = f"broker {st.leader}" if st.leader >= 0 else "no broker (offline)"
        message = f"broker {st.broker} is not the leader of {st.name} at epoch {st.leader_epoch}; leader is {where}"
        if isinstance(request, OffsetsForLeaderEpochRequest):
            return OffsetsForLeaderEpochResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, message)
        return RESPONSE_FOR[type(request)](ErrorCode.NOT_LEADER_OR_FOLLOWER, message, leader_epoch=st.leader_epoch)

    # ------------------------------------------------------------------------------------
    # controller -> replica
    # ------------------------------------------------------------------------------------
    def _answer_leader_and_isr(self, req: LeaderAndIsrRequest, now_ms: int) -> LeaderAndIsrResponse:
        """Every answer names this replica's log directory and storage lineage: a refusal
        says which log the controller is dealing with, and a controller may hear nothing
        else from a leader it just elected before it fails, while the next one can only
        tell that leader's disk from a wiped one by the directory it recorded (sim seed
        8536)."""
        response = self._leader_and_isr(req, now_ms)
        if self.leading is not None and response.error_code == ErrorCode.NONE:
            self.leading.on_controller_epoch(req.controller_epoch, now_ms)
        if self.state.role == OFFLINE:
            return response
        return dataclasses.replace(response, storage=self.state.storage, directory_id=self.state.log.directory_id)

    def _leader_and_isr(self, req: LeaderAndIsrRequest, now_ms: int) -> LeaderAndIsrResponse:
        st = self.state
        if req.topic != st.topic or req.partition != st.partition:
            return LeaderAndIsrResponse(ErrorCode.INVALID_REQUEST, f"this replica holds {st.name}, not {req.topic}-{req.partition}")
        if req.controller_epoch < st.controller_epoch:
            return LeaderAndIsrResponse(
                ErrorCode.STALE_CONTROLLER_EPOCH, f"controller epoch {req.controller_epoch} < {st.controller_epoch} already seen"
            )
        if req.incarnation and st.incarnation and req.incarnation != st.incarnation:
            return LeaderAndIsrResponse(
                ErrorCode.STALE_BROKER_EPOCH,
                f"addressed to process {req.incarnation}; this is {st.incarnation}, started since",
            )
        if req.config is not None:
            self._apply_topic_config(req.config, req.config_version, now_ms)
        if req.leader_epoch < st.leader_epoch:
            return LeaderAndIsrResponse(ErrorCode.FENCED_LEADER_EPOCH, f"leader epoch {req.leader_epoch} < current {st.leader_epoch}")
        if req.leader == st.broker and req.directory_id and req.directory_id != st.log.directory_id:
            # Asked to lead on the strength of a log this directory never held (the disk was
            # wiped or replaced since the controller last heard from this replica): followers
            # would truncate to it. Refuse; the answer names this directory, and the
            # controller elects knowing it.
            return LeaderAndIsrResponse(
                ErrorCode.FENCED_LEADER_EPOCH,
                f"broker {st.broker} is asked to lead from log directory {req.directory_id}, "
                f"but its log is in a new directory {st.log.directory_id} (its disk was wiped or replaced)",
            )
        st.controller_epoch = req.controller_epoch
        if req.leader_epoch == st.leader_epoch:
            if req.leader != st.leader:
                return LeaderAndIsrResponse(
                    ErrorCode.INVALID_REQUEST, f"epoch {req.leader_epoch} already has leader {st.leader}, request names {req.leader}"
                )
            if req.partition_epoch > st.partition_epoch:
                self._set_assignment(req)
                if self.leading is not None:
                    self.leading.on_assignment(now_ms)
            return LeaderAndIsrResponse()

        if req.leader == st.broker and st.leader_epoch < 0 and st.log.epoch_cache.latest_epoch >= req.leader_epoch:
            # A fresh process (restarted) asked to lead an epoch its log already has: it
            # would resume that leadership without its in-memory state (follower progress,
            # HW), so the HW could go backwards. Refuse; the controller elects anew.
            return LeaderAndIsrResponse(
                ErrorCode.FENCED_LEADER_EPOCH,
                f"broker {st.broker} restarted and cannot resume leading epoch {req.leader_epoch} "
                f"(its log already has epoch {st.log.epoch_cache.latest_epoch}); elect with a new epoch",
            )
        if req.leader == st.broker and st.may_have_lost_data:
            # Restarted, possibly without its unflushed tail, and asked to lead by a controller
            # that may not have seen the restart (it happened between two heartbeats, or
            # while the controller itself was down): followers would truncate to what is
            # left. Refuse once; the controller, now aware, elects with that knowledge and
            # may still pick this replica, which then accepts.
            st.may_have_lost_data = False
            return LeaderAndIsrResponse(
                ErrorCode.FENCED_LEADER_EPOCH,
                f"broker {st.broker} restarted and may have lost unflushed records; "
                f"not resuming leadership at epoch {req.leader_epoch} before the controller re-elects",
            )
        self._step_down(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{st.name}: leadership changed (epoch {req.leader_epoch}, leader {req.leader})")
        st.leader_epoch = req.leader_epoch
        st.leader = req.leader
        self._set_assignment(req)
        if req.leader == st.broker:
            self.leading = Leader(st, now_ms)
            st.role = LEADER
            self.leading.maybe_advance_hw(now_ms)
        elif req.leader >= 0:
            st.role = FOLLOWER
            self.following = Follower(st, req.leader, req.leader_epoch)
            self._checkpoint_hw(now_ms)
            self.following.step(now_ms)
            return LeaderAndIsrResponse()
        else:
            st.role = NONE
        self._checkpoint_hw(now_ms)
        return LeaderAndIsrResponse()

    def _set_assignment(self, req: LeaderAndIsrRequest) -> None:
        st = self.state
        st.partition_epoch = req.partition_epoch
        st.replicas = list(req.replicas)
        st.isr = list(req.isr)

    def _step_down(self, code: int, message: str) -> None:
        """Leave the current role: a leader's waiting requests get ``code``."""
        if self.leading is not None:
            self.leading.step_down(code, message)
        self.leading = None
        self.following = None

    # ------------------------------------------------------------------------------------
    # storage failure (KIP-112)
    # ------------------------------------------------------------------------------------
    def _storage_failed(self, exc: BaseException) -> None:
        st = self.state
        reason = f"log of {st.name} on broker {st.broker} failed: {exc}"
        st.offline_reason = reason
        self._step_down(ErrorCode.KAFKA_STORAGE_ERROR, reason)
        st.role = OFFLINE

    def _answer_offline(self, request: Message, token: Any) -> None:
        st = self.state
        if isinstance(request, HeartbeatRequest):
            st.reply(token, self.status())
            return
        st.reply(token, RESPONSE_FOR[type(request)](ErrorCode.KAFKA_STORAGE_ERROR, st.offline_reason))

    # ------------------------------------------------------------------------------------
    # status
    # ------------------------------------------------------------------------------------
    def status(self, now_ms: int | None = None) -> HeartbeatResponse:
        """The replica's own view; a leader asked with ``now_ms`` (a heartbeat) also
        vouches for the followers fetching from it."""
        st = self.state
        offline = st.role == OFFLINE
        log = st.log
        return HeartbeatResponse(
            error_code=ErrorCode.KAFKA_STORAGE_ERROR if offline else ErrorCode.NONE,
            error_message=st.offline_reason or None,
            topic=st.topic,
            partition=st.partition,
            broker=st.broker,
            role=st.role.value,
            leader=st.leader,
            leader_epoch=st.leader_epoch,
            partition_epoch=st.partition_epoch,
            log_start_offset=-1 if offline else log.log_start_offset,
            log_end_offset=-1 if offline else log.log_end_offset,
            high_watermark=st.hw,
            isr=list(st.isr),
            follower_leo={b: p.log_end_offset for b, p in self.leading.isr.followers.items()} if self.leading else {},
            incarnation=st.incarnation,
            storage=st.storage,
            directory_id=st.log.directory_id,
            followers_heard=self.leading.heard(now_ms) if self.leading is not None and now_ms is not None else {},
        )

    # ------------------------------------------------------------------------------------
    # timers
    # ------------------------------------------------------------------------------------
    def next_deadline(self, now_ms: int) -> int | None:
        """When :meth:`tick` next has work (None: nothing timed)."""
        if self.state.role == OFFLINE:
            return None
        deadlines: list[int] = []
        for role in (self.leading, self.following):
            if role is not None:
                at = role.next_deadline()
                if at is not None:
                    deadlines.append(at)
        if self.state.hw != self._hw_checkpointed:
            deadlines.append(self._last_hw_checkpoint_ms + self.state.config.hw_checkpoint_interval_ms)
        log = self.state.log
        if self.config_known:
            deadlines.append(self._next_retention_ms)
            if log.config.compact and log.supports_compaction and self.state.config.log_cleaner_enable:
                deadlines.append(self._next_clean_ms)
        return min(deadlines) if deadlines else None

    def _maybe_checkpoint_hw(self, now_ms: int) -> None:
        if self.state.hw != self._hw_checkpointed and now_ms - self._last_hw_checkpoint_ms >= self.state.config.hw_checkpoint_interval_ms:
            self._checkpoint_hw(now_ms)

    def _checkpoint_hw(self, now_ms: int) -> None:
        self.state.log.checkpoint_high_watermark(self.state.hw)
        self._hw_checkpointed = self.state.hw
        self._last_hw_checkpoint_ms = now_ms

    def close(self, now_ms: int) -> list[Action]:
        """Stop: checkpoint the HW (when the log still works) and close the log. Every
        waiting request is the driver's to answer."""
        try:
            if self.state.role != OFFLINE:
                self._checkpoint_hw(now_ms)
        except BaseException as exc:
            if not is_storage_error(exc):
                raise
        finally:
            try:
                self.state.log.close()
            except BaseException as exc:
                if not is_storage_error(exc):
                    raise
        return self.state.take()
