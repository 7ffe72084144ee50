"""The producer: :class:`Producer` (:mod:`.producer`) owns a
:class:`~.accumulator.RecordAccumulator` (per-partition queues of :class:`~.batch.ProducerBatch`,
sticky partitions, buffer memory) and a :class:`~.sender.Sender` (the thread that delivers
batches to the leaders), plus its :class:`~.idempotence.ProducerIdentity`. Records are
placed by :mod:`.partitioner`, bulk writes planned by :mod:`.bulk`, input checked by
:mod:`.validation`, and ``send()`` returns a :class:`~.futures.FutureRecordMetadata`."""

from .producer import Producer

__all__ = ["Producer"]
