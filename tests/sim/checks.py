"""What the simulation records while it runs, and the invariants it checks (README).

Checked after every event, on the process that handled it:

* **3** one writer per (partition, leader epoch); a replica's epoch never goes back; the
  controller persists leader epochs and controller epochs that only grow.
* **4** a leader's HW never goes back within its tenure; readers are only served data below
  the HW they are served with; the HW a reader sees never goes back across leader changes.
* **KIP-497** the controller's ISR is a subset of the current leader's maximal ISR.
* **ISR** every ISR member holds everything below the leader's HW, and every ELR member
  everything committed with the durability promise.
* **epochs** a replica's leader-epoch cache matches the epochs of the batches in its log
  (a leader, or a replica not yet reconciled, may add one epoch it has not written in).
* **6** a committed group offset never goes back through a commit of an older generation;
  in a Stable generation each subscribed partition has exactly one owner, both as the
  coordinator holds it and as members were told.

Checked once the healed system is quiet: **1** every record acknowledged with acks=all
while the promise held is in the final leader's log at its offset; **2** replicas agree
below the HW; what a leader committed with the promise, and what a reader was served, is
still there; **5** each idempotent producer's records appear exactly once, in order.

The promise (invariant 1): an acks=all record acknowledged while the ISR had at least
``min.insync.replicas`` members stays, unless an unclean election happened after it (which
Kafka allows to lose it). For topics that do not fsync every append the promise also needs
``min.insync.replicas >= 2``: such a topic survives losing one copy's page cache, not all of
them, and with 1 the controller may shrink the ISR to a single copy at any time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kcoord import records
from kcoord.group.metadata import STABLE
from kcoord.protocol.group import Assignment
from kcoord.replication.follower import FETCHING
from kcoord.replication.metadata import PartitionState
from kcoord.replication.roles import LEADER, OFFLINE

if TYPE_CHECKING:
    from .processes import CoordinatorProcess, ReplicaProcess
    from .scenario import TopicSpec
    from .simulation import Simulation

_ALL = 1 << 40


def record_value(producer_id: int, seq: int) -> bytes:
    """Every record's value names its producer and sequence number, so any copy of it in any
    log can be traced back to the one send it came from."""
    return b"%d:%d" % (producer_id, seq)


@dataclass
class Violation:
    invariant: str  # "1".."6", "kip497", "isr", "epochs", or "liveness" / "timer"
    at_ms: int
    message: str

    def __str__(self) -> str:
        return f"[inv {self.invariant} @ {self.at_ms} ms] {self.message}"


@dataclass
class AckedBatch:
    producer_id: int
    base_sequence: int
    count: int
    base_offset: int  # -1 when the leader only knew it was a duplicate of an older batch
    acked_ms: int
    leader_epoch: int = -1  # of the leader that acknowledged it
    promised: bool = True  # whether the ISR it was committed under made it a promise


@dataclass
class Committed:
    """A batch some leader's HW moved past, and whether the system promised to keep it."""

    data: bytes
    strong: bool
    leader: int
    epoch: int
    at_ms: int


@dataclass
class ReplicaView:
    """What the checks remember about one replica process between two events."""

    seen_epoch: int = -1
    lead_key: tuple[int, int] | None = None
    lead_hw: int = 0
    prev_hw: int = 0
    cache_checked: tuple = ()
    derived: list = field(default_factory=list)  # (epoch, start) from the batches checked


