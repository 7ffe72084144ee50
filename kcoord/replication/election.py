"""Who leads a partition next. Pure rules, so they are tested exhaustively without Ray.

* Clean election: the first live ISR member in replica-assignment order (the preferred
  leader first), members the controller has heard before those alive only by its grace. Every ISR member holds every record below the HW, so nothing acked is lost.
* No live ISR member: the partition goes offline (no leader) and keeps its ISR, so the
  first ISR member to come back is elected -- unless the topic allows unclean election,
  which then picks the live replica with the longest log and may lose acked records.
* Topics without per-append fsync (flush.messages != 1), where a crash can lose a
  replica's unflushed tail (KIP-966's problem): a replica that restarted is *suspect* until
  it rejoins the ISR, and is not elected while a trusted ISR member or a trusted *eligible
  leader replica* (ELR: it left the ISR while the ISR was below min.insync.replicas, so it
  holds every acknowledged record) is alive; with every candidate back but suspect, the
  longest log wins. Durable topics never use the ELR.
* A replica whose log directory was replaced (wiped disk; ``holds_data`` false) holds
  nothing of what it held as an ISR or ELR member: it is no candidate, and is not waited
  for. With nobody else the partition stays offline, unless unclean election is allowed.
* A live leader is never replaced except to restore the preferred leader when it is in
  the ISR (controlled move); the periodic check moves only the partitions of brokers that
  lead less than their share (``imbalanced_brokers``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from .metadata import NO_LEADER, PartitionState


@dataclass(frozen=True)
class Election:
    leader: int
    isr: list[int]
    unclean: bool = False

    @property
    def offline(self) -> bool:
        return self.leader == NO_LEADER


def elect_leader(
    p: PartitionState,
    alive: Callable[[int], bool],
    unclean_allowed: bool = False,
    log_end_offsets: Mapping[int, int] | None = None,
    trusted: Callable[[int], bool] | None = None,
    holds_data: Callable[[int], bool] | None = None,
    heard: Callable[[int], bool] | None = None,
) -> Election:
    """``trusted`` is given for topics whose appends are not fsynced, where a restarted
    replica may have lost its unflushed tail: it says which ISR and ELR members are known
    not to have restarted since they last held every acknowledged record. Only those lead
    while any is alive; if every ISR and ELR member is back but none is trusted, the longest
    log leads (under at most one damaged replica it holds what the others hold).
    ``holds_data(b)`` is false for a replica whose directory was replaced since it joined
    the ISR or ELR (None: all hold theirs). ``heard(b)`` is false for a replica the
    controller has not heard since it started watching it (a restarted controller's grace):
    it leads only if no heard member can, and leaves the new ISR -- maybe nothing runs there yet, and the
    new leader's HW would wait for it for replica.lag.time.max.ms; it comes back by the
    leader's expansion once it fetches (None: all heard)."""
    if holds_data is None:
        holds_data = lambda b: True  # noqa: E731
    isr = [b for b in p.isr if holds_data(b)]
    elr = [b for b in p.elr if holds_data(b)]
    if trusted is None:
        trusted = lambda b: True  # noqa: E731
        lossy = False
    else:
        lossy = True
    if heard is None:
        heard = lambda b: True  # noqa: E731
    # Heard members lead first (a stable sort keeps assignment order within each kind): one
    # alive only by a restarted controller's grace may run nothing, and would hold the
    # partition leaderless until the grace runs out.
    leaders = sorted((b for b in p.replicas if b in isr and alive(b) and trusted(b)), key=lambda b: not heard(b))
    if leaders:
        # Trust decides who may lead; every live ISR member stays in sync (the leader's HW
        # follows each one's real fetch offset, so an untrusted one cannot inflate it).
        live_isr = [b for b in p.replicas if b in isr and alive(b) and (b == leaders[0] or heard(b))]
        return Election(leaders[0], live_isr)
    if lossy:
        live_elr = sorted((b for b in p.replicas if b in elr and alive(b) and trusted(b)), key=lambda b: not heard(b))
        if live_elr:
            return Election(live_elr[0], [live_elr[0]])
        candidates = [b for b in p.replicas if b in isr or b in elr]
        leos = log_end_offsets or {}
        # Every candidate must be back *and* have told us its log end: comparing against an
        # unknown log end could elect an empty log over a full one.
        if candidates and all(alive(b) and b in leos for b in candidates):
            best = max(candidates, key=lambda b: (leos.get(b, -1), -p.replicas.index(b)))
            return Election(best, [best])
    if unclean_allowed and not any(alive(b) for b in (*isr, *elr)):
        # Unclean means no replica known to hold every acknowledged record is alive; while
        # one is (just not trusted or heard from yet), wait for it instead.
        live = [b for b in p.replicas if alive(b)]
        if live:
            leos = log_end_offsets or {}
            # Longest log loses least; ties go to assignment order.
            best = max(live, key=lambda b: (leos.get(b, -1), -p.replicas.index(b)))
            return Election(best, [best], unclean=True)
    return Election(NO_LEADER, list(p.isr))


def preferred_leader_move(p: PartitionState, alive: Callable[[int], bool], settled: Callable[[int], bool] | None = None) -> int | None:
    """The preferred replica, if leadership should move back to it now. ``settled``, if
    given, must hold for every ISR member: a new leader gives each a fresh
    ``replica.lag.time.max.ms``, so moving while a member may be dead holds the HW back
    for that long again."""
    preferred = p.preferred_leader
    if p.leader == preferred or p.leader == NO_LEADER:
        return None
    if settled is not None and not all(settled(b) for b in p.isr):
        return None
    if preferred in p.isr and alive(preferred):
        return preferred
    return None


def imbalanced_brokers(partitions: Iterable[PartitionState], percentage: int) -> set[int]:
    """Brokers that lead too few of the partitions they are preferred for: more than
    ``percentage`` of them are led by another broker (Kafka's
    leader.imbalance.per.broker.percentage)."""
    preferred: dict[int, int] = {}
    elsewhere: dict[int, int] = {}
    for p in partitions:
        b = p.preferred_leader
        preferred[b] = preferred.get(b, 0) + 1
        if p.leader != b:
            elsewhere[b] = elsewhere.get(b, 0) + 1
    return {b for b, n in elsewhere.items() if n * 100 > percentage * preferred[b]}


def shrink_isr_without(p: PartitionState, broker: int) -> list[int] | None:
    """ISR after a follower's failure, or None when it cannot shrink: never below one
    member, and never while the partition is offline -- then the ISR is exactly the set of
    replicas holding every acknowledged record, kept whole so any of them can lead again."""
    if p.leader == NO_LEADER or broker not in p.isr or broker == p.leader or len(p.isr) <= 1:
        return None
    return [b for b in p.isr if b != broker]
