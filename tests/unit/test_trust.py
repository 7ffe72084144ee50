"""The controller's trust ledger and leader-balance rule, on their own (no controller)."""

from __future__ import annotations

import msgpack

from kcoord.protocol.controller import HeartbeatResponse
from kcoord.replication.controller_actions import ReplicaId
from kcoord.replication.election import imbalanced_brokers
from kcoord.replication.metadata import PartitionState, ReplicaTrust, decode_trust
from kcoord.replication.trust import TrustLedger, lineage

T = "t"


def rid(b: int) -> ReplicaId:
    return ReplicaId(T, 0, b)


def status(incarnation: str, storage: str = "") -> HeartbeatResponse:
    return HeartbeatResponse(topic=T, partition=0, incarnation=incarnation, storage=storage)


def test_only_what_changed_is_stored_and_a_reloaded_ledger_has_nothing_to_store():
    p = PartitionState(T, 0, [0, 1, 2], leader=0, isr=[0, 1, 2])
    ledger = TrustLedger()
    assert not ledger.changed(p) and ledger.records(p) == {}  # nothing known yet: nothing to store
    ledger.seen(rid(1), status("inc-1", "disk-a"))
    ledger.suspect.add(rid(2))
    assert ledger.changed(p)
    records = ledger.records(p)
    assert records == {1: ReplicaTrust("inc-1", False, "", "disk-a"), 2: ReplicaTrust(suspect=True)}
    assert not ledger.changed(p)  # stored with p's record from now on
    # the records travel in the partition's record, one write with its ISR and ELR
    assert decode_trust(p.encode(records)) == records and PartitionState.decode(p.encode(records)) == p
    assert decode_trust(p.encode()) == {}
    legacy = {k: v for k, v in msgpack.unpackb(p.encode(records), raw=False).items() if k != "trust"}
    assert decode_trust(msgpack.packb(legacy)) is None, "a record from before: the trust is elsewhere"

    reloaded = TrustLedger()
    for b, record in records.items():
        reloaded.load(rid(b), record)
    assert not reloaded.changed(p)
    assert rid(2) in reloaded.suspect and reloaded.incarnation[rid(1)] == "inc-1"
    reloaded.forget(rid(1))
    assert rid(1) not in reloaded.incarnation and rid(1) not in reloaded.storage


def test_storage_changes_unless_the_same_lineage_is_reported():
    ledger = TrustLedger()
    assert ledger.storage_changed(rid(0), "disk-a")  # unknown counts as changed
    ledger.seen(rid(0), status("inc-1", "disk-a"))
    assert not ledger.storage_changed(rid(0), "disk-a")
    assert ledger.storage_changed(rid(0), "disk-b")
    assert ledger.storage_changed(rid(0), "")
    ledger.storage_lost(rid(0))  # a failed fsync: the page cache vouches for nothing
    assert ledger.storage_changed(rid(0), "disk-a")


def test_a_leader_judging_another_process_is_stale():
    ledger = TrustLedger()
    assert not ledger.stale_process(rid(1), "inc-1")  # no process known yet
    ledger.seen(rid(1), status("inc-1"))
    assert not ledger.stale_process(rid(1), "inc-1")
    assert not ledger.stale_process(rid(1), None)
    assert ledger.stale_process(rid(1), "inc-0")


def test_who_may_lead_a_lossy_partition():
    p = PartitionState(T, 0, [0, 1, 2], leader=0, isr=[0], elr=[])
    ledger = TrustLedger()
    last = {rid(0): status("inc-0", "disk-a"), rid(1): status("inc-1", "disk-b")}
    # 1 joins the ELR as the process on disk-b; 2 never answered this controller
    p.elr = [1, 2]
    ledger.witness_elr(p, [], last)
    assert ledger.elr_witness == {rid(1): lineage(last[rid(1)])}
    trusted = ledger.trusted(p, last)
    assert trusted(0)  # in the ISR, answered, not suspect
    assert trusted(1)  # the ELR member, still on the storage it had when it joined
    assert not trusted(2)  # never answered this controller
    last[rid(1)] = status("inc-1b", "disk-c")  # restarted on other storage
    assert not ledger.trusted(p, last)(1)
    ledger.suspect.add(rid(0))
    assert not ledger.trusted(p, last)(0)
    p.elr = []
    ledger.witness_elr(p, [1, 2], last)
    assert ledger.elr_witness == {}


def test_a_directory_other_than_recorded_makes_a_replica_replaced_until_in_sync():
    p = PartitionState(T, 0, [0, 1, 2], leader=0, isr=[0], elr=[1, 2])
    ledger = TrustLedger()
    assert not ledger.directory_seen(rid(1), "d1"), "the first id seen is simply recorded"
    assert not ledger.directory_seen(rid(1), "") and not ledger.directory_seen(rid(1), "d1")
    ledger.elr_witness[rid(1)] = "storage:node1"
    assert ledger.directory_seen(rid(1), "d1-new")
    assert not ledger.holds_data(rid(1)) and rid(1) not in ledger.elr_witness, "no witness of anything"
    assert not ledger.directory_seen(rid(1), "d1-new"), "reported once, counted once"
    stored = ledger.records(p)
    assert stored == {1: ReplicaTrust("", False, "", "", "d1-new", True)}
    reloaded = TrustLedger()
    reloaded.load(rid(1), stored[1])
    assert not reloaded.holds_data(rid(1)) and not reloaded.changed(p)
    reloaded.in_sync(rid(1))
    assert reloaded.holds_data(rid(1)) and reloaded.changed(p) and not reloaded.records(p)[1].replaced
    assert reloaded.directory[rid(1)] == "d1-new", "the new directory is the one to hold it to from now on"


def test_brokers_leading_too_few_of_their_preferred_partitions():
    parts = [PartitionState(T, i, [i % 3, (i + 1) % 3, (i + 2) % 3], leader=i % 3) for i in range(6)]
    assert imbalanced_brokers(parts, 10) == set()
    parts[0].leader = 1  # broker 0 leads 1 of its 2 preferred partitions: 50%
    assert imbalanced_brokers(parts, 10) == {0}
    assert imbalanced_brokers(parts, 50) == set()  # at the threshold, not over it
    assert imbalanced_brokers(parts, 0) == {0}