class PartitionHistory:
    def __init__(self, history: "History", tp: tuple[str, int], spec: "TopicSpec") -> None:
        self.history = history
        self.tp = tp
        self.spec = spec
        self.writer_of_epoch: dict[int, int] = {}
        self.last_append_epoch: dict[int, int] = {}
        self.leader_appends = 0
        self.committed: dict[int, Committed] = {}
        self.strong_hw = 0
        self.consumed: dict[int, tuple[bytes, bool]] = {}
        self.consumer_batches = 0
        self.acked: list[AckedBatch] = []
        self.producer_anomalies: list[tuple[int, str]] = []  # (producer id, what happened)
        self.reader_hw: dict[str, int] = {}
        self.unclean_at: list[int] = []
        self.unclean_epoch = -1  # the newest leader epoch that began with an unclean election
        self.stored: PartitionState | None = None

    def fail(self, invariant: str, now: int, message: str) -> None:
        self.history.fail(invariant, now, f"{self.tp[0]}-{self.tp[1]}: {message}")

    def strong(self, isr_size: int) -> bool:
        """Whether an acks=all write committed under an ISR of ``isr_size`` is promised.
        Topics that fsync every append: ISR >= min.insync.replicas. Page-cache topics only
        with min.insync.replicas >= 2 (README): with 1, the controller may shrink the ISR to
        one replica at any time, and that replica's page cache is then the only copy."""
        spec = self.spec
        if spec.lossy and spec.min_insync < 2:
            return False
        return isr_size >= spec.min_insync

    # -- invariant 3 ------------------------------------------------------------------------
    def on_leader_append(self, broker: int, epoch: int, stamped: list[int], now: int) -> None:
        self.leader_appends += 1
        if any(e != epoch for e in stamped):
            self.fail("3", now, f"broker {broker} appended as leader at epoch {epoch} but stamped {stamped}")
        writer = self.writer_of_epoch.setdefault(epoch, broker)
        if writer != broker:
            self.fail("3", now, f"two leaders accepted writes at epoch {epoch}: brokers {writer} and {broker}")
        last = self.last_append_epoch.get(broker, -1)
        if epoch < last:
            self.fail("3", now, f"broker {broker} appended as leader at epoch {epoch} after epoch {last}")
        self.last_append_epoch[broker] = max(last, epoch)

    # -- invariant 4 and the committed prefix -----------------------------------------------
    def on_leader_hw(self, broker: int, epoch: int, old_hw: int, new_hw: int, log: Any, strong: bool, now: int) -> None:
        start = max(old_hw, log.log_start_offset)
        if strong:
            self.strong_hw = max(self.strong_hw, new_hw)
        if start >= new_hw:
            return
        data = log.read(start, _ALL, new_hw)
        for pos, h in records.iter_headers(data):
            batch = bytes(data[pos : pos + h.size])
            prev = self.committed.get(h.base_offset)
            if prev is not None and prev.data != batch and prev.strong and not self.voided(prev.at_ms, prev.epoch) and epoch >= self.unclean_epoch:
                self.fail(
                    "2",
                    now,
                    f"offset {h.base_offset} was committed by leader {prev.leader} (epoch {prev.epoch}, {prev.at_ms} ms) "
                    f"and is committed again with different bytes by leader {broker} (epoch {epoch})",
                )
            if prev is None or prev.data != batch or (strong and not prev.strong):
                self.committed[h.base_offset] = Committed(batch, strong or (prev is not None and prev.strong and prev.data == batch), broker, epoch, now)

    def on_consumer_fetch(self, served_by: int, high_watermark: int, data: bytes, now: int) -> None:
        for pos, h in records.iter_headers(data):
            self.consumer_batches += 1
            if h.last_offset >= high_watermark:
                self.fail("4", now, f"a reader was served offsets {h.base_offset}..{h.last_offset} by broker {served_by} under HW {high_watermark}")
            batch = bytes(data[pos : pos + h.size])
            c = self.committed.get(h.base_offset)
            strong = c is None or c.data != batch or c.strong
            seen = self.consumed.get(h.base_offset)
            if seen is not None and seen[0] != batch and seen[1] and not self.unclean_at:
                self.fail("4", now, f"readers were served two different batches at offset {h.base_offset}, the first one committed with the durability promise")
            self.consumed[h.base_offset] = (batch, strong)

    def on_reader_hw(self, reader: str, broker: int, hw: int, now: int) -> None:
        """The HW a reader is shown never goes back -- as far as it was reached with the
        durability promise (a HW only a lone copy of a page-cache topic stood behind may
        be lost with that copy, and the HW with it)."""
        seen = self.reader_hw.get(reader, 0)  # the promised part of the highest HW it was shown
        if hw < seen and not self.unclean_at:
            self.fail("4", now, f"{reader} saw the HW go back from {seen} to {hw} (served by broker {broker})")
        self.reader_hw[reader] = max(seen, min(hw, self.strong_hw))

    def on_acked(self, batch: AckedBatch) -> None:
        """An acks=all success. It is a promise if the HW that acknowledged it moved under an
        ISR big enough (see :meth:`strong`), which the commit record of its offset says."""
        c = self.committed.get(batch.base_offset) if batch.base_offset >= 0 else None
        if c is not None and not c.strong:
            batch.promised = False
        self.acked.append(batch)

    def voided(self, at_ms: int, epoch: int) -> bool:
        """Whether an unclean election may have lost what was written (or acknowledged, or
        committed) at ``at_ms`` by the leader of ``epoch``: any election of a replica from
        outside the ISR after it, or one whose new epoch is above that leader's (a deposed
        leader that did not know yet still acknowledges at its old epoch)."""
        return any(t >= at_ms for t in self.unclean_at) or epoch < self.unclean_epoch

    def _unclean_since(self, at_ms: int) -> bool:
        return any(t >= at_ms for t in self.unclean_at)


