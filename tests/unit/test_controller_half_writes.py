"""A store write can fail at any point of a decision (the driver then resigns and reloads from
what the store holds). Whatever prefix of a decision's writes reached the store, the reloaded
controller must hold a consistent state: an ISR member is never left marked *replaced* (which
would make it no candidate while the ISR names it), and a reload repairs such a state when it
finds one (a store written before the partition record carried its replicas' trust)."""

from __future__ import annotations

from typing import Callable, Iterator

import msgpack

from kcoord.replication.controller import Persist, ReplicaId
from kcoord.replication.metadata import decode_trust, partition_key, replica_key

from controller_harness import BROKERS, TOPIC, Harness, lai_targets

DURABLE = {"min.insync.replicas": "1", "flush.messages": "1"}


def seen(h: Harness, brokers=BROKERS, leo: int = 100) -> None:
    for b in brokers:
        h.beat(b, incarnation=f"a{b}", directory_id=f"d{b}", log_end_offset=leo)


def reloads_after_each_prefix(h: Harness, decide: Callable[[], object]) -> Iterator[tuple[int, int, Harness]]:
    """Run ``decide`` on ``h``, then for every prefix of the store writes it made (none,
    some, all) a controller reloaded from a store that holds only that prefix:
    (n, writes, reloaded harness)."""
    before = dict(h.store.data)
    start = len(h.sent)
    decide()
    writes = [a for a in h.sent[start:] if isinstance(a, Persist)]
    for n in range(len(writes) + 1):
        h.store.data = dict(before)
        for a in writes[:n]:
            h.store.put(a.key, a.value) if a.value is not None else h.store.delete(a.key)
        yield n, len(writes), h.restart()


def replaced_isr_members(h: Harness) -> list[int]:
    p = h.partition()
    return [b for b in p.isr if ReplicaId(TOPIC, 0, b) in h.core.trust.replaced]


def test_a_replaced_replica_rejoining_the_isr_is_never_left_marked_replaced():
    """Review of issue 32, finding 7: ISR [0] (1 down), follower 2 back on a wiped disk,
    caught up; the leader adds it. The controller wrote the partition (ISR [0, 2]) and the
    replica's trust record (no longer replaced) as two writes; the second failed and the
    reloaded controller held an ISR member still marked replaced, which nothing cleared:
    when 0 died, the election dropped 2 and the partition went offline."""
    h = Harness()
    h.create(config=DURABLE)
    seen(h)
    h.dead(1)
    h.beat(2, incarnation="b2", directory_id="d2-new", log_end_offset=0)
    assert h.stored().isr == [0] and ReplicaId(TOPIC, 0, 2) in h.core.trust.replaced
    h.now = 100
    for n, total, h2 in reloads_after_each_prefix(h, lambda: h.alter([0, 2], incarnations={2: "b2"})):
        assert replaced_isr_members(h2) == [], f"after {n} of {total} writes"
        if 2 in h2.stored().isr:
            h2.beat(2, incarnation="b2", directory_id="d2-new", log_end_offset=100)
            h2.dead(0)
            assert h2.stored().leader == 2, f"after {n} of {total} writes: 2 holds everything"


def test_a_reload_repairs_an_isr_member_marked_replaced():
    """Follower 2 came back on a wiped disk while in the ISR: its new directory is recorded
    (replaced) and it leaves the ISR -- but if only the first of those writes reached the
    store, the reloaded controller found an ISR member marked replaced, and nothing ever
    cleared it (the directory it reports is the recorded one now; the ISR cannot grow by a
    member it already has). A reload takes such a member out of the ISR (what the lost write
    said), and the leader's expansion trusts it again once it has caught up."""
    h = Harness()
    h.create(config=DURABLE)
    seen(h)
    h.now = 100
    decide = lambda: h.beat(2, incarnation="b2", directory_id="d2-new", log_end_offset=0)  # noqa: E731
    for n, total, h2 in reloads_after_each_prefix(h, decide):
        assert replaced_isr_members(h2) == [], f"after {n} of {total} writes"
        assert h2.stored().leader == 0, f"after {n} of {total} writes"
        if h2.stored().isr == [0, 1]:
            assert 2 in lai_targets(h2.sent), "told it is out, to catch up"
        seen(h2, brokers=[0, 1])
        h2.beat(2, incarnation="b2", directory_id="d2-new", log_end_offset=0)
        assert h2.stored().isr == [0, 1], f"after {n} of {total} writes: out until caught up"
        resp, _ = h2.alter([0, 1, 2], incarnations={2: "b2"})
        assert resp.error_code == 0 and h2.stored().isr == [0, 1, 2], f"after {n} of {total} writes"
        h2.dead(0)
        h2.dead(1)
        assert h2.stored().leader == 2, f"after {n} of {total} writes: trusted again, it leads"


def test_a_store_from_before_partition_records_carried_trust_is_taken_up_and_rewritten():
    """Trust records used to be stored apart (``replica/...``). A controller booting on such
    a store takes them up, rewrites each partition record with them, then deletes them; a
    boot cut short at any of those writes loses nothing."""
    h = Harness()
    h.create(config=DURABLE)
    seen(h)
    h.beat(2, incarnation="b2", directory_id="d2-new", log_end_offset=0)
    known = {b: h.core.trust.records(h.partition())[b] for b in BROKERS}
    assert known[2].replaced and h.stored().isr == [0, 1]
    # the old layout: the partition record without its trust, one record per replica
    p = h.stored()
    old = {k: v for k, v in msgpack.unpackb(h.store.get(partition_key(TOPIC, 0)), raw=False).items() if k != "trust"}
    h.store.put(partition_key(TOPIC, 0), msgpack.packb(old, use_bin_type=True))
    for b, record in known.items():
        h.store.put(replica_key(TOPIC, 0, b), record.encode())
    before = dict(h.store.data)
    h2 = h.restart()
    writes = [a for a in h2.sent if isinstance(a, Persist) and a.key != "cluster"]
    assert [a.key for a in writes] == [partition_key(TOPIC, 0)] + [replica_key(TOPIC, 0, b) for b in BROKERS]
    assert not h2.store.keys("replica/") and decode_trust(h2.store.get(partition_key(TOPIC, 0))) == known
    for n in range(len(writes) + 1):
        h.store.data = dict(before)
        for a in writes[:n]:
            h.store.put(a.key, a.value) if a.value is not None else h.store.delete(a.key)
        h3 = h.restart()
        assert {b: h3.core.trust.records(h3.partition())[b] for b in BROKERS} == known, f"after {n} writes"
        assert h3.stored() == p and not h3.store.keys("replica/")
