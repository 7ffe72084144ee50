"""Producer ids for transactional ids: blocks from the controller's allocator.

The controller hands out consecutive fresh ids (persisted before it answers, shared with
idempotent producers and coordinators, never handed out twice). The coordinator takes a block
of ``producer_id_block_size`` and asks for the next one when a tenth is left (Kafka's
RPCProducerIdManager prefetches the same way). With none left a request that needs a new id is
answered COORDINATOR_LOAD_IN_PROGRESS, which clients retry, as Kafka answers while it waits for
a block. Ids of a block not used when the coordinator stops are simply never used.
"""

from __future__ import annotations

from .actions import AllocateProducerIds
from .context import TxnContext


class ProducerIdPool:
    def __init__(self, ctx: TxnContext) -> None:
        self.ctx = ctx
        self._blocks: list[tuple[int, int]] = []  # [next id, end) ranges, in order received
        self._requested_at: int | None = None

    @property
    def available(self) -> int:
        return sum(end - nxt for nxt, end in self._blocks)

    def take(self, now_ms: int) -> int | None:
        """A fresh producer id, or None when none is left (a block is asked for)."""
        pid = None
        if self._blocks:
            nxt, end = self._blocks[0]
            pid = nxt
            if nxt + 1 >= end:
                self._blocks.pop(0)
            else:
                self._blocks[0] = (nxt + 1, end)
        self._maybe_request(now_ms)
        return pid

    def prefetch(self, now_ms: int) -> None:
        """Ask for a block ahead of need (a loaded coordinator has ids before clients come)."""
        self._maybe_request(now_ms)

    def on_block(self, first_id: int, count: int, error_code: int, now_ms: int) -> None:
        """The controller's answer to AllocateProducerIds."""
        self._requested_at = None
        if error_code == 0 and first_id >= 0 and count > 0:
            self._blocks.append((first_id, first_id + count))
            self.ctx.stats.producer_id_blocks += 1

    def _maybe_request(self, now_ms: int) -> None:
        size = self.ctx.config.producer_id_block_size
        if self.available > size // 10:
            return
        waited = None if self._requested_at is None else now_ms - self._requested_at
        if waited is not None and waited < self.ctx.config.producer_id_request_timeout_ms:
            return
        self._requested_at = now_ms
        self.ctx.emit(AllocateProducerIds(size))
