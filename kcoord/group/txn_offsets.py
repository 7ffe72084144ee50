"""Transactional offset commits (KIP-447): TxnOffsetCommit and TxnOffsetMarker.

A part of :class:`kcoord.group.coordinator.GroupCoordinatorState`, working on the shared
:class:`~kcoord.group.context.CoordinatorContext` (docs/transactions.md, section 3).

* ``TxnOffsetCommit`` is checked like an OffsetCommit, with Kafka's transactional
  exceptions (ClassicGroup.validateOffsetCommit with ``isTransactional``): no generation and
  no member id are accepted whatever the group's members, and a group completing a rebalance
  is not refused. Its offsets are appended as *pending*: key ``[4, group, topic, partition,
  producer_id]``; they become the group's only through the transaction's marker.
* ``TxnOffsetMarker`` (from the transaction coordinator) appends, in one batch, the
  committed offsets ``[1, ...]`` (on commit) and a tombstone for every pending key of that
  producer, then answers. A retried marker finds nothing pending and answers NONE.
* Fencing without the log's producer state (kcoord's coordinator writes under its own
  producer id): per transactional producer id the newest producer epoch and transaction
  coordinator epoch accepted are kept, in memory and as key ``[5, producer_id]`` written in
  the same batches, so they survive a failover. An older producer epoch on a commit is
  PRODUCER_FENCED; on a marker INVALID_PRODUCER_EPOCH; an older coordinator epoch on a
  marker TRANSACTION_COORDINATOR_FENCED (Kafka's checks at the partition).
* Expiry: a producer's ``[5, producer_id]`` record carries when it was written (a commit
  that raised the epoch, or a marker). Once ``transactional_id_expiration_ms`` passed since
  then and the producer has nothing pending here (no pending offsets, none uncertain, no
  commit or marker in flight), it is tombstoned and forgotten when acknowledged (as Kafka
  expires a partition's idle producer state); meanwhile its commits and markers are
  CONCURRENT_TRANSACTIONS. Compaction then drops the key, and a replay rebuilds the same.

Memory follows the log: pending offsets and epochs change only when their append is
acknowledged. A marker waits while a TxnOffsetCommit of its producer is in flight, so it
resolves everything that commit may have written; a commit whose append failed may still
have landed, so its partitions stay pending without a value (the marker tombstones them and
commits nothing). While a marker is in flight, commits of its producer are answered
CONCURRENT_TRANSACTIONS (retriable).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ..protocol.errors import ErrorCode
from ..protocol.txn import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnOffsetMarkerRequest,
    TxnOffsetMarkerResponse,
    error_response,
    fenced_error,
)
from .context import CoordinatorContext
from .member_checks import member_error
from .metadata import DEAD, EMPTY, CommittedOffset, GroupMetadata, TxnOffset
from .offset_requests import accept_offsets
from .persistence import MarkerWrite, Persistence, TxnCommitWrite, TxnProducerExpiryWrite, commit_error_for_append
from .records import (
    OffsetKey,
    OffsetValue,
    Record,
    TxnOffsetKey,
    TxnProducerKey,
    TxnProducerValue,
    offset_record,
    txn_offset_record,
    txn_producer_record,
)
from .retention import Retention
from .timers import TimerKind

E = ErrorCode

#: a failed tombstone of an idle producer's record is tried again this much later
EXPIRY_RETRY_MS = 1_000


def _value(o: CommittedOffset) -> OffsetValue:
    return OffsetValue(o.offset, o.metadata, o.leader_epoch, o.commit_timestamp_ms, o.expire_timestamp_ms)


class TxnOffsetStore:
    """Pending transactional offsets, their markers, and the producers' epochs."""

    def __init__(self, ctx: CoordinatorContext, persistence: Persistence, retention: Retention) -> None:
        self.ctx = ctx
        self.persistence = persistence
        self.retention = retention
        # producer id -> the newest epochs acknowledged for it
        self.producers: dict[int, TxnProducerValue] = {}
        # producer id -> TxnOffsetCommit appends in flight
        self._commits_in_flight: Counter = Counter()
        # producer id -> its marker's append in flight
        self._resolving: dict[int, MarkerWrite] = {}
        # producer id -> markers waiting for its commits in flight
        self._queued: dict[int, list[tuple[TxnOffsetMarkerRequest, Any]]] = {}
        # producer ids whose [5] tombstone is being appended
        self._expiring: set[int] = set()
        # records written before kcoord kept ``last_update_ms`` count as active at load time
        self._loaded_at = 0

    def restore(self, producers: dict[int, TxnProducerValue], now_ms: int) -> None:
        self.producers = dict(producers)
        self._loaded_at = now_ms
        for pid in sorted(self.producers):
            self._arm(pid)

    # -- expiry of idle producers' [5] records ---------------------------------------------

    def _expires_at(self, value: TxnProducerValue) -> int:
        since = value.last_update_ms if value.last_update_ms >= 0 else self._loaded_at
        return since + self.ctx.config.transactional_id_expiration_ms

    def _arm(self, pid: int) -> None:
        value = self.producers.get(pid)
        if value is None:
            self.ctx.timers.cancel((TimerKind.TXN_PRODUCER, pid))
        else:
            self.ctx.timers.set((TimerKind.TXN_PRODUCER, pid), self._expires_at(value))

    def _busy(self, pid: int) -> bool:
        """Anything of ``pid`` pending here: offsets (acknowledged or uncertain), a commit or
        a marker in flight or waiting."""
        if pid in self._commits_in_flight or pid in self._resolving or pid in self._queued:
            return True
        return any(pid in g.txn_offsets or any(k[0] == pid for k in g.pending_txn_commits) for g in self.ctx.groups.values())

    def on_expire(self, pid: int, now_ms: int) -> None:
        value = self.producers.get(pid)
        if value is None or pid in self._expiring:
            return
        if self._expires_at(value) > now_ms:
            self._arm(pid)
            return
        if self._busy(pid):
            # Its marker re-arms the deadline; look again a horizon later all the same (a
            # group deletion can drop pending offsets without a marker).
            self.ctx.timers.set((TimerKind.TXN_PRODUCER, pid), now_ms + self.ctx.config.transactional_id_expiration_ms)
            return
        self._expiring.add(pid)
        self.persistence.persist(
            [txn_producer_record(TxnProducerKey(pid), None)],
            TxnProducerExpiryWrite(pid, value),
            f"expiry of idle transactional producer {pid}",
        )

    def complete_expiry(self, pending: TxnProducerExpiryWrite, code: int, now_ms: int) -> None:
        pid = pending.producer_id
        self._expiring.discard(pid)
        if code == E.NONE:
            self.producers.pop(pid, None)
            self.ctx.timers.cancel((TimerKind.TXN_PRODUCER, pid))
            self.ctx.stats.txn_producers_expired += 1
        else:
            self.ctx.timers.set((TimerKind.TXN_PRODUCER, pid), now_ms + EXPIRY_RETRY_MS)

    # -- TxnOffsetCommit -----------------------------------------------------------------

    def _commit_error(self, req: TxnOffsetCommitRequest, now_ms: int) -> tuple[GroupMetadata | None, int, str | None]:
        """Kafka's validateTransactionalOffsetCommit: the group (created for a commit without
        a generation) or the error for every partition."""
        if req.producer_id < 0 or req.producer_epoch < 0:
            return None, E.INVALID_REQUEST, "a transactional offset commit needs a producer id and epoch"
        group = self.ctx.groups.get(req.group_id)
        if group is None:
            if req.generation_id >= 0:
                return None, E.ILLEGAL_GENERATION, "the group does not exist (any generation is stale)"
            group = self.retention.new_group(req.group_id, now_ms)
        if group.state == DEAD:
            return None, E.COORDINATOR_NOT_AVAILABLE, "the group is being deleted"
        if not (req.generation_id < 0 and group.state == EMPTY) and (
            req.generation_id >= 0 or req.member_id or req.group_instance_id is not None
        ):
            error = member_error(group, req.member_id, req.group_instance_id)
            if error != E.NONE:
                return None, error, None
            if req.generation_id != group.generation_id:
                return None, E.ILLEGAL_GENERATION, f"generation {req.generation_id} is not the current {group.generation_id}"
        # Neither generation nor member id: accepted whatever the members (older versions of
        # TxnOffsetCommit carry neither), and no REBALANCE_IN_PROGRESS for transactions.
        # Then what the log's producer state would check in Kafka: the producer's epoch.
        known = self.producers.get(req.producer_id)
        if known is not None and req.producer_epoch < known.producer_epoch:
            return None, fenced_error(req), f"producer epoch {req.producer_epoch} is older than {known.producer_epoch}"
        if req.producer_id in self._resolving or req.producer_id in self._queued:
            return None, E.CONCURRENT_TRANSACTIONS, "the producer's previous transaction is being completed"
        if req.producer_id in self._expiring:
            return None, E.CONCURRENT_TRANSACTIONS, "the producer's idle record is being expired"
        return group, E.NONE, None

    def commit(self, req: TxnOffsetCommitRequest, token: Any, now_ms: int) -> None:
        group, error, message = self._commit_error(req, now_ms)
        if group is None:
            self.ctx.reply(token, error_response(req, error, message))
            return
        codes, accepted = accept_offsets(req.topics, self.ctx.config.offset_metadata_max_bytes, now_ms, None)
        if not accepted:
            self.ctx.reply(token, TxnOffsetCommitResponse(topics=codes))
            return
        pid = req.producer_id
        records: list[Record] = [
            txn_offset_record(TxnOffsetKey(group.group_id, t, q, pid), _value(o)) for (t, q), o in accepted.items()
        ]
        known = self.producers.get(pid)
        producer = None
        if known is None or req.producer_epoch > known.producer_epoch:
            producer = TxnProducerValue(req.producer_epoch, -1 if known is None else known.coordinator_epoch, now_ms)
            records.append(txn_producer_record(TxnProducerKey(pid), producer))
        for tp in accepted:
            group.pending_txn_commits[(pid, tp)] += 1
        self._commits_in_flight[pid] += 1
        self.persistence.persist(
            records,
            TxnCommitWrite(token, group.group_id, pid, producer, accepted, codes),
            f"transactional offset commit of group {group.group_id} (producer {pid})",
        )

    def complete_commit(self, pending: TxnCommitWrite, code: int, now_ms: int) -> None:
        pid = pending.producer_id
        group = self.ctx.groups.get(pending.group_id)
        if group is not None:
            for tp, offset in pending.accepted.items():
                key = (pid, tp)
                group.pending_txn_commits[key] -= 1
                if group.pending_txn_commits[key] <= 0:
                    del group.pending_txn_commits[key]
                offsets = group.txn_offsets.setdefault(pid, {})
                if code == E.NONE:
                    offsets[tp] = TxnOffset(offset)
                elif tp not in offsets:
                    # The append may have landed all the same: the marker must tombstone it.
                    offsets[tp] = TxnOffset(None)
            self.retention.reschedule(group, now_ms)
        if code == E.NONE and pending.producer is not None:
            known = self.producers.get(pid)
            if known is None or pending.producer.producer_epoch > known.producer_epoch:
                coordinator_epoch = -1 if known is None else known.coordinator_epoch
                self.producers[pid] = TxnProducerValue(pending.producer.producer_epoch, coordinator_epoch, pending.producer.last_update_ms)
                self._arm(pid)
        codes = pending.codes
        if code != E.NONE:
            mapped = commit_error_for_append(code)
            codes = {t: {p: (mapped if c == E.NONE else c) for p, c in parts.items()} for t, parts in codes.items()}
        self.ctx.reply(pending.token, TxnOffsetCommitResponse(topics=codes))
        self._commits_in_flight[pid] -= 1
        if self._commits_in_flight[pid] <= 0:
            del self._commits_in_flight[pid]
            for req, token in self._queued.pop(pid, []):
                self.marker(req, token, now_ms)

    # -- TxnOffsetMarker -----------------------------------------------------------------

    def marker(self, req: TxnOffsetMarkerRequest, token: Any, now_ms: int) -> None:
        def fail(code: int, message: str) -> None:
            self.ctx.reply(token, TxnOffsetMarkerResponse(error_code=code, error_message=message))

        pid = req.producer_id
        if req.partition != self.ctx.partition:
            fail(E.NOT_COORDINATOR, f"partition {req.partition} belongs to coordinator {req.partition}, this is {self.ctx.partition}")
            return
        known = self.producers.get(pid)
        if known is not None and req.coordinator_epoch < known.coordinator_epoch:
            fail(E.TRANSACTION_COORDINATOR_FENCED, f"coordinator epoch {req.coordinator_epoch} is older than {known.coordinator_epoch}")
            return
        if known is not None and req.producer_epoch < known.producer_epoch:
            fail(E.INVALID_PRODUCER_EPOCH, f"producer epoch {req.producer_epoch} is older than {known.producer_epoch}")
            return
        if pid in self._expiring:
            fail(E.CONCURRENT_TRANSACTIONS, "the producer's idle record is being expired")
            return
        inflight = self._resolving.get(pid)
        if inflight is not None:
            if inflight.commit == req.commit:
                inflight.tokens.append(token)  # a retry: answered with the write in flight
            else:
                fail(E.CONCURRENT_TRANSACTIONS, "another marker of this producer is being written")
            return
        if self._commits_in_flight[pid] > 0:
            self._queued.setdefault(pid, []).append((req, token))
            return
        if any(g.state == DEAD and pid in g.txn_offsets for g in self.ctx.groups.values()):
            # A DeleteGroups in flight tombstones them; if it fails they are pending again.
            fail(E.CONCURRENT_TRANSACTIONS, "a group with this producer's offsets is being deleted")
            return
        self._resolve(req, token, known, now_ms)

    def _resolve(self, req: TxnOffsetMarkerRequest, token: Any, known: TxnProducerValue | None, now_ms: int) -> None:
        pid = req.producer_id
        records: list[Record] = []
        materialized: dict[str, dict[tuple[str, int], CommittedOffset]] = {}
        resolved: dict[str, list[tuple[str, int]]] = {}
        for group_id in sorted(self.ctx.groups):
            pending = self.ctx.groups[group_id].txn_offsets.get(pid)
            if not pending:
                continue
            resolved[group_id] = sorted(pending)
            for tp in resolved[group_id]:
                entry = pending[tp]
                if req.commit and entry.offset is not None and not entry.superseded:
                    materialized.setdefault(group_id, {})[tp] = entry.offset
                    records.append(offset_record(OffsetKey(group_id, *tp), _value(entry.offset)))
                records.append(txn_offset_record(TxnOffsetKey(group_id, tp[0], tp[1], pid), None))
        producer = TxnProducerValue(
            max(req.producer_epoch, -1 if known is None else known.producer_epoch),
            max(req.coordinator_epoch, -1 if known is None else known.coordinator_epoch),
            now_ms,
        )
        if records or known is None or (producer.producer_epoch, producer.coordinator_epoch) != (known.producer_epoch, known.coordinator_epoch):
            # written with every marker that resolves something: the producer's activity
            records.append(txn_producer_record(TxnProducerKey(pid), producer))
        if not records:
            self.ctx.reply(token, TxnOffsetMarkerResponse())  # nothing pending: a retry, or none
            return
        write = MarkerWrite([token], pid, req.commit, materialized, resolved, producer)
        self._resolving[pid] = write
        outcome = "commit" if req.commit else "abort"
        self.persistence.persist(records, write, f"transaction marker ({outcome}) of producer {pid}")

    def complete_marker(self, pending: MarkerWrite, code: int, now_ms: int) -> None:
        pid = pending.producer_id
        self._resolving.pop(pid, None)
        if code == E.NONE:
            for group_id, tps in pending.resolved.items():
                group = self.ctx.groups.get(group_id)
                if group is None:
                    continue
                offsets = group.txn_offsets.get(pid, {})
                for tp in tps:
                    offsets.pop(tp, None)
                if not offsets:
                    group.txn_offsets.pop(pid, None)
                for tp, offset in pending.materialized.get(group_id, {}).items():
                    group.offsets[tp] = offset
                    # a committed record newer than other producers' pending ones: as replay sees it
                    self.on_plain_commit(group, tp)
                self.retention.reschedule(group, now_ms)
            self.producers[pid] = pending.producer
            self._arm(pid)
        response = TxnOffsetMarkerResponse(error_code=commit_error_for_append(code))
        for token in pending.tokens:
            self.ctx.reply(token, response)

    # -- plain commits and deletions touching pending offsets ------------------------------

    def on_plain_commit(self, group: GroupMetadata, tp: tuple[str, int]) -> None:
        """A plain commit of ``tp`` was acknowledged after the pending ones: it is newer, so
        their markers will not commit them (Kafka keeps the newest commit)."""
        for offsets in group.txn_offsets.values():
            entry = offsets.get(tp)
            if entry is not None:
                entry.superseded = True

    @staticmethod
    def tombstones(group: GroupMetadata) -> list[Record]:
        """Tombstones for every pending key of a group being deleted (in flight included)."""
        keys = {(pid, tp) for pid, offsets in group.txn_offsets.items() for tp in offsets}
        keys |= set(group.pending_txn_commits)
        return [txn_offset_record(TxnOffsetKey(group.group_id, t, p, pid), None) for pid, (t, p) in sorted(keys)]

    def close(self, error_code: int) -> None:
        """Answer every marker waiting on a commit in flight (the writes themselves are
        answered by the coordinator's close)."""
        for queued in self._queued.values():
            for _, token in queued:
                self.ctx.reply(token, TxnOffsetMarkerResponse(error_code=error_code, error_message="coordinator closed"))
        self._queued.clear()
        self._resolving.clear()
        self._commits_in_flight.clear()
        self._expiring.clear()
