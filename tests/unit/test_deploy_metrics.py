"""ReplicaMetricsExporter copies a replica's state into ray.util.metrics objects: gauges
get the current values, counters only the increase since the last export."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import kcoord.actors.metrics as metrics


class Recorder:
    """Stands in for ray.util.metrics.Gauge/Counter and remembers what was recorded."""

    def __init__(self, name: str, description: str = "", tag_keys: tuple = ()) -> None:
        self.name = name
        self.tag_keys = tag_keys
        self.values: list[tuple[float, dict]] = []

    def set(self, value: float, tags: dict) -> None:
        self.values.append((value, tags))

    def inc(self, value: float, tags: dict) -> None:
        self.values.append((value, tags))


@pytest.fixture
def exporter(monkeypatch):
    monkeypatch.setattr(metrics, "Gauge", Recorder)
    monkeypatch.setattr(metrics, "Counter", Recorder)
    return metrics.ReplicaMetricsExporter("c1", "events", 3, 1, interval_s=2.0)


def fake_replica(leo: int, hw: int, produce_bytes: int, role: str = "leader", open_txn_at: int | None = None):
    ongoing = {} if open_txn_at is None else {7: open_txn_at}
    log = SimpleNamespace(
        log_end_offset=leo,
        log_start_offset=0,
        size_bytes=leo * 100,
        last_stable_offset=lambda hw: min([hw, *ongoing.values()]),
        producer_state=SimpleNamespace(ongoing_transactions=lambda: dict(ongoing)),
    )
    return SimpleNamespace(
        log=log,
        hw=hw,
        isr=[1, 2, 0],
        role=role,
        leader_epoch=4,
        follower_state=None,
        metrics={"produce_requests": 2, "produce_bytes": produce_bytes, "fetch_requests": 0, "fetch_bytes": 0},
    )


def test_gauges_carry_partition_tags_and_current_values(exporter):
    exporter.export(fake_replica(leo=10, hw=8, produce_bytes=1000), now_s=0.0)
    g = exporter._gauges
    assert g["log_end_offset"].name == "kcoord_replica_log_end_offset"
    assert g["log_end_offset"].values[-1] == (10.0, {"cluster": "c1", "topic": "events", "partition": "3", "broker": "1"})
    assert g["high_watermark"].values[-1][0] == 8.0
    assert g["isr_size"].values[-1][0] == 3.0 and g["is_leader"].values[-1][0] == 1.0
    assert set(g["log_end_offset"].tag_keys) == {"cluster", "topic", "partition", "broker"}


def test_the_lso_lag_is_what_open_transactions_hold_back(exporter):
    exporter.export(fake_replica(leo=12, hw=10, produce_bytes=0, open_txn_at=4), now_s=0.0)
    g = exporter._gauges
    assert [g[k].values[-1][0] for k in ("last_stable_offset", "lso_lag", "ongoing_transactions")] == [4.0, 6.0, 1.0]
    assert g["lso_lag"].name == "kcoord_replica_lso_lag"
    exporter.export(fake_replica(leo=12, hw=12, produce_bytes=0), now_s=5.0)
    assert [g[k].values[-1][0] for k in ("last_stable_offset", "lso_lag", "ongoing_transactions")] == [12.0, 0.0, 0.0]


def test_counters_export_deltas_and_export_is_rate_limited(exporter):
    exporter.export(fake_replica(leo=10, hw=10, produce_bytes=1000), now_s=0.0)
    assert not exporter.due(1.0) and exporter.due(2.0)
    exporter.export(fake_replica(leo=15, hw=15, produce_bytes=1500), now_s=2.0)
    assert [v for v, _ in exporter._counters["produce_bytes"].values] == [1000.0, 500.0]
    # an unchanged counter records nothing
    assert [v for v, _ in exporter._counters["produce_requests"].values] == [2.0]


def test_group_exporter_publishes_committed_offsets_for_lag(monkeypatch):
    """Lag on the dashboard is the leader's HW minus the group's committed offset: the
    coordinator publishes the committed offset per group and partition, only on change."""
    monkeypatch.setattr(metrics, "Gauge", Recorder)
    monkeypatch.setattr(metrics, "Counter", Recorder)
    ex = metrics.GroupMetricsExporter("c1", 0)
    offsets = {("events", 0): SimpleNamespace(offset=40), ("events", 1): SimpleNamespace(offset=7)}
    core = SimpleNamespace(
        group_ids=lambda: ["g"],
        group=lambda gid: SimpleNamespace(members={"m": 1}, generation_id=3),
        committed_offsets=lambda gid: offsets,
    )
    ex.export(core, loaded=True)
    got = {(t["topic"], t["partition"]): v for v, t in ex._committed.values}
    assert ex._committed.name == "kcoord_group_committed_offset" and got == {("events", "0"): 40.0, ("events", "1"): 7.0}
    assert ex._committed.values[0][1] == {"cluster": "c1", "coordinator": "0", "group": "g", "topic": "events", "partition": "0"}
    ex.export(core, loaded=True)
    assert len(ex._committed.values) == 2, "unchanged offsets are not set again"
    offsets[("events", 1)] = SimpleNamespace(offset=9)
    ex.export(core, loaded=True)
    assert ex._committed.values[-1][0] == 9.0 and len(ex._committed.values) == 3


def test_txn_exporter_counts_open_transactions_and_exports_outcome_deltas(monkeypatch):
    """A real coordinator core: open transactions are Ongoing/Prepare*, counters go out as deltas."""
    from kcoord.txn import TransactionCoordinatorState

    monkeypatch.setattr(metrics, "Gauge", Recorder)
    monkeypatch.setattr(metrics, "Counter", Recorder)
    ex = metrics.TxnMetricsExporter("c1", 2)
    core = TransactionCoordinatorState()
    ex.export(core, loaded=True)
    assert ex._gauges["open_transactions"].values[-1] == (0.0, {"cluster": "c1", "coordinator": "2"})
    assert ex._gauges["open_transactions"].name == "kcoord_txn_open_transactions"
    snap = dict(core.metrics_snapshot(), open_transactions=3, transactions_committed=5, transactions_aborted=1)
    ex.export(SimpleNamespace(metrics_snapshot=lambda: snap), loaded=True)
    snap = dict(snap, transactions_committed=7)
    ex.export(SimpleNamespace(metrics_snapshot=lambda: snap), loaded=True)
    assert ex._gauges["open_transactions"].values[-1][0] == 3.0
    assert [v for v, _ in ex._counters["transactions_committed"].values] == [5.0, 2.0]
    assert [v for v, _ in ex._counters["transactions_aborted"].values] == [1.0]
