"""The work done inside Spark executors and Ray tasks: read one offset range into Arrow
record batches, and produce Arrow record batches under a fixed producer identity.

Engine-neutral (no Spark import): :mod:`kcoord.spark` runs these in ``mapInArrow`` tasks,
:mod:`kcoord.ray_data` in Ray tasks. Columns travel as Arrow end to end: a fetched record
batch's msgpack columns become Arrow arrays without per-record Python objects beyond the
``bytes`` msgpack creates, which is what makes a Python reader fast enough.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import msgpack
import numpy as np
import pyarrow as pa
import ray

from .. import record as _records
from ..calls import CallFailed
from ..calls.retry import Step, step_after
from ..client.cluster import ClusterClient
from ..client.consumer.fetcher import LeaderFetches, SentFetch, fetched_records
from ..protocol.errors import METADATA_REFRESH, ErrorCode, KafkaError
from ..protocol.replication import READ_COMMITTED, READ_UNCOMMITTED, FetchResponse
from ..record.control import AbortedFilter

# Spark's Kafka source schema as Arrow: exactly what pyspark's to_arrow_schema() gives for
# it, so mapInArrow output needs no conversion in the JVM.
HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
HEADERS_TYPE = pa.list_(pa.field("element", HEADER_TYPE))
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
ARROW_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", TIMESTAMP_TYPE),
        pa.field("timestampType", pa.int32()),
        pa.field("headers", HEADERS_TYPE),
    ]
)

# Per-task write statistics: one row per (task, topic partition) written.
WRITE_STATS_SCHEMA = pa.schema(
    [
        pa.field("task", pa.int32()),
        pa.field("attempt", pa.int32()),
        pa.field("producer_id", pa.int64()),
        pa.field("partition", pa.int32()),
        pa.field("records", pa.int64()),
        pa.field("batches", pa.int32()),
        pa.field("duplicate_batches", pa.int32()),
        # a transactional write's prepared transaction (kcoord.txn_write.PreparedTask)
        pa.field("transactional_id", pa.string()),
        pa.field("producer_epoch", pa.int32()),
    ]
)

DEFAULT_FETCH_BYTES = 8 << 20
FETCH_MAX_WAIT_MS = 500  # how long a leader holds a range read's fetch for new records
DEFAULT_CHUNK_BYTES = 16 << 20  # Arrow input bytes per send_batch call of a writer task
DEFAULT_BATCH_BYTES = 4 << 20  # record batch size of a writer (capped by max.message.bytes)


# ------------------------------------------------------------------------------------------
# reaching the cluster from a task
# ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ClusterRef:
    """What a task needs to reach a kcoord cluster: its name, Ray namespace and the GCS
    address of the driver's Ray cluster (a bare ``address="auto"`` in an executor could
    attach to another Ray cluster on the same machine)."""

    name: str
    namespace: str
    address: str | None = None

    @classmethod
    def of(cls, cluster: ClusterClient) -> "ClusterRef":
        return cls(cluster.name, cluster.namespace, ray.get_runtime_context().gcs_address)

    def client(self) -> ClusterClient:
        """A ClusterClient cached per process: Spark reuses Python workers across tasks, so
        the Ray connection and metadata are paid once per worker."""
        key = (self.name, self.namespace)
        with _clients_lock:
            client = _clients.get(key)
        if client is None:
            if not ray.is_initialized():
                address = self.address or os.environ.get("RAY_ADDRESS") or "auto"
                ray.init(address=address, namespace=self.namespace, log_to_driver=False, logging_level="WARNING", configure_logging=False)
            client = ClusterClient(self.name, namespace=self.namespace, address=None)
            with _clients_lock:
                _clients[key] = client
        return client


_clients: dict[tuple[str, str], ClusterClient] = {}
_clients_lock = threading.Lock()


def drop_jars_from_sys_path() -> None:
    """Take ``.jar`` files off ``sys.path`` of this (Spark Python worker) process, and the
    zipimport finders cached for them and for directories inside them.

    Spark puts spark-core's jar (5000+ entries, no Python modules) on its Python workers'
    PYTHONPATH, and PySpark's worker calls ``importlib.invalidate_caches()`` before every
    task, which makes each cached zipimport finder re-read its jar's directory in pure
    Python: 30-250 ms of CPU per task and worker on a small machine. A namespace package
    imported with the jar on the path (``google``, ``org``) leaves finders for
    ``<jar>/google`` and ``<jar>/org`` too. Run at every task (a scan of two small
    structures): a worker's later task may have put a jar back."""
    for entry in [p for p in sys.path if isinstance(p, str) and p.endswith(".jar")]:
        sys.path.remove(entry)
    for key in [k for k in sys.path_importer_cache if isinstance(k, str) and (k.endswith(".jar") or ".jar" + os.sep in k)]:
        del sys.path_importer_cache[key]


