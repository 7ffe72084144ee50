"""ListTransactions and DescribeTransactions (KIP-664), and the coordinator's metrics: what
operators see, read from the acknowledged state only (an id whose first InitProducerId is still being appended does not
exist yet; a transition in flight shows the state before it)."""

from __future__ import annotations

from typing import Any

from ..protocol.errors import ErrorCode
from ..protocol.txn import (
    DescribedTransaction,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListedTransaction,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from .context import TxnContext
from .state import TransactionState

E = ErrorCode

_STATE_NAMES = {s.value for s in TransactionState}
#: a transaction is open from its first AddPartitionsToTxn until every marker is written
OPEN_STATES = frozenset({TransactionState.ONGOING, TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT})


class TxnAdmin:
    def __init__(self, ctx: TxnContext) -> None:
        self.ctx = ctx

    def list_transactions(self, req: ListTransactionsRequest, token: Any, now_ms: int) -> None:
        """Kafka's filters: states by exact name (unknown names are reported and match
        nothing), producer ids, and KIP-994's duration (transactions running longer than it;
        an id with no transaction since its InitProducerId is not running)."""
        states = set(req.states_filter or [])
        unknown = sorted(states - _STATE_NAMES)
        pids = set(req.producer_ids_filter or [])
        out = []
        for tid in sorted(self.ctx.transactions):
            v = self.ctx.transactions[tid].value
            if v is None:
                continue
            if states and v.state.value not in states:
                continue
            if pids and v.producer_id not in pids:
                continue
            if req.duration_filter_ms >= 0 and (v.start_ms < 0 or now_ms - v.start_ms <= req.duration_filter_ms):
                continue
            out.append(ListedTransaction(tid, v.producer_id, v.state.value))
        self.ctx.reply(token, ListTransactionsResponse(unknown_state_filters=unknown, transactions=out))

    def describe_transactions(self, req: DescribeTransactionsRequest, token: Any, now_ms: int) -> None:
        out = []
        for tid in req.transactional_ids:
            if not tid:
                out.append(DescribedTransaction(tid, error_code=E.INVALID_REQUEST))
                continue
            if not self.ctx.owns(tid):
                out.append(DescribedTransaction(tid, error_code=E.NOT_COORDINATOR))
                continue
            meta = self.ctx.transactions.get(tid)
            v = None if meta is None else meta.value
            if v is None:
                out.append(DescribedTransaction(tid, error_code=E.TRANSACTIONAL_ID_NOT_FOUND))
                continue
            topics: dict[str, list[int]] = {}
            for t, p in v.partitions:
                topics.setdefault(t, []).append(p)
            out.append(
                DescribedTransaction(
                    tid,
                    state=v.state.value,
                    timeout_ms=v.timeout_ms,
                    start_time_ms=v.start_ms,
                    producer_id=v.producer_id,
                    producer_epoch=v.producer_epoch,
                    topics=topics,
                )
            )
        self.ctx.reply(token, DescribeTransactionsResponse(transactions=out))

    def metrics_snapshot(self) -> dict[str, int]:
        values = [m.value for m in self.ctx.transactions.values() if m.value is not None]
        return {
            "open_transactions": sum(1 for v in values if v.state in OPEN_STATES),
            "transactional_ids": len(values),
            **{k: int(v) for k, v in vars(self.ctx.stats).items()},
        }
