"""What a leader and a follower check before they append batches.

A leader takes one producer batch: framed, CRC right, within max.message.bytes, holding
records (:func:`validate_leader_batch`), and -- unless switched off to measure its cost --
records that decode to what the header claims (:func:`validate_produce_batch`). A follower
takes whatever the leader sent: whole, valid batches at or after its log end
(:func:`validate_follower_batches`).
"""

from __future__ import annotations

from ..protocol.errors import ErrorCode, KafkaError
from .columns import validate_columns
from .compression import KAFKA_CODECS
from .framing import Problem, Scan, scan, validate_batch
from .header import COMPRESSION_MASK, CONTROL_BIT, KAFKA_FORMAT, TRANSACTIONAL_BIT, BatchHeader, CorruptRecordError, invalid_record


def validate_leader_batch(data: bytes | bytearray | memoryview, max_batch_bytes: int, header: BatchHeader | None = None) -> BatchHeader:
    """Check a producer's batch before the leader stamps and writes it. ``header``: its
    header if the caller parsed it already."""
    if len(data) > max_batch_bytes:
        raise KafkaError(
            ErrorCode.MESSAGE_TOO_LARGE, f"batch of {len(data)} bytes exceeds max.message.bytes={max_batch_bytes}"
        )
    h = validate_batch(data, 0, check_crc=True, header=header)
    if not h.record_count:
        raise KafkaError(ErrorCode.INVALID_RECORD, "a produce batch needs at least one record")
    if h.size != len(data):
        raise KafkaError(
            ErrorCode.INVALID_RECORD,
            f"a produce append takes exactly one batch: batch is {h.size} bytes, data is {len(data)}",
        )
    return h


def validate_produce_batch(
    buf: bytes | bytearray | memoryview,
    h: BatchHeader,
    *,
    require_keys: bool = False,
) -> None:
    """Deep checks of a producer's batch before the leader appends it (framing and CRC are
    checked already, by :func:`validate_leader_batch`): the payload decodes to the columns and
    record count the header claims, the codec is one every node reads, the timestamps lie
    where the header says, and (for a compacted topic, ``require_keys``) every record has
    a key. Raises CORRUPT_MESSAGE (2), UNSUPPORTED_COMPRESSION_TYPE (76) or INVALID_RECORD
    (87); nothing is changed. The payload checks are the format's
    (:func:`~kcoord.record.columns.validate_columns`,
    :func:`~kcoord.record.kafka_v2.validate_kafka_records`).
    """
    attrs = h.attributes
    if attrs & CONTROL_BIT:
        # markers are written by partition leaders for the transaction coordinator only
        raise invalid_record(h, "a producer cannot write a control batch (transaction markers come from the transaction coordinator)")
    if attrs & TRANSACTIONAL_BIT and (h.producer_id < 0 or h.base_sequence < 0):
        raise invalid_record(h, "a transactional batch needs a producer id and sequence numbers")
    if h.first_timestamp < -1 or h.max_timestamp < -1:
        raise invalid_record(h, f"negative timestamps ({h.first_timestamp}, {h.max_timestamp})")
    if h.magic == KAFKA_FORMAT:
        codec = attrs & COMPRESSION_MASK
        if codec not in KAFKA_CODECS:
            raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"Kafka batch uses unknown compression codec {codec}")
        from .kafka_v2 import validate_kafka_records  # compiled v2 record codec, imported on first use

        validate_kafka_records(buf, h, require_keys)
        return
    validate_columns(buf, h, require_keys)


def validate_follower_batches(data: bytes | bytearray | memoryview, log_end_offset: int, *, check_crc: bool) -> Scan:
    """Check batches a follower fetched: whole, valid, starting at or after our LEO (a
    compacted leader's log has gaps between batches), offsets increasing."""
    if len(data) == 0:
        raise KafkaError(ErrorCode.INVALID_RECORD, "no batches to append")
    result = scan(data, check_crc=check_crc)
    problem = result.problem
    if problem is None:
        first = result.headers[0].base_offset
        if first < log_end_offset:
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"replicated batches start at offset {first} but the log ends at {log_end_offset}",
            )
        return result
    if problem.kind is Problem.DISCONTIGUOUS:
        raise KafkaError(ErrorCode.INVALID_RECORD, f"replicated batches are not contiguous: {problem.message}")
    raise CorruptRecordError(f"replicated batches: {problem.message}")