# ------------------------------------------------------------------------------------------
# reading
# ------------------------------------------------------------------------------------------
class _Retry(Exception):
    """An attempt failed: the retry policy's ``step`` (kcoord.calls.retry) comes next."""

    def __init__(self, reason: str, step: Step, epoch: int = -1) -> None:
        super().__init__(reason)
        self.reason = reason
        self.step = step
        self.epoch = epoch


class RangeReader:
    """Fetch ``[start, end)`` of one partition from its leader, one request ahead.

    Leader changes are followed with kcoord's retry policy (:mod:`kcoord.calls.retry`):
    NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH and friends, or a leader actor that died
    (asked of Ray's GCS once the fetch is late, ~30 ms after a kill instead of Ray's 1-2 s),
    refresh the metadata until it names a newer leader and retry at the same offset. A new leader whose HW has not caught up yet answers with no records;
    the long-poll waits for it. ``end`` never exceeds the HW the plan saw, and leaders only
    serve records below their HW, so nothing unacknowledged is ever read. Gives up with
    REQUEST_TIMED_OUT after ``timeout_s`` without progress.

    Fetches go out through the consumer's :class:`~kcoord.client.consumer.fetcher.LeaderFetches`:
    a leader on this process's Ray node answers with file hints (see :mod:`kcoord.log.hints`)
    and this reader preads its segment files, which saves the leader and Ray two copies of
    every fetch; hinted bytes that do not check out are fetched again as bytes.
    """

    def __init__(
        self,
        client: ClusterClient,
        topic: str,
        partition: int,
        start: int,
        end: int,
        *,
        max_bytes: int = DEFAULT_FETCH_BYTES,
        timeout_s: float = 120.0,
        backoff_s: float = 0.05,
        isolation_level: int = READ_UNCOMMITTED,
    ) -> None:
        self.client = client
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s
        self.backoff_s = backoff_s
        self.retries = 0
        # READ_COMMITTED: fetches stop at the LSO and carry the aborted transactions of the
        # chunk they return (``aborted``), which the caller drops (AbortedFilter).
        self.isolation_level = isolation_level
        self.aborted: list = []
        fetches = {"max_bytes": max_bytes, "min_bytes": 1, "max_wait_ms": FETCH_MAX_WAIT_MS, "request_timeout_ms": client.request_timeout_ms}
        self._leaders = LeaderFetches(client, isolation_level=isolation_level, **fetches)
        self._no_hint = False

    def _send(self, offset: int) -> SentFetch:
        try:
            pm = self.client.partition_metadata(self.topic, self.partition)
        except KafkaError as exc:
            if exc.retriable:
                raise _Retry(str(exc), Step.NO_LEADER) from None
            raise
        if pm.leader < 0:
            raise _Retry(f"{self.topic}-{self.partition} has no leader", Step.NO_LEADER)
        sent = self._leaders.send(self.topic, self.partition, pm, offset, hinted=not self._no_hint)
        self._no_hint = False
        return sent

    def _wait(self, pending: SentFetch) -> FetchResponse:
        # The leader holds the fetch up to FETCH_MAX_WAIT_MS; the call asks Ray's GCS about
        # the leader after that, and gives up at the fetch timeout (a leader alive per Ray
        # but hung), like the consumer's.
        try:
            raw = pending.answer.result()
        except CallFailed as exc:
            step = step_after(exc.kind)
            if step is Step.GIVE_UP:
                raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"fetch of {self.topic}-{self.partition} failed: {exc.detail}") from None
            raise _Retry(f"leader {pending.actor}: {exc}", step, pending.leader_epoch) from None
        response = FetchResponse.decode(raw)
        code = response.error_code
        if code == 0:
            return response
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            raise KafkaError(
                code,
                f"cannot read {self.topic}-{self.partition} at offset {pending.offset} (range [{self.start}, {self.end})): "
                f"the log now holds [{response.log_start_offset}, {response.log_end_offset}] -- records were deleted "
                f"(retention) after the read was planned",
            )
        err = KafkaError(code, response.error_message or "")
        if err.retriable or code in METADATA_REFRESH:
            raise _Retry(str(err), step_after(stale_metadata=code in METADATA_REFRESH), pending.leader_epoch)
        raise err

    def chunks(self) -> Iterator[tuple[bytes, bool]]:
        """Yield the fetched record-batch bytes in order, and whether their CRCs were
        checked already (file hints are); the first batch may start before ``start`` and
        the last may end after ``end`` (callers trim). Read committed, :attr:`aborted` holds
        the aborted transactions of the chunk just yielded (``(producer_id, first_offset)``)."""
        offset = self.start
        pending: SentFetch | None = None
        last_error = "no attempt"
        progress_deadline = time.monotonic() + self.timeout_s
        while offset < self.end:
            try:
                if pending is None or pending.offset != offset:
                    pending = self._send(offset)
                response = self._wait(pending)
                pending = None
                data, verified = fetched_records(response, offset)
                aborted = response.aborted_transactions or []
                if data is None:
                    # The leader's files changed under us (truncation, retention): ask for
                    # the bytes themselves this time.
                    self._no_hint = True
                    raise _Retry("file hint did not check out", Step.BACKOFF)
            except _Retry as r:
                pending = None
                self.retries += 1
                last_error = r.reason
                if time.monotonic() >= progress_deadline:
                    raise KafkaError(
                        ErrorCode.REQUEST_TIMED_OUT,
                        f"reading {self.topic}-{self.partition} [{self.start}, {self.end}) made no progress at offset {offset} "
                        f"for {self.timeout_s:.0f} s: {last_error}",
                    ) from None
                self.client.take_step(r.step, self.topic, self.partition, r.epoch, self.backoff_s, progress_deadline)
                continue
            if not data:
                # A new leader whose HW is still behind ``end``: the long poll waited for it.
                if time.monotonic() >= progress_deadline:
                    raise KafkaError(
                        ErrorCode.REQUEST_TIMED_OUT,
                        f"reading {self.topic}-{self.partition}: the leader's high watermark {response.high_watermark} "
                        f"stayed below offset {offset} (range end {self.end}) for {self.timeout_s:.0f} s",
                    )
                continue
            nxt = offset
            for _, h in _records.iter_headers(data):
                nxt = h.next_offset
            if nxt <= offset:
                raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"fetch of {self.topic}-{self.partition} at {offset} returned no progress")
            progress_deadline = time.monotonic() + self.timeout_s
            if nxt < self.end:
                try:
                    pending = self._send(nxt)  # the next fetch travels while this one decodes
                except _Retry:
                    pending = None
            self.aborted = aborted
            yield data, verified
            offset = nxt


