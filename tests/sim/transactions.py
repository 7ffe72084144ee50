"""Transactions on the partition side in the simulation (docs/transactions.md section 1).

Until the transaction coordinator runs in the simulation, a :class:`TxnProducer` plays its
own coordinator: an idempotent producer whose batches are transactional, which ends each
transaction, once every batch of it is acknowledged, with a WriteTxnMarker to the leader
(COMMIT or ABORT, decided when the transaction's last batch is sent and retried until
acknowledged, as the coordinator retries markers). A :class:`CommittedReader` reads its
partition with ``isolation_level=1`` and runs the consumer's own decoding of what it is
served (:class:`kcoord.client.consumer.segments.AbortedFilter`).

Invariants (checked as things happen, and once quiet):

* **txn-lso** a read_committed fetch is never served a batch at or past the last stable
  offset it is answered with, and that LSO is at most the HW; the LSO a leader shows never
  goes back within its tenure (per leader process and epoch), nor, per leader epoch, what
  read_committed readers are shown;
* **txn-control** no control record reaches an application (every record the reader
  returns is a simulation record ``pid:seq``);
* **txn-g1a** no record of an aborted transaction is returned under read_committed, nor one
  whose transaction's marker no leader had below its HW yet (an outcome a failover could
  still undo: Kafka's unreplicated transactions), and every record returned belongs to a
  transaction that committed by the end;
* **txn-index** the aborted-transaction index is the same on every in-sync replica, for the
  markers below the leader's HW that every one of them holds: the same markers, with first
  offsets that drop the same batches from a read at or past the log starts.

Everything random here comes from a generator seeded by the seed and the producer's index
(not the kernel's), and these clients exist only in runs with ``SimConfig.transactions``
(``--transactions``), so every other run is unchanged.
"""

from __future__ import annotations

import random
import re
from functools import partial
from typing import TYPE_CHECKING, Any

from kcoord import records
from kcoord.client.consumer.segments import decode_chunk
from kcoord.client.consumer.subscription_state import AssignedPartition
from kcoord.client.types import TopicPartition
from kcoord.protocol.codec import Message
from kcoord.protocol.replication import READ_COMMITTED, FetchRequest, FetchResponse
from kcoord.protocol.txn import WriteTxnMarkerRequest, WriteTxnMarkerResponse
from kcoord.replication.roles import LEADER

from .clients import METHOD, RETRIABLE_METADATA
from .kernel import OK
from .log_reading import record_value
from .producer import PendingBatch, Producer
from .reader import Reader

if TYPE_CHECKING:
    from .checks import History
    from .partition_history import PartitionHistory
    from .processes import ReplicaProcess
    from .scenario import TopicSpec
    from .simulation import Simulation

METHOD.setdefault(WriteTxnMarkerRequest, "write_txn_marker")
_RECORD = re.compile(rb"^(\d+):(\d+)$")


class TxnLedger:
    """Which transaction each record of a transactional producer belongs to, and how each
    transaction ended (known once its marker was acknowledged)."""

    def __init__(self) -> None:
        self.txn_of: dict[tuple[int, int], tuple[int, int]] = {}  # (pid, seq) -> (pid, txn)
        self.outcome: dict[tuple[int, int], bool] = {}  # (pid, txn) -> committed
        self.read: dict[tuple[int, int], tuple[str, int]] = {}  # txns read committed -> (reader, when)
        # (partition, broker, epoch, reader) -> LSO shown: per reader, whose fetches are
        # answered in order (two readers' answers may cross in the network)
        self.lso_seen: dict[tuple[str, int, int, str], int] = {}
        self.leader_lso: dict[tuple[str, int], int] = {}  # (leader process incarnation, epoch) -> LSO
        self.scanned: dict[tuple[str, int], int] = {}  # (leader process incarnation, epoch) -> HW scanned to
        self.committed_marker: dict[tuple[str, int, int], int] = {}  # (topic, partition, pid) -> newest marker below a HW
        self.markers = 0
        self.aborts = 0

    def sent(self, pid: int, seq: int, n: int, txn: int) -> None:
        for i in range(n):
            self.txn_of[(pid, seq + i)] = (pid, txn)

    def ended(self, pid: int, txn: int, commit: bool) -> None:
        self.outcome.setdefault((pid, txn), commit)
        self.markers += 1
        self.aborts += not commit


