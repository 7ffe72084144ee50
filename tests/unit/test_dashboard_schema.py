"""The Grafana dashboard (``kcoord dashboard``) against Grafana's own published schema.

No Grafana binary is packaged for Debian or PyPI, so the dashboard is checked against the
schema Grafana publishes on npm instead: ``@grafana/schema`` ships the dashboard JSON model
(``raw/dashboard/x``: Dashboard, Panel, VariableModel...) and each panel plugin's options
(``raw/composable/timeseries/panelcfg/x``) as TypeScript types generated from Grafana's CUE
kinds. ``ts-json-schema-generator`` turns those types into JSON Schema (an interface is a
closed object: unknown keys are errors, as are missing required ones and strings outside an
enum), and ``jsonschema`` checks the dashboard against it. The PromQL of every query is
parsed with Prometheus's own grammar for its web UI (``@prometheus-io/lezer-promql``).

npm installs both into a cache outside the repository (``$KCOORD_NPM_CACHE``, default
``~/.cache/kcoord/npm``) once; the generated schemas are cached next to them. Without npm,
or when the registry cannot be reached, the tests are skipped and say why. What the schema
does not cover: the keys of a panel's ``targets`` (free-form objects in the schema; the
PromQL in them is parsed here, ``test_dashboard.py`` checks their series names) and how the
panels look (no Grafana to render them).
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from kcoord.dashboard import dashboard

jsonschema = pytest.importorskip("jsonschema")

GRAFANA_SCHEMA = "@grafana/schema@13.2.3"
GENERATOR = "ts-json-schema-generator@2.4.0"
PROMQL = "@prometheus-io/lezer-promql@0.313.3"
PACKAGES = (GRAFANA_SCHEMA, GENERATOR, PROMQL)
RAW = "node_modules/@grafana/schema/dist/types/raw"
# (schema file, TypeScript declaration file under RAW, type name)
SCHEMAS = [
    ("dashboard.json", "dashboard/x/types.gen.d.ts", "Dashboard"),
    ("timeseries-options.json", "composable/timeseries/panelcfg/x/types.gen.d.ts", "Options"),
    ("timeseries-fieldconfig.json", "composable/timeseries/panelcfg/x/types.gen.d.ts", "FieldConfig"),
]


def _cache_dir() -> Path:
    base = Path(os.environ.get("KCOORD_NPM_CACHE", Path.home() / ".cache" / "kcoord" / "npm"))
    return base / "+".join(p.replace("/", "_") for p in PACKAGES)


def _npm_root() -> Path:
    """The cache with PACKAGES installed; skips the test without npm or registry."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed: cannot fetch @grafana/schema to validate the dashboard against")
    root = _cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    marker = root / "installed"
    if not marker.exists():
        _run([npm, "install", "--no-audit", "--no-fund", "--prefix", str(root), *PACKAGES], root, f"npm install {' '.join(PACKAGES)}")
        marker.touch()
    return root


def _run(cmd: list[str], cwd: Path, what: str) -> None:
    try:
        res = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        pytest.skip(f"{what} took more than 600 s (registry unreachable?)")
    if res.returncode != 0:
        pytest.skip(f"{what} failed (offline?): {(res.stderr or res.stdout).strip()[-400:]}")


@pytest.fixture(scope="module")
def grafana_schemas() -> dict[str, dict]:
    """{type name: JSON Schema} generated from @grafana/schema (cached)."""
    root = _npm_root()
    generator = root / "node_modules" / ".bin" / "ts-json-schema-generator"
    out = {}
    for filename, source, type_name in SCHEMAS:
        path = root / filename
        if not path.exists():
            tmp = path.with_suffix(".tmp")
            _run([str(generator), "--path", str(root / RAW / source), "--type", type_name, "--no-type-check", "-o", str(tmp)], root,
                 f"generating the JSON Schema of {type_name}")
            tmp.replace(path)
        out[filename] = json.loads(path.read_text())
    return out


