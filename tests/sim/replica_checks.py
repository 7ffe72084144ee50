"""The invariants checked on a replica after every event it handled (``checks.py`` lists
them all; ``History.observe_replica`` calls these):

* **epochs** its leader-epoch cache matches the epochs of the batches in its log;
* **KIP-497** the controller's ISR is within the current leader's maximal ISR;
* **isr** every ISR and ELR member holds everything below the leader's HW;
* **deleted** the current leader holds nothing below an acknowledged DeleteRecords, or
  below the log start every replica has reached;
* with transactional producers, the LSO and the aborted-transaction index
  (``transactions.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kcoord import records
from kcoord.replication.follower import FETCHING
from kcoord.replication.roles import LEADER, OFFLINE

from .log_reading import read_log

if TYPE_CHECKING:
    from .checks import History
    from .partition_history import PartitionHistory
    from .processes import ReplicaProcess


@dataclass
class ReplicaView:
    """What the checks remember about one replica process between two events."""

    seen_epoch: int = -1
    lead_key: tuple[int, int] | None = None
    lead_hw: int = 0
    prev_hw: int = 0
    cache_checked: tuple = ()
    derived: list = field(default_factory=list)  # (epoch, start) from the batches checked
    tombstone_horizon: int = 0


def check_transactions(history: "History", proc: "ReplicaProcess", part: PartitionHistory, now: int) -> None:
    """The LSO and the aborted-transaction index (tests/sim/transactions.py)."""
    from .transactions import check_txn_indexes, observe_leader_lso

    observe_leader_lso(history, proc, part, now)
    leader = leader_process(history, part)
    stored = part.stored
    if leader is None or stored is None:
        return
    hw = leader.replica.hw
    members = []
    for b in stored.isr:
        m = history.sim.replicas.get((part.tp[0], part.tp[1], b))
        if m is None or m is leader or not m.up or m.replica is None or m.replica.role == OFFLINE or history.sim.damage.is_damaged(m):
            continue
        if m.replica.log.log_end_offset >= hw:
            members.append(m)
    check_txn_indexes(history, part, leader, members, now)


def check_tombstone_age(proc: "ReplicaProcess", view: ReplicaView, part: PartitionHistory, now: int) -> None:
    """A cleaner removes a tombstone only once delete.retention.ms has passed since it first
    saw it, which is after the tombstone committed (it cleans below the HW): a consumer
    that reaches the log end within that time sees every deletion, however the producer
    stamped the record (KIP-534). The newest tombstone a pass removes committed last."""
    log = proc.replica.log
    horizon = log.tombstone_horizon
    if horizon <= view.tombstone_horizon:
        view.tombstone_horizon = horizon  # (a log started over: nothing removed)
        return
    view.tombstone_horizon = horizon
    committed = part.committed_at(horizon - 1)
    retention = log.config.delete_retention_ms
    if committed is not None and now - committed < retention:
        part.fail(
            "tombstone-early",
            now,
            f"replica {proc.broker} removed the tombstone at {horizon - 1} at {now} ms, {now - committed} ms after it "
            f"committed ({committed} ms): delete.retention.ms is {retention}",
        )


def check_deleted(history: "History", part: PartitionHistory, proc: "ReplicaProcess", now: int) -> None:
    """Records below an acknowledged DeleteRecords, or below every replica's log start,
    are not readable from the partition's current leader."""
    if part.deleted_floor <= 0 and part.retention_floor <= 0:
        return
    floor, since, why = part.read_floor()
    if floor <= 0:
        return
    stored = part.stored
    r = proc.replica
    if stored is None or stored.leader != proc.broker or stored.leader_epoch != r.leader_epoch:
        return
    log = r.log
    if log.log_start_offset < min(floor, log.log_end_offset):
        part.fail(
            "deleted",
            now,
            f"leader {proc.broker} (epoch {r.leader_epoch}) holds readable records from offset {log.log_start_offset}, "
            f"below {floor}: {why} ({since} ms) put them below the log start",
        )


def leader_process(history: "History", part: PartitionHistory) -> "ReplicaProcess | None":
    p = part.stored
    if p is None or p.leader < 0:
        return None
    proc = history.sim.replicas.get((p.topic, p.partition, p.leader))
    if proc is None or not proc.up or proc.replica is None:
        return None
    r = proc.replica
    if r.role != LEADER or r.leader_epoch != p.leader_epoch or r.leader_state is None:
        return None
    return proc


