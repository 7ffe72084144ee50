"""The combined ``results.json``: one document with every benchmark's outcome, the machine
it ran on and when, so a report (tables, plots, targets) can be rebuilt from it alone.

Layout::

    {"schema": 1,
     "suite": {"quick", "started_at", "finished_at", "seconds", "argv"},
     "machine": {... kcoord.bench.machine.MachineInfo ...},
     "benchmarks": {name: {"status": "ok" | "failed", "seconds", "started_at",
                           "returncode", "error", "commit", "json_file", "result": {...}}},
     "failures": [names], "plots": {name: file}}

A later run of some benchmarks (``kcoord bench --only``) is merged into an existing
document: its entries replace the older ones, the others stay with their own commit and
start time, so the document says where each figure came from.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

SCHEMA = 1
OK = "ok"
FAILED = "failed"


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass
class BenchmarkRun:
    """One benchmark script's outcome: its JSON result, or why there is none."""

    name: str
    status: str
    started_at: str
    seconds: float
    returncode: int | None = None
    error: str | None = None
    commit: str | None = None
    json_file: str | None = None
    result: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.status == OK

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("name")
        return out


@dataclass
class SuiteRun:
    """The whole invocation of the suite."""

    quick: bool
    started_at: str
    finished_at: str
    seconds: float
    argv: list[str] = field(default_factory=list)


def build(suite: SuiteRun, machine: dict[str, Any], runs: list[BenchmarkRun]) -> dict[str, Any]:
    """The combined document for one run of the suite."""
    doc = {
        "schema": SCHEMA,
        "suite": asdict(suite),
        "machine": machine,
        "benchmarks": {r.name: r.to_dict() for r in runs},
    }
    doc["failures"] = failures(doc)
    return doc


def merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """``update``'s benchmarks replace ``base``'s of the same name; suite and machine come
    from ``update`` (the newer run). Neither input is modified."""
    if base.get("schema") != update.get("schema"):
        raise ValueError(f"cannot merge results of schema {base.get('schema')} and {update.get('schema')}")
    out = dict(update)
    benchmarks = dict(base.get("benchmarks", {}))
    benchmarks.update(update.get("benchmarks", {}))
    out["benchmarks"] = dict(sorted(benchmarks.items()))
    plots = dict(base.get("plots", {}))
    plots.update(update.get("plots", {}))
    if plots:
        out["plots"] = plots
    out["failures"] = failures(out)
    return out


def failures(doc: dict[str, Any]) -> list[str]:
    return sorted(name for name, entry in doc.get("benchmarks", {}).items() if entry.get("status") != OK)


def result(doc: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The JSON a benchmark printed, or None if it did not run or failed."""
    entry = doc.get("benchmarks", {}).get(name)
    if not entry or entry.get("status") != OK:
        return None
    return entry.get("result")


def load(path: str | Path) -> dict[str, Any]:
    doc = json.loads(Path(path).read_text())
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ValueError(f"{path} is not a kcoord bench results.json (schema {SCHEMA})")
    return doc


def save(doc: dict[str, Any], path: str | Path) -> None:
    tmp = Path(path).with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    tmp.replace(path)
