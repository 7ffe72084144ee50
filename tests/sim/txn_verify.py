"""KIP-890 part 1 in the simulation (docs/transactions.md section 1, "Verification").

In ``--transactions`` runs the partition leaders verify a transaction's first batch with
its transaction coordinator: they call ``add_partitions_to_txn`` (``verify_only``) on
``names.transaction_coordinator(CLUSTER, coordinator_for(id, N))``, N the partitions of
``__transaction_state`` (the replicas' drivers are told N). The apps' ids (``txn_clients.py``)
are answered there by the real coordinators (``txn_coordinators.py``). The old
:class:`~.transactions.TxnProducer` plays its own coordinator, so the simulation's transport
routes the checks for its id to a :class:`CoordinatorStandIn` (``Simulation.route_call``),
which answers from that producer's state: a partition is in the producer's ongoing transaction at epoch 0 from
its first batch until its marker is first sent (the coordinator's PREPARE_*, then
COMPLETE_*), each answer sent up to 150 ms late (a busy coordinator), so a "yes" can reach the
leader after the transaction's marker did.

Fault: once healing began and a transactional producer's last transaction is ending (its
last batch sent, its marker soon to be sent, in flight, or written), a
:class:`LateWriter` sends one more transactional batch of that producer (its identity, the
next sequence): a retried or zombie write of the ending transaction, racing its marker.
Without verification a write landing after the marker opens a transaction at the partition
that no marker ends; with it, the check may pass before the marker and the append come
after it, which the leader's guard must refuse.

Invariants:

* **txn-late** the late write either landed before its transaction's marker (it is part of
  that transaction) or was refused (INVALID_TXN_STATE; OUT_OF_ORDER_SEQUENCE_NUMBER when
  retention removed the producer's batches, so its sequence is a gap), unless an unclean
  election may have lost it (``PartitionHistory.voided``: e.g. a deposed leader acknowledged
  it, then truncated it away; offsets of the two histories do not compare);
* **txn-hang** once quiet, no transaction is open at any partition leader and its last
  stable offset reaches its high watermark (no transaction stays open after its
  coordinator ended it), unless the partition had an unclean election (which may lose a
  marker).

Everything here exists only in ``--transactions`` runs; the late writer draws nothing from
the kernel's generator.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from kcoord import records
from kcoord.protocol.codec import Message
from kcoord.protocol.errors import ErrorCode as E
from kcoord.protocol.replication import ProduceRequest, ProduceResponse
from kcoord.protocol.txn import AddPartitionsToTxnRequest, AddPartitionsToTxnResponse

from .clients import RETRIABLE_METADATA, RETRIABLE_WRITE, Client
from .kernel import OK, Call
from .log_reading import record_value

if TYPE_CHECKING:
    from .simulation import Simulation
    from .transactions import TxnProducer

STAND_IN = "client/txn-coordinator-stand-in"


class CoordinatorStandIn(Client):
    """Answers the leaders' verifications from the transactional producers' own state."""

    def __init__(self, sim: "Simulation", producers: list["TxnProducer"]) -> None:
        super().__init__(sim, STAND_IN)
        self.producers = producers
        self.ids = {p.transactional_id for p in producers}
        self.answered = 0
        # a coordinator takes its time: an answer may reach the leader after the marker did
        self.side = random.Random(f"txn-stand-in:{sim.config.seed}")

    def route(self, dst: str, request: Message) -> str:
        """The stand-in for these producers' ids, the real coordinator ``dst`` for others."""
        if isinstance(request, AddPartitionsToTxnRequest) and request.transactional_id in self.ids:
            return self.name
        return dst

    def receive(self, call: Call, request: Message) -> None:
        assert isinstance(request, AddPartitionsToTxnRequest) and request.verify_only, request
        self.answered += 1
        p = next((p for p in self.producers if p.transactional_id == request.transactional_id), None)
        if p is None or p.producer_id != request.producer_id:
            code = E.INVALID_PRODUCER_ID_MAPPING
        elif request.producer_epoch != 0:
            code = E.PRODUCER_FENCED
        elif p.marker_sent:
            code = E.CONCURRENT_TRANSACTIONS  # PREPARE_*: its markers are being written
        else:
            ongoing = p.txn_batches > 0
            code = E.NONE if ongoing and request.topics == {p.topic: [p.partition]} else E.TRANSACTION_ABORTABLE
        answer = AddPartitionsToTxnResponse(results={t: {q: code for q in ps} for t, ps in request.topics.items()})
        self.later(self.side.randint(0, 150), self.sim.net.reply, call, answer)


