"""Rewriting batches for the log cleaner: a batch of some of a batch's records, and the
empty batch that stands for a producer's last batch once its records are gone."""

from __future__ import annotations

from typing import Sequence

from .columns import build_batch_columns
from .compression import CODECS, KAFKA_CODECS
from .crc import CRC_FUNCTIONS
from .decoded import DecodedBatch
from .header import COMPRESSION_MASK, HEAD, HEADER_SIZE, KAFKA_FORMAT, LENGTH_PREFIX, TAIL, TIMESTAMP_TYPE_BIT, TRANSACTIONAL_BIT, BatchHeader
from .stamping import set_log_append_time


def empty_batch(h: BatchHeader, skip: int = 0) -> bytes:
    """A batch without records standing for offsets ``[h.base_offset + skip, h.last_offset]``
    of the batch with header ``h``: same format, leader epoch, timestamps, timestamp type and
    producer id/epoch, base sequence that of offset ``h.base_offset + skip``. What the log
    cleaner leaves where a producer's last batch loses its records, so that the producer's
    epoch and last sequence survive (Kafka's empty batches, DefaultRecordBatch.writeEmptyHeader;
    a Kafka v2 batch of this form is exactly Kafka's)."""
    if not 0 <= skip <= h.last_offset_delta:
        raise ValueError(f"skip {skip} outside the batch's {h.last_offset_delta + 1} offsets")
    seq = h.base_sequence if h.base_sequence < 0 else (h.base_sequence + skip) & 0x7FFFFFFF
    tail = TAIL.pack(
        h.attributes & ~COMPRESSION_MASK,
        h.last_offset_delta - skip,
        h.first_timestamp,
        h.max_timestamp,
        h.producer_id,
        h.producer_epoch,
        seq,
        0,
    )
    crc = CRC_FUNCTIONS[h.magic](tail) & 0xFFFFFFFF
    return HEAD.pack(h.base_offset + skip, HEADER_SIZE - LENGTH_PREFIX, h.leader_epoch, h.magic, crc) + tail


def rebuild_batch(d: DecodedBatch, keep: Sequence[int]) -> bytes:
    """A batch of the records of ``d`` at positions ``keep`` (ascending and consecutive):
    same payload format, codec, leader epoch, producer id/epoch and timestamp type; base
    offset, first/max timestamps and base sequence those of the kept records. Offsets never
    change: the new batch's base offset is the first kept record's."""
    h = d.header
    lo, hi = keep[0], keep[-1] + 1
    if hi - lo != len(keep):
        raise ValueError("rebuild_batch keeps one consecutive run of records")
    n = len(d.values)
    stamps = d.timestamps if d.timestamps is not None else [h.first_timestamp] * n
    keys = d.keys if d.keys is not None else [None] * n
    hdrs = d.headers if d.headers is not None else [[]] * n
    seq = h.base_sequence if h.base_sequence < 0 else (h.base_sequence + lo) & 0x7FFFFFFF
    log_append = bool(h.attributes & TIMESTAMP_TYPE_BIT)
    if h.magic == KAFKA_FORMAT:
        from .kafka_v2 import build_kafka_batch, set_offsets  # imported on first use

        recs = [(keys[i], d.values[i], list(hdrs[i] or []), stamps[i]) for i in range(lo, hi)]
        out = build_kafka_batch(
            recs,
            compression=h.compression if h.compression in KAFKA_CODECS else 0,
            producer_id=h.producer_id,
            producer_epoch=h.producer_epoch,
            base_sequence=seq,
            transactional=bool(h.attributes & TRANSACTIONAL_BIT),
        )
        return set_offsets(out, h.base_offset + lo, h.leader_epoch, log_append_time=h.max_timestamp if log_append else None)
    out = build_batch_columns(
        d.values[lo:hi],
        keys[lo:hi],
        [list(x) if x else None for x in hdrs[lo:hi]],
        stamps[lo:hi],
        compression=h.compression if h.compression in CODECS else 0,
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        base_sequence=seq,
        base_offset=h.base_offset + lo,
        leader_epoch=h.leader_epoch,
        transactional=bool(h.attributes & TRANSACTIONAL_BIT),
    )
    if log_append:
        out = set_log_append_time(out, h.max_timestamp)
    return out
