"""The layering the simulation's verdicts depend on, checked on the source (no Ray).

The simulation only says something about production if it runs production's code: the
same drivers, built the same way, with the Ray actors doing nothing but I/O around them.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DRIVERS = {"ReplicaDriver", "ControllerDriver", "GroupCoordinatorDriver", "TransactionCoordinatorDriver"}
ACTION_TYPES = {
    # replica
    "Reply",
    "SendFetch",
    "SendOffsetsForLeaderEpoch",
    "SendAlterPartition",
    # group coordinator (and transaction coordinator)
    "AppendRecords",
    # transaction coordinator
    "SendWriteTxnMarker",
    "SendTxnOffsetMarker",
    "AllocateProducerIds",
    "RefreshMetadata",
    # controller
    "Persist",
    "CreateReplica",
    "DeleteReplica",
    "SendLeaderAndIsr",
    "SendHeartbeat",
}
CORE_PACKAGES = ("kcoord/replication", "kcoord/coordination", "kcoord/group", "kcoord/txn", "kcoord/log", "kcoord/runtime", "kcoord/protocol", "kcoord/security")


def _modules(folder: str) -> list[Path]:
    return sorted((REPO / folder).rglob("*.py"))


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _imports(tree: ast.Module) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(("." * node.level) + node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def _called_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            names.add(f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else "")
    return names


def test_the_simulation_imports_nothing_from_the_ray_shells() -> None:
    for path in _modules("tests/sim"):
        bad = {m for m in _imports(_tree(path)) if m.split(".")[0] in ("actors", "cluster", "ray")}
        assert not bad, f"{path.relative_to(REPO)} imports {sorted(bad)}: the simulation must run the drivers, not the shells"


def test_the_ray_shells_hold_no_action_execution_logic() -> None:
    """Actions are performed by the drivers; a shell that imported action types would be
    performing (some of) them itself."""
    for path in _modules("actors"):
        tree = _tree(path)
        imported = {name.rsplit(".", 1)[-1] for name in _imports(tree)}
        leaked = imported & ACTION_TYPES
        assert not leaked, f"{path.relative_to(REPO)} imports action types {sorted(leaked)}"
        assert not any(m.endswith(".actions") or m.endswith("controller_actions") for m in _imports(tree)), path


def test_shells_and_simulation_build_the_same_drivers() -> None:
    def built(folder: str) -> set[str]:
        out: set[str] = set()
        for path in _modules(folder):
            out |= _called_names(_tree(path)) & DRIVERS
        return out

    assert built("actors") == DRIVERS
    assert built("tests/sim") == DRIVERS


def test_the_core_imports_no_ray() -> None:
    for folder in CORE_PACKAGES:
        for path in _modules(folder):
            bad = {m for m in _imports(_tree(path)) if m.split(".")[0] in ("ray", "actors", "cluster")}
            assert not bad, f"{path.relative_to(REPO)} (core) imports {sorted(bad)}"


def _own_attributes(cls: ast.ClassDef) -> set[str]:
    """Names a class defines: its methods and class attributes, and whatever its methods
    assign on ``self``."""
    out: set[str] = set()
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.add(node.name)
        elif isinstance(node, ast.Assign):
            out.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
    for node in ast.walk(cls):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                out.update(
                    sub.attr
                    for sub in ast.walk(target)
                    if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == "self"
                )
    return out


def test_core_state_machines_share_state_explicitly_not_through_mixins() -> None:
    """Issue #15: a part of a state machine gets what it shares with the others through its
    constructor (ReplicaContext, CoordinatorContext), so every ``self.x`` a class reads is
    defined by that class or a base class of the same package, never by a sibling mixin's
    ``__init__``. (Classes with bases from elsewhere, e.g. enums, are not checked.)"""
    for folder in ("kcoord/group", "kcoord/replication", "kcoord/txn"):
        classes = {
            node.name: node
            for path in _modules(folder)
            for node in ast.walk(_tree(path))
            if isinstance(node, ast.ClassDef)
        }
        for name, cls in classes.items():
            bases = [ast.unparse(b) for b in cls.bases]
            if any(b not in classes for b in bases):
                continue
            defined = _own_attributes(cls).union(*(_own_attributes(classes[b]) for b in bases))
            read = {
                n.attr
                for n in ast.walk(cls)
                if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
            }
            foreign = sorted(a for a in read - defined if not a.startswith("__"))
            assert not foreign, f"{folder}: {name} reads self.{', self.'.join(foreign)} that only another class defines"


def _module_imports(path: Path) -> set[str]:
    """The kcoord modules ``path`` imports (``TYPE_CHECKING`` and function-local imports
    included), as dotted names resolved from relative imports."""
    package = ".".join(path.relative_to(REPO).with_suffix("").parts[:-1])
    out: set[str] = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m for m in out if m.startswith("kcoord.")}


def test_the_cores_and_the_kit_have_no_import_cycles() -> None:
    """Issue 33: a module of a core (or of the kit in kcoord/runtime) never imports, however
    indirectly, a module that imports it back -- TYPE_CHECKING imports count too."""
    graph: dict[str, set[str]] = {}
    for folder in ("kcoord/group", "kcoord/replication", "kcoord/txn", "kcoord/runtime"):
        for path in _modules(folder):
            name = ".".join(path.relative_to(REPO).with_suffix("").parts)
            graph[name.removesuffix(".__init__")] = _module_imports(path)
    edges = {m: {d for d in deps if d in graph and d != m} for m, deps in graph.items()}
    # a package's __init__ re-exports its modules: an edge into it is not a cycle back
    packages = {m for m in graph if (REPO / m.replace(".", "/") / "__init__.py").exists()}

    def cycle_from(start: str) -> list[str] | None:
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in edges[node]:
                if nxt == start:
                    return path + [start]
                if nxt not in seen and nxt not in packages:
                    seen.add(nxt)
                    stack.append((nxt, path + [nxt]))
        return None

    cycles = [c for m in sorted(graph) if m not in packages and (c := cycle_from(m))]
    assert not cycles, f"import cycles: {cycles[:3]}"


def test_no_two_test_modules_share_a_name():
    """pytest imports test modules by basename (no packages under tests/): a second module
    of the same name fails the whole collection."""
    seen: dict[str, Path] = {}
    clashes = []
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        if path.name in seen:
            clashes.append(f"{seen[path.name].relative_to(REPO)} and {path.relative_to(REPO)}")
        seen.setdefault(path.name, path)
    assert not clashes, "test modules with the same name: " + "; ".join(clashes)
