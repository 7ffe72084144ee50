"""An idempotent producer's identity: (producer id, epoch) and per-partition sequences.

Every batch of an idempotent producer carries (producer id, epoch, base sequence), fixed
when the batch is first sent and kept on every retry, so that a leader recognises a retry
as a duplicate. A batch that fails for good after its sequence was assigned leaves a hole
in its partition's sequence stream that the leader would reject: a producer whose identity
came from InitProducerId then bumps its epoch (every partition restarts at sequence 0), and
takes a new producer id once the epoch would pass 32767. An explicit identity (a retried
bulk writer's) is never bumped.

A leader answers a re-sent batch as a duplicate only when it is one of the producer's last
five batches (Kafka's rule); anything else behind is OUT_OF_ORDER_SEQUENCE_NUMBER. A retried
bulk writer re-sends *identical* batches, usually far more than five, so on that answer it
asks the leader how far its identity got (DescribeProducers) and counts what is committed
there as written (:func:`resume_verdict`): the writer vouches that its batches are the same,
the leader only for what it holds.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ...protocol.controller import InitProducerIdRequest, InitProducerIdResponse
from ...protocol.errors import KafkaError
from ...protocol.replication import DescribeProducersResponse
from ..cluster import ClusterClient
from .batch import ProducerBatch, sequence_after
from .validation import check_int

if TYPE_CHECKING:
    from .accumulator import PartitionQueue

logger = logging.getLogger("kcoord.producer")

MAX_PRODUCER_EPOCH = 32767


class ProducerIdentity:
    """Who a producer is to the leaders (``producer_id``, ``epoch``; -1, -1 when not
    idempotent) and the sequence bookkeeping that goes with it. Read from any thread;
    changed only by its constructor and the producer's sender thread. Epoch bumps are
    counted in ``metrics["epoch_bumps"]`` (the producer's metrics)."""

    def __init__(
        self,
        cluster: ClusterClient,
        metrics: dict[str, int],
        *,
        idempotent: bool,
        producer_id: int | None,
        producer_epoch: int,
    ) -> None:
        """An explicit ``producer_id`` (and ``producer_epoch``) skips InitProducerId;
        otherwise an idempotent producer asks the controller for one now."""
        self._cluster = cluster
        self._metrics = metrics
        self.idempotent = idempotent
        self.explicit = producer_id is not None
        if producer_id is not None:
            check_int("producer_id", producer_id, 0)
            check_int("producer_epoch", producer_epoch, 0)
            if producer_epoch > MAX_PRODUCER_EPOCH:
                raise ValueError(f"producer_epoch must be <= {MAX_PRODUCER_EPOCH}")
            self.producer_id, self.epoch = producer_id, producer_epoch
        elif idempotent:
            self.producer_id, self.epoch = self._init_producer_id_sync(), 0
        else:
            self.producer_id, self.epoch = -1, -1

    def assign_sequence(self, ps: PartitionQueue, batch: ProducerBatch) -> None:
        """Stamp ``batch`` with the identity and its partition's next base sequence, once
        (a retry keeps them). A partition whose sequences belong to an older identity
        restarts at 0."""
        if not self.idempotent or batch.base_sequence >= 0:
            return
        ident = (self.producer_id, self.epoch)
        if ps.identity != ident:
            ps.identity = ident
            ps.next_sequence = 0
            ps.written_through = -1
        batch.producer_id, batch.producer_epoch = ident
        batch.base_sequence = ps.next_sequence
        ps.next_sequence = sequence_after(ps.next_sequence, len(batch))

    transactional = False

    def on_failed(self, batch: ProducerBatch, error: BaseException | None = None) -> None:
        """``batch`` failed for good: if its sequence was assigned, its partition now has a
        hole the leader would reject, so an auto-identity producer bumps its epoch."""
        if self.idempotent and batch.base_sequence >= 0 and not self.explicit:
            self._bump_epoch(batch.producer_id, batch.producer_epoch)

    def _bump_epoch(self, producer_id: int, epoch: int) -> None:
        if (producer_id, epoch) != (self.producer_id, self.epoch):
            return  # someone already bumped past the identity this batch used
        self._metrics["epoch_bumps"] += 1
        if self.epoch < MAX_PRODUCER_EPOCH:
            self.epoch += 1
        else:
            self.producer_id, self.epoch = self._init_producer_id_sync(), 0
        logger.info("producer %d: sequence hole after a failed batch; now at epoch %d", self.producer_id, self.epoch)

    def _init_producer_id_sync(self) -> int:
        resp = self._cluster.call_controller("init_producer_id", InitProducerIdRequest(count=1), InitProducerIdResponse)
        if resp.error_code:
            raise KafkaError(resp.error_code, resp.error_message or "InitProducerId failed")
        return resp.producer_id


WRITTEN = "written"  # an earlier attempt wrote this batch, and the leader holds it committed
WAIT = "wait"  # written, not yet committed: ask again
SEND = "send"  # the batch is the next one now: send it again
REFUSED = "refused"  # a real gap, or another identity's sequences: the batch fails


def resume_verdict(batch: ProducerBatch, described: DescribeProducersResponse) -> str:
    """What an explicit-identity batch answered OUT_OF_ORDER_SEQUENCE_NUMBER is, by the
    leader's DescribeProducers answer (see the module docstring)."""
    last = sequence_after(batch.base_sequence, len(batch) - 1)
    mine = [p for p in described.producers if p.producer_id == batch.producer_id]
    if not mine:
        return SEND if batch.base_sequence == 0 else REFUSED
    state = mine[0]
    if state.producer_epoch != batch.producer_epoch:
        return REFUSED
    if state.last_sequence >= last:
        return WRITTEN if state.last_offset < described.high_watermark else WAIT
    if sequence_after(state.last_sequence, 1) == batch.base_sequence:
        return SEND
    return REFUSED