def check_isr_subset(history: "History", part: PartitionHistory, now: int) -> None:
    """KIP-497: the ISR the controller would elect from is never larger than the set
    the leader computes its HW over."""
    proc = leader_process(history, part)
    if proc is None:
        return
    stored = part.stored
    assert stored is not None
    maximal = set(proc.replica.leader_state.maximal_isr())
    if not set(stored.isr) <= maximal:
        part.fail(
            "kip497",
            now,
            f"the controller's ISR {stored.isr} (partition epoch {stored.partition_epoch}) is not within leader "
            f"{proc.broker}'s maximal ISR {sorted(maximal)} at epoch {stored.leader_epoch}",
        )


def check_members_hold(history: "History", part: PartitionHistory, now: int) -> None:
    """Every ISR and ELR member holds everything below the leader's HW."""
    proc = leader_process(history, part)
    stored = part.stored
    if proc is None or stored is None:
        return
    hw = proc.replica.hw
    topic, partition = part.tp
    for b in stored.isr + stored.elr:
        member = history.sim.replicas.get((topic, partition, b))
        if member is None or not member.up or member.replica is None or member.replica.role == OFFLINE:
            continue
        if history.sim.damage.is_damaged(member):
            continue
        # KIP-966: the HW stands still while the ISR is below min.insync.replicas, so an
        # ELR member (who left it then) holds everything below it -- whatever the promise
        # (an ELR kept across a lowered min.insync.replicas breaks this: issue 32 #1)
        need = hw
        leo = member.replica.log.log_end_offset
        if leo < need:
            part.fail("isr", now, f"{'ISR' if b in stored.isr else 'ELR'} member {b} holds offsets up to {leo}, below {need} (leader {proc.broker} HW {hw}, epoch {stored.leader_epoch})")


def check_epoch_cache(history: "History", proc: "ReplicaProcess", view: ReplicaView, now: int) -> None:
    r = proc.replica
    log = r.log
    leo = log.log_end_offset
    entries = tuple(tuple(e) for e in log.epoch_cache.entries)
    fs = r.follower_state
    reconciled = r.role == "follower" and fs is not None and fs.phase == FETCHING
    signature = (leo, entries, reconciled, log.log_start_offset)
    if signature == view.cache_checked:
        return
    history.epoch_checks += 1
    # batches: parse only what was added since the last check when the log only grew
    checked_leo = view.cache_checked[0] if view.cache_checked else None
    derived = view.derived
    if checked_leo is None or leo < checked_leo or log.log_start_offset != (view.cache_checked[3] if view.cache_checked else 0):
        derived = []
        start = log.log_start_offset
    else:
        derived = list(derived)
        start = checked_leo
    if leo > start:
        data = read_log(history, proc.tp, proc.broker, log, start)
        for _, h in records.iter_headers(data):
            if not derived or h.leader_epoch > derived[-1][0]:
                # (the batch holding the log start may begin below it: DeleteRecords)
                derived.append((h.leader_epoch, max(h.base_offset, log.log_start_offset)))
            elif h.leader_epoch < derived[-1][0]:
                history.parts[proc.tp].fail("epochs", now, f"replica {proc.broker}: batch at {h.base_offset} has epoch {h.leader_epoch} after epoch {derived[-1][0]}")
    view.derived = derived
    view.cache_checked = signature
    got = list(entries)
    if history.parts[proc.tp].compacted or log.config.compact:
        # The cleaner removes whole batches, the first of an epoch too (the cache keeps
        # the epoch's start): every batch must be in the epoch the cache says for it.
        cache = log.epoch_cache
        for epoch, start in derived:
            if cache.epoch_for_offset(start) != epoch:
                history.parts[proc.tp].fail(
                    "epochs", now, f"replica {proc.broker} ({r.role}): batch at {start} has epoch {epoch}, its epoch cache {list(entries)} says {cache.epoch_for_offset(start)}"
                )
                return
        return
    # a first epoch whose earliest records retention removed starts at the log start
    if got and derived and got[0][0] == derived[0][0] and got[0][1] <= derived[0][1]:
        got[0] = derived[0]
    if not derived and leo == log.log_start_offset and len(got) <= 1 and all(e[1] <= leo for e in got):
        return  # everything was deleted: the cache keeps the epoch the log start is in
    extra_ok = not reconciled and len(got) == len(derived) + 1 and got[-1][1] == leo and (not derived or got[-1][0] > derived[-1][0])
    if got != derived and not (extra_ok and got[:-1] == derived):
        history.parts[proc.tp].fail(
            "epochs",
            now,
            f"replica {proc.broker} ({r.role}{', reconciled' if reconciled else ''}) has epoch cache {list(entries)} "
            f"but its batches start epochs at {derived} (LEO {leo})",
        )
