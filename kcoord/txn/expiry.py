"""What time does to transactional ids: transaction timeouts and id expiration.

* An ONGOING transaction older than its ``transaction_timeout_ms`` (``start_ms + timeout <
  now``, Kafka's test) is aborted at a bumped epoch, fencing its producer (a zombie that
  stalled cannot commit it later). Two-phase transactions have no timeout (KIP-939): they
  wait for whoever holds the decision, or an operator's abort.
* An id in EMPTY or COMPLETE_* untouched for ``transactional_id_expiration_ms`` is removed: its
  tombstone is appended (the id is DEAD meanwhile) and it is forgotten once acknowledged.

Kafka scans for both periodically; the core keeps one deadline per id instead, re-armed
whenever the id's state changes, so it acts on time and sleeps in between. A write of its own
that fails is tried again after ``append_retry_backoff_ms``.
"""

from __future__ import annotations

from ..protocol.errors import ErrorCode
from .context import TxnContext
from .ending import Ending
from .metadata import TransactionMetadata
from .persistence import ExpireWrite, Persistence
from .state import DEAD, ONGOING, check_transition
from .timers import TimerKind

E = ErrorCode


class Expiry:
    def __init__(self, ctx: TxnContext, persistence: Persistence, ending: Ending) -> None:
        self.ctx = ctx
        self.persistence = persistence
        self.ending = ending

    def reschedule(self, meta: TransactionMetadata) -> None:
        """Arm the deadlines ``meta``'s acknowledged state calls for."""
        tid, timers = meta.transactional_id, self.ctx.timers
        timers.cancel((TimerKind.TIMEOUT, tid))
        timers.cancel((TimerKind.EXPIRE, tid))
        v = meta.value
        if v is None:
            return
        if v.state == ONGOING and not v.two_phase:
            timers.set((TimerKind.TIMEOUT, tid), v.start_ms + v.timeout_ms + 1)
        if v.state.expiration_allowed:
            timers.set((TimerKind.EXPIRE, tid), v.last_update_ms + self.ctx.config.transactional_id_expiration_ms)

    def forget(self, transactional_id: str) -> None:
        for kind in (TimerKind.TIMEOUT, TimerKind.EXPIRE, TimerKind.COMPLETE):
            self.ctx.timers.cancel((kind, transactional_id))

    # -- transaction timeouts ------------------------------------------------------------

    def on_timeout(self, transactional_id: str, now_ms: int) -> None:
        meta = self.ctx.transactions.get(transactional_id)
        v = None if meta is None else meta.value
        if meta is None or v is None or v.state != ONGOING or v.two_phase or v.start_ms + v.timeout_ms >= now_ms:
            return
        if meta.pending is not None:  # e.g. partitions being added: look again shortly
            self.ctx.timers.set((TimerKind.TIMEOUT, transactional_id), now_ms + self.ctx.config.append_retry_backoff_ms)
            return
        self.ending.abort(meta, "timeout", None, None, now_ms)

    # -- id expiration -------------------------------------------------------------------

    def on_expire(self, transactional_id: str, now_ms: int) -> None:
        meta = self.ctx.transactions.get(transactional_id)
        v = None if meta is None else meta.value
        if meta is None or v is None or not v.state.expiration_allowed:
            return
        if v.last_update_ms + self.ctx.config.transactional_id_expiration_ms > now_ms:
            return
        if meta.pending is not None:
            self.ctx.timers.set((TimerKind.EXPIRE, transactional_id), now_ms + self.ctx.config.append_retry_backoff_ms)
            return
        check_transition(v.state, DEAD)
        meta.pending = DEAD
        self.persistence.persist(ExpireWrite(transactional_id), f"expiry of {transactional_id}")

    def expired(self, pending: ExpireWrite, code: int, now_ms: int) -> None:
        """The tombstone's outcome (the id is already forgotten when it succeeded)."""
        if code == E.NONE:
            self.ctx.stats.expired_ids += 1
        else:
            self.ctx.timers.set((TimerKind.EXPIRE, pending.transactional_id), now_ms + self.ctx.config.append_retry_backoff_ms)
