"""Record batches: a fixed binary header, then the records packed once by the producer.

Two payload formats share the header (:mod:`~kcoord.record.header`), told apart by its
``magic``: 1, kcoord's own msgpack columns under a zlib CRC-32
(:mod:`~kcoord.record.columns`); 2, Kafka's v2 varint records under a CRC-32C, stored
exactly as a Kafka client sent them (:mod:`~kcoord.record.kafka_v2`). The log, replication
and idempotence read only the header, so they treat both alike; :func:`decode_batch`
decodes either into the same columns, and :func:`~kcoord.record.conversion.to_kafka` turns
magic 1 into magic 2 for Kafka consumers.

One concept per module, each importing only those before it here:

- ``header``: layout, :class:`BatchHeader`, parsing, the errors of a bad batch;
- ``crc``, ``compression``: the CRC functions per magic, the codecs per attribute id;
- ``stamping``: what a leader writes into a batch (offset, epoch, LogAppendTime);
- ``framing``: one batch's framing and CRC, walking concatenated batches (``scan``);
- ``decoded``, ``columns``, ``kafka_v2``: decoded batches; the two formats (build, decode,
  payload checks);
- ``control``: transaction markers (control batches) in both formats, built and read;
- ``decoding``, ``validation``, ``rebuild``, ``conversion``: reading records (never a
  control record), what a leader and a follower check, the log cleaner's rewrites, the
  Kafka consumers' view.

The package depends on nothing in kcoord but :mod:`kcoord.protocol.errors`. Kafka's v2
codec (aiokafka, ~0.1 s to import) is imported on first use, or at a server's start by
:func:`warm_up_codecs`; ``kafka_v2`` and ``conversion`` are therefore not imported here.
"""

from __future__ import annotations

from .columns import build_batch, build_batch_columns, decode_columns, now_ms, validate_columns
from .compression import CODEC_IDS, CODECS, KAFKA_CODECS, Codec, available_codecs, codec_id, register_codec
from .control import ControlRecord, ControlType, build_control_batch, is_control, is_transactional, read_control
from .crc import CRC_FUNCTIONS, compute_crc, crc32, crc32c
from .decoded import DecodedBatch, Record
from .decoding import decode_batch, iter_batches, iter_records, warm_up_codecs
from .framing import Problem, Scan, ScanProblem, batches_info, iter_headers, scan, validate_batch
from .header import (
    COMPRESSION_MASK,
    CONTROL_BIT,
    CRC_START,
    CREATE_TIME,
    FORMAT_VERSION,
    HEAD,
    HEADER,
    HEADER_SIZE,
    KAFKA_FORMAT,
    LENGTH_PREFIX,
    LOG_APPEND_TIME,
    MAGIC_AT,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    PREFIX,
    STAMP,
    TAIL,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    CorruptRecordError,
    batch_size_at,
    invalid_record,
    read_header,
)
from .rebuild import empty_batch, rebuild_batch
from .stamping import set_log_append_time, stamp, stamp_prefix, with_log_append_time
from .validation import validate_follower_batches, validate_leader_batch, validate_produce_batch

__all__ = [
    "BatchHeader",
    "CODECS",
    "CODEC_IDS",
    "COMPRESSION_MASK",
    "CONTROL_BIT",
    "CRC_FUNCTIONS",
    "CRC_START",
    "CREATE_TIME",
    "Codec",
    "ControlRecord",
    "ControlType",
    "CorruptRecordError",
    "DecodedBatch",
    "FORMAT_VERSION",
    "HEAD",
    "HEADER",
    "HEADER_SIZE",
    "KAFKA_CODECS",
    "KAFKA_FORMAT",
    "LENGTH_PREFIX",
    "LOG_APPEND_TIME",
    "MAGIC_AT",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "PREFIX",
    "Problem",
    "Record",
    "STAMP",
    "Scan",
    "ScanProblem",
    "TAIL",
    "TIMESTAMP_TYPE_BIT",
    "TRANSACTIONAL_BIT",
    "available_codecs",
    "batch_size_at",
    "batches_info",
    "build_batch",
    "build_batch_columns",
    "build_control_batch",
    "codec_id",
    "compute_crc",
    "crc32",
    "crc32c",
    "decode_batch",
    "decode_columns",
    "empty_batch",
    "invalid_record",
    "is_control",
    "is_transactional",
    "iter_batches",
    "iter_headers",
    "iter_records",
    "now_ms",
    "read_control",
    "read_header",
    "rebuild_batch",
    "register_codec",
    "scan",
    "set_log_append_time",
    "stamp",
    "stamp_prefix",
    "validate_batch",
    "validate_columns",
    "validate_follower_batches",
    "validate_leader_batch",
    "validate_produce_batch",
    "warm_up_codecs",
    "with_log_append_time",
]
