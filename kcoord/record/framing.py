"""Where batches start and end, and whether their bytes check out.

:func:`validate_batch` checks one batch's framing (and CRC); :func:`scan` walks a buffer of
concatenated batches and answers the question three callers share -- the follower append
path (reject the whole fetch if anything is wrong), recovery on open (keep the good prefix,
cut the rest) and the in-memory log: how many whole, valid, contiguous batches does this
buffer start with, and what is wrong with the rest? :func:`scan` never raises; the callers
decide what a problem means.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Iterator

from .crc import CRC_FUNCTIONS
from .header import CRC_START, HEADER_SIZE, LENGTH_PREFIX, PREFIX, BatchHeader, CorruptRecordError, read_header


def validate_batch(
    buf: bytes | bytearray | memoryview, pos: int = 0, *, check_crc: bool = True, header: BatchHeader | None = None
) -> BatchHeader:
    """Check one batch's framing (and CRC): raises :class:`CorruptRecordError`. ``header``:
    the batch's header if the caller parsed it already (it is not parsed again)."""
    h = read_header(buf, pos) if header is None else header
    if h.magic not in CRC_FUNCTIONS:
        raise CorruptRecordError(f"batch at byte {pos}: unknown format version {h.magic}")
    if h.batch_length < HEADER_SIZE - LENGTH_PREFIX or pos + h.size > len(buf):
        raise CorruptRecordError(f"batch at byte {pos}: length {h.batch_length} does not fit the {len(buf) - pos} bytes left")
    # record count 0: an emptied batch the log cleaner keeps for its producer (empty_batch)
    if h.record_count < 0 or h.last_offset_delta < 0 or (h.record_count and h.last_offset_delta != h.record_count - 1):
        raise CorruptRecordError(f"batch at byte {pos}: record count {h.record_count} and last offset delta {h.last_offset_delta} disagree")
    if check_crc and CRC_FUNCTIONS[h.magic](memoryview(buf)[pos + CRC_START : pos + h.size]) != h.crc:
        raise CorruptRecordError(f"batch at offset {h.base_offset} (byte {pos}): CRC mismatch")
    return h


def iter_headers(buf: bytes | bytearray | memoryview, *, check_crc: bool = False) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` for each batch in a buffer of concatenated batches.

    Raises :class:`CorruptRecordError` at the first batch that does not check out.
    """
    pos, end = 0, len(buf)
    while pos < end:
        h = validate_batch(buf, pos, check_crc=check_crc)
        yield pos, h
        pos += h.size


def batches_info(buf: bytes | bytearray | memoryview) -> tuple[int, int, int]:
    """(first base offset, next offset after the last batch, batch count) of a buffer."""
    first = -1
    nxt = -1
    count = 0
    for _, h in iter_headers(buf):
        if first < 0:
            first = h.base_offset
        nxt = h.next_offset
        count += 1
    return first, nxt, count


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
        base, length = PREFIX.unpack_from(buf, pos)
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
