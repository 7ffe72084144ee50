"""Transactional offset commits in the simulation: the group side of transactions
(docs/transactions.md section 3, KIP-447).

A :class:`TxnOffsetCommitter` plays a transactional producer and its transaction coordinator
against one group coordinator: each transaction sends a TxnOffsetCommit of its group
``txg<i>`` (no member id, generation -1: a consume-transform-produce app without group
management), then decides COMMIT (when the commit was acknowledged, most of the time) or
ABORT and sends the TxnOffsetMarker, retried until acknowledged, at the next producer epoch
(KIP-890 part 2's bump). Between the commit and its marker it now and then crashes the
group coordinator (Ray restarts it), so markers land on a coordinator that replayed the
pending offsets. It also reads the group's offsets with and without ``require_stable``.
Offsets are unique per transaction (``10 * txn + partition``), so a value names its
transaction.

Invariants (checked on every OffsetFetch answer, and once quiet):

* **txg-visible** an offset committed in a transaction is never answered unless that
  transaction was decided COMMIT (its marker sent): never a pending one, never an aborted one;
* **txg-durable** an answer is never older than the newest transaction whose COMMIT marker
  was acknowledged before the fetch was sent (committed offsets survive failovers);
* **txg-stable** a ``require_stable`` fetch sent while a transaction's TxnOffsetCommit was
  acknowledged and answered before that transaction's marker was sent answers
  UNSTABLE_OFFSET_COMMIT for its partitions (pending offsets survive failovers);
* **txg-final** once quiet, the coordinator holds exactly the last committed transaction's
  offsets and nothing pending;
* **txg-expiry** the producer's fencing record (``[5, producer_id]``) expires only when idle:
  a loaded coordinator holds it while a transaction's offsets are acknowledged pending (and
  its marker not yet sent) and for ``HORIZON`` ms after its last acknowledged marker was
  first sent (the record is written at or after that), and once quiet, ``HORIZON`` ms (plus slack for the tombstone's
  append) after the committer's last answer, it is gone. The committer now and then pauses
  longer than ``HORIZON``, so records expire and later transactions start over, across
  coordinator crashes (a restart must load the tombstone, not resurrect the record).

Everything random here comes from a generator seeded by the seed and the committer's index
(not the kernel's), and committers exist only in groups runs with ``SimConfig.transactions``
(``--transactions``), so every other run is unchanged.
"""

from __future__ import annotations

import dataclasses
import random
from functools import partial
from typing import TYPE_CHECKING

from kcoord.group import coordinator_for
from kcoord.protocol import names
from kcoord.protocol.codec import Message
from kcoord.protocol.errors import ErrorCode as E
from kcoord.protocol.group import OffsetCommitPartition, OffsetFetchRequest, OffsetFetchResponse
from kcoord.protocol.txn import TxnOffsetCommitRequest, TxnOffsetCommitResponse, TxnOffsetMarkerRequest, TxnOffsetMarkerResponse

from .clients import METHOD, Client
from .kernel import OK
from .processes import CLUSTER

if TYPE_CHECKING:
    from .simulation import Simulation

METHOD.setdefault(TxnOffsetCommitRequest, "txn_offset_commit")
METHOD.setdefault(TxnOffsetMarkerRequest, "txn_offset_marker")

TOPIC = "txn-in"  # the input topic whose offsets the transactions commit (never read)
PARTITIONS = 3
# the group coordinators' transactional.id.expiration.ms in runs with committers, short
# enough that idle producers' records expire within a run
HORIZON = 800
# the tombstone's append after the deadline (retried every second when it fails)
EXPIRY_SLACK = 5_000


