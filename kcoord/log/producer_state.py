"""Idempotent-producer state: which sequence numbers each producer has already written.

A producer with ``enable_idempotence`` numbers its batches (``base_sequence``) per partition
and retries a batch with the same numbers when a response is lost. The leader must then
answer "already have it" instead of writing it twice, and must refuse a gap (an earlier
batch was lost, so writing this one would reorder records).

Kafka's rules (ProducerStateEntry, ProducerAppendInfo): a batch is a duplicate only when its
epoch, first and last sequence match one of the producer's last :data:`CACHED_BATCHES`
batches, and the answer carries that batch's offsets; any other batch of the current epoch
that does not start at the next sequence is OUT_OF_ORDER_SEQUENCE_NUMBER, whether it lies
ahead or behind. A batch behind the cache may be another writer's under the same identity
(an older process of a group coordinator), so it is never acknowledged unseen.

The state is derived only from batch headers, so every replica rebuilds the same state from
the same log: a follower that becomes leader deduplicates exactly like its predecessor.

Sequence numbers are int32 in the batch header; kcoord ignores wrap-around (a producer
would need two billion batches per partition under one producer epoch to reach it).

Transactions (docs/transactions.md, section 1): each producer also has the first offset of
its ongoing transaction in this partition (-1: none) and the coordinator epoch of the last
marker it got. A transactional data batch with no ongoing transaction starts one at its
base offset; a control batch ends it (a :class:`CompletedTxn`, aborted or committed). A
completed transaction stays *unstable* until its marker is below the high watermark
(:meth:`ProducerStateManager.on_high_watermark`), so the first unstable offset
(:meth:`ProducerStateManager.first_unstable_offset`) covers ongoing transactions and those
whose outcome a failover could still undo (Kafka's unreplicated transactions). A marker
needs its batch's record (which end, which coordinator epoch): :meth:`update` takes it, and
replays are given a ``read_control`` to fetch it from the log.

Verification (KIP-890 part 1, docs/transactions.md section 1): a transactional batch that
would *start* a transaction here (none ongoing for its producer at its epoch) is appended
only with the producer's current :class:`VerificationGuard`, which the leader takes
(:meth:`ProducerStateManager.start_verification`) before it asks the transaction coordinator
whether this partition is in the producer's ongoing transaction. Any transactional batch or
marker of that producer applied after that (a marker ending the transaction, a data batch
starting it) drops the guard, and so does a verification at another epoch: an answer that
arrives after the transaction ended cannot let a late write open a transaction no marker
will end. Guards live in memory only, on the leader; a replay of the log keeps them.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Iterable, NamedTuple

from ..protocol.errors import ErrorCode, KafkaError
from ..record import CONTROL_BIT, TRANSACTIONAL_BIT, BatchHeader, ControlRecord

CACHED_BATCHES = 5  # Kafka's max.in.flight.requests.per.connection limit for idempotence


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    base_offset: int
    last_offset: int


class CompletedTxn(NamedTuple):
    """A transaction a marker ended in this partition: its first offset (the marker's own
    when none was ongoing, as Kafka), the marker's offset, and how it ended."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


ReadControl = Callable[[BatchHeader], ControlRecord]


@dataclass
class ProducerEntry:
    """One producer's epoch and its most recent batches (oldest first); the first offset of
    its ongoing transaction here (-1: none) and the coordinator epoch of its last marker."""

    producer_id: int
    epoch: int
    batches: deque[BatchMetadata]
    txn_first_offset: int = -1
    coordinator_epoch: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


@dataclass(frozen=True)
class ProducerCheck:
    """Verdict of :meth:`ProducerStateManager.check` for a batch the leader is about to write.

    Exactly one of: ok, ``duplicate`` (with the original batch's base offset), or
    ``error`` with a message.
    """

    duplicate: bool = False
    duplicate_base_offset: int = -1
    error: ErrorCode | None = None
    message: str = ""

    @property
    def ok(self) -> bool:
        return not self.duplicate and self.error is None

    def raise_for_error(self) -> None:
        if self.error is not None:
            raise KafkaError(self.error, self.message)


