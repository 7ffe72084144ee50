"""Partition assignors, run by the group leader (client side, as in Kafka).

Every assignor has a ``name`` (the protocol name members advertise in JoinGroup) and::

    assign(cluster_partitions: dict[topic, partition_count],
           subscriptions: dict[member_id, Subscription]) -> dict[member_id, Assignment]

Guarantees common to all: every member in ``subscriptions`` gets an entry; each partition
of a topic that exists in ``cluster_partitions`` and that at least one member subscribes to
goes to exactly one member subscribed to its topic (no overlap, no gap); topics missing from
the cluster are ignored; the result depends only on the inputs (sorted iteration, no hash
order), so any leader computes the same assignment.

* ``range`` (:class:`RangeAssignor`): per topic, contiguous ranges over the members sorted
  by id; the first ``count % members`` get one extra.
* ``roundrobin`` (:class:`RoundRobinAssignor`): all topic-partitions sorted, dealt in turn
  to the sorted members, skipping members not subscribed to the topic.
* ``sticky`` (:class:`StickyAssignor`): balanced, and keeps each member's previously owned
  partitions (``Subscription.owned_partitions``) wherever balance allows. When all members
  subscribe to the same topics the counts differ by at most one and the number of moved
  partitions is the minimum possible.
"""

from __future__ import annotations

from typing import Any, Iterable, Protocol, Sequence

from ..protocol.group import Assignment, Subscription

TopicPartition = tuple[str, int]


class Assignor(Protocol):
    name: str

    def assign(
        self, cluster_partitions: dict[str, int], subscriptions: dict[str, Subscription]
    ) -> dict[str, Assignment]: ...


def _to_assignments(
    members: list[str], owned: dict[str, list[TopicPartition]]
) -> dict[str, Assignment]:
    out: dict[str, Assignment] = {}
    for member in members:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(owned.get(member, [])):
            by_topic.setdefault(topic, []).append(partition)
        out[member] = Assignment(partitions=by_topic)
    return out


def _subscribers(
    cluster_partitions: dict[str, int], subscriptions: dict[str, Subscription]
) -> dict[str, list[str]]:
    """topic -> sorted members subscribed to it, for topics that exist."""
    result: dict[str, list[str]] = {}
    for member in sorted(subscriptions):
        for topic in sorted(set(subscriptions[member].topics)):
            if cluster_partitions.get(topic, 0) > 0:
                result.setdefault(topic, []).append(member)
    return result


class RangeAssignor:
    name = "range"

    def assign(
        self, cluster_partitions: dict[str, int], subscriptions: dict[str, Subscription]
    ) -> dict[str, Assignment]:
        owned: dict[str, list[TopicPartition]] = {}
        for topic, members in sorted(_subscribers(cluster_partitions, subscriptions).items()):
            count = cluster_partitions[topic]
            per_member, extra = divmod(count, len(members))
            start = 0
            for i, member in enumerate(members):
                length = per_member + (1 if i < extra else 0)
                owned.setdefault(member, []).extend((topic, p) for p in range(start, start + length))
                start += length
        return _to_assignments(sorted(subscriptions), owned)


class RoundRobinAssignor:
    name = "roundrobin"

    def assign(
        self, cluster_partitions: dict[str, int], subscriptions: dict[str, Subscription]
    ) -> dict[str, Assignment]:
        members = sorted(subscriptions)
        subscribed = _subscribers(cluster_partitions, subscriptions)
        wants = {m: set(subscriptions[m].topics) for m in members}
        owned: dict[str, list[TopicPartition]] = {}
        cursor = 0
        for topic in sorted(subscribed):
            for partition in range(cluster_partitions[topic]):
                # Advance to the next member that subscribes to this topic; one exists.
                while topic not in wants[members[cursor % len(members)]]:
                    cursor += 1
                owned.setdefault(members[cursor % len(members)], []).append((topic, partition))
                cursor += 1
        return _to_assignments(members, owned)