class GroupHistory:
    """Invariant 6, per (group, partition). Commits are numbered in the order members sent
    them. A fetch sent at time t must return the offset of the latest-sent commit that had
    been acknowledged by t, or of one sent after it (it may have been applied meanwhile) --
    never an older one: that would be a commit the coordinator lost (a load that skipped
    it) or one of a fenced generation or coordinator landing after a newer one."""

    def __init__(self, history: "History") -> None:
        self.history = history
        # (group, tp) -> [(offset, generation, acked)] in the order sent
        self.commits: dict[tuple[str, tuple[str, int]], list[list]] = {}
        self.owners: dict[tuple[str, int], dict[tuple[str, int], str]] = {}
        self.commits_acked = 0
        self.fetches_checked = 0

    def floor(self, group: str, tp: tuple[str, int]) -> int:
        """Index of the latest-sent acknowledged commit (-1: none yet)."""
        commits = self.commits.get((group, tp), ())
        for i in range(len(commits) - 1, -1, -1):
            if commits[i][2]:
                return i
        return -1

    def on_commit_sent(self, group: str, tp: tuple[str, int], offset: int, generation: int) -> int:
        commits = self.commits.setdefault((group, tp), [])
        commits.append([offset, generation, False])
        return len(commits) - 1

    def on_commit_acked(self, group: str, tp: tuple[str, int], index: int, now: int) -> None:
        self.commits_acked += 1
        self.commits[(group, tp)][index][2] = True

    def on_fetched(self, group: str, tp: tuple[str, int], offset: int, floor: int, sent: int, now: int) -> None:
        self.fetches_checked += 1
        if floor < 0:
            return
        commits = self.commits[(group, tp)]
        if offset == commits[floor][0] or any(c[0] == offset for c in commits[floor + 1 :]):
            return
        self.history.fail(
            "6",
            now,
            f"group {group} {tp[0]}-{tp[1]}: an offset fetch sent at {sent} ms returned {offset}, but the latest commit "
            f"acknowledged before it was {commits[floor][0]} (generation {commits[floor][1]}), and no commit sent since was {offset}",
        )

    def on_assignment(self, group: str, generation: int, member: str, owned: list[tuple[str, int]], now: int) -> None:
        owners = self.owners.setdefault((group, generation), {})
        for tp in owned:
            other = owners.setdefault(tp, member)
            if other != member:
                self.history.fail("6", now, f"group {group} generation {generation}: members {other} and {member} were both assigned {tp[0]}-{tp[1]}")

    def check_stable(self, proc: "CoordinatorProcess", topics: dict[str, int], now: int) -> None:
        core = proc.core
        if core is None:
            return
        for group_id in core.group_ids():
            g = core.group(group_id)
            if g is None or g.state != STABLE or not g.members:
                continue
            owned: dict[tuple[str, int], str] = {}
            subscribed: set[str] = set()
            for m in g.members.values():
                try:
                    from kcoord.protocol.group import Subscription

                    subscribed.update(Subscription.decode(m.metadata_for(g.protocol)).topics)
                except Exception:
                    pass
                if not m.assignment:
                    continue
                for tp in Assignment.decode(m.assignment).topic_partitions():
                    other = owned.setdefault(tp, m.member_id)
                    if other != m.member_id:
                        self.history.fail("6", now, f"group {group_id} is Stable in generation {g.generation_id} with {tp[0]}-{tp[1]} owned by {other} and {m.member_id}")
            wanted = {(t, p) for t in subscribed if t in topics for p in range(topics[t])}
            missing = wanted - set(owned)
            if missing:
                self.history.fail("6", now, f"group {group_id} is Stable in generation {g.generation_id} but nobody owns {sorted(missing)}")


