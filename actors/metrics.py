"""Export kcoord metrics through ``ray.util.metrics`` (Ray dashboard / Prometheus).

The state machines keep plain counters; this module copies them into Ray metric objects
periodically, so the cores stay free of Ray.
"""

from __future__ import annotations

from typing import Any, Mapping

from ray.util.metrics import Counter, Gauge, Histogram

FAILOVER_BOUNDARIES_MS = [50, 100, 200, 500, 1000, 2000, 5000, 10000]


def _metrics(kind: type, prefix: str, tags: tuple[str, ...], described: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    """``{name: kind(prefix + name, description)}`` for each ``(name, description)``."""
    return {name: kind(f"{prefix}{name}", description, tag_keys=tags) for name, description in described}


def _add_deltas(counters: dict[str, Any], totals: Mapping[str, float], exported: dict[str, float], tags: dict[str, str]) -> None:
    """Add to each Ray counter what its running total in ``totals`` grew by since the last
    export (``exported`` holds the totals as last exported)."""
    for name, counter in counters.items():
        value = float(totals.get(name, 0))
        delta = value - exported.get(name, 0.0)
        if delta > 0:
            counter.inc(delta, tags=tags)
        exported[name] = value


class ControllerMetricsExporter:
    def __init__(self, cluster: str) -> None:
        tags = ("cluster",)
        self._tags = {"cluster": cluster}
        self._gauges = _metrics(
            Gauge,
            "kcoord_",
            tags,
            (
                ("partitions", "Partitions in the cluster"),
                ("under_replicated_partitions", "Partitions whose ISR is smaller than their replica set"),
                ("offline_partitions", "Partitions without a leader"),
                ("offline_log_replicas", "Replicas whose log an I/O error took offline (until restarted)"),
                ("replaced_directory_replicas", "Replicas back with a wiped disk, not yet in sync (they do not lead)"),
                ("controller_epoch", "Current controller epoch"),
            ),
        )
        self._counters = _metrics(
            Counter,
            "kcoord_",
            tags,
            (
                ("failovers_total", "Leader failovers that elected a new leader"),
                ("failovers_failed", "Leader failures that left a partition offline"),
                ("unclean_elections", "Unclean leader elections"),
                ("preferred_leader_elections", "Leadership moves back to the preferred replica"),
                ("isr_shrinks", "ISR shrinks applied by the controller"),
                ("isr_expands", "ISR expansions applied by the controller"),
                ("replicas_recreated", "Replica actors recreated after dying"),
                ("replicas_replaced_stuck", "Replica actors replaced after a Ray restart that hung"),
                ("directories_replaced", "Replicas seen back with another log directory (a wiped disk)"),
            ),
        )
        self._failover = Histogram(
            "kcoord_failover_duration_ms",
            "Failure detection to new leader accepting writes (ms)",
            boundaries=FAILOVER_BOUNDARIES_MS,
            tag_keys=tags,
        )
        self._exported: dict[str, float] = {}
        self._observed = 0

    def export(self, core: Any) -> None:
        snap = core.metrics_snapshot()
        for name, gauge in self._gauges.items():
            gauge.set(float(snap.get(name, 0)), tags=self._tags)
        _add_deltas(self._counters, snap, self._exported, self._tags)
        durations = list(core.metrics.failover_ms)
        total = core.metrics.failovers_total
        new = min(len(durations), max(0, total - self._observed))
        for d in durations[len(durations) - new :] if new else []:
            self._failover.observe(float(d), tags=self._tags)
        self._observed = total


class ReplicaMetricsExporter:
    """Per-partition replica metrics, tagged ``cluster``/``topic``/``partition``/``broker``.

    Gauges hold the replica's current log state (LEO, HW, ISR size, role); counters copy the
    deltas of :attr:`Replica.metrics` (bytes and requests served, ISR changes, truncations).
    The replica actor calls :meth:`export` from its timer loop at most every
    ``interval_s``, so the produce path never touches a metric object. Ray ships metrics
    every 10 s (``metrics_report_interval_ms``); copying them much more often only costs
    an idle replica wake-ups."""

    def __init__(self, cluster: str, topic: str, partition: int, broker: int, interval_s: float = 5.0) -> None:
        tags = ("cluster", "topic", "partition", "broker")
        self._tags = {"cluster": cluster, "topic": topic, "partition": str(partition), "broker": str(broker)}
        self.interval_s = interval_s
        self._last = float("-inf")
        self._gauges = _metrics(
            Gauge,
            "kcoord_replica_",
            tags,
            (
                ("log_end_offset", "Log end offset (LEO) of the replica"),
                ("high_watermark", "High watermark the replica knows"),
                ("log_start_offset", "First offset still in the replica's log"),
                ("isr_size", "Size of the ISR as this replica sees it (meaningful on the leader)"),
                ("is_leader", "1 while this replica leads its partition"),
                ("leader_epoch", "Leader epoch the replica is at"),
                ("size_bytes", "Bytes of log on disk"),
                ("follower_lag", "Leader's log end minus this follower's (0 on the leader)"),
                ("last_stable_offset", "Last stable offset: read_committed readers read below it"),
                ("lso_lag", "High watermark minus the last stable offset: what open transactions hold back from read_committed readers"),
                ("ongoing_transactions", "Producers with a transaction open in this partition"),
            ),
        )
        self._counters = _metrics(
            Counter,
            "kcoord_replica_",
            tags,
            (
                ("produce_requests", "Produce requests handled"),
                ("produce_bytes", "Record bytes appended by produce requests"),
                ("fetch_requests", "Fetch requests served (consumers and followers)"),
                ("fetch_bytes", "Record bytes returned by fetches"),
                ("isr_shrinks", "ISR shrinks proposed by this replica as leader"),
                ("isr_expands", "ISR expansions proposed by this replica as leader"),
                ("truncations", "Log truncations while reconciling with a leader"),
                ("truncated_records", "Records removed by those truncations"),
            ),
        )
        self._exported: dict[str, float] = {}
        self._gauge_values: dict[str, float] = {}

    def due(self, now_s: float) -> bool:
        return now_s - self._last >= self.interval_s

    def export(self, replica: Any, now_s: float) -> None:
        """Copy ``replica``'s (a :class:`kcoord.replication.replica.Replica`) state."""
        self._last = now_s
        log = replica.log
        fs = replica.follower_state
        lso = log.last_stable_offset(replica.hw)
        values = {
            "log_end_offset": log.log_end_offset,
            "high_watermark": replica.hw,
            "log_start_offset": log.log_start_offset,
            "isr_size": len(replica.isr),
            "is_leader": 1 if replica.role == "leader" else 0,
            "leader_epoch": replica.leader_epoch,
            "size_bytes": log.size_bytes,
            "follower_lag": max(0, fs.leader_log_end_offset - log.log_end_offset) if fs is not None and fs.leader_log_end_offset >= 0 else 0,
            "last_stable_offset": lso,
            "lso_lag": max(0, replica.hw - lso),
            "ongoing_transactions": len(log.producer_state.ongoing_transactions()),
        }
        for name, gauge in self._gauges.items():
            value = float(values[name])
            if self._gauge_values.get(name) != value:  # an idle replica sets nothing
                gauge.set(value, tags=self._tags)
                self._gauge_values[name] = value
        _add_deltas(self._counters, replica.metrics, self._exported, self._tags)


class GroupMetricsExporter:
    """Per-group gauges and counters through ``ray.util.metrics``. Lag is the partition's
    high watermark (``kcoord_replica_high_watermark`` of its leader) minus the group's
    ``kcoord_group_committed_offset``: the coordinator exports the second, the replicas the
    first, and the dashboard subtracts (the coordinator does not track log ends)."""

    def __init__(self, cluster: str, index: int) -> None:
        tags = ("cluster", "coordinator", "group")
        self._base = {"cluster": cluster, "coordinator": str(index)}
        self._members = Gauge("kcoord_group_members", "Members of a consumer group", tag_keys=tags)
        self._generation = Gauge("kcoord_group_generation", "Current generation of a consumer group", tag_keys=tags)
        self._rebalances = Counter("kcoord_group_rebalances_total", "Completed generations (rebalances) of a group", tag_keys=tags)
        self._commits = Counter("kcoord_group_offset_commits_total", "Partition offsets committed by a group", tag_keys=tags)
        self._loaded = Gauge(
            "kcoord_group_coordinator_loaded", "1 once the coordinator replayed its partition", tag_keys=("cluster", "coordinator")
        )
        self._committed = Gauge(
            "kcoord_group_committed_offset",
            "Offset a consumer group committed for a partition (lag: the partition's HW minus this)",
            tag_keys=("cluster", "coordinator", "group", "topic", "partition"),
        )
        self._generations: dict[str, int] = {}
        self._committed_values: dict[tuple[str, str, int], int] = {}

    def _tags(self, group_id: str) -> dict[str, str]:
        return {**self._base, "group": group_id}

    def committed(self, group_id: str, partitions: int) -> None:
        if partitions:
            self._commits.inc(partitions, tags=self._tags(group_id))

    def export(self, core: Any, loaded: bool) -> None:
        self._loaded.set(1.0 if loaded else 0.0, tags=self._base)
        for group_id in core.group_ids():
            group = core.group(group_id)
            if group is None:
                continue
            tags = self._tags(group_id)
            self._members.set(float(len(group.members)), tags=tags)
            self._generation.set(float(group.generation_id), tags=tags)
            before = self._generations.get(group_id)
            if before is not None and group.generation_id > before:
                self._rebalances.inc(group.generation_id - before, tags=tags)
            self._generations[group_id] = group.generation_id
            for (topic, partition), committed in core.committed_offsets(group_id).items():
                key = (group_id, topic, partition)
                if self._committed_values.get(key) != committed.offset:  # idle groups set nothing
                    self._committed.set(float(committed.offset), tags={**tags, "topic": topic, "partition": str(partition)})
                    self._committed_values[key] = committed.offset


class TxnMetricsExporter:
    """One transaction coordinator's gauges and counters, tagged ``cluster``/``coordinator``:
    transactions open now (Ongoing or deciding: what an operator watches for hanging ones,
    with each partition's ``kcoord_replica_lso_lag``), and the running totals of committed,
    aborted, timed-out and fenced transactions (the core's counters,
    :meth:`~kcoord.txn.TransactionCoordinatorState.metrics_snapshot`)."""

    def __init__(self, cluster: str, index: int) -> None:
        tags = ("cluster", "coordinator")
        self._tags = {"cluster": cluster, "coordinator": str(index)}
        self._gauges = _metrics(
            Gauge,
            "kcoord_txn_",
            tags,
            (
                ("open_transactions", "Transactions of this coordinator that are Ongoing, PrepareCommit or PrepareAbort"),
                ("transactional_ids", "Transactional ids this coordinator holds"),
                ("coordinator_loaded", "1 once the coordinator replayed its partition"),
            ),
        )
        self._counters = _metrics(
            Counter,
            "kcoord_txn_",
            tags,
            (
                ("transactions_committed", "Transactions committed (COMMIT markers written everywhere)"),
                ("transactions_aborted", "Transactions aborted (ABORT markers written everywhere)"),
                ("timed_out_transactions", "Transactions the coordinator aborted because they outlived their timeout"),
                ("fenced_transactions", "Transactions aborted because a newer instance of their id initialised"),
            ),
        )
        self._exported: dict[str, float] = {}

    def export(self, core: Any, loaded: bool) -> None:
        snap = core.metrics_snapshot()
        for name, gauge in self._gauges.items():
            value = (1.0 if loaded else 0.0) if name == "coordinator_loaded" else float(snap.get(name, 0))
            gauge.set(value, tags=self._tags)
        _add_deltas(self._counters, snap, self._exported, self._tags)
