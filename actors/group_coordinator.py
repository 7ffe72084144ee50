"""GroupCoordinatorActor: the Ray shell around one :class:`GroupCoordinatorState`.

Coordinator ``i`` of a cluster (named ``names.group_coordinator(cluster, i)``) owns every
group that hashes to ``i`` and partition ``i`` of the internal topic ``__consumer_offsets``.
It holds no local disk state: the partition *is* its state. So the shell's duties are

* **replay** the partition from log start to the high watermark into ``core.load()`` on every
  (re)start, answering COORDINATOR_LOAD_IN_PROGRESS until that is done;
* **persist**: append the core's Persist actions to the partition leader with acks=all, one
  append in flight, consecutive actions merged into one record batch, outcomes reported in
  emission order (what the core requires so its memory equals a replay of the log);
* **timers**: one asyncio task sleeping until ``core.next_deadline()``;
* **serve** the group APIs as msgpack bytes; malformed bytes get an error response.

Group settings (Kafka's ``group.*``/``offsets.*`` broker configs) come from the constructor
and may be overridden cluster-wide at runtime with
:func:`actors.group_config.configure_group_coordinators` (deployment: ``actors.group_deploy``);
overrides are kept in Ray's GCS key/value store so they survive actor restarts.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
import traceback
import uuid
from collections import deque
from typing import Any, Callable, Mapping

import ray

from kcoord.client.cluster import ClusterClient
from kcoord.group import GroupConfig, GroupCoordinatorState, Persist, Reply, decode_record
from kcoord.group.records import OFFSETS_TOPIC
from kcoord.protocol import names
from kcoord.protocol.codec import Message
from kcoord.protocol.errors import METADATA_REFRESH, RETRIABLE, DecodeError, ErrorCode, KafkaError, error_name
from kcoord.protocol.group import (
    RESPONSE_FOR,
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    GroupHeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    SyncGroupRequest,
    error_response,
)
from kcoord.protocol.replication import FetchRequest, FetchResponse, ProduceRequest, ProduceResponse
from kcoord.records import batches_info, build_batch_columns, iter_records

from .calls import DEAD, CallFailed, Handles
from .group_config import stored_config
from .metrics import GroupMetricsExporter

logger = logging.getLogger("kcoord.group")

E = ErrorCode

_IDLE_WAKE_S = 1.0
_METRICS_INTERVAL_S = 2.0
# Records per merged append (keeps one produce request well below the batch size limits).
_MAX_RECORDS_PER_APPEND = 5_000
_FETCH_MAX_BYTES = 8 << 20
_RETRY_BACKOFF_S = 0.05


def now_ms() -> int:
    return int(time.time() * 1000)


class GroupCoordinatorActor:
    def __init__(
        self,
        cluster: str,
        index: int,
        count: int,
        namespace: str = names.DEFAULT_NAMESPACE,
        config: Mapping[str, Any] | None = None,
        persist_timeout_ms: int = 15_000,
    ) -> None:
        self.cluster = cluster
        self.index = index
        self.count = count
        self.namespace = namespace
        self.base_config = dict(config or {})
        self.persist_timeout_ms = persist_timeout_ms
        self.core = GroupCoordinatorState(GroupConfig.from_properties(self.base_config), partition=index, num_partitions=count)
        self.incarnation = uuid.uuid4().hex
        self.started_ms = now_ms()
        self._handles = Handles(namespace)
        self._client: ClusterClient | None = None
        self._leader: tuple[int, int] | None = None  # (broker, leader epoch) of our partition
        self._loaded = False
        self._load_info: dict[str, Any] = {}
        self._boot: asyncio.Task | None = None
        self._tokens = itertools.count()
        self._waiters: dict[int, asyncio.Future] = {}
        self._queue: deque[Persist] = deque()
        self._writer_wake: asyncio.Event | None = None
        self._timer_wake: asyncio.Event | None = None
        self._scheduled_ms = 0
        self._tasks: list[asyncio.Task] = []
        self._seen: dict[str, tuple[str, int, int]] = {}
        self._metrics = GroupMetricsExporter(cluster, index)
        self._appends = 0
        self._appended_records = 0
        # Load now, not on the first request: after a Ray restart the restored members'
        # session timers must run even if nobody calls us for a while.
        ray.get_runtime_context().current_actor.ready.remote()

    # ======================================================================================
    # lifecycle
    # ======================================================================================

    def _ensure_started(self) -> asyncio.Task:
        if self._boot is None:
            loop = asyncio.get_running_loop()
            self._writer_wake = asyncio.Event()
            self._timer_wake = asyncio.Event()
            self._tasks = [loop.create_task(self._writer_loop()), loop.create_task(self._timer_loop())]
            self._boot = loop.create_task(self._load())
        return self._boot

    async def _load(self) -> None:
        """Replay our partition into the core. Retries forever: until it succeeds the
        coordinator answers COORDINATOR_LOAD_IN_PROGRESS, which clients retry."""
        try:
            overrides = stored_config(self.cluster)
        except Exception:
            overrides = {}
            logger.warning("[coordinator %d] could not read config overrides:\n%s", self.index, traceback.format_exc())
        if overrides:
            self._set_config(overrides)
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            try:
                records, end_offset = await self._replay()
                break
            except Exception as exc:
                level = logging.INFO if attempt < 5 else logging.WARNING
                logger.log(level, "[coordinator %d] replay of %s-%d failed (attempt %d): %s", self.index, OFFSETS_TOPIC, self.index, attempt, exc)
                self._leader = None
                await asyncio.sleep(min(1.0, 0.1 * attempt))
        good = []
        for key, value in records:
            try:
                decode_record(key, value)
            except DecodeError as exc:
                logger.error("[coordinator %d] skipping a malformed record of %s-%d: %s", self.index, OFFSETS_TOPIC, self.index, exc)
                continue
            good.append((key, value))
        self.core.load(good, now_ms())
        self._loaded = True
        self._load_info = {"records": len(good), "end_offset": end_offset, "load_ms": int((time.monotonic() - started) * 1000)}
        for group_id in self.core.group_ids():
            group = self.core.group(group_id)
            if group is not None:
                self._seen[group_id] = (group.state.value, group.generation_id, len(group.members))
                logger.info(
                    "[group=%s generation=%d] loaded: %s with %d members, %d committed offsets",
                    group_id, group.generation_id, group.state.value, len(group.members), len(group.offsets),
                )
        logger.info(
            "[coordinator %d] loaded %d records of %s-%d up to offset %d in %d ms: %d groups",
            self.index, len(good), OFFSETS_TOPIC, self.index, end_offset, self._load_info["load_ms"], len(self.core.group_ids()),
        )
        self._run(self.core.tick, now_ms())

    async def _replay(self) -> tuple[list[tuple[bytes, bytes | None]], int]:
        """Fetch our partition from log start until caught up: at the HW, and the HW at the
        leader's log end (so an append of a previous incarnation that was still being
        replicated is part of what we load, exactly as every later replay will see it)."""
        records: list[tuple[bytes, bytes | None]] = []
        offset = 0
        settle_deadline: float | None = None
        while True:
            resp = await self._fetch(offset, max_wait_ms=0 if settle_deadline is None else 200)
            if resp.error_code == E.OFFSET_OUT_OF_RANGE and offset < resp.log_start_offset:
                offset = resp.log_start_offset  # retention removed the head: start at log start
                continue
            if resp.error_code:
                raise KafkaError(resp.error_code, resp.error_message or "fetch failed")
            if resp.records:
                for rec in iter_records(resp.records, from_offset=offset):
                    records.append((rec.key or b"", rec.value))
                _, next_offset, _ = batches_info(resp.records)
                offset = max(offset, next_offset)
                continue
            if offset < resp.high_watermark:
                raise KafkaError(E.CORRUPT_MESSAGE, f"empty read at offset {offset} below HW {resp.high_watermark}")
            if resp.high_watermark >= resp.log_end_offset:
                return records, offset
            # Caught up to the HW but the leader holds more: wait (bounded) for it to commit.
            if settle_deadline is None:
                settle_deadline = time.monotonic() + 15
            elif time.monotonic() > settle_deadline:
                logger.warning(
                    "[coordinator %d] loading stops at HW %d; the leader's log ends at %d (uncommitted tail)",
                    self.index, resp.high_watermark, resp.log_end_offset,
                )
                return records, offset

    # ======================================================================================
    # the partition leader
    # ======================================================================================

    async def _leader_info(self) -> tuple[int, int]:
        if self._leader is None:
            if self._client is None:
                self._client = ClusterClient(self.cluster, namespace=self.namespace, address=None)
            md = await self._client.atopic(OFFSETS_TOPIC, refresh=True)
            if self.index >= len(md.partitions):
                raise KafkaError(E.UNKNOWN_TOPIC_OR_PARTITION, f"{OFFSETS_TOPIC} has no partition {self.index}")
            p = md.partitions[self.index]
            if p.leader < 0:
                raise KafkaError(E.LEADER_NOT_AVAILABLE, f"{OFFSETS_TOPIC}-{self.index} has no leader")
            self._leader = (p.leader, p.leader_epoch)
        return self._leader

    def _replica_name(self, broker: int) -> str:
        return names.replica(self.cluster, OFFSETS_TOPIC, self.index, broker)

    async def _fetch(self, offset: int, max_wait_ms: int) -> FetchResponse:
        broker, epoch = await self._leader_info()
        req = FetchRequest(
            OFFSETS_TOPIC, self.index, offset, max_bytes=_FETCH_MAX_BYTES, max_wait_ms=max_wait_ms, current_leader_epoch=epoch
        )
        try:
            raw = await self._handles.call(
                self._replica_name(broker), "fetch", req.encode(), timeout=max_wait_ms / 1000 + 30, probe_after=max_wait_ms / 1000 + 0.5
            )
        except CallFailed as exc:
            self._leader = None
            raise KafkaError(E.NOT_LEADER_OR_FOLLOWER if exc.kind == DEAD else E.REQUEST_TIMED_OUT, str(exc)) from None
        resp = FetchResponse.decode(raw)
        if resp.error_code in METADATA_REFRESH:
            self._leader = None
        return resp

    async def _append(self, records: list[tuple[bytes, bytes | None]]) -> int:
        """Append with acks=all; retry retriable failures (refreshing the leader when it
        moved) until ``persist_timeout_ms``. Returns the final error code (0 = acked).

        A retry after a timeout may append the same records twice. That is harmless: the
        writes are idempotent key/value updates, and nothing else is appended in between
        because there is only ever one append in flight."""
        batch = build_batch_columns([v for _, v in records], [k for k, _ in records])
        deadline = time.monotonic() + self.persist_timeout_ms / 1000
        code: int = E.UNKNOWN_SERVER_ERROR
        attempt = 0
        while True:
            attempt += 1
            try:
                broker, epoch = await self._leader_info()
                remaining = max(0.5, deadline - time.monotonic())
                req = ProduceRequest(
                    OFFSETS_TOPIC, self.index, batch, acks=-1, timeout_ms=int(remaining * 1000), current_leader_epoch=epoch
                )
                # probe_after: a leader that died is noticed through Ray's GCS in ~0.5 s,
                # not the 1-2 s Ray takes to fail the call.
                raw = await self._handles.call(
                    self._replica_name(broker), "produce", req.encode(), timeout=remaining + 5, probe_after=0.5
                )
                code = ProduceResponse.decode(raw).error_code
            except CallFailed as exc:
                code = E.NOT_LEADER_OR_FOLLOWER if exc.kind == DEAD else E.REQUEST_TIMED_OUT
            except KafkaError as exc:
                code = int(exc.code)
            except Exception:
                # e.g. the controller is restarting while we look the leader up: retriable.
                logger.warning("[coordinator %d] append failed:\n%s", self.index, traceback.format_exc())
                code = E.LEADER_NOT_AVAILABLE
            if code == E.NONE:
                return code
            if code in METADATA_REFRESH:
                self._leader = None
            if code not in RETRIABLE or time.monotonic() >= deadline:
                logger.warning(
                    "[coordinator %d] append of %d records to %s-%d failed after %d attempts: %s",
                    self.index, len(records), OFFSETS_TOPIC, self.index, attempt, error_name(code),
                )
                return code
            await asyncio.sleep(min(0.5, _RETRY_BACKOFF_S * attempt))

    async def _writer_loop(self) -> None:
        """The single appender: drains the Persist queue in order, merging consecutive
        actions into one batch, and reports every id in emission order."""
        assert self._writer_wake is not None
        while True:
            await self._writer_wake.wait()
            self._writer_wake.clear()
            while self._queue:
                taken: list[Persist] = []
                records: list[tuple[bytes, bytes | None]] = []
                while self._queue and (not taken or len(records) + len(self._queue[0].records) <= _MAX_RECORDS_PER_APPEND):
                    p = self._queue.popleft()
                    taken.append(p)
                    records.extend(p.records)
                code = await self._append(records) if records else E.NONE
                self._appends += 1
                self._appended_records += len(records)
                for p in taken:
                    self._run(self.core.on_persisted, p.persist_id, code, now_ms())
                if code != E.NONE:
                    logger.warning("[coordinator %d] persist failed (%s): %s", self.index, error_name(code), "; ".join(p.reason for p in taken))

    # ======================================================================================
    # driving the core
    # ======================================================================================

    async def _timer_loop(self) -> None:
        assert self._timer_wake is not None
        last_metrics = 0.0
        while True:
            deadline = self.core.next_deadline() if self._loaded else None
            now = now_ms()
            delay = _IDLE_WAKE_S if deadline is None else min(_IDLE_WAKE_S, max(0.0, (deadline - now) / 1000))
            self._scheduled_ms = now + int(delay * 1000)
            self._timer_wake.clear()
            try:
                await asyncio.wait_for(self._timer_wake.wait(), delay)
            except asyncio.TimeoutError:
                pass
            if self._loaded:
                self._run(self.core.tick, now_ms())
            if time.monotonic() - last_metrics >= _METRICS_INTERVAL_S:
                last_metrics = time.monotonic()
                try:
                    self._metrics.export(self.core, self._loaded)
                except Exception:
                    logger.warning("[coordinator %d] metrics export failed:\n%s", self.index, traceback.format_exc())

    def _run(self, fn: Callable[..., list], *args: Any, group_id: str | None = None) -> None:
        """Call the core and perform its actions. A bug in the core is logged, never fatal."""
        try:
            actions = fn(*args)
        except Exception:
            logger.error("[coordinator %d] internal error:\n%s", self.index, traceback.format_exc())
            return
        self._perform(actions)
        self._observe(group_id)

    def _perform(self, actions: list) -> None:
        for action in actions:
            if isinstance(action, Reply):
                fut = self._waiters.pop(action.token, None)
                if fut is not None and not fut.done():
                    fut.set_result(action.response)
            elif isinstance(action, Persist):
                self._queue.append(action)
                assert self._writer_wake is not None
                self._writer_wake.set()
        if self._timer_wake is not None:
            deadline = self.core.next_deadline()
            if deadline is not None and deadline < self._scheduled_ms:
                self._timer_wake.set()

    def _observe(self, group_id: str | None) -> None:
        """Log each group's state/generation/membership change, one line per change."""
        ids = [group_id] if group_id is not None else list(self._seen.keys() | set(self.core.group_ids()))
        for gid in ids:
            group = self.core.group(gid)
            if group is None:
                if self._seen.pop(gid, None) is not None:
                    logger.info("[group=%s] removed (deleted or expired)", gid)
                continue
            now = (group.state.value, group.generation_id, len(group.members))
            before = self._seen.get(gid)
            if now != before:
                self._seen[gid] = now
                logger.info(
                    "[group=%s generation=%d] %s%s, %d members, leader %s",
                    gid, group.generation_id, f"{before[0]} -> " if before and before[0] != now[0] else "",
                    now[0], now[2], group.leader or "-",
                )

    def _set_config(self, overrides: Mapping[str, Any]) -> None:
        merged = {**self.base_config, **{str(k): v for k, v in overrides.items()}}
        self.core.config = GroupConfig.from_properties(merged)

    # ======================================================================================
    # APIs: msgpack bytes in, msgpack bytes out
    # ======================================================================================

    async def _serve(self, data: bytes, request_type: type[Message]) -> bytes:
        response_type = RESPONSE_FOR[request_type]
        try:
            req = request_type.decode(data)
        except DecodeError as exc:
            return response_type(error_code=int(exc.code), error_message=exc.message).encode()
        self._ensure_started()
        if not self._loaded and request_type is not FindCoordinatorRequest:
            return error_response(
                req, E.COORDINATOR_LOAD_IN_PROGRESS, f"coordinator {self.index} is loading {OFFSETS_TOPIC}-{self.index}"
            ).encode()
        token = next(self._tokens)
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._waiters[token] = fut
        try:
            actions = self.core.handle(req, token, now_ms())
        except Exception:
            self._waiters.pop(token, None)
            logger.error("[coordinator %d] internal error on %s:\n%s", self.index, request_type.__name__, traceback.format_exc())
            return error_response(req, E.UNKNOWN_SERVER_ERROR, "internal error in the group coordinator; see its logs").encode()
        self._perform(actions)
        self._observe(getattr(req, "group_id", None) if isinstance(getattr(req, "group_id", None), str) else None)
        response = await fut
        if isinstance(response, OffsetCommitResponse):
            done = sum(1 for parts in response.topics.values() for c in parts.values() if c == E.NONE)
            self._metrics.committed(req.group_id, done)  # type: ignore[attr-defined]
        return response.encode()

    async def find_coordinator(self, data: bytes) -> bytes:
        return await self._serve(data, FindCoordinatorRequest)

    async def join_group(self, data: bytes) -> bytes:
        return await self._serve(data, JoinGroupRequest)

    async def sync_group(self, data: bytes) -> bytes:
        return await self._serve(data, SyncGroupRequest)

    async def heartbeat(self, data: bytes) -> bytes:
        return await self._serve(data, GroupHeartbeatRequest)

    async def leave_group(self, data: bytes) -> bytes:
        return await self._serve(data, LeaveGroupRequest)

    async def offset_commit(self, data: bytes) -> bytes:
        return await self._serve(data, OffsetCommitRequest)

    async def offset_fetch(self, data: bytes) -> bytes:
        return await self._serve(data, OffsetFetchRequest)

    async def describe_groups(self, data: bytes) -> bytes:
        return await self._serve(data, DescribeGroupsRequest)

    async def list_groups(self, data: bytes) -> bytes:
        return await self._serve(data, ListGroupsRequest)

    async def delete_groups(self, data: bytes) -> bytes:
        return await self._serve(data, DeleteGroupsRequest)

    # ======================================================================================
    # operations
    # ======================================================================================

    async def ready(self, timeout_s: float | None = None) -> str:
        """Wait until the partition is loaded; returns this incarnation's id."""
        boot = self._ensure_started()
        await asyncio.wait_for(asyncio.shield(boot), timeout_s)
        return self.incarnation

    async def reconfigure(self, properties: dict[str, Any]) -> dict[str, int]:
        """Apply group settings now (Kafka names or field names); returns the effective
        config. Callers persist them with :func:`configure_group_coordinators`."""
        self._set_config(properties)
        return dict(vars(self.core.config))

    async def describe(self) -> dict[str, Any]:
        """This coordinator's view, for tests, benchmarks and debugging."""
        groups = {}
        for group_id in self.core.group_ids():
            g = self.core.group(group_id)
            if g is not None:
                groups[group_id] = {
                    "state": g.state.value,
                    "generation": g.generation_id,
                    "members": sorted(g.members),
                    "leader": g.leader,
                    "offsets": {f"{t}-{p}": o.offset for (t, p), o in sorted(g.offsets.items())},
                }
        return {
            "index": self.index,
            "count": self.count,
            "loaded": self._loaded,
            "load": dict(self._load_info),
            "incarnation": self.incarnation,
            "pid": os.getpid(),
            "leader": self._leader,
            "config": dict(vars(self.core.config)),
            "groups": groups,
            "pending_persists": len(self.core.pending_persists()),
            "appends": self._appends,
            "appended_records": self._appended_records,
            "stats": dict(vars(self.core.stats)),
        }

    async def pid(self) -> int:
        return os.getpid()


def __getattr__(name: str) -> Any:
    """Deployment and configuration moved to ``group_deploy`` and ``group_config``; these
    names stay importable from here (lazily: ``group_deploy`` imports this module)."""
    if name in ("configure_group_coordinators", "CONFIG_KEY"):
        from . import group_config

        return getattr(group_config, name)
    if name in ("deploy_group_coordinators", "offsets_topic_config", "RemoteGroupCoordinator"):
        from . import group_deploy

        return getattr(group_deploy, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
