"""Producer: batch records per partition and send them to partition leaders (kafka-python's
KafkaProducer, on Ray actors).

Threads: ``send()`` runs in the caller's thread and only appends to the partition's open
batch under one short lock; a background *sender* thread runs an asyncio loop that drains
batches, packs them (:func:`kcoord.records.build_batch_columns`) and calls the leaders'
``produce``. Callbacks run in the sender thread.

A Producer owns its parts and hands each what it needs: the partition queues below
``send()`` are a :class:`~.accumulator.RecordAccumulator`, the sender thread a
:class:`~.sender.Sender` draining it, the idempotent identity and sequence numbers a
:class:`~.idempotence.ProducerIdentity`. Bulk-write planning is in :mod:`.bulk` and input
checks in :mod:`.validation`. This module holds the public API and ``send()``'s checks.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from typing import Any, Callable, Iterable, Sequence

from ... import records as _records
from ...protocol.errors import ErrorCode, KafkaError
from ...protocol.txn import DEFAULT_TRANSACTION_TIMEOUT_MS
from ...records import now_ms
from ..cluster import ClusterClient
from ..errors import IllegalStateError, SerializationError
from ..metrics import RequestStats
from . import partitioner as _part
from .accumulator import RecordAccumulator, TopicQueue
from .batch import RECORD_OVERHEAD, headers_size
from .bulk import PartitionWrite, Plan, build_bulk_batches, partition_writes, plan_bulk
from .futures import FutureRecordMetadata
from .idempotence import ProducerIdentity
from .sender import Sender, Wakeup
from .transaction_manager import PreparedTxnState, TransactionManager
from .transactions import TransactionalIdentity, Transactions
from .validation import as_bytes, bulk_columns, check_headers, check_int, check_transactional

def _serialize(f: Callable[[Any], bytes], what: str, data: Any, topic: str, partition: int | None) -> bytes:
    try:
        return f(data)
    except Exception as exc:
        where = f"topic {topic!r}" + (f" partition {partition}" if partition is not None else "")
        raise SerializationError(f"{what} failed for a record to {where}: {type(exc).__name__}: {exc}") from exc


_ACKS = {"all": -1, -1: -1, "-1": -1, 1: 1, "1": 1, 0: 0, "0": 0}
_monotonic = time.monotonic


class Producer:
    """Send records to a kcoord cluster; names follow kafka-python, and so do the defaults
    except the batching ones (below).

    Ordering and Ray. Ray does **not** preserve the order of calls from one caller to an
    async actor when argument sizes differ (a small request can overtake a large one), so
    this producer keeps **at most one produce request in flight per partition**: a batch is
    sent only after the previous batch of its partition was answered. Records of a
    partition are therefore appended in ``send()`` order, and an idempotent retry can never
    overtake a later batch. Throughput comes from large batches instead (``batch_size``,
    1 MiB by default, fills up while the previous request is in flight; batches that queued
    up behind it go out together as one request of up to ``max_request_size``, 4 MiB) and
    from partitions in parallel (``max_in_flight`` bounds the requests across all
    partitions).

    Idempotence (``enable_idempotence``, the default with ``acks="all"``): the producer
    gets a producer id from the controller; every batch carries (producer id, epoch, base
    sequence), fixed when the batch is first sent and kept on every retry, so a retry after
    a lost response or a leader failover is recognised by the leader (``duplicate=True``:
    counted as success, offsets of the original append). If a batch fails for good after
    its sequence was assigned (delivery timeout, non-retriable error) the partition's
    sequence stream has a hole the leader would reject, so the producer bumps its epoch
    and every partition restarts at sequence 0 (a new producer id once the epoch would
    pass 32767); the failed batch may or may not have been written, as in Kafka.

    ``producer_id=``/``producer_epoch=`` give an explicit identity and skip InitProducerId:
    a bulk writer that re-sends *identical* batches (same :meth:`send_batch` input, fresh
    producer, same identity) gets them deduplicated, which is how a retried Spark task
    writes exactly once. A leader recognises only a producer's last five batches as
    duplicates (Kafka's rule) and answers OUT_OF_ORDER_SEQUENCE_NUMBER for older ones; such
    a producer then asks the leader how far its identity got (DescribeProducers) and counts
    the batches the leader holds committed as written, without sending them again
    (``duplicate=True``, offset -1). It never bumps its epoch; after a failed batch it
    should be discarded.

    Defaults that differ from kafka-python's, and why: ``batch_size`` 1 MiB (kafka-python:
    16 KiB), ``max_request_size`` 4 MiB (1 MiB), ``linger_ms`` 5 (0) and ``max_in_flight``
    64 requests across all partitions (kafka-python: 5 per broker connection). With one
    request in flight per partition (above), a partition's throughput is one batch per
    round trip through Ray (an actor call and the ISR's fetches, about a millisecond), so
    batches must be large to move many records per round trip, and a short linger lets a
    batch fill instead of sending one record per round trip. A request is a Ray call, not a
    socket write, so a large one costs little extra. The other defaults (acks="all" with
    idempotence, retries, retry_backoff_ms 100, request_timeout_ms 30 s,
    delivery_timeout_ms 120 s, buffer_memory 32 MiB, max_block_ms 60 s) are kafka-python's.

    ``key_serializer`` / ``value_serializer``: callables turning the ``key``/``value`` given
    to :meth:`send` (or :meth:`send_batch`) into bytes, applied once per record when it is
    queued (never again on retries); None passes through as None (no key, a tombstone). A
    serializer that raises makes ``send()`` raise :class:`~kcoord.client.errors.SerializationError`
    naming the topic (and partition, if given).

    ``metrics()`` returns the producer's counters (records_sent, batches_sent, requests,
    retries, duplicates, epoch_bumps, merged_requests), produce request latency (avg, max,
    p50, p99 over the last 1024 requests) and failed requests and records by error, as a
    new dict.

    Other settings: ``acks`` 0 (futures resolve with offset -1 once sent), 1 or "all";
    ``linger_ms`` how long a non-full batch waits for more records; ``retries`` /
    ``retry_backoff_ms`` for retriable errors (on leadership errors and dead leaders the
    metadata is refreshed every 10-20 ms during the backoff, and the retry goes out as soon
    as it names a new leader), all bounded by ``delivery_timeout_ms`` after which the batch fails
    with KafkaError(REQUEST_TIMED_OUT); ``request_timeout_ms`` per attempt;
    ``compression_type`` None or "gzip" (plus "lz4"/"zstd" when installed); ``partitioner``
    None (murmur2 / sticky), "round_robin" or a callable; ``buffer_memory`` bytes of
    unsent records before ``send()`` blocks, at most ``max_block_ms``.

    Close producers (``close()`` or a ``with`` block): the sender thread keeps an unclosed
    producer alive. ``send()`` and ``flush()`` may be called from any thread.
    """

    def __init__(
        self,
        cluster: ClusterClient,
        *,
        acks: int | str = "all",
        linger_ms: float = 5,
        batch_size: int = 1 << 20,
        enable_idempotence: bool | None = None,
        retries: int = 2**31 - 1,
        retry_backoff_ms: int = 100,
        delivery_timeout_ms: int = 120_000,
        request_timeout_ms: int = 30_000,
        compression_type: str | None = None,
        partitioner: str | Callable[..., int] | None = None,
        max_in_flight: int = 64,
        max_request_size: int = 4 << 20,
        buffer_memory: int = 32 << 20,
        max_block_ms: int = 60_000,
        producer_id: int | None = None,
        producer_epoch: int = 0,
        metadata_refresh_ms: int = 50,
        key_serializer: Callable[[Any], bytes] | None = None,
        value_serializer: Callable[[Any], bytes] | None = None,
        transactional_id: str | None = None,
        transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS,
        enable_two_phase_commit: bool = False,
    ) -> None:
        if not isinstance(cluster, ClusterClient):
            raise TypeError(f"Producer needs a ClusterClient (kcoord.connect() or kcoord.local_cluster()), got {type(cluster).__name__}")
        try:
            self.acks: int = _ACKS[acks]
        except (KeyError, TypeError):
            raise ValueError(f"acks must be 0, 1 or 'all' (-1), got {acks!r}") from None
        manager = None
        if transactional_id is not None:
            check_transactional(transactional_id, producer_id, enable_idempotence, self.acks, acks)
            enable_idempotence = True
            # KIP-890 part 2: the partition leaders add produce partitions (no AddPartitionsToTxn)
            manager = TransactionManager(transactional_id, transaction_timeout_ms, two_phase=enable_two_phase_commit, implicit_adds=True)
        elif enable_two_phase_commit:
            raise ValueError("enable_two_phase_commit needs a transactional_id")
        if producer_id is not None:
            if enable_idempotence is False:
                raise ValueError("an explicit producer_id means an idempotent producer; do not pass enable_idempotence=False")
            enable_idempotence = True
        if enable_idempotence is None:
            enable_idempotence = self.acks == -1
        if enable_idempotence and self.acks != -1:
            raise ValueError(f"enable_idempotence needs acks='all' (got acks={acks!r}): a record acknowledged by the leader alone may be lost on failover")
        check_int("batch_size", batch_size, 1)
        check_int("retries", retries, 0)
        check_int("max_in_flight", max_in_flight, 1)
        check_int("delivery_timeout_ms", delivery_timeout_ms, 1)
        check_int("request_timeout_ms", request_timeout_ms, 1)
        check_int("buffer_memory", buffer_memory, 1)
        if enable_idempotence and retries == 0:
            raise ValueError("enable_idempotence needs retries > 0")
        if linger_ms < 0 or retry_backoff_ms < 0:
            raise ValueError("linger_ms and retry_backoff_ms must be >= 0")
        self.cluster = cluster
        self.linger_ms = linger_ms
        self.batch_size = batch_size
        self.enable_idempotence = bool(enable_idempotence)
        self.retries = retries
        self.retry_backoff_ms = retry_backoff_ms
        self.delivery_timeout_ms = delivery_timeout_ms
        self.request_timeout_ms = request_timeout_ms
        self.compression_type = compression_type
        compression = _records.codec_id(compression_type)
        resolved_partitioner = _part.resolve(partitioner)
        self.max_in_flight = max_in_flight
        check_int("max_request_size", max_request_size, 1)
        self.max_request_size = max_request_size
        self.buffer_memory = buffer_memory
        self.max_block_ms = max_block_ms
        for name, f in (("key_serializer", key_serializer), ("value_serializer", value_serializer)):
            if f is not None and not callable(f):
                raise TypeError(f"{name} must be callable, got {f!r}")
        self.key_serializer = key_serializer
        self.value_serializer = value_serializer

        # Producer identity. Epoch bumps are counted in metrics, so metrics comes first.
        self._metrics = {"batches_sent": 0, "requests": 0, "retries": 0, "records_sent": 0, "duplicates": 0, "epoch_bumps": 0, "merged_requests": 0}
        self.transactional_id = transactional_id
        self._identity: ProducerIdentity | TransactionalIdentity
        self._txn: Transactions | None = None
        if manager is not None:  # the identity comes from the transaction coordinator
            self._identity = TransactionalIdentity(manager)
            self._txn = Transactions(
                cluster, manager, flush=self.flush, retry_backoff_ms=retry_backoff_ms, max_block_ms=max_block_ms, request_timeout_ms=request_timeout_ms
            )
        else:
            self._identity = ProducerIdentity(
                cluster, self._metrics, idempotent=self.enable_idempotence, producer_id=producer_id, producer_epoch=producer_epoch
            )
        self._stats = RequestStats("request_latency", "request_error")
        # Where null-key records of a bulk write start (deterministic per identity).
        self._bulk_seed = self._identity.producer_id if self._identity.producer_id >= 0 else random.randrange(1 << 30)

        # The queues send() appends to, and the sender thread that drains them.
        wakeup = Wakeup(asyncio.new_event_loop())
        if self._txn is not None:
            self._txn.sender_loop = wakeup.loop
        self._accumulator = RecordAccumulator(
            cluster,
            batch_size=batch_size,
            max_request_size=max_request_size,
            buffer_memory=buffer_memory,
            max_block_ms=max_block_ms,
            partitioner=resolved_partitioner,
            wake=wakeup.wake,
            metrics=self._metrics,
            # a transactional producer appends inside a transaction only, and a batch opened
            # at a partition adds it to the transaction (not with implicit adds: its leader does)
            gate=None if self._txn is None else self._txn.manager,
            on_new_batch=None if self._txn is None or self._txn.manager.implicit_adds else self._txn.batch_opened,
        )
        self._sender = Sender(
            cluster,
            self._accumulator,
            self._identity,
            self._metrics,
            self._stats,
            wakeup,
            acks=self.acks,
            retries=retries,
            retry_backoff_ms=retry_backoff_ms,
            delivery_timeout_ms=delivery_timeout_ms,
            request_timeout_ms=request_timeout_ms,
            compression=compression,
            linger_ms=linger_ms,
            max_in_flight=max_in_flight,
            metadata_refresh_ms=metadata_refresh_ms,
            transactions=self._txn,
        )
        self._closed = False
        self._sender.start()

    def __repr__(self) -> str:
        txn = f", transactional_id={self.transactional_id!r}" if self.transactional_id is not None else ""
        return f"Producer(cluster={self.cluster.name!r}, acks={self.acks}, idempotent={self.enable_idempotence}{txn}, producer_id={self._identity.producer_id})"

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def metrics(self) -> dict[str, Any]:
        """The producer's figures as a new dict (kafka-python's ``metrics()``, flat, with
        its names in snake case):

        - counters: records_sent (kafka-python's record-send-total), batches_sent,
          requests, retries, duplicates (retried batches the leader already had),
          epoch_bumps, merged_requests;
        - request_latency_avg / _max / _p50 / _p99: ms from sending a produce request to
          its answer, over the last 1024 answered requests (None before the first);
        - request_error_total and request_errors ``{error: n}``: produce attempts that
          failed (an error answer, a leader gone or silent); most are retried;
        - record_error_total and record_errors ``{error: n}``: records that failed for
          good, whether ``send()`` raised (MESSAGE_TOO_LARGE, UNKNOWN_TOPIC_OR_PARTITION)
          or their future did (REQUEST_TIMED_OUT after delivery_timeout_ms...).

        Errors are named by Kafka error code, other exceptions by class name."""
        return {**self._metrics, **self._stats.snapshot()}

    @property
    def producer_id(self) -> int:
        return self._identity.producer_id

    @property
    def producer_epoch(self) -> int:
        return self._identity.epoch

    # ------------------------------------------------------------------------------------
    # send(): the per-record hot path
    # ------------------------------------------------------------------------------------
    def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        headers: Sequence[tuple[str, bytes]] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> FutureRecordMetadata:
        """Queue one record; returns a future resolving to ``RecordMetadata``.

        ``value``/``key`` are bytes or None, ``headers`` a list of ``(str, bytes)``. Raises at
        once for bad input (TypeError), an unknown topic or partition, and a record larger
        than the topic's ``max.message.bytes`` (KafkaError MESSAGE_TOO_LARGE). On a
        transactional producer, only inside a transaction (IllegalStateError otherwise; after
        a failed transaction, that failure's error until ``abort_transaction()``).
        """
        txn = self._txn
        if txn is not None and not txn.manager.appends_open:
            txn.manager.refuse_append()  # outside a transaction: at once, before other checks
        # Hot path: a few microseconds per record. Checks here, then one lock round in the
        # accumulator (two list appends for a record without key or headers). A
        # transactional producer's records join the transaction there: the gate is checked
        # again under that lock, and a batch opening at a partition registers it (one set
        # lookup per batch, not per record).
        try:
            if self.value_serializer is not None and value is not None:
                value = _serialize(self.value_serializer, "value_serializer", value, topic, partition)
            if self.key_serializer is not None and key is not None:
                key = _serialize(self.key_serializer, "key_serializer", key, topic, partition)
            if value is not None and type(value) is not bytes:
                value = as_bytes(value, "value")
            acc = self._accumulator
            t = acc.topics.get(topic)
            if t is None:
                t = acc.topic(topic)
            size = RECORD_OVERHEAD if value is None else RECORD_OVERHEAD + len(value)
            if key is not None:
                if type(key) is not bytes:
                    key = as_bytes(key, "key")
                size += len(key)
            if headers:
                headers = check_headers(headers)
                size += headers_size(headers)
            else:
                headers = None
            if size > t.record_limit:
                raise KafkaError(
                    ErrorCode.MESSAGE_TOO_LARGE,
                    f"a record of ~{size} bytes does not fit max.message.bytes={t.max_message_bytes} of topic {topic!r}",
                )
            if timestamp_ms is None:
                timestamp_ms = now_ms()
            elif type(timestamp_ms) is not int or timestamp_ms < 0:
                raise TypeError(f"timestamp_ms must be a non-negative int (ms since the epoch), got {timestamp_ms!r}")
            if partition is not None and type(partition) is int and partition >= t.num_partitions:
                t = acc.refresh_topic(topic)  # added since this producer looked (create_partitions)?
            if partition is not None and (type(partition) is not int or not 0 <= partition < t.num_partitions):
                raise KafkaError(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    f"topic {topic!r} has no partition {partition!r} (it has {t.num_partitions}: 0..{t.num_partitions - 1})",
                )
            b, index = acc.append(t, partition, key, value, headers, timestamp_ms, size)
            return FutureRecordMetadata(b, index)
        except KafkaError as exc:  # a record that failed before it was queued
            self._stats.record_errors.add(exc)
            raise

    def partitions_for(self, topic: str) -> set[int]:
        """The partition ids of ``topic`` (kafka-python's ``partitions_for``)."""
        return set(self._accumulator.topic(topic).all_partitions)

    # ------------------------------------------------------------------------------------
    # send_batch(): bulk writes, deterministic batches
    # ------------------------------------------------------------------------------------
    def send_batch(
        self,
        topic: str,
        records: Iterable[Any] | None = None,
        *,
        values: Sequence[bytes | None] | None = None,
        keys: Sequence[bytes | None] | None = None,
        headers: Sequence[Sequence[tuple[str, bytes]] | None] | None = None,
        timestamps: Sequence[int] | None = None,
        partition: int | None = None,
        partitions: Sequence[int] | None = None,
        timeout: float | None = None,
        batch_size: int | None = None,
    ) -> dict[int, PartitionWrite]:
        """Write many records and block until every one is acknowledged.

        Give either ``records`` — an iterable of values, or of ``(key, value)``,
        ``(key, value, headers)`` or ``(key, value, headers, timestamp_ms)`` tuples — or the
        columnar form ``values=[...]`` with optional ``keys=``, ``headers=``, ``timestamps=``
        (equal-length lists; no per-record tuples, the fast path for Arrow/Spark writers).
        ``partition=`` sends everything to one partition, ``partitions=`` gives one per
        record; otherwise the producer's partitioner decides.

        Deterministic: the same input gives the same partitions, the same batch boundaries
        and, for a fresh producer with the same identity, the same sequence numbers. Keys
        go where murmur2 says; records without a key are cut, in input order, into chunks
        of up to ``batch_size`` bytes that go round-robin over *all* partitions starting at
        ``producer_id % partitions`` (not only those with a leader: availability may differ
        between two attempts). Each partition's records keep their input order, and a
        partition's batches are sent one at a time.

        ``batch_size`` overrides the producer's for this call: bulk writes go faster with
        bigger batches (4 MiB moves ~1.4x the records/s of 1 MiB here: fewer actor calls and
        replication round trips per record); it is capped by the topic's max.message.bytes.

        Returns ``{partition: PartitionWrite}``. Raises the first batch's KafkaError if any
        batch failed (after all batches are done), or REQUEST_TIMED_OUT after ``timeout``.
        """
        vs, ks = self.value_serializer, self.key_serializer
        values, keys, headers, timestamps = bulk_columns(
            records, values, keys, headers, timestamps,
            serialize_value=None if vs is None else (lambda v: _serialize(vs, "value_serializer", v, topic, partition)),
            serialize_key=None if ks is None else (lambda k: _serialize(ks, "key_serializer", k, topic, partition)),
        )
        if len(values) == 0:
            return {}
        try:
            t = self._accumulator.topic(topic)
        except KafkaError as exc:  # counted as send() counts a record it cannot queue
            self._stats.record_errors.add(exc, len(values))
            raise
        default_ts = now_ms()
        if batch_size is not None:
            check_int("batch_size", batch_size, 1)
        plan = self._plan_bulk(t, values, keys, headers, partition, partitions, batch_size)
        batches, by_partition = build_bulk_batches(t, plan, values, keys, headers, timestamps, default_ts)
        txn = self._txn
        if txn is not None:  # inside a transaction only, as send() (checked again there)
            txn.manager.check_append()
        self._accumulator.append_sealed(t, by_partition)
        deadline = None if timeout is None else _monotonic() + timeout
        for b in batches:
            remaining = None if deadline is None else max(0.0, deadline - _monotonic())
            if not b.done.wait(remaining):
                raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"send_batch to {topic!r} not acknowledged within {timeout} s")
        failed = [b for b in batches if b.error is not None]
        if failed:
            first = failed[0].error
            assert first is not None
            code = getattr(first, "code", ErrorCode.UNKNOWN_SERVER_ERROR)
            raise KafkaError(int(code), f"{len(failed)} of {len(batches)} batches to {topic!r} failed; first ({topic}-{failed[0].partition}): {first}")
        return partition_writes(by_partition)

    def _plan_bulk(
        self,
        t: TopicQueue,
        values: Sequence,
        keys: Sequence | None,
        headers: Sequence | None,
        partition: int | None,
        partitions: Sequence[int] | None,
        batch_size: int | None = None,
    ) -> Plan:
        """:func:`~kcoord.client.producer.bulk.plan_bulk` with this producer's partitioner
        and bulk seed."""
        acc = self._accumulator
        return plan_bulk(
            t, values, keys, headers, partition, partitions, batch_size,
            partitioner=acc.partitioner, seed=self._bulk_seed, partition_for=acc.partition_for,
        )

    # ------------------------------------------------------------------------------------
    # transactions (kafka-python's methods; the logic is in .transactions and
    # .transaction_manager)
    # ------------------------------------------------------------------------------------
    def _transactions(self, what: str) -> Transactions:
        if self._txn is None:
            raise IllegalStateError(f"{what} needs a transactional producer: Producer(cluster, transactional_id=...)")
        self._not_in_sender(what)
        return self._txn

    def init_transactions(self, keep_prepared_txn: bool = False) -> None:
        """Get this ``transactional_id``'s producer id and a new epoch from its transaction
        coordinator, fencing every older instance (their open transaction is aborted, or
        completed if it was already committing). Once per producer; calling it again
        does nothing. ``keep_prepared_txn`` (KIP-939, needs ``enable_two_phase_commit``):
        keep a transaction an older instance prepared, for :meth:`complete_transaction`.
        Bounded by ``max_block_ms`` (RequestTimedOutError; call again to keep waiting)."""
        self._transactions("init_transactions()").init_transactions(keep_prepared_txn)

    def begin_transaction(self) -> None:
        """Start a transaction (after ``init_transactions()``; one at a time)."""
        self._transactions("begin_transaction()").manager.begin_transaction()

    def send_offsets_to_transaction(self, offsets: dict, group_metadata: Any) -> None:
        """Commit a consumer group's offsets (``{TopicPartition: OffsetAndMetadata}``) as
        part of the transaction: they become the group's committed offsets if and only if the
        transaction commits. ``group_metadata``: ``Consumer.group_metadata()`` (the group
        coordinator then refuses offsets of a consumer whose generation is over, KIP-447) or
        a group id str. Blocks until the group coordinator has them (pending)."""
        self._transactions("send_offsets_to_transaction()").send_offsets_to_transaction(offsets, group_metadata)

    def commit_transaction(self) -> None:
        """Flush, then commit: every record sent and every offset sent in the transaction
        becomes visible to read_committed readers together. Raises the error of a failed
        record or request (then only ``abort_transaction()`` is allowed), ProducerFencedError
        if a newer instance took over, RequestTimedOutError after ``max_block_ms`` (call
        again to keep waiting; an abort is not allowed then: the commit may be under way)."""
        txn = self._transactions("commit_transaction()")
        txn.end_transaction(True, self._sender._loop)

    def abort_transaction(self) -> None:
        """Abort: records not yet sent fail with TransactionAbortedError, the others are
        discarded for read_committed readers, offsets sent in it are dropped."""
        self._transactions("abort_transaction()").end_transaction(False, self._sender._loop)

    def prepare_transaction(self) -> PreparedTxnState:
        """KIP-939 (``enable_two_phase_commit=True``): flush and leave the transaction
        prepared: it has no timeout and survives this process; returns its producer id and
        epoch for whoever decides, who commits or aborts it here (``commit_transaction()``,
        ``abort_transaction()``) or through a new instance's :meth:`complete_transaction`."""
        return self._transactions("prepare_transaction()").prepare_transaction(self._sender._loop)

    def complete_transaction(self, prepared: PreparedTxnState) -> bool:
        """KIP-939: after ``init_transactions(keep_prepared_txn=True)`` kept a prepared
        transaction, commit it if ``prepared`` (what ``prepare_transaction()`` returned)
        names it, else abort it. Returns True if it committed. IllegalStateError when no
        prepared transaction was kept."""
        return self._transactions("complete_transaction()").complete_transaction(prepared, self._sender._loop)

    # ------------------------------------------------------------------------------------
    # flush / close
    # ------------------------------------------------------------------------------------
    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued now (ignoring linger_ms) and wait until it is answered.
        Raises KafkaError(REQUEST_TIMED_OUT) if ``timeout`` seconds pass first."""
        self._not_in_sender("flush()")
        batches = self._accumulator.begin_flush()
        try:
            deadline = None if timeout is None else _monotonic() + timeout
            for b in batches:
                remaining = None if deadline is None else max(0.0, deadline - _monotonic())
                if not b.done.wait(remaining):
                    raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"flush did not complete within {timeout} s")
        finally:
            self._accumulator.end_flush()

    def close(self, timeout: float | None = None) -> None:
        """Deliver what is queued (up to ``timeout`` seconds; None = as long as
        delivery_timeout_ms allows), then stop the sender. Records still undelivered after
        ``timeout`` fail with KafkaError(REQUEST_TIMED_OUT)."""
        if self._closed:
            return
        self._not_in_sender("close()")
        batches = self._accumulator.begin_flush(closing=True)
        deadline = None if timeout is None else _monotonic() + timeout
        for b in batches:
            remaining = None if deadline is None else max(0.0, deadline - _monotonic())
            if not b.done.wait(remaining):
                break
        self._sender.stop(timeout=30)
        self._closed = True

    def _not_in_sender(self, what: str) -> None:
        if threading.current_thread() is self._sender.thread:
            raise RuntimeError(f"{what} from a producer callback would wait for the thread running the callback")