class TxnOffsetCommitter(Client):
    """One transactional producer committing its group's offsets in transactions."""

    def __init__(self, sim: "Simulation", index: int) -> None:
        super().__init__(sim, f"client/txn-committer{index}")
        self.side = random.Random(f"txn-committer:{sim.config.seed}:{index}")
        self.group_id = f"txg{index}"
        self.producer_id = 900_000 + index
        self.epoch = 0
        self.index = coordinator_for(self.group_id, sim.scenario.coordinators)
        self.txn = 0
        self.open = False  # a transaction begun and not yet ended by an acknowledged marker
        self.offsets: dict[tuple[str, int], int] = {}
        self.decision: dict[int, bool] = {}  # txn -> COMMIT? (once its first marker is sent)
        self.committed_ack: dict[int, set[tuple[str, int]]] = {}  # txn -> partitions acknowledged pending
        self.unresolved: dict[tuple[str, int], int] = {}  # tp -> txn acknowledged pending, marker not sent
        self.last_committed: dict[tuple[str, int], int] = {}  # tp -> offset of the newest acked COMMIT
        self.txn_of: dict[int, int] = {}  # offset value -> txn
        self.stats = {"txns": 0, "commits": 0, "aborts": 0, "crashes": 0, "unstable": 0, "fetches": 0, "pauses": 0, "expired": 0}
        self.marker_sent: dict[int, int] = {}  # txn -> when its marker was first sent
        self.kept_until = -1  # the fencing record must exist until then (a marker's first send + HORIZON)
        self.last_answer = 0  # when the last TxnOffsetCommit or marker answer arrived
        self.held = False  # the record was held at the last check (counts expiries seen)
        # set before the coordinators start (they read it at every start)
        sim.group_config = dataclasses.replace(sim.group_config, transactional_id_expiration_ms=HORIZON)

    @property
    def coordinator(self) -> str:
        return names.group_coordinator(CLUSTER, self.index)

    @property
    def idle(self) -> bool:
        return not self.open

    def start(self) -> None:
        self.later(self.side.randint(200, 1_000), self._begin)
        self.later(self.side.randint(300, 1_500), self._poll)

    # -- one transaction ----------------------------------------------------------------------
    def _begin(self) -> None:
        if self.sim.phase != "faults" or self.open:
            return
        self.txn += 1
        self.open = True
        self.stats["txns"] += 1
        parts = sorted(self.side.sample(range(PARTITIONS), self.side.randint(1, PARTITIONS)))
        self.offsets = {(TOPIC, p): 10 * self.txn + p for p in parts}
        for o in self.offsets.values():
            self.txn_of[o] = self.txn
        self._send_commit(attempt=1)

    def _send_commit(self, attempt: int) -> None:
        topics = {TOPIC: {p: OffsetCommitPartition(o) for (_, p), o in self.offsets.items()}}
        req = TxnOffsetCommitRequest(f"tx-{self.group_id}", self.group_id, self.producer_id, self.epoch, topics=topics)
        self.call(self.coordinator, req, TxnOffsetCommitResponse, partial(self._committed, self.txn, attempt))

    def _committed(self, txn: int, attempt: int, response: Message | None, kind: str) -> None:
        if response is not None:
            self.last_answer = self.sim.kernel.now
        if txn != self.txn:
            return
        codes = {c for parts in response.topics.values() for c in parts.values()} if isinstance(response, TxnOffsetCommitResponse) else {None}
        if codes == {E.NONE}:
            now = self.sim.kernel.now
            self.committed_ack[txn] = set(self.offsets)
            for tp in self.offsets:
                self.unresolved[tp] = txn
            self.sim.trace(f"{self.name} transaction {txn}: offsets {sorted(self.offsets.values())} pending at {now}")
            commit = self.side.random() < 0.65
            if self.sim.phase == "faults" and self.side.random() < 0.3:
                self._crash_coordinator()
            self.later(self.side.randint(1, 400), self._end, txn, commit)
            return
        retriable = codes <= {None, E.COORDINATOR_LOAD_IN_PROGRESS, E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR, E.CONCURRENT_TRANSACTIONS, E.REQUEST_TIMED_OUT}
        if retriable and attempt < 4:
            self.later(self.sim.config.client_backoff_ms, self._send_commit, attempt + 1)
            return
        if not retriable:
            self.sim.history.fail("txg-visible", self.sim.kernel.now, f"{self.name}: TxnOffsetCommit of transaction {txn} refused {sorted(c for c in codes if c is not None)}")
        # Abortable, as in Kafka: the commit may have landed; the ABORT marker drops it.
        self._end(txn, False)

    def _crash_coordinator(self) -> None:
        proc = self.sim.coordinators[self.index]
        if proc.up:
            self.stats["crashes"] += 1
            proc.crash("crashed between a transaction's offsets and its marker")
            self.sim.restart_later(proc, self.side.choice([50, 300, 1_500]))

    def _end(self, txn: int, commit: bool) -> None:
        if txn in self.decision:
            return
        self.decision[txn] = commit
        for tp, t in list(self.unresolved.items()):
            if t == txn:
                del self.unresolved[tp]
        self._send_marker(txn)

    def _send_marker(self, txn: int) -> None:
        self.marker_sent.setdefault(txn, self.sim.kernel.now)
        commit = self.decision[txn]
        req = TxnOffsetMarkerRequest(self.producer_id, self.epoch + 1, 0, commit, self.index, f"tx-{self.group_id}")
        self.call(self.coordinator, req, TxnOffsetMarkerResponse, partial(self._marked, txn))

    def _marked(self, txn: int, response: Message | None, kind: str) -> None:
        code = response.error_code if isinstance(response, TxnOffsetMarkerResponse) and kind == OK else None
        if response is not None:
            self.last_answer = self.sim.kernel.now
        if code == E.NONE:
            self.kept_until = self.marker_sent[txn] + HORIZON
            commit = self.decision[txn]
            self.sim.trace(f"{self.name} transaction {txn} {'committed' if commit else 'aborted'}")
            if commit and txn in self.committed_ack:
                self.last_committed.update(self.offsets)
            self.stats["commits" if commit else "aborts"] += 1
            self.epoch += 1
            self.open = False
            if self.side.random() < 0.15:  # idle past the horizon: the record expires
                self.stats["pauses"] += 1
                self.later(self.side.randint(HORIZON + 100, 3 * HORIZON), self._begin)
            else:
                self.later(self.side.randint(50, 500), self._begin)
            return
        if code in (E.TRANSACTION_COORDINATOR_FENCED, E.INVALID_PRODUCER_EPOCH):
            self.sim.history.fail("txg-visible", self.sim.kernel.now, f"{self.name}: marker of transaction {txn} refused {E(code).name}")
            return
        self.later(self.sim.config.client_backoff_ms, self._send_marker, txn)

    # -- reading the group's offsets --------------------------------------------------------
    def _loaded_core(self):
        proc = self.sim.coordinators[self.index]
        driver = getattr(proc, "driver", None)
        if not proc.up or driver is None or not driver.loaded or driver.closed:
            return None
        return driver.core

    def _check_expiry(self) -> None:
        core = self._loaded_core()
        if core is None:
            return
        now = self.sim.kernel.now
        held = self.producer_id in core.txn_producers()
        if self.held and not held:
            self.stats["expired"] += 1
        self.held = held
        if not held and now < self.kept_until:
            self.sim.history.fail("txg-expiry", now, f"{self.name}: producer {self.producer_id}'s record expired before {self.kept_until}, {HORIZON} ms after its last acknowledged marker was sent")
        if not held and self.open and self.txn in self.committed_ack and self.txn not in self.marker_sent:  # pending for sure
            self.sim.history.fail("txg-expiry", now, f"{self.name}: producer {self.producer_id}'s record expired while transaction {self.txn}'s offsets were pending")

    def _poll(self) -> None:
        if self.sim.phase != "faults":
            return
        self._check_expiry()
        stable = self.side.random() < 0.6
        floors = {tp: self.last_committed.get(tp, -1) for tp in [(TOPIC, p) for p in range(PARTITIONS)]}
        pending = dict(self.unresolved)
        req = OffsetFetchRequest(self.group_id, {TOPIC: list(range(PARTITIONS))}, require_stable=stable)
        self.stats["fetches"] += 1
        self.call(self.coordinator, req, OffsetFetchResponse, partial(self._fetched, stable, floors, pending))
        self.later(self.side.randint(50, 400), self._poll)

    def _fetched(self, stable: bool, floors: dict, pending: dict, response: Message | None, kind: str) -> None:
        if not isinstance(response, OffsetFetchResponse) or response.error_code != E.NONE:
            return
        now = self.sim.kernel.now
        fail = self.sim.history.fail
        for (t, p), floor in floors.items():
            part = response.offsets.get(t, {}).get(p)
            if part is None:
                continue
            if part.error_code == E.UNSTABLE_OFFSET_COMMIT:
                self.stats["unstable"] += 1
                continue
            if part.error_code != E.NONE:
                continue
            where = f"{self.name}: {self.group_id} {t}-{p}"
            txn = pending.get((t, p))
            if stable and txn is not None and txn not in self.decision:
                fail("txg-stable", now, f"{where}: require_stable answered {part.offset} while transaction {txn}'s offset was pending (acknowledged, no marker sent)")
            if part.offset >= 0:
                owner = self.txn_of.get(part.offset)
                if owner is None or self.decision.get(owner) is not True:
                    state = "never committed" if owner is None else ("aborted" if self.decision.get(owner) is False else "pending, no marker sent")
                    fail("txg-visible", now, f"{where}: answered offset {part.offset} of transaction {owner} ({state})")
            if part.offset < floor:
                fail("txg-durable", now, f"{where}: answered {part.offset}, older than {floor} whose COMMIT marker was acknowledged before the fetch")

    # -- once quiet ---------------------------------------------------------------------------
    def final_check(self) -> None:
        now = self.sim.kernel.now
        core = self.sim.coordinators[self.index].core
        if core is None:
            self.sim.history.fail("txg-final", now, f"{self.name}: coordinator {self.index} is not running")
            return
        held = {tp: o.offset for tp, o in core.committed_offsets(self.group_id).items()}
        if held != self.last_committed:
            self.sim.history.fail("txg-final", now, f"{self.name}: coordinator {self.index} holds {held}, the last committed transactions wrote {self.last_committed}")
        pending = core.pending_txn_offsets(self.group_id)
        if pending:
            self.sim.history.fail("txg-final", now, f"{self.name}: offsets still pending once every transaction ended: {pending}")
        self._check_expiry()
        if not self.open and now > self.last_answer + HORIZON + EXPIRY_SLACK and self.producer_id in core.txn_producers():
            self.sim.history.fail("txg-expiry", now, f"{self.name}: producer {self.producer_id}'s record still held {now - self.last_answer} ms after its last answer (horizon {HORIZON} ms)")