def _headers_array(headers: list, n: int) -> pa.Array:
    """list<struct<key, value>> from per-record header lists (None/() = no headers)."""
    lengths = np.fromiter(map(len, headers), dtype=np.int32, count=n) if headers else np.zeros(n, np.int32)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    flat = [pair for hs in headers if hs for pair in hs]
    if flat:
        keys, values = zip(*flat)
        items = pa.StructArray.from_arrays([pa.array(keys, pa.string()), pa.array(values, pa.binary())], fields=list(HEADER_TYPE))
    else:
        items = pa.array([], HEADER_TYPE)
    return pa.ListArray.from_arrays(pa.array(offsets), items, type=HEADERS_TYPE)


def records_to_arrow(
    topic: str, partition: int, data: bytes, start: int, end: int, *, check_crc: bool = True, aborted: Iterable[tuple[int, int]] | None = None
) -> pa.RecordBatch | None:
    """The records of ``data`` (concatenated batches) with offsets in ``[start, end)`` as
    one Arrow record batch of :data:`ARROW_SCHEMA`, or None if there are none.
    ``aborted`` (read committed: what the fetch answered): the batches of those aborted
    transactions are dropped, with the consumer's algorithm (AbortedFilter)."""
    dropping = AbortedFilter(aborted) if aborted is not None else None
    values: list = []
    keys: list | None = None
    headers: list | None = None
    stamps: list = []
    types: list = []
    segments: list = []
    n = 0
    for pos, h in _records.iter_headers(data):
        if h.base_offset >= end:
            break
        # every batch goes through the filter in order: a marker before ``start`` ends its abort
        if dropping is not None and dropping.drops(data, pos, h):  # an aborted transaction's batch, or a marker
            continue
        if h.next_offset <= start:
            continue
        if not h.record_count or h.attributes & _records.CONTROL_BIT:  # emptied (compaction), or a marker
            continue
        b = _records.decode_batch(data, pos, check_crc=check_crc)
        count = len(b.values)
        lo = start - h.base_offset if start > h.base_offset else 0
        hi = end - h.base_offset if end < h.base_offset + count else count
        k = hi - lo
        whole = lo == 0 and hi == count
        values.extend(b.values if whole else b.values[lo:hi])
        if b.keys is not None:
            if keys is None:
                keys = [None] * n
            keys.extend(b.keys if whole else b.keys[lo:hi])
        elif keys is not None:
            keys.extend([None] * k)
        if b.headers is not None:
            if headers is None:
                headers = [()] * n
            headers.extend(b.headers if whole else b.headers[lo:hi])
        elif headers is not None:
            headers.extend([()] * k)
        if h.timestamp_type == _records.LOG_APPEND_TIME:
            stamps.append(np.full(k, h.max_timestamp, dtype=np.int64))
        elif b.timestamps is not None:
            stamps.append(np.asarray(b.timestamps[lo:hi], dtype=np.int64))
        else:
            stamps.append(np.full(k, h.first_timestamp, dtype=np.int64))
        types.append((k, h.timestamp_type))
        segments.append(np.arange(h.base_offset + lo, h.base_offset + hi, dtype=np.int64))
        n += k
    if n == 0:
        return None
    ts = np.concatenate(stamps) if len(stamps) > 1 else stamps[0]
    ts_types = np.concatenate([np.full(k, t, dtype=np.int32) for k, t in types]) if len(types) > 1 else np.full(n, types[0][1], np.int32)
    offsets = np.concatenate(segments) if len(segments) > 1 else segments[0]
    topic_bytes = topic.encode()
    columns = [
        pa.array(keys, pa.binary()) if keys is not None else pa.nulls(n, pa.binary()),
        pa.array(values, pa.binary()),
        pa.StringArray.from_buffers(
            n, pa.py_buffer(np.arange(0, (n + 1) * len(topic_bytes), len(topic_bytes), dtype=np.int32) if topic_bytes else np.zeros(n + 1, np.int32)), pa.py_buffer(topic_bytes * n)
        ),
        pa.array(np.full(n, partition, dtype=np.int32)),
        pa.array(offsets),
        pa.array(ts * 1000, TIMESTAMP_TYPE),
        pa.array(ts_types),
        _headers_array(headers, n) if headers is not None else pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, np.int32)), pa.array([], HEADER_TYPE), type=HEADERS_TYPE),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


