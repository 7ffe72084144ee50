"""What callers hand the producer, checked and normalised.

Settings must be ints in range; record keys and values bytes or None; headers
``(str, bytes)`` pairs. :meth:`~kcoord.client.producer.Producer.send_batch` takes records as
tuples or as columns; :func:`bulk_columns` turns either into checked columns, at C speed
where it can (a type check over a whole column rather than per record).
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from ...records import now_ms


def check_int(name: str, value: Any, minimum: int) -> None:
    if type(value) is not int or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")


def as_bytes(value: Any, what: str) -> bytes:
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(
        f"record {what} must be bytes or None, got {type(value).__name__}"
        + (" (encode str values first, e.g. value.encode())" if isinstance(value, str) else "")
    )


def check_headers(headers: Any) -> list[tuple[str, bytes]]:
    if not isinstance(headers, (list, tuple)):
        raise TypeError(f"headers must be a list of (str, bytes) pairs, got {type(headers).__name__}")
    out = []
    for h in headers:
        if not isinstance(h, (list, tuple)) or len(h) != 2:
            raise TypeError(f"each header must be a (str, bytes) pair, got {h!r}")
        k, v = h
        if type(k) is not str:
            raise TypeError(f"header key must be str, got {type(k).__name__}")
        if v is not None and type(v) is not bytes:
            v = as_bytes(v, f"header {k!r} value")
        out.append((k, v))
    return out


_OK_TYPES = {bytes, type(None)}


def check_column(column: Sequence[Any], what: str) -> list:
    """A column of bytes/None as a list; other types raise TypeError (C-speed check)."""
    col = column if isinstance(column, list) else list(column)
    types = set(map(type, col))
    if types <= _OK_TYPES:
        return col
    bad = types - _OK_TYPES - {bytearray, memoryview}
    if bad:
        name = sorted(t.__name__ for t in bad)
        raise TypeError(f"record {what}s must be bytes or None, found {name}" + (" (encode str values first)" if str in bad else ""))
    return [bytes(x) if isinstance(x, (bytearray, memoryview)) else x for x in col]


def columns_from_records(records: Iterable[Any]) -> tuple[list, list | None, list | None, list | None]:
    values: list = []
    keys: list = []
    headers: list = []
    stamps: list = []
    plain = True
    for rec in records:
        if rec is None or isinstance(rec, (bytes, bytearray, memoryview)):
            values.append(rec)
            keys.append(None)
            headers.append(None)
            stamps.append(None)
            continue
        if not isinstance(rec, (tuple, list)) or not 2 <= len(rec) <= 4:
            raise TypeError(f"a record is a value or (key, value[, headers[, timestamp_ms]]), got {rec!r:.80}")
        plain = False
        keys.append(rec[0])
        values.append(rec[1])
        headers.append(rec[2] if len(rec) > 2 else None)
        stamps.append(rec[3] if len(rec) > 3 else None)
    if plain:
        return values, None, None, None
    if any(s is not None for s in stamps):
        if any(s is None for s in stamps):
            now = now_ms()
            stamps = [now if s is None else s for s in stamps]
    else:
        stamps = None  # type: ignore[assignment]
    return values, keys, (headers if any(headers) else None), stamps


def bulk_columns(
    records: Iterable[Any] | None,
    values: Sequence[bytes | None] | None,
    keys: Sequence[bytes | None] | None,
    headers: Sequence[Sequence[tuple[str, bytes]] | None] | None,
    timestamps: Sequence[int] | None,
    serialize_value: Any = None,
    serialize_key: Any = None,
) -> tuple[list, list | None, list | None, Sequence[int] | None]:
    """send_batch()'s input as checked columns ``(values, keys, headers, timestamps)``:
    from ``records`` or from the given columns; all-None keys or headers become None.
    ``serialize_value``/``serialize_key`` (the producer's serializers) turn each non-None
    value/key into bytes before the checks."""
    if records is not None:
        if values is not None or keys is not None or headers is not None or timestamps is not None:
            raise TypeError("send_batch takes either records or the columns values=/keys=/headers=/timestamps=, not both")
        values, keys, headers, timestamps = columns_from_records(records)
    elif values is None:
        raise TypeError("send_batch needs records or values=")
    if serialize_value is not None:
        values = [None if v is None else serialize_value(v) for v in values]
    if serialize_key is not None and keys is not None:
        keys = [None if k is None else serialize_key(k) for k in keys]
    values = check_column(values, "value")
    n = len(values)
    if keys is not None:
        if len(keys) != n:
            raise ValueError(f"keys has {len(keys)} entries for {n} values")
        keys = check_column(keys, "key")
        if not any(k is not None for k in keys):
            keys = None
    if headers is not None:
        if len(headers) != n:
            raise ValueError(f"headers has {len(headers)} entries for {n} values")
        headers = [check_headers(h) if h else None for h in headers]
        if not any(headers):
            headers = None
    if timestamps is not None:
        if len(timestamps) != n:
            raise ValueError(f"timestamps has {len(timestamps)} entries for {n} values")
        if not all(type(ts) is int and ts >= 0 for ts in timestamps):
            raise TypeError("timestamps must be non-negative ints (ms since the epoch)")
    return values, keys, headers, timestamps


def check_transactional(transactional_id: object, producer_id: object, enable_idempotence: object, acks: int, given_acks: object) -> None:
    """A transactional producer's settings: idempotent, acks=all, its identity from the
    transaction coordinator (never an explicit ``producer_id``)."""
    if not isinstance(transactional_id, str) or not transactional_id:
        raise ValueError(f"transactional_id must be a non-empty str, got {transactional_id!r}")
    if producer_id is not None:
        raise ValueError(
            f"transactional_id={transactional_id!r} with producer_id={producer_id!r}: a transactional producer gets its "
            "producer id and epoch from the transaction coordinator (init_transactions()); pass one or the other"
        )
    if enable_idempotence is False:
        raise ValueError(f"transactional_id={transactional_id!r} needs an idempotent producer; do not pass enable_idempotence=False")
    if acks != -1:
        raise ValueError(f"transactional_id={transactional_id!r} needs acks='all' (got acks={given_acks!r})")