class StickyAssignor:
    """Balance first, then stickiness.

    1. Each member keeps the owned partitions that still exist and that it still
       subscribes to. A partition claimed by several members goes to the claim with the
       highest ``generation_id`` (then the smallest member id): the others are stale.
    2. Unowned partitions go, most constrained first (fewest eligible members), to the
       eligible member with the fewest partitions.
    3. While some member has at least two more partitions than an eligible member, move one
       partition from the fullest to the emptiest. Each move strictly lowers the sum of
       squared counts, so this ends; with identical subscriptions it ends balanced within
       one, and only partitions above a member's share ever move.
    """

    name = "sticky"

    def assign(
        self, cluster_partitions: dict[str, int], subscriptions: dict[str, Subscription]
    ) -> dict[str, Assignment]:
        members = sorted(subscriptions)
        subscribed = _subscribers(cluster_partitions, subscriptions)
        eligible: dict[str, list[str]] = subscribed  # topic -> members that may own it
        topics_of = {m: {t for t in subscriptions[m].topics if t in eligible} for m in members}
        all_partitions = [(t, p) for t in sorted(eligible) for p in range(cluster_partitions[t])]

        # 1. previously owned partitions, conflicts resolved by generation
        claims: dict[TopicPartition, list[tuple[int, str]]] = {}
        for m in members:
            sub = subscriptions[m]
            for topic, parts in sub.owned_partitions.items():
                if topic not in topics_of[m]:
                    continue
                for p in set(parts):
                    if 0 <= p < cluster_partitions[topic]:
                        claims.setdefault((topic, p), []).append((-sub.generation_id, m))
        owned: dict[str, set[TopicPartition]] = {m: set() for m in members}
        for tp, contenders in claims.items():
            owned[min(contenders)[1]].add(tp)

        # 2. unowned partitions, most constrained first
        unowned = [tp for tp in all_partitions if tp not in claims]
        unowned.sort(key=lambda tp: (len(eligible[tp[0]]), tp))
        for tp in unowned:
            target = min(eligible[tp[0]], key=lambda m: (len(owned[m]), m))
            owned[target].add(tp)

        # 3. even out
        while self._move_one(members, owned, topics_of):
            pass
        return _to_assignments(members, {m: sorted(tps) for m, tps in owned.items()})

    @staticmethod
    def _move_one(
        members: list[str], owned: dict[str, set[TopicPartition]], topics_of: dict[str, set[str]]
    ) -> bool:
        by_count_desc = sorted(members, key=lambda m: (-len(owned[m]), m))
        by_count_asc = sorted(members, key=lambda m: (len(owned[m]), m))
        for src in by_count_desc:
            for dst in by_count_asc:
                if len(owned[src]) - len(owned[dst]) < 2:
                    break
                movable = sorted(tp for tp in owned[src] if tp[0] in topics_of[dst])
                if movable:
                    tp = movable[-1]
                    owned[src].remove(tp)
                    owned[dst].add(tp)
                    return True
        return False


ASSIGNORS: dict[str, Assignor] = {
    a.name: a for a in (RangeAssignor(), RoundRobinAssignor(), StickyAssignor())
}


def get_assignor(name: str) -> Assignor:
    try:
        return ASSIGNORS[name]
    except KeyError:
        raise ValueError(f"unknown assignor {name!r}; known: {sorted(ASSIGNORS)}") from None


# kafka-python's class names for the built-in assignors, accepted as aliases.
_ASSIGNOR_ALIASES = {
    "rangepartitionassignor": "range",
    "roundrobinpartitionassignor": "roundrobin",
    "stickypartitionassignor": "sticky",
    "cooperativestickyassignor": "sticky",
}


def resolve_assignors(strategy: str | Assignor | Sequence[str | Assignor | type]) -> list[Assignor]:
    """Assignors from kcoord names (``"range"``, ``"roundrobin"``, ``"sticky"``), kafka-python
    class names (``"RangePartitionAssignor"``), or objects/classes with ``name`` and
    ``assign``. Order is preference order."""
    items: Iterable[Any] = [strategy] if isinstance(strategy, str) or hasattr(strategy, "assign") else strategy
    out: list[Assignor] = []
    for item in items:
        if isinstance(item, str):
            name = _ASSIGNOR_ALIASES.get(item.lower(), item.lower())
            out.append(get_assignor(name))
        elif isinstance(item, type):
            name = getattr(item, "name", None) or item.__name__
            name = _ASSIGNOR_ALIASES.get(str(name).lower(), str(name).lower())
            try:
                out.append(get_assignor(name))
            except ValueError:
                out.append(item())  # a user assignor class
        elif hasattr(item, "assign") and hasattr(item, "name"):
            out.append(item)
        else:
            raise ValueError(f"not an assignor: {item!r}")
    if not out:
        raise ValueError("partition_assignment_strategy needs at least one assignor")
    names = [a.name for a in out]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate assignors in partition_assignment_strategy: {names}")
    return out
