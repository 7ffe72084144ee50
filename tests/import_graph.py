"""kcoord's import graph, read from the source: import cycles and imports that go up the layers.

Every import counts: at module level, inside functions (imported on first use) and under
``TYPE_CHECKING``, since each is a dependency of one module on another whichever way it is
written. ``from a import b`` is an edge to ``a.b`` when that is a module, else to ``a``.

    .venv/bin/python -m tests.import_graph            # counts, and each cycle and violation

The layers (docs/architecture.md, "Layers"), lowest first: a module may import its own layer
and those below it. The one copy of this graph: tests/unit/test_import_graph.py holds the
whole package to it, tests/unit/test_client_structure.py adds the client side's rules.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Source folders and the package name each installs as (``actors/`` is ``kcoord.actors``).
ROOTS = {"kcoord": REPO / "kcoord", "kcoord.actors": REPO / "actors", "kcoord.cluster": REPO / "cluster"}

# (layer, module prefixes), lowest first; a module's layer is its longest matching prefix.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("protocol", ("kcoord.protocol",)),
    ("record", ("kcoord.record", "kcoord.records", "kcoord.kafka.batches")),
    ("log", ("kcoord.log",)),
    ("runtime", ("kcoord.runtime", "kcoord.security", "kcoord.extras")),
    ("cores", ("kcoord.coordination", "kcoord.replication", "kcoord.group", "kcoord.txn")),
    ("calls", ("kcoord.calls", "kcoord.channel", "kcoord.actors.runtime", "kcoord.actors.gcs_store")),
    ("kafka", ("kcoord.kafka",)),
    ("client", ("kcoord.client",)),
    ("readers", ("kcoord.spark", "kcoord.ray_data", "kcoord.txn_write", "kcoord.streaming")),
    ("shells", ("kcoord.actors",)),
    ("cluster", ("kcoord.cluster",)),
    ("tools", ("kcoord.cli", "kcoord.bench", "kcoord.dashboard", "kcoord")),
]
# Re-exports of what moved up, kept for running clusters and old import paths.
COMPAT = {"kcoord.kafka.actor", "kcoord.kafka.deploy"}


def module_files() -> dict[str, Path]:
    """Module name -> source file, for every module of the package."""
    out: dict[str, Path] = {}
    for package, folder in ROOTS.items():
        for path in sorted(folder.rglob("*.py")):
            parts = [*package.split("."), *path.relative_to(folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of ``modules`` that module ``name`` imports, anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:  # a name inside a module: the module
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def graph() -> dict[str, set[str]]:
    modules = module_files()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (each holds a cycle)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:  # Tarjan's algorithm, iterative over the edges of v
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        work = [(v, iter(sorted(g.get(v, ()))))]
        while work:
            node, edges = work[-1]
            for w in edges:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(g.get(w, ())))))
                    break
                if w in on_stack:
                    low[node] = min(low[node], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == node:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return sorted(out)


def layer_of(module: str) -> int:
    best, rank = -1, len(LAYERS) - 1
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, rank = len(p), i
    return rank


def upward_imports(g: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(importer, imported) pairs where a module imports one of a higher layer."""
    return sorted((m, t) for m, targets in g.items() for t in targets if m not in COMPAT and layer_of(t) > layer_of(m))


def main() -> None:
    g = graph()
    found = cycles(g)
    up = upward_imports(g)
    print(f"{len(g)} modules, {sum(map(len, g.values()))} imports")
    print(f"import cycles (strongly connected groups of modules): {len(found)}")
    for component in found:
        print("  " + " <-> ".join(component))
    print(f"imports from a lower layer to a higher one: {len(up)}")
    for src, dst in up:
        print(f"  {src} -> {dst}")
    sys.exit(0)


if __name__ == "__main__":
    main()
