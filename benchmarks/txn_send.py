"""The transactional ``send()``'s own cost per record against the idempotent producer's, in
the caller's thread, without Ray (issue 34): the real ``Producer.send`` and accumulator over
a stand-in for the cluster's metadata; no sender thread runs, nothing is delivered. Each
repetition sends N 100-byte records to 3 partitions inside one transaction, and the same to
an idempotent producer, interleaved; prints JSON with medians and the ratio.

    python -m benchmarks.txn_send [--records 200000] [--repeats 5] [--quick] [--out FILE]
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kcoord.bench.script import context, emit, parser  # noqa: E402
from kcoord.client.cluster import ClusterClient  # noqa: E402
from kcoord.client.producer.accumulator import RecordAccumulator  # noqa: E402
from kcoord.client.producer.partitioner import ROUND_ROBIN  # noqa: E402
from kcoord.client.producer.producer import Producer  # noqa: E402
from kcoord.client.producer.transaction_manager import TransactionManager, Verdict  # noqa: E402
from kcoord.client.producer.transactions import Transactions  # noqa: E402
from kcoord.client.metrics import RequestStats  # noqa: E402
from kcoord.protocol.controller import PartitionMetadata, TopicMetadata  # noqa: E402
from kcoord.protocol.txn import TxnInitProducerIdResponse  # noqa: E402

TOPIC, PARTITIONS, VALUE = "out", 3, b"x" * 100


class _Metadata:
    """The one thing the accumulator asks the cluster: a topic's partitions."""

    def topic(self, name: str, refresh: bool = False) -> TopicMetadata:
        return TopicMetadata(name, partitions=[PartitionMetadata(i, leader=0) for i in range(PARTITIONS)])


class _Sender:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop


def _producer(txn: Transactions | None, loop: asyncio.AbstractEventLoop) -> Producer:
    """A Producer whose send() runs as in production, built without its sender thread."""
    p = object.__new__(Producer)
    p.value_serializer = p.key_serializer = None
    p._txn = txn
    p._stats = RequestStats("request_latency", "request_error")
    if txn is not None:
        txn.sender_loop = loop
    p._accumulator = RecordAccumulator(
        _Metadata(), batch_size=16384, max_request_size=1 << 20, buffer_memory=1 << 40, max_block_ms=60_000,
        partitioner=ROUND_ROBIN, wake=lambda: None, metrics={},
        gate=None if txn is None else txn.manager, on_new_batch=None if txn is None else txn.batch_opened,
    )
    p._sender = _Sender(loop)
    return p


def _transactions() -> Transactions:
    m = TransactionManager("bench", 60_000)
    m.init_request()
    assert m.on_init(TxnInitProducerIdResponse(producer_id=1, producer_epoch=0)) is Verdict.DONE
    m.begin_transaction()
    return Transactions(object.__new__(ClusterClient), m, flush=lambda s: None, retry_backoff_ms=100, max_block_ms=60_000, request_timeout_ms=30_000)


def _run(p: Producer, n: int) -> float:
    send = p.send
    start = time.perf_counter()
    for _ in range(n):
        send(TOPIC, VALUE)
    return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--records", type=int, default=None, help="records per run (default 200,000; quick 20,000)")
    ap.add_argument("--repeats", type=int, default=None, help="repetitions (default 5; quick 3)")
    args = ap.parse_args()
    args.records = args.records or (20_000 if args.quick else 200_000)
    args.repeats = args.repeats or (3 if args.quick else 5)
    started = time.perf_counter()
    loop = asyncio.new_event_loop()  # never run: add_soon only queues a callback on it
    idem, txn = [], []
    for _ in range(args.repeats):
        idem.append(_run(_producer(None, loop), args.records))
        txn.append(_run(_producer(_transactions(), loop), args.records))
    loop.close()
    mi, mt = statistics.median(idem), statistics.median(txn)
    emit({
        "benchmark": "txn_send",
        "context": context(),
        "records": args.records,
        "repeats": args.repeats,
        "idempotent_send_us": {"median": round(mi, 3), "runs": [round(x, 3) for x in idem]},
        "transactional_send_us": {"median": round(mt, 3), "runs": [round(x, 3) for x in txn]},
        "transactional_overhead_us": round(mt - mi, 3),
        "ratio_idempotent_to_transactional_rate": round(mi / mt, 3),
    }, args.out, started)


if __name__ == "__main__":
    main()
