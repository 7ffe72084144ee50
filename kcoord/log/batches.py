"""Walking concatenated record batches: the one place that decides whether bytes are a log.

Three callers need the same answer to "how many whole, valid, contiguous batches does this
buffer start with, and what is wrong with the rest?": the follower append path (reject the
whole fetch if anything is wrong), recovery on open (keep the good prefix, cut the rest) and
the in-memory log. :func:`scan` never raises; the callers decide what a problem means.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import Enum

from ..protocol.errors import ErrorCode, KafkaError
from ..records import HEADER_SIZE, LENGTH_PREFIX, BatchHeader, CorruptRecordError, validate_batch

_PREFIX = struct.Struct(">qi")


class Problem(Enum):
    TORN = "torn"  # the buffer ends inside a batch (a write that did not finish)
    CORRUPT = "corrupt"  # framing or CRC does not check out
    DISCONTIGUOUS = "discontiguous"  # a batch starts before the previous one ended


@dataclass(frozen=True)
class ScanProblem:
    kind: Problem
    position: int  # byte position of the bad batch in the scanned buffer (or file)
    expected_offset: int | None  # the offset the bad batch should have started at
    message: str


@dataclass
class Scan:
    """The valid prefix of a buffer: batch positions and headers, where it ends, what stopped it."""

    positions: list[int] = field(default_factory=list)
    headers: list[BatchHeader] = field(default_factory=list)
    end: int = 0
    problem: ScanProblem | None = None

    @property
    def next_offset(self) -> int | None:
        return self.headers[-1].next_offset if self.headers else None

    @property
    def record_count(self) -> int:
        return sum(h.record_count for h in self.headers)


def scan(
    buf: bytes | bytearray | memoryview,
    *,
    pos: int = 0,
    expected_offset: int | None = None,
    check_crc: bool = True,
    base_position: int = 0,
    out: Scan | None = None,
) -> Scan:
    """Walk batches in ``buf`` from ``pos`` while they are whole, valid and contiguous.

    ``expected_offset`` pins the first batch's base offset (None accepts any); later
    batches must follow on. Positions in the result are ``base_position + pos`` so a file
    can be scanned in chunks into one ``out``.
    """
    result = out if out is not None else Scan(end=base_position + pos)
    end = len(buf)
    expected = expected_offset
    while pos < end:
        where = base_position + pos
        left = end - pos
        if left < LENGTH_PREFIX:
            result.problem = ScanProblem(Problem.TORN, where, expected, f"byte {where}: {left} bytes left, not even a batch length prefix")
            break
        base, length = _PREFIX.unpack_from(buf, pos)
        size = LENGTH_PREFIX + length
        if length < HEADER_SIZE - LENGTH_PREFIX:
            result.problem = ScanProblem(Problem.CORRUPT, where, expected, f"byte {where}: impossible batch length {length}")
            break
        if size > left:
            result.problem = ScanProblem(Problem.TORN, where, expected, f"byte {where}: batch of {size} bytes but only {left} left")
            break
        try:
            h = validate_batch(buf, pos, check_crc=check_crc)
        except CorruptRecordError as exc:
            result.problem = ScanProblem(Problem.CORRUPT, where, expected, f"byte {where}: {exc.message}")
            break
        if expected is not None and base < expected:
            # A gap (base > expected) is allowed: the log cleaner drops batches whose
            # records were all superseded, and offsets never change. Going back is not.
            result.problem = ScanProblem(
                Problem.DISCONTIGUOUS, where, expected, f"byte {where}: batch has base offset {base}, expected at least {expected}"
            )
            break
        result.positions.append(where)
        result.headers.append(h)
        expected = h.next_offset
        pos += size
        result.end = base_position + pos
    return result


def validate_leader_batch(data: bytes | bytearray | memoryview, max_batch_bytes: int) -> BatchHeader:
    """Check a producer's batch before the leader stamps and writes it."""
    if len(data) > max_batch_bytes:
        raise KafkaError(
            ErrorCode.MESSAGE_TOO_LARGE, f"batch of {len(data)} bytes exceeds max.message.bytes={max_batch_bytes}"
        )
    h = validate_batch(data, 0, check_crc=True)
    if not h.record_count:
        raise KafkaError(ErrorCode.INVALID_RECORD, "a produce batch needs at least one record")
    if h.size != len(data):
        raise KafkaError(
            ErrorCode.INVALID_RECORD,
            f"a produce append takes exactly one batch: batch is {h.size} bytes, data is {len(data)}",
        )
    return h


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
