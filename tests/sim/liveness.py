"""Invariant **isr-liveness**: a leader never proposes to drop a follower that was caught up
within ``replica.lag.time.max.ms`` (issue 32, finding 3).

The harness keeps its own account of each follower, from the fetches that reach a leader
(Kafka's rule, ``Replica.updateFetchState``): a fetch at or past the leader's log end makes
the follower caught up at its arrival; a fetch at or past the log end the leader had at
the follower's previous fetch makes it caught up at that previous fetch. The account is
per follower *process* (the ``replica_incarnation`` its fetches carry): another process's
fetch starts it over, since that process may hold less. When a replica starts leading an
epoch, every ISR member counts as caught up then (the leader's grace period), credited to
the process the harness knows it had at that moment; if the leader never hears that
process, the first process it hears takes the grace over, as the leader's own account does
(it is the replica's until a process is heard: Kafka's lastCaughtUpTime is per replica). A
LeaderAndIsr that changes the ISR during the leadership gives the new members without an
account the same grace, as the leader does -- except a process an expansion named whose
fetches the harness set aside: the leader judges it by them, so the harness, which has no
figures for it, judges it from its next fetch.

An ISR member's account stays with its *pinned* process (the leader's admitted one: the
first heard, or the one an expansion named): a fetch of another process of that broker
(restarted, or an old one still running) puts the member out of step, and the leader may
propose it out at once (sim seed 21425: an old process must not keep a member in the ISR).

A proposal (AlterPartition) that leaves out a member of the leader's confirmed ISR whose
current process was caught up less than ``replica.lag.time.max.ms`` before is a violation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .partition_history import PartitionHistory
    from .processes import ReplicaProcess


@dataclass
class Account:
    process: str | None  # the follower process these figures are for (None: unknown)
    caught_up_ms: int = -1
    last_fetch_ms: int = -1
    leader_leo_at_last_fetch: int = -1
    heard: bool = False  # the process was heard by this leadership (it is pinned, if a member)
    # An expansion named the process before the harness counted any fetch of it for this
    # account: the leader judges it by fetches the harness set aside (sim seed 50353)
    named: bool = False


@dataclass
class IsrWatch:
    """One leadership: a leader process at one epoch."""

    started_ms: int
    accounts: dict[int, Account] = field(default_factory=dict)


def leadership_key(proc: "ReplicaProcess") -> tuple[str, int]:
    assert proc.replica is not None
    return (proc.incarnation_id, proc.replica.leader_epoch)


def on_lead(part: "PartitionHistory", proc: "ReplicaProcess", now: int) -> None:
    """``proc`` leads a new epoch from now: its ISR members get the grace period."""
    r = proc.replica
    assert r is not None
    watch = IsrWatch(now)
    for b in r.isr:
        if b != proc.broker:
            watch.accounts[b] = Account(_process_of(part, b), caught_up_ms=now)
    part.isr_watch[leadership_key(proc)] = watch


def on_controller_isr(part: "PartitionHistory", proc: "ReplicaProcess", now: int) -> None:
    """A LeaderAndIsr at the leader's epoch changed its ISR: members without an account
    get the grace period."""
    watch = part.isr_watch.get(leadership_key(proc))
    if watch is None:
        return
    for b in proc.replica.isr:
        if b == proc.broker:
            continue
        a = watch.accounts.get(b)
        if a is None:
            watch.accounts[b] = Account(_process_of(part, b), caught_up_ms=now)
        elif a.caught_up_ms < 0 and not a.named:
            # a process an expansion named keeps the leader's figures from its fetches, not
            # a grace; the harness has none for it, so it judges it only from its next fetch
            a.caught_up_ms = now


def on_fetch(part: "PartitionHistory", proc: "ReplicaProcess", req, now: int) -> None:
    """A follower's fetch reaches leader ``proc`` (before it is handled)."""
    r = proc.replica
    if r is None or r.leading is None:
        return
    log = r.log
    leo = log.log_end_offset
    if req.current_leader_epoch >= 0 and req.current_leader_epoch != r.leader_epoch:
        return  # refused
    if req.replica_id == proc.broker or req.replica_id not in r.replicas:
        return
    if req.fetch_offset < log.log_start_offset or req.fetch_offset > leo:
        return  # refused (OFFSET_OUT_OF_RANGE)
    watch = part.isr_watch.get(leadership_key(proc))
    if watch is None:
        return
    a = watch.accounts.get(req.replica_id)
    # a member, or proposed as one: the leader pins a process from the proposal on
    member = req.replica_id in r.leader_state.maximal_isr()
    if a is not None and not a.heard:
        # a grace given to no process, or to one never heard, goes to the first process
        # heard, as at the leader (whose account is the replica's until a process is heard)
        if a.process is not None and a.process != req.replica_incarnation and a.last_fetch_ms >= 0:
            a.caught_up_ms = a.last_fetch_ms = a.leader_leo_at_last_fetch = -1
        a.process = req.replica_incarnation
    elif a is not None and member and a.process != req.replica_incarnation:
        # another process of a pinned member: out of step, and the pinned process's next
        # fetch starts its figures over (the leader keeps one process's figures)
        a.caught_up_ms = a.last_fetch_ms = a.leader_leo_at_last_fetch = -1
        return
    elif a is None or a.process != req.replica_incarnation:
        a = watch.accounts[req.replica_id] = Account(req.replica_incarnation)
    a.heard = True
    a.named = False
    if req.fetch_offset >= leo:
        a.caught_up_ms = now
    elif a.last_fetch_ms >= 0 and req.fetch_offset >= a.leader_leo_at_last_fetch:
        a.caught_up_ms = max(a.caught_up_ms, a.last_fetch_ms)
    a.last_fetch_ms = now
    a.leader_leo_at_last_fetch = leo


def on_proposal(part: "PartitionHistory", proc: "ReplicaProcess", req, now: int) -> None:
    """Leader ``proc`` sends AlterPartition ``req``."""
    r = proc.replica
    if r is None or r.leading is None:
        return
    watch = part.isr_watch.get(leadership_key(proc))
    if watch is None:
        return
    lag = r.config.replica_lag_time_max_ms
    for b, inc in req.incarnations.items():
        # an expansion pins the new member to the process it names
        if b in req.new_isr and b not in r.leader_state.isr:
            a = watch.accounts.get(b)
            if a is None or a.process != inc:
                watch.accounts[b] = Account(inc, heard=True, named=True)
    for b in r.leader_state.isr:
        if b == proc.broker or b in req.new_isr:
            continue
        a = watch.accounts.get(b)
        if a is None or a.caught_up_ms < 0 or now - a.caught_up_ms >= lag:
            continue
        since = f"the grace from when the leader took over at {watch.started_ms} ms" if a.caught_up_ms == watch.started_ms else "its fetches"
        part.fail(
            "isr-liveness",
            now,
            f"leader {proc.broker} (epoch {r.leader_epoch}, {proc.incarnation_id}) proposes ISR {req.new_isr} without follower {b}, "
            f"whose process {a.process} was caught up {now - a.caught_up_ms} ms ago (by {since}; "
            f"replica.lag.time.max.ms {lag}; its last fetch {'at ' + str(a.last_fetch_ms) + ' ms' if a.last_fetch_ms >= 0 else 'none yet'})",
        )


def _process_of(part: "PartitionHistory", broker: int) -> str | None:
    proc = part.history.sim.replicas.get((part.tp[0], part.tp[1], broker))
    if proc is None or not proc.up or proc.replica is None:
        return None
    return proc.incarnation_id