def read_range(
    ref: ClusterRef,
    topic: str,
    partition: int,
    start: int,
    end: int,
    *,
    max_bytes: int = DEFAULT_FETCH_BYTES,
    timeout_s: float = 120.0,
    check_crc: bool = True,
    isolation_level: int = READ_UNCOMMITTED,
) -> Iterator[pa.RecordBatch]:
    """Arrow record batches holding exactly the records ``[start, end)`` of a partition
    (READ_COMMITTED: ``end`` at most the LSO, aborted transactions dropped)."""
    committed = isolation_level == READ_COMMITTED
    reader = RangeReader(ref.client(), topic, partition, start, end, max_bytes=max_bytes, timeout_s=timeout_s, isolation_level=isolation_level)
    for data, verified in reader.chunks():
        # Decoding creates many short-lived lists; a cyclic collection in the middle of it
        # walks them all for nothing (see Consumer._decode_next).
        enabled = gc.isenabled()
        gc.disable()
        try:
            aborted = reader.aborted if committed else None
            batch = records_to_arrow(topic, partition, data, start, end, check_crc=check_crc and not verified, aborted=aborted)
        finally:
            if enabled:
                gc.enable()
        if batch is not None:
            yield batch


# ------------------------------------------------------------------------------------------
# writing
# ------------------------------------------------------------------------------------------
def _msgpack_default(obj: Any) -> Any:
    """What msgpack cannot pack natively (dates, decimals, ...) goes as a string."""
    if hasattr(obj, "isoformat"):
        return obj.isoformat()
    return str(obj)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (bytes, bytearray)):
        return bytes(obj).decode("utf-8", "replace")
    return _msgpack_default(obj)


