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

import json

from tests.import_graph import LAYERS, REPO, cycles, graph, layer_of, module_files, upward_imports

# The part of the package these rules are enforced on (the cores' own structure is checked
# in test_import_graph.py and test_architecture.py).
CHECKED = ["kcoord.calls", "kcoord.channel", "kcoord.actors.runtime", "kcoord.actors.kafka_listener", "kcoord.kafka", "kcoord.client", "kcoord.spark", "kcoord.ray_data", "kcoord.cluster", "kcoord.cli"]
UNCHECKED = {"kcoord.kafka.batches"}  # a re-export of the record package


def checked(module: str) -> bool:
    return module not in UNCHECKED and any(module == p or module.startswith(p + ".") for p in CHECKED)


def test_no_import_cycles_in_the_clients_listener_calls_and_deployment() -> None:
    found = [c for c in cycles(graph()) if any(checked(m) for m in c)]
    assert not found, f"import cycles: {found}"


def test_no_module_of_the_clients_listener_calls_and_deployment_imports_from_a_higher_layer() -> None:
    found = [(m, t) for m, t in upward_imports(graph()) if checked(m)]
    assert not found, "imports from a higher layer: " + ", ".join(f"{m} -> {t} ({LAYERS[layer_of(t)][0]})" for m, t in found)


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
    long = {m: n for m, path in module_files().items() if checked(m) and (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these by concept: {long}"


def main() -> None:
    g = graph()
    all_cycles = cycles(g)
    up = upward_imports(g)
    print(
        json.dumps(
            {
                "modules": len(g),
                "cycles": len(all_cycles),
                "cycles_list": all_cycles,
                "upward_imports": len(up),
                "upward_list": [f"{m} -> {t}" for m, t in up],
                "largest": sorted(((len(p.read_text().splitlines()), m) for m, p in module_files().items()), reverse=True)[:8],
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