class History:
    def __init__(self, sim: "Simulation") -> None:
        self.sim = sim
        self.violations: list[Violation] = []
        self.parts: dict[tuple[str, int], PartitionHistory] = {}
        self.groups = GroupHistory(self)
        self.views: dict[str, ReplicaView] = {}
        self.stored_epochs: dict[str, int] = {}
        self.controller_epoch = -1
        self.epoch_checks = 0
        self.sim_producer_ids: set[int] = set()  # ids of the simulation's idempotent producers
        self.coordinator_epochs: dict[tuple[int, int], str] = {}  # (producer id, epoch) -> incarnation

    def fail(self, invariant: str, now: int, message: str) -> None:
        if len(self.violations) < 200:
            self.violations.append(Violation(invariant, now, message))

    def add_topic(self, spec: "TopicSpec") -> None:
        for p in range(spec.partitions):
            self.parts[(spec.name, p)] = PartitionHistory(self, (spec.name, p), spec)

    def partition(self, tp: tuple[str, int]) -> PartitionHistory:
        return self.parts[tp]

    # -- the controller's store -------------------------------------------------------------
    def on_store_write(self, key: str, value: bytes | None) -> None:
        now = self.sim.kernel.now
        if value is None:
            return
        if key.startswith("partition/"):
            p = PartitionState.decode(value)
            last = self.stored_epochs.get(key, -1)
            if p.leader_epoch < last:
                self.fail("3", now, f"controller persisted {key} at leader epoch {p.leader_epoch} after {last}")
            self.stored_epochs[key] = max(last, p.leader_epoch)
            part = self.parts.get((p.topic, p.partition))
            if part is None:
                return
            before = part.stored
            if (
                before is not None
                and p.leader >= 0
                and p.leader_epoch > before.leader_epoch
                and (
                    (p.leader != before.leader and p.leader not in before.isr and p.leader not in before.elr)
                    # the controller's own record: an ISR member whose directory was wiped
                    # (a new directory id) is elected only uncleanly
                    or p.last_unclean_epoch == p.leader_epoch
                )
            ):
                part.unclean_at.append(now)
                part.unclean_epoch = max(part.unclean_epoch, p.leader_epoch)
                self.sim.trace(f"{p.topic}-{p.partition}: unclean election of {p.leader} at epoch {p.leader_epoch}")
            part.stored = p
            if self.sim.tracing:
                self.sim.trace(f"store: {p.topic}-{p.partition} leader {p.leader} epoch {p.leader_epoch}/{p.partition_epoch} ISR {p.isr} ELR {p.elr}")
            self._check_isr_subset(part, now)
        elif key == "cluster":
            from kcoord.replication.metadata import ClusterState

            epoch = ClusterState.decode(value).controller_epoch
            if self.sim.tracing:
                self.sim.trace(f"store: controller epoch {epoch}")
            if epoch < self.controller_epoch:
                self.fail("3", now, f"controller epoch went back from {self.controller_epoch} to {epoch}")
            self.controller_epoch = max(self.controller_epoch, epoch)

    # -- replicas ---------------------------------------------------------------------------
    def on_replica_start(self, proc: "ReplicaProcess") -> None:
        self.views[proc.name] = ReplicaView(prev_hw=proc.replica.hw if proc.replica else 0)

    def on_replica_stop(self, proc: "ReplicaProcess") -> None:
        self.views.pop(proc.name, None)

    def on_produce_handled(self, proc: "ReplicaProcess", leo_before: int, epoch: int, role: Any) -> None:
        r = proc.replica
        if r is None or r.role == OFFLINE:
            return
        log = r.log
        if log.log_end_offset > leo_before:
            now = self.sim.kernel.now
            if role != LEADER:
                self.parts[proc.tp].fail("3", now, f"broker {proc.broker} appended a produce request as {role}")
            data = log.read(leo_before, _ALL)
            self.parts[proc.tp].on_leader_append(proc.broker, epoch, [h.leader_epoch for _, h in records.iter_headers(data)], now)

    def observe_replica(self, proc: "ReplicaProcess") -> None:
        r = proc.replica
        view = self.views.get(proc.name)
        if r is None or view is None or r.role == OFFLINE:
            return
        now = self.sim.kernel.now
        part = self.parts[proc.tp]
        if r.leader_epoch < view.seen_epoch:
            part.fail("3", now, f"replica {proc.broker} went from leader epoch {view.seen_epoch} back to {r.leader_epoch}")
        view.seen_epoch = max(view.seen_epoch, r.leader_epoch)
        if r.role == LEADER and r.leader_state is not None:
            key = (proc.incarnation, r.leader_epoch)
            if key != view.lead_key:
                view.lead_key = key
                view.lead_hw = min(view.prev_hw, r.hw)
            if r.hw < view.lead_hw:
                part.fail("4", now, f"leader {proc.broker} HW went back from {view.lead_hw} to {r.hw} at epoch {r.leader_epoch}")
            elif r.hw > view.lead_hw:
                part.on_leader_hw(proc.broker, r.leader_epoch, view.lead_hw, r.hw, r.log, part.strong(len(r.isr)), now)
                view.lead_hw = r.hw
            self._check_isr_subset(part, now)
        view.prev_hw = r.hw
        self._check_epoch_cache(proc, view, now)
        self._check_members_hold(part, now)
        if self.sim.scenario.txn_producers:
            self._check_transactions(proc, part, now)
        self.sim.on_replica_progress(proc)

    def _check_transactions(self, proc: "ReplicaProcess", part: PartitionHistory, now: int) -> None:
        """The LSO and the aborted-transaction index (tests/sim/transactions.py)."""
        from .transactions import check_txn_indexes, observe_leader_lso

        observe_leader_lso(self, proc, part, now)
        leader = self._leader_process(part)
        stored = part.stored
        if leader is None or stored is None:
            return
        hw = leader.replica.hw
        members = []
        for b in stored.isr:
            m = self.sim.replicas.get((part.tp[0], part.tp[1], b))
            if m is None or m is leader or not m.up or m.replica is None or m.replica.role == OFFLINE or self.sim.is_damaged(m):
                continue
            if m.replica.log.log_end_offset >= hw:
                members.append(m)
        check_txn_indexes(self, part, leader, members, now)

    def _leader_process(self, part: PartitionHistory) -> "ReplicaProcess | None":
        p = part.stored
        if p is None or p.leader < 0:
            return None
        proc = self.sim.replicas.get((p.topic, p.partition, p.leader))
        if proc is None or not proc.up or proc.replica is None:
            return None
        r = proc.replica
        if r.role != LEADER or r.leader_epoch != p.leader_epoch or r.leader_state is None:
            return None
        return proc

    def _check_isr_subset(self, part: PartitionHistory, now: int) -> None:
        """KIP-497: the ISR the controller would elect from is never larger than the set
        the leader computes its HW over."""
        proc = self._leader_process(part)
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

    def _check_members_hold(self, part: PartitionHistory, now: int) -> None:
        """Every ISR member holds everything below the leader's HW; every ELR member
        everything committed with the promise."""
        proc = self._leader_process(part)
        stored = part.stored
        if proc is None or stored is None:
            return
        hw = proc.replica.hw
        topic, partition = part.tp
        for b in stored.isr + stored.elr:
            member = self.sim.replicas.get((topic, partition, b))
            if member is None or not member.up or member.replica is None or member.replica.role == OFFLINE:
                continue
            if self.sim.is_damaged(member):
                continue
            need = hw if b in stored.isr else min(hw, part.strong_hw)
            leo = member.replica.log.log_end_offset
            if leo < need:
                part.fail("isr", now, f"{'ISR' if b in stored.isr else 'ELR'} member {b} holds offsets up to {leo}, below {need} (leader {proc.broker} HW {hw}, epoch {stored.leader_epoch})")

    def _check_epoch_cache(self, proc: "ReplicaProcess", view: ReplicaView, now: int) -> None:
        r = proc.replica
        log = r.log
        leo = log.log_end_offset
        entries = tuple(tuple(e) for e in log.epoch_cache.entries)
        fs = r.follower_state
        reconciled = r.role == "follower" and fs is not None and fs.phase == FETCHING
        signature = (leo, entries, reconciled, log.log_start_offset)
        if signature == view.cache_checked:
            return
        self.epoch_checks += 1
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
            data = log.read(start, _ALL)
            for _, h in records.iter_headers(data):
                if not derived or h.leader_epoch > derived[-1][0]:
                    derived.append((h.leader_epoch, h.base_offset))
                elif h.leader_epoch < derived[-1][0]:
                    self.parts[proc.tp].fail("epochs", now, f"replica {proc.broker}: batch at {h.base_offset} has epoch {h.leader_epoch} after epoch {derived[-1][0]}")
        view.derived = derived
        view.cache_checked = signature
        got = list(entries)
        # a first epoch whose earliest records retention removed starts at the log start
        if got and derived and got[0][0] == derived[0][0] and got[0][1] <= derived[0][1]:
            got[0] = derived[0]
        extra_ok = not reconciled and len(got) == len(derived) + 1 and got[-1][1] == leo and (not derived or got[-1][0] > derived[-1][0])
        if got != derived and not (extra_ok and got[:-1] == derived):
            self.parts[proc.tp].fail(
                "epochs",
                now,
                f"replica {proc.broker} ({r.role}{', reconciled' if reconciled else ''}) has epoch cache {list(entries)} "
                f"but its batches start epochs at {derived} (LEO {leo})",
            )

    # -- controller and coordinators ---------------------------------------------------------
    def observe_controller(self, proc: Any) -> None:
        # Its partition decisions are checked where they land: the store (on_store_write);
        # its security metadata against what it acknowledged (tests/sim/security.py).
        admin = self.sim.security_admin
        driver = proc.driver
        if admin is not None and driver is not None and driver.booted and driver.core is not None:
            admin.check(driver.core)

    def observe_coordinator(self, proc: "CoordinatorProcess") -> None:
        topics = {t.name: t.partitions for t in self.sim.scenario.topics}
        self.groups.check_stable(proc, topics, self.sim.kernel.now)
        d = proc.driver
        held = None if d is None else d.held_producer
        if held is not None:
            # The controller hands a coordinator's producer epoch to one incarnation only
            # (owned_producers.py); two writers on one epoch defeat the fence.
            holder = self.coordinator_epochs.setdefault(held, d.incarnation)
            if holder != d.incarnation:
                self.fail("6", self.sim.kernel.now, f"coordinator {proc.index}: producer {held[0]} epoch {held[1]} held by {holder} and {d.incarnation}")

    # -- final checks -----------------------------------------------------------------------
    def final_checks(self, tp: tuple[str, int], leader: int, logs: dict[int, Any], hw: int, now: int) -> None:
        part = self.parts[tp]
        final = logs[leader]
        data = final.read(final.log_start_offset, _ALL) if final.log_end_offset > final.log_start_offset else b""
        batches: dict[int, tuple[records.BatchHeader, bytes]] = {}
        values: dict[int, bytes | None] = {}
        for pos, h in records.iter_headers(data, check_crc=True):
            batch = bytes(data[pos : pos + h.size])
            batches[h.base_offset] = (h, batch)
            for rec in records.decode_batch(batch).records():
                values[rec.offset] = rec.value
        self._check_acked(part, leader, batches, values, now)
        self._check_replicas_agree(part, leader, logs, hw, now)
        self._check_committed(part, leader, batches, now)
        self._check_producers(part, batches, values, now)

    def _check_acked(self, part: PartitionHistory, leader: int, batches: dict, values: dict, now: int) -> None:
        where_is: dict[tuple[int, int], int] = {}
        for base in sorted(batches):
            h, _ = batches[base]
            if h.producer_id >= 0 and h.base_sequence >= 0:
                for i in range(h.record_count):
                    where_is.setdefault((h.producer_id, h.base_sequence + i), base + i)
        for a in part.acked:
            if not a.promised or part.voided(a.acked_ms, a.leader_epoch):
                continue
            for i in range(a.count):
                seq = a.base_sequence + i
                where = where_is.get((a.producer_id, seq))
                want = a.base_offset + i if a.base_offset >= 0 else None
                if where is None:
                    part.fail("1", now, f"record {a.producer_id}:{seq} acked at offset {want} ({a.acked_ms} ms) is missing from leader {leader}'s final log")
                elif want is not None and where != want:
                    part.fail("1", now, f"record {a.producer_id}:{seq} acked at offset {want} is at offset {where} in the final log")
                elif values.get(where) != record_value(a.producer_id, seq):
                    part.fail("1", now, f"offset {where} holds {values.get(where)!r}, not record {a.producer_id}:{seq}")

    def _check_replicas_agree(self, part: PartitionHistory, leader: int, logs: dict[int, Any], hw: int, now: int) -> None:
        ref = logs[leader]
        for broker in sorted(logs):
            log = logs[broker]
            start = max(log.log_start_offset, ref.log_start_offset)
            end = min(hw, log.log_end_offset)
            if start >= end:
                continue
            mine = log.read(start, _ALL, end)
            theirs = ref.read(start, _ALL, end)
            if mine != theirs:
                part.fail("2", now, f"replica {broker} and leader {leader} differ below HW {hw}: {_first_difference(mine, theirs)}")

    def _check_committed(self, part: PartitionHistory, leader: int, batches: dict, now: int) -> None:
        for base in sorted(part.committed):
            c = part.committed[base]
            if not c.strong or part.voided(c.at_ms, c.epoch):
                continue
            got = batches.get(base)
            if got is None or got[1] != c.data:
                part.fail(
                    "1",
                    now,
                    f"batch at offset {base} committed by leader {c.leader} at epoch {c.epoch} ({c.at_ms} ms) "
                    f"is {'missing from' if got is None else 'different in'} the final log of leader {leader}",
                )
        for base in sorted(part.consumed):
            data, strong = part.consumed[base]
            if not strong or part.unclean_at:
                continue
            got = batches.get(base)
            if got is None or got[1] != data:
                part.fail("4", now, f"a reader read a batch at offset {base} that the final log does not hold")

    def _check_producers(self, part: PartitionHistory, batches: dict, values: dict, now: int) -> None:
        """Per producer id: epochs never go back in log order (an older incarnation of a
        fenced writer, such as a group coordinator, never lands after a newer one), and
        within an epoch sequences run 0, 1, 2, ... in offset order -- no duplicate, no
        reordering. Records of the simulation's producers also name their sequence."""
        state: dict[int, tuple[int, int]] = {}  # producer id -> (epoch, next sequence)
        lossy_ok = bool(part.unclean_at)
        ours = self.sim_producer_ids
        for base in sorted(batches):
            h, _ = batches[base]
            if h.producer_id < 0 or h.base_sequence < 0:
                continue
            epoch, nxt = state.get(h.producer_id, (h.producer_epoch, 0))
            if h.producer_epoch < epoch:
                part.fail("5", now, f"producer {h.producer_id}: batch at offset {base} has epoch {h.producer_epoch} after epoch {epoch} (a fenced writer landed)")
                continue
            if h.producer_epoch > epoch:
                epoch, nxt = h.producer_epoch, 0
            if h.base_sequence != nxt and not (lossy_ok and h.base_sequence > nxt):
                kind = "duplicate" if h.base_sequence < nxt else "gap/reorder"
                part.fail("5", now, f"producer {h.producer_id} epoch {epoch}: batch at offset {base} has sequence {h.base_sequence}, expected {nxt} ({kind})")
            state[h.producer_id] = (epoch, max(nxt, h.base_sequence + h.record_count))
            if h.producer_id in ours:
                for i in range(h.record_count):
                    if values.get(base + i) != record_value(h.producer_id, h.base_sequence + i):
                        part.fail("5", now, f"offset {base + i}: value {values.get(base + i)!r} is not producer {h.producer_id} sequence {h.base_sequence + i}")
        if not lossy_ok:  # an unclean election may lose acknowledged batches: sequences then break
            for pid, anomaly in part.producer_anomalies:
                if all(a.promised for a in part.acked if a.producer_id == pid):
                    part.fail("5", now, anomaly)


def _first_difference(a: bytes, b: bytes) -> str:
    ha = [(h.base_offset, h.record_count, h.crc) for _, h in records.iter_headers(a)]
    hb = [(h.base_offset, h.record_count, h.crc) for _, h in records.iter_headers(b)]
    for x, y in zip(ha, hb):
        if x != y:
            return f"first differing batch (base, count, crc): {x} vs {y}"
    return f"{len(ha)} vs {len(hb)} batches"
