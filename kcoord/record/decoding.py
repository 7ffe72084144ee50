"""Reading records: decode a batch of either format into columns, walk a buffer's records."""

from __future__ import annotations

from typing import Iterator

from .columns import decode_columns
from .decoded import DecodedBatch, Record
from .framing import iter_headers, validate_batch
from .header import CONTROL_BIT, KAFKA_FORMAT


def decode_batch(buf: bytes | bytearray | memoryview, pos: int = 0, *, check_crc: bool = True) -> DecodedBatch:
    """Decode the records of the batch at ``pos`` (consumer side only). A control batch (a
    transaction marker) has no records for applications: it decodes to none, in either
    format (:func:`kcoord.record.control.read_control` reads its marker)."""
    h = validate_batch(buf, pos, check_crc=check_crc)
    if not h.record_count or h.attributes & CONTROL_BIT:
        return DecodedBatch(h, None, None, [], None)  # an emptied batch (empty_batch) or a marker
    if h.magic == KAFKA_FORMAT:
        from .kafka_v2 import decode_kafka_batch  # compiled v2 record codec, imported on first use

        return decode_kafka_batch(buf, pos, h)
    return decode_columns(buf, pos, h)


def iter_batches(buf: bytes | bytearray | memoryview, *, check_crc: bool = True) -> Iterator[DecodedBatch]:
    for pos, _ in iter_headers(buf, check_crc=False):
        yield decode_batch(buf, pos, check_crc=check_crc)


def iter_records(buf: bytes | bytearray | memoryview, *, from_offset: int = 0, check_crc: bool = True) -> Iterator[Record]:
    """Every record in a buffer of batches, skipping offsets below ``from_offset``."""
    for batch in iter_batches(buf, check_crc=check_crc):
        if batch.header.next_offset <= from_offset:
            continue
        for rec in batch.records():
            if rec.offset >= from_offset:
                yield rec


def warm_up_codecs() -> None:
    """Import the Kafka v2 record codecs that are otherwise imported on first use (clients
    that never see a Kafka batch skip their cost). Servers call this at start: a lazy
    import inside the first request runs on the event loop that also answers heartbeats."""
    from . import kafka_v2  # noqa: F401
