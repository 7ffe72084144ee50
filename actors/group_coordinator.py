"""GroupCoordinatorActor: the Ray shell around one group coordinator's driver.

Coordinator ``i`` of a cluster (named ``names.group_coordinator(cluster, i)``) owns every
group that hashes to ``i`` and partition ``i`` of the internal topic ``__consumer_offsets``.
Loading that partition, fencing older incarnations, the persist pipeline and the timers are
:class:`~kcoord.group.coordinator_driver.GroupCoordinatorDriver`'s, the same driver the simulation runs;
this shell decodes requests, awaits the driver's replies, logs group changes and exports
metrics.

Group settings (Kafka's ``group.*``/``offsets.*`` broker configs) come from the constructor
and may be overridden cluster-wide at runtime with
:func:`kcoord.cluster.group_coordinators.configure_group_coordinators` (deployment: ``kcoord.cluster.group_coordinators``);
overrides are kept in Ray's GCS key/value store so they survive actor restarts.
"""

from __future__ import annotations

import logging
import os
import time
import traceback
import uuid
from typing import Any, Mapping

import ray

from kcoord.group import GroupConfig, GroupCoordinatorState
from kcoord.group.coordinator_driver import CoordinatorTimeouts, GroupCoordinatorDriver
from kcoord.protocol import names
from kcoord.protocol.codec import Message
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.group import OffsetCommitResponse
from kcoord.protocol.services import GROUP_COORDINATOR

from .group_config import stored_config
from .metrics import GroupMetricsExporter
from .runtime import coordinator_io, rpc_methods, serve_encoded, wait_loaded, wall_ms

logger = logging.getLogger("kcoord.group")

_METRICS_INTERVAL_S = 2.0


@rpc_methods(GROUP_COORDINATOR)
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
        self.timeouts = CoordinatorTimeouts(persist_ms=persist_timeout_ms)
        self.core = GroupCoordinatorState(GroupConfig.from_properties(self.base_config), partition=index, num_partitions=count)
        self.incarnation = uuid.uuid4().hex
        self.started_ms = wall_ms()
        self.driver: GroupCoordinatorDriver | None = None
        self._seen: dict[str, tuple[str, int, int]] = {}
        self._metrics = GroupMetricsExporter(cluster, index)
        self._last_metrics = 0.0
        # Load now, not on the first request: after a Ray restart the restored members'
        # session timers must run even if nobody calls us for a while.
        ray.get_runtime_context().current_actor.ready.remote()

    # -- lifecycle ------------------------------------------------------------------------
    def _driver(self) -> GroupCoordinatorDriver:
        if self.driver is None:
            try:
                overrides = stored_config(self.cluster)
            except Exception:
                overrides = {}
                logger.warning("[coordinator %d] could not read config overrides:\n%s", self.index, traceback.format_exc())
            if overrides:
                self._set_config(overrides)
            self.driver = GroupCoordinatorDriver(
                self.cluster,
                self.core,
                **coordinator_io(self.namespace),
                timeouts=self.timeouts,
                on_change=self._observe,
                after_tick=self._export_metrics,
                incarnation=self.incarnation,
            )
            self.driver.start()
        return self.driver

    async def ready(self, timeout_s: float | None = None) -> str:
        """Wait until the partition is loaded; returns this incarnation's id."""
        await wait_loaded(self._driver(), timeout_s)
        return self.incarnation

    def _set_config(self, overrides: Mapping[str, Any]) -> None:
        merged = {**self.base_config, **{str(k): v for k, v in overrides.items()}}
        self.core.config = GroupConfig.from_properties(merged)

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

    def _export_metrics(self, _now_ms: int) -> None:
        now = time.monotonic()
        if now - self._last_metrics >= _METRICS_INTERVAL_S and self.driver is not None:
            self._last_metrics = now
            try:
                self._metrics.export(self.core, self.driver.loaded)
            except Exception:
                logger.warning("[coordinator %d] metrics export failed:\n%s", self.index, traceback.format_exc())

    # -- APIs: msgpack bytes in, msgpack bytes out ---------------------------------------
    async def _serve(self, data: bytes, request_type: type[Message]) -> bytes:
        """Every RPC method (``GROUP_COORDINATOR``'s table): msgpack bytes in and out;
        committed offsets are counted per group."""

        def serve(request: Message, reply: Any) -> None:
            def answered(response: Message) -> None:
                if isinstance(response, OffsetCommitResponse):
                    done = sum(1 for parts in response.topics.values() for c in parts.values() if c == ErrorCode.NONE)
                    self._metrics.committed(request.group_id, done)  # type: ignore[attr-defined]
                reply(response)

            self._driver().serve(request, answered)

        return (await serve_encoded(data, request_type, serve)).encode()

    async def reconfigure(self, properties: dict[str, Any]) -> dict[str, int]:
        """Apply group settings now (Kafka names or field names); returns the effective
        config. Callers persist them with :func:`configure_group_coordinators`."""
        self._set_config(properties)
        return dict(vars(self.core.config))

    async def describe(self) -> dict[str, Any]:
        """This coordinator's view, for tests, benchmarks and debugging."""
        driver = self._driver()
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
                    # transactional offsets pending their markers, by producer id (None: uncertain)
                    "pending_txn": {
                        pid: {f"{t}-{p}": (None if o is None else o.offset) for (t, p), o in sorted(offsets.items())}
                        for pid, offsets in self.core.pending_txn_offsets(group_id).items()
                    },
                }
        return {
            "index": self.index,
            "count": self.count,
            "loaded": driver.loaded,
            "fenced": driver.fenced,
            "load": dict(driver.load_info),
            "loading": driver.load_progress(),  # where a load in progress stands
            "incarnation": self.incarnation,
            "pid": os.getpid(),
            "leader": driver.leader,
            "producer": (driver.producer_id, driver.producer_epoch),
            "config": dict(vars(self.core.config)),
            "groups": groups,
            # transactional producers' fencing records ([5, producer_id]): (producer epoch, coordinator epoch)
            "txn_producers": self.core.txn_producers(),
            "pending_persists": len(self.core.pending_persists()),
            "appends": driver.appends,
            "appended_records": driver.appended_records,
            "stats": dict(vars(self.core.stats)),
        }

    async def pid(self) -> int:
        return os.getpid()
