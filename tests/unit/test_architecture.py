"""The layering the simulation's verdicts depend on, checked on the source (no Ray).

The simulation only says something about production if it runs production's code: the
same drivers, built the same way, with the Ray actors doing nothing but I/O around them.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DRIVERS = {"ReplicaDriver", "ControllerDriver", "GroupCoordinatorDriver"}
ACTION_TYPES = {
    # replica
    "Reply",
    "SendFetch",
    "SendOffsetsForLeaderEpoch",
    "SendAlterPartition",
    # group coordinator
    "AppendRecords",
    # controller
    "Persist",
    "CreateReplica",
    "DeleteReplica",
    "SendLeaderAndIsr",
    "SendHeartbeat",
}
CORE_PACKAGES = ("kcoord/replication", "kcoord/group", "kcoord/log", "kcoord/runtime", "kcoord/protocol")


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