class TxnProducer(Producer):
    """An idempotent producer whose batches are transactions, ending them itself."""

    def __init__(self, sim: "Simulation", index: int, spec: "TopicSpec", partition: int, *, max_in_flight: int, max_batch: int) -> None:
        super().__init__(sim, index, spec, partition, acks=-1, max_in_flight=max_in_flight, max_batch=max_batch)
        self.name = f"client/txn-producer{index}"
        self.side = random.Random(f"txn-producer:{sim.config.seed}:{index}")
        self.ledger: TxnLedger = sim.txn_ledger
        self.txn = 0
        self.txn_batches = 0
        self.txn_size = self.side.randint(1, 6)
        self.ending: bool | None = None  # the decision while its marker is written
        self.marker_in_flight = False
        self.marker_sent = False  # since its first marker went out (the coordinator's PREPARE_*)
        self.marker_offsets: dict[int, int] = {}  # transaction -> where its marker landed
        self.transactional_id = f"txn-{self.name}"  # the leaders verify with it (txn_verify.py)

    def send_new(self) -> None:
        if self.producer_id < 0 or self.fatal is not None or self.ending is not None:
            return
        n = self.side.randint(1, self.max_batch)
        seq = self.next_seq
        self.next_seq += n
        data = records.build_batch_columns(
            [record_value(self.producer_id, seq + i) for i in range(n)],
            timestamp_ms=self.sim.kernel.now,
            producer_id=self.producer_id,
            producer_epoch=0,
            base_sequence=seq,
            transactional=True,
        )
        self.batches.append(PendingBatch(seq, n, data))
        self.ledger.sent(self.producer_id, seq, n, self.txn)
        self.txn_batches += 1
        if self.txn_batches >= self.txn_size:
            self.ending = self.side.random() < 0.6
        self.pump()

    def finish(self) -> None:
        """Healing: end the open transaction, whatever its size."""
        if self.txn_batches and self.ending is None:
            self.ending = self.side.random() < 0.6
        self.pump()

    def pump(self) -> None:
        super().pump()
        self._maybe_end()

    def _done(self, b: PendingBatch, broker: int, predecessors_acked: bool, response: Message | None, kind: str) -> None:
        super()._done(b, broker, predecessors_acked, response, kind)
        if self.fatal is not None and self.txn_batches and not self.marker_sent:
            # The producer stopped in a transaction; the coordinator it plays aborts it, as
            # a real one does when transaction.timeout.ms passes (else its LSO hangs).
            self.ending = False
            self._maybe_end()

    def _maybe_end(self) -> None:
        if self.ending is None or self.marker_in_flight or self.leader < 0:
            return
        if self.fatal is None and self.unacked():
            return  # every batch of the transaction first (a coordinator's EndTxn comes after them)
        cfg = self.sim.config
        self.marker_in_flight = True
        self.marker_sent = True
        req = WriteTxnMarkerRequest(
            self.producer_id, 0, 0, self.ending, self.topic, self.partition, current_leader_epoch=self.leader_epoch, timeout_ms=cfg.produce_timeout_ms
        )
        self.call(self.leader_name(), req, WriteTxnMarkerResponse, self._marker_done, cfg.produce_timeout_ms + cfg.call_timeout_ms)

    def _marker_done(self, response: Message | None, kind: str) -> None:
        self.marker_in_flight = False
        if isinstance(response, WriteTxnMarkerResponse) and response.error_code == 0:
            assert self.ending is not None
            self.ledger.ended(self.producer_id, self.txn, self.ending)
            self.marker_offsets[self.txn] = response.offset
            self.marker_sent = False
            self.sim.trace(f"{self.name} {'committed' if self.ending else 'aborted'} transaction {self.txn} (marker at {response.offset})")
            self.txn += 1
            self.txn_batches = 0
            self.ending = None
            self.txn_size = self.side.randint(1, 6)
            self.pump()
            return
        code = response.error_code if isinstance(response, WriteTxnMarkerResponse) else None
        if kind != OK or code in RETRIABLE_METADATA:
            self.refresh_metadata()
        self.later(self.sim.config.client_backoff_ms, self._maybe_end)

    @property
    def idle(self) -> bool:
        if self.fatal is not None:
            return True  # as the idempotent producer: it stopped (the checks report why)
        return super().idle and self.ending is None and not self.txn_batches


