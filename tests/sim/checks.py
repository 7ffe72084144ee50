"""What the simulation records while it runs, and the invariants it checks (README).

Checked after every event, on the process that handled it:

* **3** one writer per (partition, leader epoch); a replica's epoch never goes back; the
  controller persists leader epochs and controller epochs that only grow.
* **4** a leader's HW never goes back within its tenure; readers are only served data below
  the HW they are served with; the HW a reader sees never goes back across leader changes.
* **KIP-497** the controller's ISR is a subset of the current leader's maximal ISR.
* **ISR** every ISR member, and every ELR member, holds everything below the leader's HW.
* **epochs** a replica's leader-epoch cache matches the epochs of the batches in its log
  (a leader, or a replica not yet reconciled, may add one epoch it has not written in).
* **6** a committed group offset never goes back through a commit of an older generation;
  in a Stable generation each subscribed partition has exactly one owner, both as the
  coordinator holds it and as members were told.

Issue 32's invariants, checked after every event too:

* **deleted** records below an acknowledged DeleteRecords, or below the log start every
  replica of the partition has reached (retention, or DeleteRecords followed), are never
  readable again: the partition's current leader holds none of them (unless an unclean
  election came after);
* **config** an acknowledged topic config is never replaced by an older one on any replica:
  a topic's configs are numbered in the order the operator's alters were made (each is
  retried until acknowledged, one at a time), and the number a replica runs never goes
  back -- across its processes, so a restarted process must not run an older one either;
* **isr-liveness** a leader never proposes to drop a follower from the ISR that was caught
  up within ``replica.lag.time.max.ms``, by Kafka's rule (a fetch at or past the leader's
  log end, or at or past the log end the leader had at that follower's previous fetch)
  over the fetches of one follower process; ISR members count as caught up when the
  leader took over (the grace), credited to the process each had then;
* **5** (also during the run) an idempotent producer's record committed with the promise is
  never committed again at another offset: a retried batch written twice, compaction
  included.

Checked once the healed system is quiet: **1** every record acknowledged with acks=all
while the promise held is in the final leader's log at its offset; **2** replicas agree
below the HW; what a leader committed with the promise, and what a reader was served, is
still there; **5** each idempotent producer's records appear exactly once, in order.

The promise (invariant 1): an acks=all record acknowledged while the ISR had at least
``min.insync.replicas`` members (the leader's config then: operators change it) stays,
unless an unclean election happened after it (which Kafka allows to lose it). For topics
that do not fsync every append the promise also needs ``min.insync.replicas >= 2``: such a
topic survives losing one copy's page cache, not all of them, and with 1 the controller may
shrink the ISR to a single copy at any time. Records below the log start (retention,
DeleteRecords) and, on compacted topics, records a later record of the same key supersedes
may be gone: the final checks are exact about both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kcoord import records
from kcoord.group.metadata import STABLE
from kcoord.protocol.controller import AlterPartitionRequest, LeaderAndIsrRequest
from kcoord.protocol.group import Assignment
from kcoord.protocol.replication import FetchRequest
from kcoord.replication.follower import FETCHING
from kcoord.replication.metadata import PartitionState
from kcoord.replication.roles import LEADER, OFFLINE

from . import liveness
from .configs import ConfigHistory

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


def read_log(history: "History", tp: tuple[str, int], broker: int, log: Any, start: int, end: int | None = None) -> bytes:
    """``log.read`` for the checks: a log that cannot serve a read of what it holds is a
    violation (**log**), not a crash of the harness."""
    try:
        return log.read(start, _ALL, end)
    except Exception as exc:  # noqa: BLE001 - whatever the log raised is the finding
        if _is_storage_error(exc):
            raise
        history.fail("log", history.sim.kernel.now, f"{tp[0]}-{tp[1]}: replica {broker}'s log (start {log.log_start_offset}, end {log.log_end_offset}) cannot be read from {start}: {exc!r}")
        return b""


def _is_storage_error(exc: BaseException) -> bool:
    from kcoord.replication.entry import is_storage_error

    return is_storage_error(exc)


def _records_of(data: bytes) -> dict[int, tuple]:
    """offset -> (key, value) of every record in ``data``."""
    out: dict[int, tuple] = {}
    for pos, h in records.iter_headers(data):
        d = records.decode_batch(data, pos)
        keys = d.keys if d.keys is not None else [None] * len(d.values)
        for i, (k, v) in enumerate(zip(keys, d.values)):
            out[h.base_offset + i] = (k, v)
    return out


def consistent(a: bytes, b: bytes, compacted: bool) -> bool:
    """Whether two copies of a batch (same base offset) hold the same records: byte for
    byte, or -- where the cleaner rewrites batches -- the same key and value at every offset
    both still hold."""
    if a == b:
        return True
    if not compacted:
        return False
    ra, rb = _records_of(a), _records_of(b)
    return all(ra[o] == rb[o] for o in ra.keys() & rb.keys())


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
        # when operators made the topic lose its promise: min.insync.replicas below 2 on a
        # page-cache topic (README: its one copy's page cache may then be all there is), and
        # what was promised before may go with it
        self.weakened_at: list[int] = []
        self.unclean_epoch = -1  # the newest leader epoch that began with an unclean election
        self.stored: PartitionState | None = None
        # issue 32
        self.compacted = spec.compact
        self.keys: dict[tuple[int, int], bytes] = {}  # (producer id, sequence) -> key
        self.first_commit: dict[tuple[int, int], tuple[int, int, int, bool]] = {}  # -> (offset, ms, epoch, strong)
        self.deleted_floor = 0  # below an acknowledged DeleteRecords
        self.deleted_at = -1
        self.log_starts: dict[int, int] = {}  # broker -> its log start, as last seen
        self.retention_floor = 0  # every replica's log start has passed it
        self.retention_at = -1
        self.deletions = 0
        self.isr_watch: dict[tuple[str, int], "IsrWatch"] = {}

    def fail(self, invariant: str, now: int, message: str) -> None:
        self.history.fail(invariant, now, f"{self.tp[0]}-{self.tp[1]}: {message}")

    def strong(self, isr_size: int, min_insync: int | None = None) -> bool:
        """Whether an acks=all write committed under an ISR of ``isr_size`` is promised: the
        ISR had at least min.insync.replicas members (the leader's config then: operators
        change it). Page-cache topics only with min.insync.replicas >= 2 (README): with 1,
        the controller may shrink the ISR to one replica at any time, and that replica's
        page cache is then the only copy."""
        min_insync = self.spec.min_insync if min_insync is None else min_insync
        if self.spec.lossy and min_insync < 2:
            return False
        return isr_size >= min_insync

    # -- issue 32 ---------------------------------------------------------------------------
    def on_keys(self, producer_id: int, seq: int, keys: list[bytes]) -> None:
        for i, k in enumerate(keys):
            self.keys[(producer_id, seq + i)] = k

    def on_records_deleted(self, offset: int, low_watermark: int, broker: int, epoch: int, sent: int, now: int) -> None:
        """An acknowledged DeleteRecords: nothing below max(offset, low watermark) is
        readable from now on."""
        self.deletions += 1
        floor = max(offset, low_watermark)
        self.history.sim.trace(f"admin: DeleteRecords {self.tp[0]}-{self.tp[1]} up to {offset} acknowledged by broker {broker} (epoch {epoch}): low watermark {low_watermark}")
        if floor > self.deleted_floor:
            self.deleted_floor = floor
            self.deleted_at = now

    def read_floor(self) -> tuple[int, int, str]:
        """(offset below which nothing may be read, since when, why)."""
        d = (self.deleted_floor, self.deleted_at, "an acknowledged DeleteRecords") if not self._unclean_since(self.deleted_at) else (0, -1, "")
        r = (self.retention_floor, self.retention_at, "the log start of every replica") if not self._unclean_since(self.retention_at) else (0, -1, "")
        return max(d, r)

    def on_log_start(self, broker: int, log_start: int, assignment: list[int], now: int) -> None:
        if self.log_starts.get(broker) == log_start:
            return
        self.log_starts[broker] = log_start
        low = min(self.log_starts.get(b, 0) for b in assignment)
        if low > self.retention_floor:
            self.retention_floor = low
            self.retention_at = now

    def on_commit_records(self, h: Any, broker: int, epoch: int, strong: bool, ours: set[int], now: int) -> None:
        """Invariant 5 as records commit: an idempotent producer's record committed with the
        promise is never committed again at another offset."""
        pid = h.producer_id
        if pid not in ours or h.base_sequence < 0:
            return
        first = self.first_commit
        for i in range(h.record_count):
            key = (pid, h.base_sequence + i)
            offset = h.base_offset + i
            prev = first.get(key)
            if prev is None:
                first[key] = (offset, now, epoch, strong)
            elif prev[0] != offset:
                if prev[3] and not self.voided(prev[1], prev[2]) and epoch >= self.unclean_epoch:
                    self.fail(
                        "5",
                        now,
                        f"record {pid}:{key[1]} was committed at offset {prev[0]} (epoch {prev[2]}, {prev[1]} ms) and again at offset "
                        f"{offset} by leader {broker} (epoch {epoch}): a duplicate{' (compacted topic)' if self.compacted else ''}",
                    )
                first[key] = (offset, now, epoch, strong)
            elif strong and not prev[3]:
                first[key] = (offset, prev[1], prev[2], True)

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
        data = read_log(self.history, self.tp, broker, log, start, new_hw)
        ours = self.history.sim_producer_ids
        for pos, h in records.iter_headers(data):
            batch = bytes(data[pos : pos + h.size])
            if h.producer_id in ours:
                self.on_commit_records(h, broker, epoch, strong, ours, now)
            prev = self.committed.get(h.base_offset)
            if (
                prev is not None
                and prev.strong
                and not consistent(prev.data, batch, self.compacted)
                and not self.voided(prev.at_ms, prev.epoch)
                and epoch >= self.unclean_epoch
            ):
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
            if seen is not None and seen[1] and not self.lost_any and not consistent(seen[0], batch, self.compacted):
                self.fail("4", now, f"readers were served two different batches at offset {h.base_offset}, the first one committed with the durability promise")
            self.consumed[h.base_offset] = (batch, strong)

    def on_reader_hw(self, reader: str, broker: int, hw: int, now: int) -> None:
        """The HW a reader is shown never goes back -- as far as it was reached with the
        durability promise (a HW only a lone copy of a page-cache topic stood behind may
        be lost with that copy, and the HW with it)."""
        seen = self.reader_hw.get(reader, 0)  # the promised part of the highest HW it was shown
        if hw < seen and not self.lost_any:
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
        return any(t >= at_ms for t in self.unclean_at) or epoch < self.unclean_epoch or any(t >= at_ms for t in self.weakened_at)

    @property
    def lost_any(self) -> bool:
        """Whether anything promised may have been lost since the start (an unclean
        election, or an operator's lowering of the promise)."""
        return bool(self.unclean_at or self.weakened_at)

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
        self.configs = ConfigHistory(self, sim.scenario.broker_config)

    def fail(self, invariant: str, now: int, message: str) -> None:
        if len(self.violations) < 200:
            self.violations.append(Violation(invariant, now, message))

    def add_topic(self, spec: "TopicSpec") -> None:
        for p in range(spec.partitions):
            self.add_partition(spec, p)
        self.configs.add_topic(spec)

    def add_partition(self, spec: "TopicSpec", p: int) -> None:
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
            nemesis = getattr(self.sim, "nemesis", None)
            if nemesis is not None:
                nemesis.on_partition_stored(p)
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

    def on_replica_twin(self, proc: "ReplicaProcess", ghost: "ReplicaProcess") -> None:
        """``proc`` runs on as ``ghost``: what was checked of it continues under its name."""
        view = self.views.pop(proc.name, None)
        if view is not None:
            self.views[ghost.name] = view

    # -- issue 32: what reaches a replica, and what it sends -----------------------------------
    def on_replica_request(self, proc: "ReplicaProcess", request: Any) -> Any:
        """Before ``proc`` handles ``request``; returns what :meth:`after_replica_request`
        needs."""
        r = proc.replica
        if r is None or r.role != LEADER:
            return None
        if isinstance(request, FetchRequest) and request.replica_id >= 0:
            liveness.on_fetch(self.parts[proc.tp], proc, request, self.sim.kernel.now)
        elif isinstance(request, LeaderAndIsrRequest) and request.leader_epoch == r.leader_epoch and request.partition_epoch > r.partition_epoch:
            return list(r.isr)
        return None

    def after_replica_request(self, proc: "ReplicaProcess", request: Any, before: Any) -> None:
        r = proc.replica
        if before is not None and r is not None and r.role == LEADER and list(r.isr) != before:
            liveness.on_controller_isr(self.parts[proc.tp], proc, self.sim.kernel.now)

    def on_replica_call(self, proc: "ReplicaProcess", method: str, request: Any) -> None:
        if method == "alter_partition" and isinstance(request, AlterPartitionRequest):
            liveness.on_proposal(self.parts[proc.tp], proc, request, self.sim.kernel.now)

    def on_produce_handled(self, proc: "ReplicaProcess", leo_before: int, epoch: int, role: Any) -> None:
        r = proc.replica
        if r is None or r.role == OFFLINE:
            return
        log = r.log
        if log.log_end_offset > leo_before:
            now = self.sim.kernel.now
            if role != LEADER:
                self.parts[proc.tp].fail("3", now, f"broker {proc.broker} appended a produce request as {role}")
            data = read_log(self, proc.tp, proc.broker, log, leo_before)
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
                liveness.on_lead(part, proc, now)
            if r.hw < view.lead_hw:
                part.fail("4", now, f"leader {proc.broker} HW went back from {view.lead_hw} to {r.hw} at epoch {r.leader_epoch}")
            elif r.hw > view.lead_hw:
                part.on_leader_hw(proc.broker, r.leader_epoch, view.lead_hw, r.hw, r.log, part.strong(len(r.isr), r.config.min_insync_replicas), now)
                view.lead_hw = r.hw
            self._check_isr_subset(part, now)
        view.prev_hw = r.hw
        self._check_epoch_cache(proc, view, now)
        self._check_members_hold(part, now)
        if not proc.is_ghost:
            self.configs.check(proc, now)
            log = r.log
            part.on_log_start(proc.broker, log.log_start_offset, self.sim.assignments[proc.tp], now)
            if r.role == LEADER:
                self._check_deleted(part, proc, now)
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

    def _check_deleted(self, part: PartitionHistory, proc: "ReplicaProcess", now: int) -> None:
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
        """Every ISR and ELR member holds everything below the leader's HW."""
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
            # KIP-966: the HW stands still while the ISR is below min.insync.replicas, so an
            # ELR member (who left it then) holds everything below it -- whatever the promise
            # (an ELR kept across a lowered min.insync.replicas breaks this: issue 32 #1)
            need = hw
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
            data = read_log(self, proc.tp, proc.broker, log, start)
            for _, h in records.iter_headers(data):
                if not derived or h.leader_epoch > derived[-1][0]:
                    # (the batch holding the log start may begin below it: DeleteRecords)
                    derived.append((h.leader_epoch, max(h.base_offset, log.log_start_offset)))
                elif h.leader_epoch < derived[-1][0]:
                    self.parts[proc.tp].fail("epochs", now, f"replica {proc.broker}: batch at {h.base_offset} has epoch {h.leader_epoch} after epoch {derived[-1][0]}")
        view.derived = derived
        view.cache_checked = signature
        got = list(entries)
        if self.parts[proc.tp].compacted or log.config.compact:
            # The cleaner removes whole batches, the first of an epoch too (the cache keeps
            # the epoch's start): every batch must be in the epoch the cache says for it.
            cache = log.epoch_cache
            for epoch, start in derived:
                if cache.epoch_for_offset(start) != epoch:
                    self.parts[proc.tp].fail(
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
        data = read_log(self, tp, leader, final, final.log_start_offset) if final.log_end_offset > final.log_start_offset else b""
        batches: dict[int, tuple[records.BatchHeader, bytes]] = {}
        values: dict[int, bytes | None] = {}
        last_of_key: dict[bytes, int] = {}
        for pos, h in records.iter_headers(data, check_crc=True):
            batch = bytes(data[pos : pos + h.size])
            batches[h.base_offset] = (h, batch)
            for rec in records.decode_batch(batch).records():
                values[rec.offset] = rec.value
                if rec.key is not None:
                    last_of_key[rec.key] = rec.offset
        view = FinalLog(final.log_start_offset, batches, values, last_of_key, part.compacted)
        self._check_acked(part, leader, view, now)
        self._check_replicas_agree(part, leader, logs, hw, now)
        self._check_committed(part, leader, view, now)
        self._check_producers(part, view, now)

    def _check_acked(self, part: PartitionHistory, leader: int, view: "FinalLog", now: int) -> None:
        where_is: dict[tuple[int, int], int] = {}
        for base in sorted(view.batches):
            h, _ = view.batches[base]
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
                if want is None and (a.producer_id, seq) in part.first_commit:
                    want = part.first_commit[(a.producer_id, seq)][0]
                if where is None:
                    if want is not None and view.gone(want, part.keys.get((a.producer_id, seq))):
                        continue  # deleted (below the log start) or superseded (compaction)
                    part.fail("1", now, f"record {a.producer_id}:{seq} acked at offset {want} ({a.acked_ms} ms) is missing from leader {leader}'s final log")
                elif want is not None and where != want:
                    part.fail("1", now, f"record {a.producer_id}:{seq} acked at offset {want} is at offset {where} in the final log")
                elif view.values.get(where) != record_value(a.producer_id, seq):
                    part.fail("1", now, f"offset {where} holds {view.values.get(where)!r}, not record {a.producer_id}:{seq}")

    def _check_replicas_agree(self, part: PartitionHistory, leader: int, logs: dict[int, Any], hw: int, now: int) -> None:
        ref = logs[leader]
        for broker in sorted(logs):
            log = logs[broker]
            start = max(log.log_start_offset, ref.log_start_offset)
            end = min(hw, log.log_end_offset)
            if start >= end:
                continue
            mine = read_log(self, part.tp, broker, log, start, end)
            theirs = read_log(self, part.tp, leader, ref, start, end)
            if mine == theirs:
                continue
            if not part.compacted:
                part.fail("2", now, f"replica {broker} and leader {leader} differ below HW {hw}: {_first_difference(mine, theirs)}")
                continue
            # Replicas clean on their own: they may differ in which superseded records are
            # still there, never in a record both hold, nor in a key's last record.
            a = {o: r for o, r in _records_of(mine).items() if start <= o < end}
            b = {o: r for o, r in _records_of(theirs).items() if start <= o < end}
            differ = sorted(o for o in a.keys() & b.keys() if a[o] != b[o])
            last_a = {r[0]: o for o, r in sorted(a.items()) if r[0] is not None}
            last_b = {r[0]: o for o, r in sorted(b.items()) if r[0] is not None}
            if differ or last_a != last_b:
                keys = sorted(k for k in last_a.keys() | last_b.keys() if last_a.get(k) != last_b.get(k))[:5]
                part.fail(
                    "2",
                    now,
                    f"replica {broker} and leader {leader} differ below HW {hw} (compacted): records at {differ[:5]} differ; "
                    f"last offsets of keys {[(k, last_a.get(k), last_b.get(k)) for k in keys]}",
                )

    def _check_committed(self, part: PartitionHistory, leader: int, view: "FinalLog", now: int) -> None:
        for base in sorted(part.committed):
            c = part.committed[base]
            if not c.strong or part.voided(c.at_ms, c.epoch):
                continue
            got = view.batches.get(base)
            if (got is not None and got[1] == c.data) or view.rightly_changed(c.data):
                continue
            part.fail(
                "1",
                now,
                f"batch at offset {base} committed by leader {c.leader} at epoch {c.epoch} ({c.at_ms} ms) "
                f"is {'missing from' if got is None else 'different in'} the final log of leader {leader}",
            )
        for base in sorted(part.consumed):
            data, strong = part.consumed[base]
            if not strong or part.lost_any:
                continue
            got = view.batches.get(base)
            if (got is None or got[1] != data) and not view.rightly_changed(data):
                part.fail("4", now, f"a reader read a batch at offset {base} that the final log does not hold")

    def _check_producers(self, part: PartitionHistory, view: "FinalLog", now: int) -> None:
        """Per producer id: epochs never go back in log order (an older incarnation of a
        fenced writer, such as a group coordinator, never lands after a newer one), and
        within an epoch sequences rise in offset order -- no duplicate, no reordering, and
        no gap but records deleted below the log start or superseded by a later record of
        their key on compacted topics (of the simulation's producers, whose keys are known,
        exactly; of others, any gap there). Records of the simulation's producers also name
        their sequence."""
        state: dict[int, tuple[int, int]] = {}  # producer id -> (epoch, next sequence)
        lossy_ok = part.lost_any
        ours = self.sim_producer_ids
        start = view.log_start
        for base in sorted(view.batches):
            h, _ = view.batches[base]
            if h.producer_id < 0 or h.base_sequence < 0:
                continue
            first = h.producer_id not in state
            epoch, nxt = state.get(h.producer_id, (h.producer_epoch, 0))
            if h.producer_epoch < epoch:
                part.fail("5", now, f"producer {h.producer_id}: batch at offset {base} has epoch {h.producer_epoch} after epoch {epoch} (a fenced writer landed)")
                continue
            if h.producer_epoch > epoch:
                epoch, nxt = h.producer_epoch, 0
            if h.base_sequence < nxt:
                part.fail("5", now, f"producer {h.producer_id} epoch {epoch}: batch at offset {base} has sequence {h.base_sequence}, expected {nxt} (duplicate)")
            elif h.base_sequence > nxt and not lossy_ok and not self._gap_explained(part, view, h.producer_id, nxt, h.base_sequence, first and start > 0):
                part.fail("5", now, f"producer {h.producer_id} epoch {epoch}: batch at offset {base} has sequence {h.base_sequence}, expected {nxt} (gap/reorder)")
            state[h.producer_id] = (epoch, max(nxt, h.base_sequence + h.record_count))
            if h.producer_id in ours:
                for i in range(h.record_count):
                    if view.values.get(base + i) != record_value(h.producer_id, h.base_sequence + i):
                        part.fail("5", now, f"offset {base + i}: value {view.values.get(base + i)!r} is not producer {h.producer_id} sequence {h.base_sequence + i}")
        if not lossy_ok:  # an unclean election may lose acknowledged batches: sequences then break
            for pid, anomaly in part.producer_anomalies:
                if all(a.promised for a in part.acked if a.producer_id == pid):
                    part.fail("5", now, anomaly)

    def _gap_explained(self, part: PartitionHistory, view: "FinalLog", pid: int, lo: int, hi: int, at_start: bool) -> bool:
        """Whether sequences ``lo..hi-1`` of producer ``pid`` may be missing from the final log."""
        if pid not in self.sim_producer_ids:
            # a coordinator's: its records' keys are not known here
            return at_start or part.compacted
        for seq in range(lo, hi):
            commit = part.first_commit.get((pid, seq))
            if commit is None or not view.gone(commit[0], part.keys.get((pid, seq))):
                return False
        return True


@dataclass
class FinalLog:
    """The final leader's log, as the final checks read it."""

    log_start: int
    batches: dict[int, tuple[records.BatchHeader, bytes]]
    values: dict[int, bytes | None]
    last_of_key: dict[bytes, int]
    compacted: bool

    def gone(self, offset: int, key: bytes | None) -> bool:
        """Whether a record that was at ``offset`` may rightly be gone: below the log start,
        or (compacted topics) a later record of its key is in the log."""
        if offset < self.log_start:
            return True
        return self.compacted and key is not None and self.last_of_key.get(key, -1) > offset

    def rightly_changed(self, batch: bytes) -> bool:
        """Whether a batch that is not in the log as it was (``batch``) may rightly have
        changed: wholly below the log start, or (compacted topics) every record of it
        still there or superseded."""
        h = records.read_header(batch)
        if h.last_offset < self.log_start:
            return True
        return self.compacted and self.holds(batch)

    def holds(self, batch: bytes) -> bool:
        """Whether every record of ``batch`` is in the log, or rightly gone."""
        for pos, h in records.iter_headers(batch):
            if h.last_offset < self.log_start:
                continue
            d = records.decode_batch(batch, pos)
            keys = d.keys if d.keys is not None else [None] * len(d.values)
            for i, (k, v) in enumerate(zip(keys, d.values)):
                o = h.base_offset + i
                if self.gone(o, k):
                    continue
                if o not in self.values or self.values[o] != v:
                    return False
        return True


def _first_difference(a: bytes, b: bytes) -> str:
    ha = [(h.base_offset, h.record_count, h.crc) for _, h in records.iter_headers(a)]
    hb = [(h.base_offset, h.record_count, h.crc) for _, h in records.iter_headers(b)]
    for x, y in zip(ha, hb):
        if x != y:
            return f"first differing batch (base, count, crc): {x} vs {y}"
    return f"{len(ha)} vs {len(hb)} batches"
