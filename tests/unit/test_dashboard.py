"""The Grafana dashboard (``kcoord dashboard``): a well-formed Grafana JSON model whose
every query names a series kcoord actually exports, as Ray's Prometheus exporter names it
(``ray_`` prefix; counters get ``_total`` unless they end in it; histograms ``_bucket``)."""

from __future__ import annotations

import json

import pytest

import kcoord.actors.metrics as metrics
from kcoord.dashboard import dashboard, metric_names


class Recorder:
    made: list = []

    def __init__(self, name: str, description: str = "", tag_keys: tuple = (), boundaries=None) -> None:
        self.name, self.tag_keys = name, tuple(tag_keys)
        Recorder.made.append((type(self).__name__, self))

    def set(self, *a, **k) -> None: ...
    def inc(self, *a, **k) -> None: ...
    def observe(self, *a, **k) -> None: ...


class Gauge(Recorder): ...
class Counter(Recorder): ...
class Histogram(Recorder): ...


@pytest.fixture
def exported(monkeypatch) -> dict[str, tuple]:
    """{prometheus series name: tag keys} of every metric kcoord's exporters create."""
    Recorder.made = []
    import ray.util.metrics

    from kcoord.streaming.metrics import StreamMetricsExporter

    for cls in (Gauge, Counter, Histogram):
        monkeypatch.setattr(metrics, cls.__name__, cls)
        monkeypatch.setattr(ray.util.metrics, cls.__name__, cls)
    metrics.ControllerMetricsExporter("c")
    metrics.ReplicaMetricsExporter("c", "t", 0, 0)
    metrics.GroupMetricsExporter("c", 0)
    StreamMetricsExporter("c", "q", "g")
    out = {}
    for kind, m in Recorder.made:
        name = "ray_" + m.name
        if kind == "Counter" and not name.endswith("_total"):
            name += "_total"
        if kind == "Histogram":
            name += "_bucket"
        out[name] = m.tag_keys
    return out


def test_every_queried_series_is_exported(exported):
    used = metric_names(dashboard())
    assert used, "the dashboard queries nothing"
    assert used <= set(exported), f"not exported by kcoord: {sorted(used - set(exported))}"
    # every series it filters by cluster carries that tag
    assert all("cluster" in exported[m] for m in used)


def test_grafana_model_is_well_formed():
    d = json.loads(json.dumps(dashboard()))  # plain JSON
    assert d["uid"] and d["title"] == "kcoord" and isinstance(d["schemaVersion"], int)
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids)) >= 10
    cells = set()
    for p in d["panels"]:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0
        assert (g["x"], g["y"]) not in cells, "panels overlap"
        cells.add((g["x"], g["y"]))
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        refs = [t["refId"] for t in p["targets"]]
        assert refs and len(refs) == len(set(refs)) and all(t["expr"].count("(") == t["expr"].count(")") for t in p["targets"])
    names = [v["name"] for v in d["templating"]["list"]]
    assert names == ["datasource", "cluster"]
    titles = " ".join(p["title"] for p in d["panels"]).lower()
    for topic in ("throughput", "isr", "offline", "failover", "lag"):
        assert topic in titles, topic


def test_cli_writes_the_file(tmp_path):
    from click.testing import CliRunner

    from kcoord.cli import cli

    out = tmp_path / "d.json"
    res = CliRunner().invoke(cli, ["dashboard", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text()) == dashboard()
    res = CliRunner().invoke(cli, ["dashboard", "--install", "--session-dir", str(tmp_path / "nope")])
    assert res.exit_code != 0 and "does not exist" in res.output
    (tmp_path / "s" / "metrics" / "grafana" / "dashboards").mkdir(parents=True)
    res = CliRunner().invoke(cli, ["dashboard", "--install", "--session-dir", str(tmp_path / "s")])
    assert res.exit_code == 0 and (tmp_path / "s/metrics/grafana/dashboards/kcoord_grafana_dashboard.json").exists()