def _errors(schema: dict, instance, definition: str | None = None) -> list[str]:
    """Every violation as 'path: message'; ``definition`` checks against one of the schema's
    definitions (a panel against Panel, not the Panel | RowPanel union, for clear messages)."""
    if definition is not None:
        schema = {"$ref": f"#/definitions/{definition}", "definitions": schema["definitions"]}
    validator = jsonschema.Draft7Validator(schema)
    return [f"{'/'.join(map(str, e.absolute_path)) or '.'}: {e.message}" for e in validator.iter_errors(instance)]


def test_dashboard_matches_grafanas_dashboard_schema(grafana_schemas):
    model = json.loads(json.dumps(dashboard()))
    schema = grafana_schemas["dashboard.json"]
    assert _errors(schema, model) == []
    for panel in model["panels"]:
        assert _errors(schema, panel, "Panel") == [], panel["title"]


def test_panel_options_match_the_timeseries_plugin_schema(grafana_schemas):
    model = json.loads(json.dumps(dashboard()))
    for panel in model["panels"]:
        assert panel["type"] == "timeseries", "only the timeseries plugin's schema is checked here"
        assert _errors(grafana_schemas["timeseries-options.json"], panel["options"]) == [], panel["title"]
        custom = panel["fieldConfig"]["defaults"].get("custom", {})
        assert _errors(grafana_schemas["timeseries-fieldconfig.json"], custom) == [], panel["title"]


def test_the_schema_catches_what_grafana_would_reject(grafana_schemas):
    """The check is not vacuous: the mistakes it is there for are reported, by path."""
    bad = copy.deepcopy(dashboard())
    bad["schemaVersion"] = "39"  # a string
    bad["panels"][0]["gridPos"].pop("w")  # required
    bad["panels"][1]["legend"] = {}  # not a panel key
    bad["templating"]["list"][1]["refresh"] = 7  # not a VariableRefresh
    errors = _errors(grafana_schemas["dashboard.json"], bad)
    assert any(e.startswith("schemaVersion:") for e in errors), errors
    panel_errors = _errors(grafana_schemas["dashboard.json"], bad["panels"][0], "Panel") + _errors(
        grafana_schemas["dashboard.json"], bad["panels"][1], "Panel"
    )
    assert any("gridPos" in e and "'w' is a required property" in e for e in panel_errors), panel_errors
    assert any("'legend' was unexpected" in e for e in panel_errors), panel_errors
    assert any(e.startswith("templating/list/1/refresh:") for e in errors), errors
    options = copy.deepcopy(bad["panels"][0]["options"])
    options["legend"]["placement"] = "top"  # only bottom or right
    assert any("legend/placement" in e for e in _errors(grafana_schemas["timeseries-options.json"], options))


# Reads a JSON list of PromQL expressions; prints [index, offset, context] per syntax error.
_PROMQL_CHECK = """
const { parser } = require('@prometheus-io/lezer-promql');
const exprs = JSON.parse(require('fs').readFileSync(0, 'utf8'));
const out = [];
exprs.forEach((e, i) => parser.parse(e).iterate({ enter: (n) => {
  if (n.type.isError) out.push([i, n.from, e.slice(Math.max(0, n.from - 30), n.from + 30)]);
} }));
console.log(JSON.stringify(out));
"""


def promql_errors(exprs: list[str]) -> list[list]:
    root = _npm_root()
    script = root / "promql_check.cjs"
    script.write_text(_PROMQL_CHECK)
    res = subprocess.run([shutil.which("node") or "node", str(script)], cwd=root, input=json.dumps(exprs),
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_every_query_is_valid_promql():
    exprs = [t["expr"] for p in dashboard()["panels"] for t in p["targets"]]
    assert promql_errors(exprs) == []
    # and the parser does reject broken PromQL (an open parenthesis, a dangling operator)
    bad = promql_errors(["sum(rate(x[1m])", "max by (a) (y) - on (a) group_right z", 'up{cluster=~"$cluster"} and'])
    assert sorted({i for i, _, _ in bad}) == [0, 2], bad