OK = ProducerCheck()


class VerificationGuard:
    """Proof that a verification began for one producer at one epoch (compared by identity,
    Kafka's VerificationGuard). The append that starts a transaction must present the one
    its producer still holds."""

    __slots__ = ("producer_id", "epoch")

    def __init__(self, producer_id: int, epoch: int) -> None:
        self.producer_id = producer_id
        self.epoch = epoch

    def __repr__(self) -> str:
        return f"VerificationGuard(producer {self.producer_id}, epoch {self.epoch}, id {id(self):#x})"


#: what a leader presents for a batch it did not verify: a transaction-starting batch with it
#: is refused (``None`` instead: verification not required, as for replication)
NO_GUARD = VerificationGuard(-1, -1)


def _tracked(h: BatchHeader) -> bool:
    # A batch without a producer id, or without a sequence, is not idempotent.
    return h.producer_id >= 0 and h.base_sequence >= 0


class ProducerStateManager:
    """Per producer id: epoch plus the metadata of its last :data:`CACHED_BATCHES` batches."""

    def __init__(self) -> None:
        self._producers: dict[int, ProducerEntry] = {}
        self._ongoing: dict[int, int] = {}  # producer id -> first offset of its ongoing transaction
        self._unreplicated: list[CompletedTxn] = []  # completed, marker not yet below the HW
        self._guards: dict[int, VerificationGuard] = {}  # producer id -> its verification guard

    def __len__(self) -> int:
        return len(self._producers)

    def __contains__(self, producer_id: int) -> bool:
        return producer_id in self._producers

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ProducerStateManager):
            return self.snapshot() == other.snapshot()
        return NotImplemented

    def __repr__(self) -> str:
        return f"ProducerStateManager({self.snapshot()})"

    def get(self, producer_id: int) -> ProducerEntry | None:
        return self._producers.get(producer_id)

    def producer_ids(self) -> list[int]:
        return sorted(self._producers)

    def last_offsets(self) -> dict[int, int]:
        """Each producer's last batch's last offset (what the cleaner keeps; Kafka's
        lastRecordsOfActiveProducers)."""
        return {pid: e.batches[-1].last_offset for pid, e in self._producers.items() if e.batches}

    def retained_batches(self) -> set[tuple[int, int]]:
        """(producer id, last offset) of every batch remembered for deduplication (the
        last five per producer): the cleaner keeps each, emptied if need be."""
        return {(pid, b.last_offset) for pid, e in self._producers.items() for b in e.batches}

    # -- transactions -----------------------------------------------------------------

    def ongoing_transactions(self) -> dict[int, int]:
        """Producer id -> first offset of its ongoing transaction in this partition."""
        return dict(self._ongoing)

    def first_unstable_offset(self, high_watermark: int | None = None) -> int | None:
        """The smallest first offset over ongoing transactions and completed ones whose
        marker is not yet below the high watermark (given: :meth:`on_high_watermark` first);
        None when there is none."""
        if not self._ongoing and not self._unreplicated:
            return None  # the common case, on every consumer fetch: no transactions here
        if high_watermark is not None:
            self.on_high_watermark(high_watermark)
        firsts = list(self._ongoing.values())
        firsts.extend(t.first_offset for t in self._unreplicated)
        return min(firsts) if firsts else None

    def on_high_watermark(self, hw: int) -> None:
        """Completed transactions whose marker is below ``hw`` are stable now."""
        if self._unreplicated:
            self._unreplicated = [t for t in self._unreplicated if t.last_offset >= hw]

    def last_stable_offset_after(self, completed: CompletedTxn) -> int:
        """Kafka's lastStableOffset(completedTxn), stored with an aborted transaction: the
        first offset of another producer's ongoing transaction, else just past the marker."""
        others = [first for pid, first in self._ongoing.items() if pid != completed.producer_id]
        return min(others) if others else completed.last_offset + 1

    def has_ongoing(self, producer_id: int, epoch: int) -> bool:
        """Whether ``producer_id`` has a transaction ongoing here at ``epoch`` (a batch at
        another epoch does not belong to it: it starts a transaction, so it is verified)."""
        entry = self._producers.get(producer_id)
        return entry is not None and entry.txn_first_offset >= 0 and entry.epoch == epoch

    def needs_verification(self, h: BatchHeader) -> bool:
        """Whether batch ``h`` would start a transaction here (Kafka's
        maybeStartTransactionVerification): transactional data with no transaction of its
        producer ongoing at its epoch."""
        return bool(h.attributes & TRANSACTIONAL_BIT) and not h.attributes & CONTROL_BIT and h.producer_id >= 0 and not self.has_ongoing(h.producer_id, h.producer_epoch)

    def start_verification(self, producer_id: int, epoch: int) -> VerificationGuard:
        """The guard a leader holds while it asks the transaction coordinator about
        ``producer_id`` at ``epoch``: the producer's current one at that epoch, else a new one
        (a guard of another epoch is dropped). Concurrent requests share it, so the first to
        append starts the transaction and the others find it ongoing."""
        guard = self._guards.get(producer_id)
        if guard is None or guard.epoch != epoch:
            guard = self._guards[producer_id] = VerificationGuard(producer_id, epoch)
        return guard

    def verification_guard(self, producer_id: int) -> VerificationGuard | None:
        return self._guards.get(producer_id)

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> ProducerCheck:
        """Whether the leader may append a marker of ``producer_id``: never one from an
        older coordinator epoch than the last marker's (TRANSACTION_COORDINATOR_FENCED), nor
        at an older producer epoch (INVALID_PRODUCER_EPOCH). A marker for a producer with no
        ongoing transaction is fine (a retried marker must succeed)."""
        entry = self._producers.get(producer_id)
        if entry is None:
            return OK
        if coordinator_epoch < entry.coordinator_epoch:
            return ProducerCheck(
                error=ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                message=f"marker of producer {producer_id} from coordinator epoch {coordinator_epoch}, but epoch {entry.coordinator_epoch} wrote its last one",
            )
        if producer_epoch < entry.epoch:
            return ProducerCheck(
                error=ErrorCode.INVALID_PRODUCER_EPOCH,
                message=f"marker of producer {producer_id} at epoch {producer_epoch}, older than its current epoch {entry.epoch}",
            )
        return OK

    def check(self, h: BatchHeader, guard: VerificationGuard | None = None) -> ProducerCheck:
        """Decide whether the leader may append batch ``h`` (see the module docstring).
        ``guard``: None when no verification is required (replication, verification
        disabled, a batch that is not transactional); else a batch that would start a
        transaction must present its producer's current guard (INVALID_TXN_STATE
        otherwise), checked after deduplication as Kafka does (:meth:`_verified`)."""
        if not _tracked(h):
            return OK
        entry = self._producers.get(h.producer_id)
        first, last = h.base_sequence, h.last_sequence
        pid = h.producer_id
        if entry is not None and entry.txn_first_offset >= 0 and not h.attributes & TRANSACTIONAL_BIT and h.producer_epoch >= entry.epoch:
            return ProducerCheck(
                error=ErrorCode.INVALID_TXN_STATE,
                message=f"producer {pid} has a transaction ongoing here since offset {entry.txn_first_offset}: expected a transactional batch",
            )
        if entry is None:
            if first != 0:
                return ProducerCheck(
                    error=ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    message=f"producer {pid} is unknown here, so its first batch must have sequence 0, got {first}",
                )
            return OK if guard is None else self._verified(h, guard)
        if h.producer_epoch < entry.epoch:
            return ProducerCheck(
                error=ErrorCode.INVALID_PRODUCER_EPOCH,
                message=f"producer {pid} epoch {h.producer_epoch} is older than the current epoch {entry.epoch}",
            )
        if h.producer_epoch > entry.epoch:
            if first != 0:
                return ProducerCheck(
                    error=ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    message=f"producer {pid} started epoch {h.producer_epoch} at sequence {first}, expected 0",
                )
            return OK if guard is None else self._verified(h, guard)
        for b in entry.batches:
            if b.first_seq == first and b.last_seq == last:
                return ProducerCheck(duplicate=True, duplicate_base_offset=b.base_offset)
        if first == entry.last_seq + 1:
            return OK if guard is None else self._verified(h, guard)
        where = f"behind, and not one of its last {CACHED_BATCHES} batches" if first <= entry.last_seq else "after a gap"
        return ProducerCheck(
            error=ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
            message=f"producer {pid} epoch {entry.epoch}: expected sequence {entry.last_seq + 1}, got {first}..{last} ({where})",
        )

    def _verified(self, h: BatchHeader, guard: VerificationGuard) -> ProducerCheck:
        """A batch that passed the sequence checks: one that would start a transaction
        needs ``guard`` to be its producer's current one at its epoch."""
        if not h.attributes & TRANSACTIONAL_BIT or self.has_ongoing(h.producer_id, h.producer_epoch):
            return OK
        held = self._guards.get(h.producer_id)
        if held is not None and held is guard and guard.epoch == h.producer_epoch:
            return OK
        why = "it was not verified with its transaction coordinator" if guard is NO_GUARD else "its transaction ended (or its epoch changed) since it was verified"
        return ProducerCheck(
            error=ErrorCode.INVALID_TXN_STATE,
            message=f"producer {h.producer_id} epoch {h.producer_epoch}: a transactional batch that would start a transaction here, but {why}",
        )

    def update(self, h: BatchHeader, control: ControlRecord | None = None) -> CompletedTxn | None:
        """Record an appended batch (leader and follower paths alike). A control batch needs
        its ``control`` record; the transaction it ends is returned."""
        if self._guards and h.attributes & TRANSACTIONAL_BIT:
            # a marker ended the transaction, or data started it: the guard served its turn
            self._guards.pop(h.producer_id, None)
        if h.attributes & CONTROL_BIT:
            if h.producer_id < 0:
                return None
            if control is None:
                raise ValueError(f"the control batch at offset {h.base_offset} needs its control record")
            return self._end_transaction(h, control)
        if not _tracked(h):
            return None
        meta = BatchMetadata(h.base_sequence, h.last_sequence, h.base_offset, h.last_offset)
        pid = h.producer_id
        entry = self._producers.get(pid)
        if entry is None or h.producer_epoch != entry.epoch:
            # A new epoch starts the sequence over, so older batches can no longer match;
            # an ongoing transaction and the coordinator epoch carry over (its marker ends it).
            old = entry
            entry = ProducerEntry(pid, h.producer_epoch, deque([meta], CACHED_BATCHES))
            if old is not None:
                entry.txn_first_offset, entry.coordinator_epoch = old.txn_first_offset, old.coordinator_epoch
            self._producers[pid] = entry
        else:
            entry.batches.append(meta)
        if h.attributes & TRANSACTIONAL_BIT and entry.txn_first_offset < 0:
            entry.txn_first_offset = h.base_offset
            self._ongoing[pid] = h.base_offset
        return None

    def _end_transaction(self, h: BatchHeader, control: ControlRecord) -> CompletedTxn:
        pid = h.producer_id
        entry = self._producers.get(pid)
        if entry is None:
            entry = self._producers[pid] = ProducerEntry(pid, h.producer_epoch, deque((), CACHED_BATCHES))
        elif h.producer_epoch != entry.epoch:
            # the marker may carry a newer epoch (KIP-890 part 2, a fence, KIP-939's keep):
            # the producer's next batch starts that epoch at sequence 0
            entry.epoch = h.producer_epoch
            entry.batches = deque((), CACHED_BATCHES)
        first = entry.txn_first_offset if entry.txn_first_offset >= 0 else h.base_offset
        done = CompletedTxn(pid, first, h.last_offset, not control.commit)
        entry.txn_first_offset = -1
        entry.coordinator_epoch = control.coordinator_epoch
        self._ongoing.pop(pid, None)
        self._unreplicated.append(done)
        return done

    def rebuild(self, headers: Iterable[BatchHeader], read_control: ReadControl | None = None, on_completed: Callable[[CompletedTxn], None] | None = None) -> None:
        """Forget everything and replay ``headers`` (the batches left in the log). The
        verification guards are kept: history replayed is no news about a transaction."""
        guards = self._guards
        self.clear()
        self._guards = {}
        self.replay(headers, read_control, on_completed)
        self._guards = guards

    def replay(self, headers: Iterable[BatchHeader], read_control: ReadControl | None = None, on_completed: Callable[[CompletedTxn], None] | None = None) -> None:
        """Apply ``headers`` in order; ``read_control(h)`` gives a control batch's record,
        ``on_completed`` hears each transaction a marker ends."""
        update = self.update
        for h in headers:
            if h.attributes & CONTROL_BIT and h.producer_id >= 0:
                if read_control is None:
                    raise ValueError(f"replaying the control batch at offset {h.base_offset} needs read_control")
                done = update(h, read_control(h))
                if on_completed is not None and done is not None:
                    on_completed(done)
            else:
                update(h)

    def clear(self) -> None:
        self._producers.clear()
        self._ongoing.clear()
        self._unreplicated.clear()
        self._guards = {}

    # -- persistence and describe ---------------------------------------------------------

    def snapshot(self) -> dict[int, dict[str, Any]]:
        """Plain data (msgpack-able): ``{producer_id: {"epoch", "batches": [[first_seq,
        last_seq, base_offset, last_offset], ...], "txn_first_offset", "coordinator_epoch"}}``
        (the last two only when set, so a snapshot without transactions is as before)."""
        out: dict[int, dict[str, Any]] = {}
        for pid, e in sorted(self._producers.items()):
            d: dict[str, Any] = {"epoch": e.epoch, "batches": [list(b) for b in e.batches]}
            if e.txn_first_offset >= 0:
                d["txn_first_offset"] = e.txn_first_offset
            if e.coordinator_epoch >= 0:
                d["coordinator_epoch"] = e.coordinator_epoch
            out[pid] = d
        return out

    def snapshot_below(self, offset: int) -> dict[int, dict[str, Any]]:
        """:meth:`snapshot` of the state as of ``offset``: each producer's batches below it
        (and its transaction if one began below it). Loaded, then replaying the log from
        ``offset`` on, gives this state back: what a follower starting over at the leader's
        log start needs of it (KIP-405's followers take the same from remote storage)."""
        out: dict[int, dict[str, Any]] = {}
        for pid, d in self.snapshot().items():
            batches = [b for b in d["batches"] if b[3] < offset]
            if not batches and d.get("txn_first_offset", offset) >= offset:
                continue  # everything of it is at or past ``offset``: the replay brings it
            d["batches"] = batches
            if d.get("txn_first_offset", -1) >= offset:
                del d["txn_first_offset"]
            out[pid] = d
        return out

    def load(self, snapshot: dict[int, dict[str, Any]]) -> None:
        """Replace the state with one produced by :meth:`snapshot`; a snapshot written before
        transactions loads as "none ongoing". Completed transactions not yet below the HW are
        not in a snapshot (as in Kafka): a restart counts them stable."""
        producers: dict[int, ProducerEntry] = {}
        ongoing: dict[int, int] = {}
        for pid, data in snapshot.items():
            batches = deque((BatchMetadata(*map(int, b)) for b in data["batches"]), CACHED_BATCHES)
            entry = ProducerEntry(int(pid), int(data["epoch"]), batches, int(data.get("txn_first_offset", -1)), int(data.get("coordinator_epoch", -1)))
            producers[entry.producer_id] = entry
            if entry.txn_first_offset >= 0:
                ongoing[entry.producer_id] = entry.txn_first_offset
        self._producers = producers
        self._ongoing = ongoing
        self._unreplicated = []