class CommittedReader(Reader):
    """Reads one partition read_committed, decoding as kcoord's Consumer does."""

    def __init__(self, sim: "Simulation", index: int, topic: str, partition: int) -> None:
        super().__init__(sim, index, topic, partition)
        self.name = f"client/committed-reader{index}"
        self.ledger: TxnLedger = sim.txn_ledger
        self.returned = 0

    def poll(self) -> None:
        if self._fetching or self.leader < 0:
            return
        cfg = self.sim.config
        self._fetching = True
        self.fetches += 1
        req = FetchRequest(
            self.topic, self.partition, self.position, max_bytes=1 << 16, max_wait_ms=cfg.consumer_wait_ms,
            current_leader_epoch=self.leader_epoch, isolation_level=READ_COMMITTED,
        )
        self.call(self.leader_name(), req, FetchResponse, partial(self._done, self.leader), cfg.consumer_wait_ms + cfg.call_timeout_ms)

    def _done(self, broker: int, response: Message | None, kind: str) -> None:
        if isinstance(response, FetchResponse) and response.error_code == 0:
            self._check(broker, response)
        super()._done(broker, response, kind)

    def _check(self, broker: int, response: FetchResponse) -> None:
        sim = self.sim
        now = sim.kernel.now
        history = sim.history
        where = f"{self.topic}-{self.partition}"
        lso, hw = response.last_stable_offset, response.high_watermark
        if lso > hw or lso < 0:
            history.fail("txn-lso", now, f"{where}: broker {broker} answered a read_committed fetch with LSO {lso} and HW {hw}")
        key = (where, broker, response.leader_epoch, self.name)
        seen = self.ledger.lso_seen.get(key, -1)
        if lso < seen:
            history.fail("txn-lso", now, f"{where}: broker {broker} showed LSO {seen} and then {lso} at leader epoch {response.leader_epoch}")
        self.ledger.lso_seen[key] = max(seen, lso)
        data = response.records
        if not data:
            return
        for _, h in records.iter_headers(data):
            if h.last_offset >= lso:
                history.fail("txn-lso", now, f"{where}: a read_committed fetch was served offsets {h.base_offset}..{h.last_offset} by broker {broker} under LSO {lso}")
        st = AssignedPartition(TopicPartition(self.topic, self.partition), position=self.position, decode_from=self.position)
        st.pending.append((data, response.aborted_transactions or []))
        decode_chunk(st, True)
        for seg in st.segments:
            for i, value in enumerate(seg.values[seg.start :]):
                self.returned += 1
                self._returned(value, seg.base + seg.start + i, where, now)

    def _returned(self, value: Any, offset: int, where: str, now: int) -> None:
        """One record handed to the application (a subclass checks its own records)."""
        history = self.sim.history
        m = _RECORD.match(value) if isinstance(value, bytes) else None
        if m is None and isinstance(value, bytes) and value.startswith(b"T"):
            return  # an application's record (txn_clients.py): its own reader checks it
        if m is None:
            history.fail("txn-control", now, f"{where}: a read_committed reader was handed {value!r}, not a record (a control record?)")
            return
        txn = self.ledger.txn_of.get((int(m.group(1)), int(m.group(2))))
        if txn is None:
            return
        if self.ledger.outcome.get(txn) is False:
            history.fail("txn-g1a", now, f"{where}: read_committed returned record {value.decode()} of aborted transaction {txn}")
        if self.ledger.committed_marker.get((self.topic, self.partition, txn[0]), -1) <= offset:
            history.fail("txn-g1a", now, f"{where}: read_committed returned record {value.decode()} at offset {offset} before any leader had its transaction's marker below the HW")
        self.ledger.read.setdefault(txn, (self.name, now))


