"""Reading the logs for the checks: the value every simulated record carries, a read that
reports an unreadable log as a violation, and comparing copies of batches."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kcoord import records

if TYPE_CHECKING:
    from .checks import History

_ALL = 1 << 40


def record_value(producer_id: int, seq: int) -> bytes:
    """Every record's value names its producer and sequence number, so any copy of it in any
    log can be traced back to the one send it came from."""
    return b"%d:%d" % (producer_id, seq)


def is_tombstone(seq: int) -> bool:
    """A keyed producer (compacted topics) deletes its key with every fifth record: a
    tombstone (null value), which the cleaner removes once ``delete.retention.ms`` passed."""
    return seq % 5 == 4


def read_log(history: "History", tp: tuple[str, int], broker: int, log: Any, start: int, end: int | None = None) -> bytes:
    """``log.read`` for the checks: a log that cannot serve a read of what it holds is a
    violation (**log**), not a crash of the harness."""
    try:
        return log.read(start, _ALL, end)
    except Exception as exc:  # noqa: BLE001 - whatever the log raised is the finding
        if _is_storage_error(exc):
            raise
        history.fail("log", history.sim.kernel.now, f"{tp[0]}-{tp[1]}: replica {broker}'s log (start {log.log_start_offset}, end {log.log_end_offset}) cannot be read from {start}: {exc!r}")
        return b""


def _is_storage_error(exc: BaseException) -> bool:
    from kcoord.replication.entry import is_storage_error

    return is_storage_error(exc)


def records_of(data: bytes) -> dict[int, tuple]:
    """offset -> (key, value) of every record in ``data``."""
    out: dict[int, tuple] = {}
    for pos, h in records.iter_headers(data):
        d = records.decode_batch(data, pos)
        keys = d.keys if d.keys is not None else [None] * len(d.values)
        for i, (k, v) in enumerate(zip(keys, d.values)):
            out[h.base_offset + i] = (k, v)
    return out


def consistent(a: bytes, b: bytes, compacted: bool) -> bool:
    """Whether two copies of a batch (same base offset) hold the same records: byte for
    byte, or -- where the cleaner rewrites batches -- the same key and value at every offset
    both still hold."""
    if a == b:
        return True
    if not compacted:
        return False
    ra, rb = records_of(a), records_of(b)
    return all(ra[o] == rb[o] for o in ra.keys() & rb.keys())


def first_difference(a: bytes, b: bytes) -> str:
    ha = [(h.base_offset, h.record_count, h.crc) for _, h in records.iter_headers(a)]
    hb = [(h.base_offset, h.record_count, h.crc) for _, h in records.iter_headers(b)]
    for x, y in zip(ha, hb):
        if x != y:
            return f"first differing batch (base, count, crc): {x} vs {y}"
    return f"{len(ha)} vs {len(hb)} batches"
