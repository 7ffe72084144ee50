"""The structure of kcoord's client side, the Kafka listener, the call stack and the
deployment code: no import cycles, no module importing from a layer above its own, every
Ray actor shell in ``actors/``, and no module over 600 lines.

Every import counts: at module level, inside functions, and under ``TYPE_CHECKING``.
``python -m tests.unit.test_client_structure`` prints the counts for the whole package (the
cores' own cycles included) as JSON.

Layers, lowest first (docs/architecture.md, "Layers"): the cores and what they stand on;
the call stack and the Ray runtime under the actors (:mod:`kcoord.calls`, the clock,
transport and GCS store of ``actors/``); the Kafka listener's logic, codecs and address
book (:mod:`kcoord.kafka`); the clients; the readers and writers built on them (Spark, Ray
Data); the actor shells; deployment (``cluster/``); the command line and the benchmark
tooling. Two modules only re-export what moved up and are exempt: ``kcoord.kafka.actor``
(Ray restarts listeners deployed before the move by that path) and ``kcoord.kafka.deploy``.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROOTS = {"kcoord": REPO / "kcoord", "kcoord.actors": REPO / "actors", "kcoord.cluster": REPO / "cluster"}

# (layer, module prefixes), lowest first; a module's layer is its longest matching prefix.
LAYERS = [
    ("core", ["kcoord.protocol", "kcoord.records", "kcoord.record", "kcoord.log", "kcoord.security", "kcoord.runtime", "kcoord.replication", "kcoord.group", "kcoord.txn", "kcoord.extras", "kcoord.kafka.batches"]),
    ("calls", ["kcoord.calls", "kcoord.channel", "kcoord.actors.runtime", "kcoord.actors.gcs_store"]),
    ("kafka", ["kcoord.kafka"]),
    ("client", ["kcoord.client"]),
    ("readers", ["kcoord.spark", "kcoord.ray_data"]),
    ("shells", ["kcoord.actors"]),
    ("cluster", ["kcoord.cluster"]),
    ("tools", ["kcoord.cli", "kcoord.bench", "kcoord.dashboard", "kcoord"]),
]
# Re-exports of what moved up, kept for running clusters and old import paths.
COMPAT = {"kcoord.kafka.actor", "kcoord.kafka.deploy"}
# The part of the package these rules are enforced on (the cores' own structure is checked
# in test_architecture.py).
CHECKED = ["kcoord.calls", "kcoord.channel", "kcoord.actors.runtime", "kcoord.actors.kafka_listener", "kcoord.kafka", "kcoord.client", "kcoord.spark", "kcoord.ray_data", "kcoord.cluster", "kcoord.cli"]
UNCHECKED = {"kcoord.kafka.batches"}  # a re-export of the record package


def modules() -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, is a package)."""
    out = {}
    for package, folder in ROOTS.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts = parts[:-1]
            out[".".join([package, *parts])] = (path, is_package)
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the kcoord modules it imports (``from x import y`` counts y when it is a
    module, else x)."""
    mods = modules()

    def known(name: str) -> str | None:
        parts = name.split(".")
        while parts:
            if ".".join(parts) in mods:
                return ".".join(parts)
            parts.pop()
        return None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, (path, is_package) in mods.items():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                targets = [f"{module}.{a.name}" if known(f"{module}.{a.name}") == f"{module}.{a.name}" else module for a in node.names]
            for target in targets:
                found = known(target) if target.startswith("kcoord") else None
                if found and found != name:
                    graph[name].add(found)
    return graph


def layer(module: str) -> int:
    best, rank = -1, len(LAYERS) - 1
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, rank = len(p), i
    return rank


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def upward(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(importer, imported) pairs where the imported module is in a higher layer."""
    return sorted((m, t) for m, targets in graph.items() for t in targets if m not in COMPAT and layer(t) > layer(m))


def checked(module: str) -> bool:
    return module not in UNCHECKED and any(module == p or module.startswith(p + ".") for p in CHECKED)


def test_no_import_cycles_in_the_clients_listener_calls_and_deployment() -> None:
    found = [c for c in cycles(import_graph()) if any(checked(m) for m in c)]
    assert not found, f"import cycles: {found}"


def test_no_module_of_the_clients_listener_calls_and_deployment_imports_from_a_higher_layer() -> None:
    found = [(m, t) for m, t in upward(import_graph()) if checked(m)]
    assert not found, "imports from a higher layer: " + ", ".join(f"{m} -> {t} ({LAYERS[layer(t)][0]})" for m, t in found)


def test_the_kafka_listener_shell_is_an_actor_shell_and_its_old_path_still_resolves() -> None:
    """Listeners deployed before the shell moved are restarted by Ray from a pickle that
    names ``kcoord.kafka.actor.KafkaListener``: unpickling that name must give the class."""
    import pickle

    from kcoord.actors.kafka_listener import KafkaListener

    assert pickle.loads(b"ckcoord.kafka.actor\nKafkaListener\n.") is KafkaListener
    assert KafkaListener.__module__ == "kcoord.actors.kafka_listener"
    assert not (REPO / "kcoord" / "kafka" / "actor.py").read_text().count("class ")


MAX_LINES = 600


def test_no_module_of_the_clients_listener_calls_and_deployment_is_over_600_lines() -> None:
    mods = modules()
    long = {m: n for m, (path, _) in mods.items() if checked(m) and (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these by concept: {long}"


def main() -> None:
    graph = import_graph()
    all_cycles = cycles(graph)
    up = upward(graph)
    print(
        json.dumps(
            {
                "modules": len(graph),
                "cycles": len(all_cycles),
                "cycles_list": all_cycles,
                "upward_imports": len(up),
                "upward_list": [f"{m} -> {t}" for m, t in up],
                "largest": sorted(((len(p.read_text().splitlines()), m) for m, (p, _) in modules().items()), reverse=True)[:8],
                "checked_part": {
                    "cycles": sum(1 for c in all_cycles if any(checked(m) for m in c)),
                    "upward_imports": sum(1 for m, _ in up if checked(m)),
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