def observe_leader_lso(history: "History", proc: "ReplicaProcess", part: "PartitionHistory", now: int) -> None:
    """The LSO a leader shows never goes back within its tenure (after every event)."""
    r = proc.replica
    if r is None or r.role != LEADER or r.leading is None or r.leading.hw_is_stale():
        return
    ledger: TxnLedger | None = getattr(history.sim, "txn_ledger", None)
    if ledger is None:
        return
    key = (proc.incarnation_id, r.leader_epoch)
    log = r.log
    start = max(ledger.scanned.get(key, 0), log.log_start_offset)
    if start < r.hw:  # markers newly below this leader's HW: their outcome is durable
        for _, h in records.iter_headers(log.read(start, 1 << 40, r.hw)):
            if h.attributes & records.CONTROL_BIT:
                marker_key = (proc.topic, proc.partition, h.producer_id)
                ledger.committed_marker[marker_key] = max(ledger.committed_marker.get(marker_key, -1), h.base_offset)
        ledger.scanned[key] = r.hw
    lso = log.last_stable_offset(r.hw)
    seen = ledger.leader_lso.get(key, -1)
    if lso < seen:
        part.fail("txn-lso", now, f"leader {proc.broker} LSO went back from {seen} to {lso} at epoch {r.leader_epoch}")
    ledger.leader_lso[key] = max(seen, lso)


def check_txn_indexes(history: "History", part: "PartitionHistory", leader: "ReplicaProcess", members: list[Any], now: int) -> None:
    """Every in-sync replica holds the leader's aborted-transaction entries below its HW:
    the same markers, and first offsets that drop the same batches from a read at or past
    the log starts (two first offsets differ harmlessly when neither log holds a batch of
    that producer's transactions between them: a replica that rebuilt producer state
    from a log start past the transaction's first batch, after DeleteRecords, starts it at
    the first batch it has, as Kafka's does)."""
    r = leader.replica
    hw = r.hw
    logs = [leader.replica.log] + [m.replica.log for m in members]
    start = max(log.log_start_offset for log in logs)

    def entries(log: Any) -> dict[tuple[int, int], int]:
        return {(e.producer_id, e.last_offset): max(e.first_offset, start) for e in log.txn_index.entries() if start <= e.last_offset < hw}

    def txn_batch_between(pid: int, lo: int, hi: int) -> bool:
        for log in logs:
            for _, h in records.iter_headers(log.read(lo, 1 << 40, hi)):
                if h.producer_id == pid and h.attributes & records.TRANSACTIONAL_BIT and h.last_offset >= lo:
                    return True
        return False

    want = entries(r.log)
    for m in members:
        got = entries(m.replica.log)
        same = got.keys() == want.keys() and all(
            got[k] == first or not txn_batch_between(k[0], min(got[k], first), max(got[k], first)) for k, first in want.items()
        )
        if not same:
            show = lambda es: sorted((pid, first, last) for (pid, last), first in es.items())  # noqa: E731
            part.fail("txn-index", now, f"ISR member {m.broker}'s aborted-transaction index {show(got)} differs from leader {leader.broker}'s {show(want)} below HW {hw} (from {start})")


def final_checks(sim: "Simulation") -> None:
    """Once quiet: every transaction a read_committed reader read committed."""
    ledger: TxnLedger = sim.txn_ledger
    now = sim.kernel.now
    for txn, (reader, at) in sorted(ledger.read.items()):
        outcome = ledger.outcome.get(txn)
        if outcome is not True:
            sim.history.fail("txn-g1a", now, f"{reader} read transaction {txn} at {at} ms, which {'aborted' if outcome is False else 'never ended'}")
