"""The future ``Producer.send()`` returns: a batch and an index, nothing else.

A producer may create hundreds of thousands of these a second, so a record future is two
slots; the waiting (a ``threading.Event``), the outcome and the callbacks live on the batch
and are shared by all of its records (kafka-python's FutureRecordMetadata does the same).
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from ...protocol.errors import ErrorCode, KafkaError
from ..types import RecordMetadata, TopicPartition
from .batch import ProducerBatch

logger = logging.getLogger("kcoord.producer")


class FutureRecordMetadata:
    """Resolves to :class:`RecordMetadata` once the record's batch is acknowledged.

    ``offset`` is -1 with ``acks=0`` (nobody waits for the leader) and for a batch of a
    retried bulk write (explicit producer identity) that an earlier attempt had written.
    """

    __slots__ = ("_batch", "_index")

    def __init__(self, batch: ProducerBatch, index: int) -> None:
        self._batch = batch
        self._index = index

    def __repr__(self) -> str:
        b = self._batch
        state = "pending" if not b.is_done else ("failed" if b.error is not None else "done")
        return f"FutureRecordMetadata({b.topic}-{b.partition}, {state})"

    # -- state ------------------------------------------------------------------------------
    @property
    def is_done(self) -> bool:
        return self._batch.done.is_set()

    def done(self) -> bool:
        return self._batch.done.is_set()

    def succeeded(self) -> bool:
        return self._batch.done.is_set() and self._batch.error is None

    def failed(self) -> bool:
        return self._batch.done.is_set() and self._batch.error is not None

    @property
    def exception(self) -> BaseException | None:
        return self._batch.error if self._batch.done.is_set() else None

    @property
    def value(self) -> RecordMetadata | None:
        b = self._batch
        if not b.done.is_set() or b.error is not None:
            return None
        return self._metadata()

    def _metadata(self) -> RecordMetadata:
        b = self._batch
        return RecordMetadata(b.topic, b.partition, b.offset_of(self._index), b.timestamp_of(self._index), TopicPartition(b.topic, b.partition))

    # -- waiting ----------------------------------------------------------------------------
    def get(self, timeout: float | None = None) -> RecordMetadata:
        """Block until the record is acknowledged (or fails) and return its metadata.

        Raises the batch's :class:`KafkaError` if it failed, and KafkaError(REQUEST_TIMED_OUT)
        if ``timeout`` seconds pass first (the record may still be delivered later).
        """
        b = self._batch
        if not b.done.wait(timeout):
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"record for {b.topic}-{b.partition} not acknowledged within {timeout} s")
        if b.error is not None:
            raise b.error
        return self._metadata()

    # -- callbacks (run in the producer's sender thread, or at once if already done) --------
    def add_callback(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> "FutureRecordMetadata":
        """``fn(*args, record_metadata, **kwargs)`` on success."""

        def on_done(batch: ProducerBatch) -> None:
            if batch.error is None:
                fn(*args, self._metadata(), **kwargs)

        if not self._batch.add_callback(on_done):
            _run_callback(on_done, self._batch)
        return self

    def add_errback(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> "FutureRecordMetadata":
        """``fn(*args, exception, **kwargs)`` on failure."""

        def on_done(batch: ProducerBatch) -> None:
            if batch.error is not None:
                fn(*args, batch.error, **kwargs)

        if not self._batch.add_callback(on_done):
            _run_callback(on_done, self._batch)
        return self

    def add_both(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> "FutureRecordMetadata":
        self.add_callback(fn, *args, **kwargs)
        return self.add_errback(fn, *args, **kwargs)


def _run_callback(fn: Callable[[ProducerBatch], Any], batch: ProducerBatch) -> None:
    """A user callback that raises must not kill the sender: log it and carry on."""
    try:
        fn(batch)
    except Exception:
        logger.exception("producer callback for %s-%d raised", batch.topic, batch.partition)


def run_callbacks(callbacks: list, batch: ProducerBatch) -> None:
    for fn in callbacks:
        _run_callback(fn, batch)
