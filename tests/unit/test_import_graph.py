"""The import graph of the lower layers (tests/import_graph.py): the batch format and the log
depend on nothing above them and sit in no import cycle."""

from __future__ import annotations

from tests.import_graph import cycles, graph, upward_imports


def test_the_record_package_imports_only_the_protocol_errors() -> None:
    g = graph()
    for module, targets in g.items():
        if module.startswith("kcoord.record."):
            outside = {t for t in targets if not t.startswith("kcoord.record.")}
            assert outside <= {"kcoord.protocol.errors"}, f"{module} imports {sorted(outside)}"


def test_no_import_cycle_goes_through_the_batch_format_or_the_log() -> None:
    for component in cycles(graph()):
        mine = [m for m in component if m.startswith(("kcoord.record", "kcoord.log"))]
        assert not mine, f"import cycle {' <-> '.join(component)}"


def test_no_module_imports_from_a_layer_above_its_own() -> None:
    assert upward_imports(graph()) == []


def test_the_graph_sees_every_kind_of_import() -> None:
    """A cycle written with a lazy import or under TYPE_CHECKING is still a cycle."""
    g = graph()
    assert "kcoord.record.kafka_v2" in g["kcoord.record.decoding"]  # imported on first use
    assert "kcoord.record.header" in g["kcoord.record.columns"]
    assert "kcoord.protocol.errors" in g["kcoord.record.header"]
