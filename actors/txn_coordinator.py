"""TransactionCoordinatorActor: the Ray shell around one transaction coordinator's driver.

Coordinator ``i`` of a cluster (named ``names.transaction_coordinator(cluster, i)``) owns
every transactional id that hashes to ``i`` (``kcoord.txn.coordinator_for``) and partition
``i`` of the internal topic ``__transaction_state``. Loading that partition, fencing older
incarnations, the persist pipeline, the markers and the timers are
:class:`~kcoord.txn.driver.TransactionCoordinatorDriver`'s; this shell decodes requests,
awaits the driver's replies and describes itself. Its RPC methods are the rows of
``TRANSACTION_COORDINATOR`` (``kcoord.protocol.services``). Deployment:
``kcoord.cluster.txn_coordinators``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import traceback
import uuid
from typing import Any, Mapping

import ray

from kcoord.protocol import names
from kcoord.protocol.codec import Message
from kcoord.protocol.services import TRANSACTION_COORDINATOR
from kcoord.txn import TransactionCoordinatorState, TxnConfig
from kcoord.txn.driver import CoordinatorTimeouts, TransactionCoordinatorDriver

from .metrics import TxnMetricsExporter
from .runtime import coordinator_io, rpc_methods, serve_encoded, wait_loaded, wall_ms

logger = logging.getLogger("kcoord.txn")
_METRICS_INTERVAL_S = 2.0


@rpc_methods(TRANSACTION_COORDINATOR)
class TransactionCoordinatorActor:
    def __init__(
        self,
        cluster: str,
        index: int,
        count: int,
        offsets_partitions: int,
        namespace: str = names.DEFAULT_NAMESPACE,
        config: Mapping[str, Any] | None = None,
        persist_timeout_ms: int = 15_000,
    ) -> None:
        """``count``: transaction coordinators (partitions of ``__transaction_state``);
        ``offsets_partitions``: group coordinators (AddOffsetsToTxn places a group's offsets);
        ``config``: Kafka-named settings (``transaction.max.timeout.ms``...)."""
        self.cluster = cluster
        self.index = index
        self.count = count
        self.namespace = namespace
        self.timeouts = CoordinatorTimeouts(persist_ms=persist_timeout_ms)
        self.core = TransactionCoordinatorState(
            TxnConfig.from_properties(dict(config or {})), partition=index, num_partitions=count, offsets_partitions=offsets_partitions
        )
        self.incarnation = uuid.uuid4().hex
        self.started_ms = wall_ms()
        self.driver: TransactionCoordinatorDriver | None = None
        self._metrics = TxnMetricsExporter(cluster, index)
        self._metrics_task: asyncio.Task | None = None
        # Load now, not on the first request: after a restart, PREPARE_* transactions resume
        # their markers and ONGOING ones their timeouts even if nobody calls us.
        ray.get_runtime_context().current_actor.ready.remote()

    def _driver(self) -> TransactionCoordinatorDriver:
        if self.driver is None:
            self.driver = TransactionCoordinatorDriver(
                self.cluster,
                self.core,
                **coordinator_io(self.namespace),
                timeouts=self.timeouts,
                incarnation=self.incarnation,
            )
            self.driver.start()
            self._metrics_task = asyncio.get_running_loop().create_task(self._metrics_loop())
        return self.driver

    async def _metrics_loop(self) -> None:
        """Copy the core's counters into Ray's metrics every few seconds (markers complete
        and transactions open between requests and timers, so neither drives this)."""
        while True:
            await asyncio.sleep(_METRICS_INTERVAL_S)
            if self.driver is None or self.driver.closed:
                continue
            try:
                self._metrics.export(self.core, self.driver.loaded)
            except Exception:
                logger.warning("[txn coordinator %d] metrics export failed:\n%s", self.index, traceback.format_exc())

    async def ready(self, timeout_s: float | None = None) -> str:
        """Wait until the partition is loaded; returns this incarnation's id."""
        await wait_loaded(self._driver(), timeout_s)
        return self.incarnation

    async def _serve(self, data: bytes, request_type: type[Message]) -> bytes:
        """Every RPC method (``TRANSACTION_COORDINATOR``'s table): msgpack bytes in and out."""
        return (await serve_encoded(data, request_type, self._driver().serve)).encode()

    async def describe(self) -> dict[str, Any]:
        """This coordinator's view, for tests, status and debugging."""
        driver = self._driver()
        transactions = {}
        for tid in self.core.transactional_ids():
            meta = self.core.transaction(tid)
            if meta is not None and meta.value is not None:
                v = meta.value
                transactions[tid] = {
                    "state": v.state.value,
                    "producer_id": v.producer_id,
                    "producer_epoch": v.producer_epoch,
                    "partitions": [f"{t}-{p}" for t, p in v.partitions],
                    "pending_markers": sorted(f"{t}-{p}" for t, p in self.core.pending_markers(tid)),
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
            "coordinator_epoch": self.core.coordinator_epoch,
            "config": dict(vars(self.core.config)),
            "transactions": transactions,
            "pending_persists": len(self.core.pending_persists()),
            "appends": driver.appends,
            "markers_sent": driver.markers_sent,
            "markers_failed": driver.markers_failed,
            "stats": dict(vars(self.core.stats)),
            "metrics": self.core.metrics_snapshot(),
        }

    async def pid(self) -> int:
        return os.getpid()
