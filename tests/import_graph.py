"""kcoord's import graph, read from the source: import cycles and imports that go up the layers.

Every import counts: at module level, inside functions (imported on first use) and under
``TYPE_CHECKING``, since each is a dependency of one module on another whichever way it is
written. ``from a import b`` is an edge to ``a.b`` when that is a module, else to ``a``.

    .venv/bin/python -m tests.import_graph            # counts, and each cycle and violation

The layers (docs/architecture.md), lowest first; a module may import its own layer and
those below it. Clients, the Kafka listener and the Spark and Ray Data readers stand on
the cores' protocol; they are ranked above the cores so that nothing below imports them.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

LAYERS: list[tuple[str, ...]] = [
    ("kcoord.protocol",),
    ("kcoord.record", "kcoord.records"),
    ("kcoord.log",),
    ("kcoord.runtime", "kcoord.security"),
    ("kcoord.replication", "kcoord.group", "kcoord.txn"),
    ("kcoord.client", "kcoord.kafka", "kcoord.spark", "kcoord.ray_data"),
    ("actors",),
    ("cluster",),
    ("kcoord.cli",),
]


def module_files(roots: tuple[str, ...] = ("kcoord", "actors", "cluster")) -> dict[str, Path]:
    """Module name -> source file, for every module under ``roots``."""
    out: dict[str, Path] = {}
    for root in roots:
        for path in sorted((REPO / root).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
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


def graph(roots: tuple[str, ...] = ("kcoord", "actors", "cluster")) -> dict[str, set[str]]:
    modules = module_files(roots)
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


def layer_of(module: str) -> int | None:
    for rank, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return rank
    return None


def upward_imports(g: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(importer, imported) pairs where a ranked module imports one of a higher layer."""
    out = []
    for src, targets in g.items():
        a = layer_of(src)
        for dst in targets:
            b = layer_of(dst)
            if a is not None and b is not None and b > a:
                out.append((src, dst))
    return sorted(out)


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
