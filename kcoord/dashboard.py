"""A Grafana dashboard for kcoord over Ray's Prometheus metrics (``kcoord dashboard``).

kcoord's actors record their metrics with ``ray.util.metrics`` (:mod:`kcoord.actors.metrics`);
Ray's metrics agent exports them to Prometheus with a ``ray_`` prefix (counters also get a
``_total`` suffix), next to Ray's own. This dashboard sits beside the ones Ray ships
(``<session>/metrics/grafana/dashboards``) and uses the same ``datasource`` variable:
throughput, request rates, the HW and log ends, ISR and offline partitions, failovers and
their duration, consumer-group lag (a partition's HW minus the group's committed offset), and
streaming queries' lag, input rate and batch duration.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

UID = "kcoord-overview"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}

# The HW of each partition as its leader reports it.
_LEADER_HW = (
    'max by (topic, partition) (ray_kcoord_replica_high_watermark{cluster=~"$cluster"} '
    'and on (topic, partition, broker) ray_kcoord_replica_is_leader{cluster=~"$cluster"} == 1)'
)

# (title, unit, [(PromQL, legend)]): each row of the dashboard, two panels a row.
PANELS: list[tuple[str, str, list[tuple[str, str]]]] = [
    (
        "Produce throughput (bytes/s, leaders)",
        "Bps",
        [('sum by (topic) (rate(ray_kcoord_replica_produce_bytes_total{cluster=~"$cluster"}[1m]))', "{{topic}}")],
    ),
    (
        "Fetch throughput (bytes/s, consumers and followers)",
        "Bps",
        [('sum by (topic) (rate(ray_kcoord_replica_fetch_bytes_total{cluster=~"$cluster"}[1m]))', "{{topic}}")],
    ),
    (
        "Produce and fetch requests/s",
        "reqps",
        [
            ('sum(rate(ray_kcoord_replica_produce_requests_total{cluster=~"$cluster"}[1m]))', "produce"),
            ('sum(rate(ray_kcoord_replica_fetch_requests_total{cluster=~"$cluster"}[1m]))', "fetch"),
        ],
    ),
    (
        "Under-replicated and offline partitions",
        "short",
        [
            ('max by (cluster) (ray_kcoord_under_replicated_partitions{cluster=~"$cluster"})', "under-replicated {{cluster}}"),
            ('max by (cluster) (ray_kcoord_offline_partitions{cluster=~"$cluster"})', "offline {{cluster}}"),
        ],
    ),
    (
        "Failovers and ISR changes (per minute)",
        "short",
        [
            ('sum(increase(ray_kcoord_failovers_total{cluster=~"$cluster"}[1m]))', "failovers"),
            ('sum(increase(ray_kcoord_failovers_failed_total{cluster=~"$cluster"}[1m]))', "failovers left offline"),
            ('sum(increase(ray_kcoord_isr_shrinks_total{cluster=~"$cluster"}[1m]))', "ISR shrinks"),
            ('sum(increase(ray_kcoord_isr_expands_total{cluster=~"$cluster"}[1m]))', "ISR expands"),
        ],
    ),
    (
        "Failover duration p50 / p99 (failure detected -> new leader writable)",
        "ms",
        [
            ('histogram_quantile(0.5, sum by (le) (rate(ray_kcoord_failover_duration_ms_bucket{cluster=~"$cluster"}[5m])))', "p50"),
            ('histogram_quantile(0.99, sum by (le) (rate(ray_kcoord_failover_duration_ms_bucket{cluster=~"$cluster"}[5m])))', "p99"),
        ],
    ),
    (
        "High watermark per partition (leaders)",
        "short",
        [(_LEADER_HW, "{{topic}}-{{partition}}")],
    ),
    (
        "Follower lag (records behind the leader)",
        "short",
        [('max by (topic, partition, broker) (ray_kcoord_replica_follower_lag{cluster=~"$cluster"})', "{{topic}}-{{partition}} broker {{broker}}")],
    ),
    (
        "Consumer group lag (HW - committed offset)",
        "short",
        [
            (
                "sum by (group, topic) ("
                + _LEADER_HW
                + ' - on (topic, partition) group_right max by (group, topic, partition) (ray_kcoord_group_committed_offset{cluster=~"$cluster"}))',
                "{{group}} / {{topic}}",
            )
        ],
    ),
    (
        "Consumer groups: members and rebalances (per minute)",
        "short",
        [
            ('max by (group) (ray_kcoord_group_members{cluster=~"$cluster"})', "members {{group}}"),
            ('sum by (group) (increase(ray_kcoord_group_rebalances_total{cluster=~"$cluster"}[1m]))', "rebalances {{group}}"),
        ],
    ),
    (
        "Log size on disk (bytes, all replicas)",
        "bytes",
        [('sum by (topic) (ray_kcoord_replica_size_bytes{cluster=~"$cluster"})', "{{topic}}")],
    ),
    (
        "Offset commits/s",
        "ops",
        [('sum by (group) (rate(ray_kcoord_group_offset_commits_total{cluster=~"$cluster"}[1m]))', "{{group}}")],
    ),
    (
        "Streaming queries: lag (records behind the log end after each batch)",
        "short",
        [('sum by (query, topic) (ray_kcoord_stream_lag{cluster=~"$cluster"})', "{{query}} / {{topic}}")],
    ),
    (
        "Streaming queries: input rows/s and batch duration",
        "short",
        [
            ('sum by (query) (rate(ray_kcoord_stream_input_rows_total{cluster=~"$cluster"}[1m]))', "rows/s {{query}}"),
            ('max by (query) (ray_kcoord_stream_batch_duration_ms{cluster=~"$cluster"})', "batch ms {{query}}"),
        ],
    ),
]


def dashboard() -> dict[str, Any]:
    """The dashboard as Grafana's JSON model (schema version 39: Grafana 10/11; newer
    Grafanas migrate it on load). Valid against ``@grafana/schema`` 13.2.3
    (tests/unit/test_dashboard_schema.py)."""
    panels = []
    for i, (title, unit, queries) in enumerate(PANELS):
        panels.append(
            {
                "id": i + 1,
                "type": "timeseries",
                "title": title,
                "datasource": DATASOURCE,
                "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
                "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                # legend.calcs/showLegend and tooltip.sort are required by the timeseries
                # plugin's schema (tests/unit/test_dashboard_schema.py)
                "options": {
                    "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True, "calcs": []},
                    "tooltip": {"mode": "multi", "sort": "none"},
                },
                "targets": [
                    {"datasource": DATASOURCE, "expr": expr, "legendFormat": legend, "refId": chr(ord("A") + j)}
                    for j, (expr, legend) in enumerate(queries)
                ],
            }
        )
    return {
        "uid": UID,
        "title": "kcoord",
        "tags": ["kcoord", "ray"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "10s",
        "time": {"from": "now-30m", "to": "now"},
        "templating": {
            "list": [
                # no "current": Grafana picks the default Prometheus data source (an empty
                # one is invalid: a VariableOption needs text and value)
                {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Data source"},
                {
                    "name": "cluster",
                    "type": "query",
                    "datasource": DATASOURCE,
                    "query": "label_values(ray_kcoord_partitions, cluster)",
                    "refresh": 2,
                    "includeAll": True,
                    "multi": True,
                    "current": {"text": "All", "value": "$__all"},
                    "label": "kcoord cluster",
                },
            ]
        },
        "annotations": {"list": []},
        "panels": panels,
    }


def metric_names(model: dict[str, Any]) -> set[str]:
    """Every ``ray_kcoord_*`` series the dashboard queries."""
    exprs = [t["expr"] for p in model["panels"] for t in p["targets"]]
    exprs += [v["query"] for v in model["templating"]["list"] if v["type"] == "query"]
    return {m for e in exprs for m in re.findall(r"\bray_kcoord_[a-z_]+", e)}


def ray_grafana_dir(session_dir: str | Path = "/tmp/ray/session_latest") -> Path:
    """Where Ray provisions its Grafana dashboards for a session (Ray writes its own there
    when its dashboard starts; Grafana started with Ray's provisioning loads every file)."""
    return Path(session_dir) / "metrics" / "grafana" / "dashboards"


def write(path: str | Path) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(dashboard(), indent=2) + "\n")
    return out