class LateWriter(Client):
    """One late transactional write of ``producer``'s after its last transaction ended."""

    def __init__(self, sim: "Simulation", producer: "TxnProducer") -> None:
        super().__init__(sim, f"client/late-writer{producer.name.rsplit('producer', 1)[1]}")
        self.producer = producer
        self.armed = False
        self.outcome: int | None = None  # the leader's final answer
        self.offset = -1
        self.txn = -1  # the producer's transaction it belongs to
        self.acked = (-1, -1)  # when it was answered NONE, and the answering leader's epoch
        self.voided = False  # an unclean election may have lost it (final_checks)

    @property
    def idle(self) -> bool:
        return not self.armed or self.outcome is not None

    def arm(self) -> None:
        """Healing began: write once the producer's last transaction ended."""
        self.armed = True
        self._wait()

    def _wait(self) -> None:
        p = self.producer
        if p.fatal is not None:
            self.outcome = -1  # the producer stopped: nothing to be late for
            return
        if p.txn == 0 and not p.txn_batches and p.ending is None:
            # no transaction began before healing, and none begins after it (seed 9397: the
            # controller answered its InitProducerId only after the heal): nothing to be late for
            self.outcome = -1
            return
        if not (p.ending is not None or (p.idle and p.txn > 0)) or p.leader < 0:
            self.later(20, self._wait)
            return
        self.txn = p.txn if p.ending is not None else p.txn - 1
        p.ledger.sent(p.producer_id, p.next_seq, 1, self.txn)  # it belongs to the ending transaction
        # before the marker now and then (inside the transaction), mostly after it
        self.later(random.Random(f"late-writer:{self.sim.config.seed}").randint(0, 400), self._send)

    def _send(self) -> None:
        p = self.producer
        cfg = self.sim.config
        seq = p.next_seq  # the next sequence: the leader's checks pass but the transaction's
        data = records.build_batch_columns(
            [record_value(p.producer_id, seq)], timestamp_ms=self.sim.kernel.now, producer_id=p.producer_id, producer_epoch=0, base_sequence=seq, transactional=True
        )
        req = ProduceRequest(p.topic, p.partition, data, acks=-1, timeout_ms=cfg.produce_timeout_ms, current_leader_epoch=p.leader_epoch, transactional_id=p.transactional_id)
        self.sim.trace(f"{self.name} late write of {p.name}'s transaction {self.txn} (seq {seq})")
        p.foreign_seqs.add(seq)
        self.call(p.leader_name(), req, ProduceResponse, self._done, cfg.produce_timeout_ms + cfg.call_timeout_ms)

    def _done(self, response: Any, kind: str) -> None:
        code = response.error_code if isinstance(response, ProduceResponse) else None
        # out of order: ahead of the producer's own last batches, until they land (after that it
        # is final: e.g. retention removed every batch of the producer, so any sequence is a gap)
        ahead = code == E.OUT_OF_ORDER_SEQUENCE_NUMBER and self.producer.unacked() > 0 and self.producer.fatal is None
        if kind != OK or code in RETRIABLE_WRITE or ahead:
            if kind != OK or code in RETRIABLE_METADATA:
                self.producer.refresh_metadata()
            self.later(self.sim.config.client_backoff_ms, self._send)
            return
        self.outcome = code
        self.offset = response.base_offset
        self.acked = (self.sim.kernel.now, response.leader_epoch)
        self.sim.trace(f"{self.name} late write answered {code} (offset {self.offset})")
        marker = self.producer.marker_offsets.get(self.txn)
        if code == E.NONE and marker is not None and self.offset > marker and not self.lost():
            self.sim.history.fail("txn-late", self.sim.kernel.now, f"{self.name}: the late write of transaction {self.txn} landed at {self.offset}, after its marker at {marker}: a transaction no marker will end")
        elif code not in (E.NONE, E.INVALID_TXN_STATE, E.OUT_OF_ORDER_SEQUENCE_NUMBER):
            self.sim.history.fail("txn-late", self.sim.kernel.now, f"{self.name}: the late write was answered {code}; expected NONE (before its marker) or a refusal")

    def lost(self) -> bool:
        """Whether an unclean election may have lost the acknowledged late write."""
        part = self.sim.history.parts.get(self.producer.tp)
        return part is not None and part.voided(*self.acked)


def final_checks(sim: "Simulation", writers: list[LateWriter]) -> None:
    """Once quiet: no transaction open at a transactional producer's partition leader, and
    its LSO at its HW."""
    now = sim.kernel.now
    for w in writers:
        marker = w.producer.marker_offsets.get(w.txn, -1)
        if w.outcome == E.NONE and not 0 <= w.offset < marker and w.lost():
            w.voided = True
        elif w.outcome == E.NONE and not 0 <= w.offset < marker:
            sim.history.fail("txn-late", now, f"{w.name}: the late write of transaction {w.txn} landed at {w.offset}, after its marker at {marker}")
    for tp in sorted({w.producer.tp for w in writers}):
        p = sim.stored_partition(*tp)
        leader = sim.replicas[(tp[0], tp[1], p.leader)].replica
        ongoing = leader.log.producer_state.ongoing_transactions()
        hw = leader.hw
        first = leader.log.producer_state.first_unstable_offset(hw)
        lso = hw if first is None else min(first, hw)
        part = sim.history.parts.get(tp)
        if (ongoing or lso != hw) and not (part is not None and part.lost_any):  # an unclean election may lose a marker
            sim.history.fail("txn-hang", now, f"{tp[0]}-{tp[1]}: quiet with transactions open {ongoing}, LSO {lso} < HW {hw}")
