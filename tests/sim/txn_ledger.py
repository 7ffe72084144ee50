"""What the transactional applications did (``txn_clients.py``), and the invariants over it
(Jepsen's Kafka checker, for the transactions the coordinators run).

During the run, on every read_committed fetch an :class:`AppReader` is answered:

* **txn-g1a** no record of a transaction its client aborted is returned (aborted read);
* **txn-precommit** no record is returned before some leader of its partition had a marker
  of its producer past it below the HW (a read before its commit was decided and durable);
* **txn-monotonic** the offsets a read_committed reader is handed only rise;
* **txn-zombie** no record an instance sent after a newer instance of its id initialised is
  returned (a fenced producer's writes never become visible as committed);
* **txn-lso** (``transactions.py``'s, on these readers too) nothing at or past the LSO;
* **txn-17754** a delayed EndTxn of kcoord's client (epoch bump) never succeeds once the
  next transaction holds a partition.

Once quiet, from the final leader logs (each record value names its transaction, and the
first marker of its producer after it tells how it ended in that partition):

* **txn-hanging** every transaction ended: no transactional record without a marker after
  it, and the LSO of every partition at its HW;
* **txn-torn** a transaction ended the same way in every partition, and every record of a
  committed one that was acknowledged is there (all visible, none missing);
* **txn-client** a transaction whose EndTxn commit (abort) its client saw answered ended
  COMMIT (ABORT) everywhere;
* **txn-unsent** every record an application handed to a transaction whose commit its
  client saw answered is committed in the log, acknowledged or not (a commit succeeds only
  if every send did: chaos seed 839016 committed a transaction none of whose batches was
  ever written, in the real producer's sender, which this app does not run);
* **txn-lost** / **txn-dup** every acknowledged record of a committed transaction is in the
  log once (unless below the log start: retention, DeleteRecords);

txn-monotonic, txn-unsent, txn-lost and txn-hanging do not hold for a partition that had an
unclean election (an operator's ``unclean.leader.election.enable``): Kafka lets that lose what
was acknowledged, markers included, and reuse its offsets, as the replication invariants
allow (``voided``); nor for a page-cache partition that committed without a promise
(min.insync.replicas 1: the replication invariants' ``strong``).
* **txn-zombie** no record sent by a fenced instance after its fence committed;
* **txn-g1a** every transaction a reader read committed;
* **txn-offsets** a group's offsets are those of its id's last committed transaction that
  committed offsets, and none are pending;
* **txn-g1c** no cycle of write-read dependencies between committed transactions. The
  applications consume what the readers were handed (consume-transform-produce): a
  transaction asking to commit has read every record the readers returned since its id's
  previous commit request, so ``W -> T`` when T read a record of W. Under read_committed W
  committed before T read it, and T reads before it commits, so a cycle means some
  transaction was read before it committed (Jepsen's G1c, restricted to wr edges: cycles
  through write-write order are allowed by Kafka's protocol, whose transactions interleave).
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from kcoord import records
from kcoord.protocol.txn import EndTxnRequest, EndTxnResponse
from kcoord.record.control import read_control

from .transactions import CommittedReader
from .txn_clients import IN_TOPIC, parse_value

if TYPE_CHECKING:
    from .simulation import Simulation
    from .txn_clients import TxnApp, TxnSlot
    from .txn_coordinators import TxnCoordinatorProcess

Key = tuple[str, int, int]
_OTHER = re.compile(rb"^\d+:\d+$")  # (transactional id, instance, transaction number)


class AppLedger:
    def __init__(self, sim: "Simulation") -> None:
        self.sim = sim
        self.fenced_at: dict[tuple[str, int], int] = {}  # (tid, instance) -> a newer instance initialised
        self.instances: dict[str, list[int]] = defaultdict(list)
        self.sent: dict[bytes, tuple[Key, tuple[str, int], int, int]] = {}  # value -> (txn, tp, sent at, pid)
        self.acked: dict[bytes, tuple[tuple[str, int], int]] = {}  # value -> (tp, offset)
        self.handed: dict[Key, list[tuple[tuple[str, int], bytes]]] = {}  # txn -> the records its app sent in it
        self.client_outcome: dict[Key, bool] = {}
        self.offsets: dict[Key, dict[int, int]] = {}  # txn -> {input partition: offset}
        self.offset_owner: dict[int, Key] = {}
        self._next_offset = 1
        self.read: dict[Key, tuple[str, int]] = {}
        self.returned: list[Key] = []  # every application record the readers handed out, in order
        self.consumed_upto: dict[str, int] = {}  # tid -> how much of ``returned`` its transactions read
        self.reads_from: dict[Key, set[Key]] = {}  # a transaction that asked to commit -> the ones it read
        self.stats = defaultdict(int)

    # -- what the clients report ------------------------------------------------------------
    def on_instance(self, app: "TxnApp") -> None:
        self.instances[app.tid].append(app.instance)
        self.stats["app_instances"] += 1

    def on_init(self, app: "TxnApp", pid: int, epoch: int) -> None:
        now = self.sim.kernel.now
        for inst in self.instances[app.tid]:
            if inst < app.instance:
                self.fenced_at.setdefault((app.tid, inst), now)

    def offset_for(self, tid: str, instance: int, txn: int) -> int:
        o = self._next_offset
        self._next_offset += 1
        self.offset_owner[o] = (tid, instance, txn)
        return o

    def on_begin(self, app: "TxnApp", txn: int, parts: list, offsets: dict[int, int], handed: list | None = None) -> None:
        self.stats["app_txns"] += 1
        if handed is not None:
            self.handed[(app.tid, app.instance, txn)] = list(handed)
        if offsets:
            self.offsets[(app.tid, app.instance, txn)] = dict(offsets)

    def on_sent(self, app: "TxnApp", values: list[bytes], tp: tuple[str, int], now: int) -> None:
        for v in values:
            self.sent[v] = ((app.tid, app.instance, app.txn), tp, now, app.tm.producer_id)

    def on_acked(self, app: "TxnApp", values: list[bytes], tp: tuple[str, int], offset: int) -> None:
        for i, v in enumerate(values):
            self.acked.setdefault(v, (tp, offset + i))

    def on_end_sent(self, app: "TxnApp", txn: int, req: EndTxnRequest) -> None:
        key = (app.tid, app.instance, txn)
        if req.commit and key not in self.reads_from:  # a resend reads nothing more
            start = self.consumed_upto.get(app.tid, 0)
            self.reads_from[key] = set(self.returned[start:]) - {key}
            self.consumed_upto[app.tid] = len(self.returned)

    def on_ended(self, app: "TxnApp", txn: int, commit: bool, req: EndTxnRequest | None) -> None:
        self.client_outcome[(app.tid, app.instance, txn)] = commit
        self.stats["app_commits" if commit else "app_aborts"] += 1

    def on_fatal(self, app: "TxnApp", err: BaseException) -> None:
        self.stats["app_fenced"] += 1

    def on_stale_end(
        self, app: "TxnApp", txn: int, req: EndTxnRequest, response: EndTxnResponse, started: bool, current: tuple[int, int] | None = None
    ) -> None:
        """A delayed EndTxn of the transaction before ``txn`` was answered. With the epoch
        bump (kcoord's client) it must not succeed once ``txn`` held a partition when it
        was sent (KAFKA-17754: it would end ``txn``) -- unless it was answered as a retry of
        the original, naming the identity ``current`` that ``txn`` runs at: an older process
        of the coordinator (a twin cut off from the controller) that never saw ``txn`` does
        that, and a retry ends nothing (sim seed 3128)."""
        self.stats["stale_end_ok" if response.error_code == 0 else "stale_end_refused"] += 1
        if response.error_code == 0 and req.bump_epoch and current is not None and (response.producer_id, response.producer_epoch) == current:
            self.stats["stale_end_retry_answer"] += 1
            return
        if response.error_code == 0 and req.bump_epoch and started:
            self.sim.history.fail("txn-17754", self.sim.kernel.now, f"{app.name}: a delayed EndTxn of the transaction before {txn} was answered NONE while {txn} was ongoing")
        if response.error_code == 0 and not req.bump_epoch and app.txn == txn:
            self.stats["kafka_17754_window"] += 1  # a v0-3 client's delayed EndTxn ended a later transaction

    def observe_coordinator(self, proc: "TxnCoordinatorProcess") -> None:
        pass

    # -- reads ------------------------------------------------------------------------------
    def on_read(self, reader: "AppReader", value: Any, offset: int, where: str) -> None:
        sim = self.sim
        now = sim.kernel.now
        fail = sim.history.fail
        key = parse_value(value)
        if key is None and isinstance(value, bytes) and _OTHER.match(value):
            return  # another producer's record (clients.py, transactions.py)
        if key is None:
            fail("txn-control", now, f"{where}: a read_committed reader was handed {value!r}, not an application record")
            return
        if offset <= reader.last_returned and not self._lossy((reader.topic, reader.partition)):
            fail("txn-monotonic", now, f"{where}: {reader.name} was handed offset {offset} after {reader.last_returned}")
        reader.last_returned = max(reader.last_returned, offset)
        if self.client_outcome.get(key) is False:
            fail("txn-g1a", now, f"{where}: read_committed returned {value.decode()} of transaction {key}, which its client aborted")
        sent = self.sent.get(value)
        if sent is not None:
            pid = sent[3]
            if sim.txn_ledger.committed_marker.get((reader.topic, reader.partition, pid), -1) <= offset:
                fail("txn-precommit", now, f"{where}: read_committed returned {value.decode()} at offset {offset} before any leader had its transaction's marker below the HW")
            fenced = self.fenced_at.get((key[0], key[1]))
            if fenced is not None and sent[2] > fenced:
                fail("txn-zombie", now, f"{where}: read_committed returned {value.decode()}, sent at {sent[2]} ms by an instance fenced at {fenced} ms")
        self.read.setdefault(key, (reader.name, now))
        self.returned.append(key)

    def _lossy(self, tp: tuple[str, int], written: bool = True) -> bool:
        """Whether an unclean election (or an operator's weakening) may have lost what was
        acknowledged in ``tp``, or -- for what was ``written`` -- a page-cache topic committed
        it without a promise (the replication invariants' ``strong``: sim seed 3486,
        min.insync.replicas 1, the ISR shrank to a replica that had lost power, and it led
        with the tail gone)."""
        part = self.sim.history.parts.get(tp)
        return part is not None and (part.lost_any or (written and part.weak_commits))

    # -- once quiet -------------------------------------------------------------------------
    def final_checks(self, slots: list["TxnSlot"], outputs: list[tuple[str, int]]) -> None:
        sim = self.sim
        now = sim.kernel.now
        fail = sim.history.fail
        outcome: dict[bytes, bool] = {}
        unsure: set[bytes] = set()  # ended by another transaction's marker where one may have been lost
        starts: dict[tuple[str, int], int] = {}
        for tp in outputs:
            p = sim.stored_partition(*tp)
            r = sim.replicas[(tp[0], tp[1], p.leader)].replica
            log, hw = r.log, r.hw
            starts[tp] = log.log_start_offset
            lso = log.last_stable_offset(hw)
            lossy = self._lossy(tp)
            if lso < hw and not lossy:  # an unclean election may lose a marker
                fail("txn-hanging", now, f"{tp[0]}-{tp[1]}: LSO {lso} below HW {hw} once quiet (a transaction never ended)")
            open_: dict[int, list[tuple[int, bytes, Key]]] = defaultdict(list)  # pid -> (offset, value, its transaction)
            seen: set[bytes] = set()
            data = log.read(log.log_start_offset, 1 << 40, hw)
            for pos, h in records.iter_headers(data):
                if h.attributes & records.CONTROL_BIT:
                    commit = read_control(data, pos, h).commit
                    ended = open_.pop(h.producer_id, [])
                    last = ended[-1][2] if ended else None
                    for _, v, key in ended:
                        outcome[v] = commit
                        if lossy and key != last:
                            unsure.add(v)  # its own marker is gone: this one is the next transaction's
                        if commit:
                            if v in seen:
                                fail("txn-dup", now, f"{tp[0]}-{tp[1]}: committed record {v.decode()} is in the log twice")
                            seen.add(v)
                    continue
                if not h.attributes & records.TRANSACTIONAL_BIT:
                    continue
                for i, v in enumerate(records.decode_batch(data, pos).values):
                    key = parse_value(v)
                    if key is not None:
                        open_[h.producer_id].append((h.base_offset + i, v, key))
            for pid, vs in sorted(open_.items()) if not lossy else ():
                fail("txn-hanging", now, f"{tp[0]}-{tp[1]}: records {[v.decode() for _, v, _ in vs[:3]]} of producer {pid} (from offset {vs[0][0]}) have no marker once quiet")
        # A lost marker lets the producer's next marker end a transaction its own way (seed
        # 9103: an unclean election lost a COMMIT; the next transaction's ABORT ended it), so
        # where a marker may have been lost, one that ends records of several transactions
        # tells only how the last of them ended.
        by_txn: dict[Key, set[bool]] = defaultdict(set)
        for v, c in outcome.items():
            if v not in unsure:
                by_txn[parse_value(v)].add(c)
        for key, cs in sorted(by_txn.items()):
            if len(cs) > 1:
                fail("txn-torn", now, f"transaction {key} committed in some partitions and aborted in others")
        txn_outcome = {k: next(iter(cs)) for k, cs in by_txn.items() if len(cs) == 1}
        for key, c in self.client_outcome.items():
            if key in txn_outcome and txn_outcome[key] != c:
                fail("txn-client", now, f"transaction {key}: its client's EndTxn {'commit' if c else 'abort'} was answered, the logs say {'COMMIT' if txn_outcome[key] else 'ABORT'}")
        for v, (tp, offset) in sorted(self.acked.items()):
            key = parse_value(v)
            committed = txn_outcome.get(key) or self.client_outcome.get(key)
            if committed and v not in outcome and offset >= starts.get(tp, 0) and not self._lossy(tp):
                fail("txn-lost" if self.client_outcome.get(key) else "txn-torn", now, f"{v.decode()} of committed transaction {key}, acknowledged at {tp[0]}-{tp[1]}@{offset}, is not in the final log")
        for key, committed in sorted(self.client_outcome.items()):
            for tp, v in self.handed.get(key, ()) if committed else ():
                # a record never acknowledged was never written: no replication loss explains it
                if not outcome.get(v) and not (v not in outcome and starts.get(tp, 0) > 0) and not self._lossy(tp, written=v in self.acked):
                    fail("txn-unsent", now, f"{v.decode()} of transaction {key}, whose commit its client saw answered, is not committed at {tp[0]}-{tp[1]}"
                         f" ({'acknowledged' if v in self.acked else 'never acknowledged'})")
                    break
        for v, c in outcome.items():
            sent = self.sent.get(v)
            if c and sent is not None:
                fenced = self.fenced_at.get(sent[0][:2])
                if fenced is not None and sent[2] > fenced:
                    fail("txn-zombie", now, f"{v.decode()} sent at {sent[2]} ms by an instance fenced at {fenced} ms committed")
        for key, (reader, at) in sorted(self.read.items()):
            if txn_outcome.get(key) is False:
                fail("txn-g1a", now, f"{reader} read transaction {key} at {at} ms, which aborted")
        self._check_offsets(slots, txn_outcome)
        self._check_g1c(txn_outcome)

    def _check_g1c(self, txn_outcome: dict[Key, bool]) -> None:
        committed = {k for k, c in txn_outcome.items() if c}
        edges = {t: sorted(w for w in ws if w in committed) for t, ws in self.reads_from.items() if t in committed}
        self.stats["g1c_wr_edges"] += sum(len(ws) for ws in edges.values())
        cycle = find_cycle(edges)
        if cycle:
            chain = " -> ".join(str(k) for k in cycle)
            self.sim.history.fail("txn-g1c", self.sim.kernel.now, f"committed transactions read each other's writes in a cycle (G1c, each read the previous one's records): {chain}")


    def _check_offsets(self, slots: list["TxnSlot"], txn_outcome: dict[Key, bool]) -> None:
        sim = self.sim
        now = sim.kernel.now
        from kcoord.group import coordinator_for

        for slot in slots:
            if slot.group is None:
                continue
            core = sim.coordinators[coordinator_for(slot.group, sim.scenario.coordinators)].core
            held = {tp[1]: o.offset for tp, o in core.committed_offsets(slot.group).items() if tp[0] == IN_TOPIC}
            pending = core.pending_txn_offsets(slot.group)
            if pending:
                sim.history.fail("txn-offsets", now, f"{slot.group}: offsets still pending once quiet: {pending}")
            want: dict[int, int] = {}
            unsure: set[int] = set()
            for key in sorted(k for k in self.offsets if k[0] == slot.tid):
                c = txn_outcome.get(key, self.client_outcome.get(key))
                for p, o in self.offsets[key].items():
                    if c is True:
                        want[p] = o
                        unsure.discard(p)
                    elif c is None:
                        unsure.add(p)  # all its records gone or never sent: unknown
            for p, o in held.items():
                owner = self.offset_owner.get(o)
                c = None if owner is None else txn_outcome.get(owner, self.client_outcome.get(owner))
                if c is False:
                    sim.history.fail("txn-offsets", now, f"{slot.group} {IN_TOPIC}-{p}: offset {o} of transaction {owner}, which aborted")
            for p in set(want) | set(held):
                if p not in unsure and held.get(p) != want.get(p):
                    sim.history.fail("txn-offsets", now, f"{slot.group} {IN_TOPIC}-{p}: holds {held.get(p)}, the last committed transaction wrote {want.get(p)}")


def find_cycle(edges: dict[Key, list[Key]]) -> list[Key] | None:
    """One cycle of the graph ``node -> nodes it depends on`` (closed: first node repeated at
    the end), or None. Iterative depth-first search, nodes in sorted order (deterministic)."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour: dict[Key, int] = {}
    for root in sorted(edges):
        if colour.get(root, WHITE) != WHITE:
            continue
        path: list[Key] = [root]
        stack = [iter(edges.get(root, ()))]
        colour[root] = GREY
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                colour[path.pop()] = BLACK
                stack.pop()
                continue
            c = colour.get(nxt, WHITE)
            if c == GREY:
                return path[path.index(nxt) :] + [nxt]
            if c == WHITE:
                colour[nxt] = GREY
                path.append(nxt)
                stack.append(iter(edges.get(nxt, ())))
    return None


class AppReader(CommittedReader):
    """A read_committed reader of an output partition of the applications."""

    def __init__(self, sim: "Simulation", index: int, topic: str, partition: int, ledger: AppLedger) -> None:
        super().__init__(sim, index, topic, partition)
        self.name = f"client/app-reader{index}"
        self.app_ledger = ledger
        self.last_returned = -1

    def _returned(self, value: Any, offset: int, where: str, now: int) -> None:
        self.app_ledger.on_read(self, value, offset, where)