def encode_column(column: pa.Array | pa.ChunkedArray, what: str, value_format: str = "json") -> list:
    """A column as a list of bytes/None: binary as is, strings as UTF-8, structs, maps and
    lists as JSON (or msgpack with ``value_format="msgpack"``)."""
    t = column.type
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return column.to_pylist()
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return column.cast(pa.large_binary() if pa.types.is_large_string(t) else pa.binary()).to_pylist()
    if pa.types.is_struct(t) or pa.types.is_map(t) or pa.types.is_list(t) or pa.types.is_large_list(t):
        rows = column.to_pylist()
        if pa.types.is_map(t):
            rows = [dict(r) if r is not None else None for r in rows]
        if value_format == "msgpack":
            pack = msgpack.Packer(default=_msgpack_default, use_bin_type=True).pack
            return [pack(r) if r is not None else None for r in rows]
        dumps = json.JSONEncoder(default=_json_default, separators=(",", ":"), ensure_ascii=False).encode
        return [dumps(r).encode() if r is not None else None for r in rows]
    raise TypeError(f"{what} column has type {t}; it must be binary, string, or a struct/map/array (sent as {value_format})")


def headers_column(column: pa.Array | pa.ChunkedArray) -> list:
    """list<struct<key string, value binary|string>> or map<string, binary|string> as
    per-record lists of (str, bytes) pairs (None for no headers)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    n = len(column)
    if pa.types.is_map(column.type):
        entry = pa.struct([pa.field("key", column.type.key_type), pa.field("value", column.type.item_type)])
        column = column.cast(pa.list_(entry))
    flat = column.flatten()  # the struct<key, value> entries of the rows (slices respected)
    keys_arr, vals_arr = flat.field(0), flat.field(1)
    if pa.types.is_string(vals_arr.type) or pa.types.is_large_string(vals_arr.type):
        vals_arr = vals_arr.cast(pa.binary())
    pairs = list(zip(keys_arr.to_pylist(), vals_arr.to_pylist()))
    lengths = column.value_lengths().fill_null(0).to_numpy(zero_copy_only=False)
    out: list = [None] * n
    pos = 0
    for i in np.flatnonzero(lengths).tolist():
        k = int(lengths[i])
        # value_lengths and flatten() both skip nulls, so positions line up.
        out[i] = pairs[pos : pos + k]
        pos += k
    return out


def produce_batches(
    ref: ClusterRef,
    topic: str,
    batches: Iterable[pa.RecordBatch],
    *,
    producer_id: int | None,
    acks: str | int = "all",
    value_format: str = "json",
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
    timeout_s: float | None = None,
    producer: Any = None,
) -> dict[int, list[int]]:
    """Produce the rows of ``batches`` (columns ``value`` and optionally ``key``,
    ``headers``, ``partition``) to ``topic``; returns ``{partition: [records, batches,
    duplicate batches]}``.

    With ``producer_id`` the producer is idempotent with that identity at epoch 0 and the
    input is cut into ``send_batch`` calls at deterministic points (every ``chunk_bytes`` of
    Arrow input), so the same input always gives the same batches and sequence numbers: a
    retried task re-sends exactly what the failed attempt sent, and the leaders drop what
    they already have. One thread sends the chunks, in order, while this one converts the
    next chunk from Arrow.

    ``producer``: send with it instead (a transactional one, :func:`kcoord.txn_write.prepare_task`).
    """
    from concurrent.futures import Future, ThreadPoolExecutor

    from ..client.producer import Producer

    client = ref.client()
    nparts = len(client.topic(topic).partitions)
    owned = producer is None
    if owned:
        identity = {"acks": "all", "producer_id": producer_id, "producer_epoch": 0} if producer_id is not None else {"acks": acks}
        producer = Producer(client, linger_ms=0, batch_size=batch_bytes, **identity)
    stats: dict[int, list[int]] = {}
    pending: list[pa.RecordBatch] = []
    pending_bytes = 0
    row_base = 0
    sender = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kcoord-write")
    in_flight: Future | None = None

    def account(future: Future | None) -> None:
        if future is None:
            return
        for p, w in future.result().items():
            s = stats.setdefault(p, [0, 0, 0])
            s[0] += w.count
            s[1] += w.batches
            s[2] += w.duplicate_batches

    def flush() -> None:
        nonlocal pending, pending_bytes, row_base, in_flight
        if not pending:
            return
        table = pa.Table.from_batches(pending)
        pending, pending_bytes = [], 0
        n = table.num_rows
        if n == 0:
            return
        names = table.column_names
        values = encode_column(table.column("value"), "value", value_format)
        keys = encode_column(table.column("key"), "key", value_format) if "key" in names else None
        headers = headers_column(table.column("headers")) if "headers" in names else None
        partitions = None
        if "partition" in names:
            partitions = table.column("partition").to_pylist()
            if None in partitions:
                partitions = _fill_partitions(partitions, keys, nparts, (producer_id or 0) + row_base)
        del table
        row_base += n
        account(in_flight)  # the previous chunk first: chunks go out in input order
        in_flight = sender.submit(producer.send_batch, topic, values=values, keys=keys, headers=headers, partitions=partitions, timeout=timeout_s)

    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            pending.append(batch)
            pending_bytes += batch.nbytes
            if pending_bytes >= chunk_bytes:
                flush()
        flush()
        account(in_flight)
    finally:
        if owned:
            producer.close(timeout=30)
        sender.shutdown(wait=True)
    return stats


def _fill_partitions(partitions: list, keys: list | None, nparts: int, seed: int) -> list[int]:
    """Partitions for rows whose partition column is null, as Spark's Kafka sink does: by
    key hash (murmur2, like the producer), else spread round-robin from ``seed``
    (deterministic, so a retried task picks the same ones)."""
    from ..client.producer.partitioner import partition_for_key

    out = []
    for i, p in enumerate(partitions):
        if p is None:
            k = keys[i] if keys is not None else None
            p = partition_for_key(k, nparts) if k is not None else (seed + i) % nparts
        out.append(p)
    return out


def stats_batch(
    task: int, attempt: int, producer_id: int, stats: dict[int, list[int]], transactional_id: str | None = None, producer_epoch: int = -1
) -> pa.RecordBatch:
    """The per-task write statistics as an Arrow batch of :data:`WRITE_STATS_SCHEMA`
    (``transactional_id``, ``producer_epoch``: the task's prepared transaction, if any)."""
    parts = sorted(stats)
    if not parts:
        parts, rows = [-1], [[0, 0, 0]]
    else:
        rows = [stats[p] for p in parts]
    k = len(parts)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([task] * k, pa.int32()),
            pa.array([attempt] * k, pa.int32()),
            pa.array([producer_id] * k, pa.int64()),
            pa.array(parts, pa.int32()),
            pa.array([r[0] for r in rows], pa.int64()),
            pa.array([r[1] for r in rows], pa.int32()),
            pa.array([r[2] for r in rows], pa.int32()),
            pa.array([transactional_id] * k, pa.string()),
            pa.array([producer_epoch] * k, pa.int32()),
        ],
        schema=WRITE_STATS_SCHEMA,
    )
