"""Broker -> node placement policy (kcoord/replication/placement.py), without Ray: the initial
binding, re-binding after a node dies, and waiting when no node can take a broker."""

from __future__ import annotations

import json

from kcoord.replication.placement import (
    BrokerBinding,
    choose_node,
    colocated_partitions,
    initial_binding,
    order_nodes,
    peers_of,
)


def consecutive(brokers: int, partitions: int, rf: int) -> dict[tuple[str, int], list[int]]:
    """The controller's default assignment shape: consecutive broker ids."""
    return {("t", p): [(p + j) % brokers for j in range(rf)] for p in range(partitions)}


def test_single_node_keeps_brokers_logical():
    assert initial_binding(range(3), []) == {}
    assert initial_binding(range(3), ["n1"]) == {}


def test_enough_nodes_gives_every_broker_its_own_node_and_head_is_the_spare():
    nodes = order_nodes(["head", "w2", "w1", "w3"], head="head")
    assert nodes == ["w1", "w2", "w3", "head"]
    binding = initial_binding(range(3), nodes)
    assert binding == {0: "w1", 1: "w2", 2: "w3"}
    assert colocated_partitions(consecutive(3, 6, 3), binding) == []


def test_fewer_nodes_deal_round_robin_and_stay_distinct_when_nodes_divide_brokers():
    binding = initial_binding(range(6), ["a", "b", "c"])
    assert binding == {0: "a", 1: "b", 2: "c", 3: "a", 4: "b", 5: "c"}
    assert colocated_partitions(consecutive(6, 12, 3), binding) == []


def test_bound_node_alive_is_kept():
    assert choose_node(1, {0: "a", 1: "b", 2: "c"}, ["a", "b", "c"], peers_of([[0, 1, 2]])) == "b"


def test_dead_node_with_no_acceptable_node_waits():
    binding = {0: "a", 1: "b", 2: "c"}
    # RF=3 over 3 brokers: both survivors host a peer of broker 1.
    assert choose_node(1, binding, ["a", "c"], peers_of([[0, 1, 2]])) is None


def test_dead_node_rebinds_to_a_spare_node_first():
    binding = {0: "a", 1: "b", 2: "c"}
    assert choose_node(1, binding, ["a", "c", "d"], peers_of([[0, 1, 2]])) == "d"


def test_rebind_may_share_a_node_with_brokers_that_are_not_peers():
    binding = initial_binding(range(6), ["a", "b", "c"])
    peers = peers_of(consecutive(6, 6, 3).values())
    # node b (brokers 1 and 4) died and a new node d joined: 1 goes to d; 4 shares no
    # partition with 1 (distance 3), so it may join it there, but not a or c.
    assert choose_node(1, binding, ["a", "c", "d"], peers) == "d"
    rebound = {**binding, 1: "d"}
    assert choose_node(4, rebound, ["a", "c", "d"], peers) == "d"
    assert colocated_partitions(consecutive(6, 6, 3), {**rebound, 4: "d"}) == []


def test_binding_rebinds_and_reports_waiting():
    placement = BrokerBinding({0: "a", 1: "b", 2: "c"}, alive={"a", "c"})
    assignments = [[0, 1, 2]]
    assert placement.decide(0, assignments).node == "a"
    d = placement.decide(1, assignments)
    assert d.wait and d.node is None
    assert placement.describe()["waiting"] == [1]
    assert placement.rebinds == 0
    placement.alive = {"a", "c", "d"}
    d = placement.decide(1, assignments)
    assert (d.node, d.wait, d.rebound_from) == ("d", False, "b")
    assert json.loads(placement.encode()) == {"0": "a", "1": "d", "2": "c"}
    assert placement.describe()["waiting"] == [] and placement.rebinds == 1


def test_binding_keeps_nodes_until_told_which_are_alive():
    placement = BrokerBinding({0: "a", 1: "b"})
    assert placement.decide(1, [[0, 1]]) == placement.decide(1, [[0, 1]])
    assert placement.decide(1, [[0, 1]]).node == "b" and placement.rebinds == 0


def test_unbound_placement_lets_ray_place_replicas():
    placement = BrokerBinding({}, alive={"a", "b"})
    d = placement.decide(0, [[0, 1, 2]])
    assert d.node is None and not d.wait


def test_a_broker_whose_node_holds_the_only_copy_waits_for_it():
    """Seeds 69 and 77 of the cluster simulation: an RF=1 partition's broker lost its node,
    was re-bound to a spare node, and its replica there -- empty, but still the ISR --
    was elected: acknowledged records were gone. A broker still in an ISR or ELR is not
    moved; it waits for its node as a Kafka broker's partitions wait for it."""
    placement = BrokerBinding({0: "a", 1: "b"}, alive={"b", "spare"})
    d = placement.decide(0, [[0], [1]], movable=False)
    assert d.wait and placement.binding[0] == "a" and placement.rebinds == 0
    assert placement.decide(0, [[0], [1]], movable=True).node == "spare"


def test_a_broker_holding_the_only_copy_follows_its_machine_to_a_new_node_id():
    """The chaos run of seed 622365 (CI): a node lost while its broker was a partition's
    last ISR member came back -- as Ray does -- under a new node id on the same host, and the
    broker waited for the old id forever: the partition stayed offline. A node on the lost
    node's host is its machine back, with its disk; a node on another host is not."""
    hosts = {"a": "10.0.0.1", "b": "10.0.0.2", "c": "10.0.0.3", "other": "10.0.0.9"}
    placement = BrokerBinding({0: "a", 1: "b", 2: "c"}, alive={"a", "c", "other"}, hosts=dict(hosts))
    assignments = [[0, 1, 2]]
    assert placement.decide(1, assignments, movable=False).wait  # another host: still waits
    assert placement.describe()["waiting"] == [1]
    placement.hosts["b2"] = "10.0.0.2"  # the machine's raylet is back
    placement.alive = {"a", "c", "other", "b2"}
    d = placement.decide(1, assignments, movable=False)
    assert (d.node, d.wait, d.rebound_from) == ("b2", False, "b")
    assert placement.binding[1] == "b2" and placement.describe()["waiting"] == [] and placement.rebinds == 1


def test_a_broker_holding_the_only_copy_never_joins_a_peer_on_its_host():
    """On one host (several raylets on one machine, as in the tests) every node shares the
    disk, but the peer rule still holds: no node hosting a broker that shares a partition."""
    placement = BrokerBinding({0: "a", 1: "b", 2: "c"}, alive={"a", "c"}, hosts={n: "127.0.0.1" for n in "abc"})
    assert placement.decide(1, [[0, 1, 2]], movable=False).wait
    placement.alive = {"a", "c", "d"}
    placement.hosts["d"] = "127.0.0.1"
    assert placement.decide(1, [[0, 1, 2]], movable=False).node == "d"


def test_a_broker_holding_the_only_copy_waits_when_its_host_is_unknown():
    placement = BrokerBinding({0: "a", 1: "b"}, alive={"a", "d"}, hosts={"a": "h1", "d": "h2"})
    assert placement.decide(1, [[0, 1]], movable=False).wait
    assert placement.decide(1, [[0, 1]], movable=True).node == "d"
