"""How ``kcoord consume`` writes records and reads ``--offset``, and how ``kcoord produce``
reads ``--header``: pure functions, so the CLI's output rules are tested without Ray.

Output is bytes: keys and values are arbitrary bytes, and a consumer piping them into a
file must get them unchanged (decoding them as text would replace what is not UTF-8).
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from typing import Any, Callable

# kcat's -f tokens (%s and rpk's %v are both the value)
_TOKEN = re.compile(r"%[svkKStpoTh%]|\\[ntr\\]")
_ESCAPES = {"\\n": b"\n", "\\t": b"\t", "\\r": b"\r", "\\\\": b"\\"}

FORMAT_HELP = (
    "kcat-style output format: %s or %v value, %k key, %S value length, %K key length, %t topic, "
    "%p partition, %o offset, %T timestamp (ms), %h headers (k=v,...), %% a percent sign; "
    "\\n \\t \\r \\\\ escapes. A null key or value prints nothing (its length prints -1)."
)


def _length(data: bytes | None) -> bytes:
    return b"-1" if data is None else str(len(data)).encode()


def _headers(headers: list) -> bytes:
    return b",".join(k.encode() + b"=" + (v if v is not None else b"") for k, v in headers or ())


_FIELDS: dict[str, Callable[[Any], bytes]] = {
    "%s": lambda r: r.value or b"",
    "%v": lambda r: r.value or b"",
    "%k": lambda r: r.key or b"",
    "%S": lambda r: _length(r.value),
    "%K": lambda r: _length(r.key),
    "%t": lambda r: r.topic.encode(),
    "%p": lambda r: str(r.partition).encode(),
    "%o": lambda r: str(r.offset).encode(),
    "%T": lambda r: str(r.timestamp).encode(),
    "%h": lambda r: _headers(r.headers),
    "%%": lambda r: b"%",
}


def compile_format(fmt: str) -> Callable[[Any], bytes]:
    """A function from a ConsumerRecord to its output bytes, for a kcat ``-f`` style format.
    Raises ValueError naming an unknown ``%`` token (a typo would otherwise print itself)."""
    parts: list[bytes | Callable[[Any], bytes]] = []
    pos = 0
    for m in _TOKEN.finditer(fmt):
        literal = fmt[pos:m.start()]
        if "%" in literal:
            bad = literal[literal.index("%"):][:2]
            raise ValueError(f"unknown format token {bad!r}; known: {' '.join(sorted(_FIELDS))}")
        if literal:
            parts.append(literal.encode())
        tok = m.group()
        parts.append(_ESCAPES[tok] if tok in _ESCAPES else _FIELDS[tok])
        pos = m.end()
    tail = fmt[pos:]
    if "%" in tail:
        raise ValueError(f"unknown format token {tail[tail.index('%'):][:2]!r}; known: {' '.join(sorted(_FIELDS))}")
    if tail:
        parts.append(tail.encode())

    def render(record: Any) -> bytes:
        return b"".join(p if isinstance(p, bytes) else p(record) for p in parts)

    return render


def _json_bytes(data: bytes | None) -> Any:
    """Text when the bytes are UTF-8, else ``{"base64": ...}``: JSON cannot hold raw bytes,
    and an object (not a string) keeps the two cases apart."""
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


def record_json(record: Any) -> bytes:
    """One JSON line per record (``--json``)."""
    doc = {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
        "key": _json_bytes(record.key),
        "value": _json_bytes(record.value),
        "headers": [[k, _json_bytes(v)] for k, v in record.headers or ()],
    }
    return json.dumps(doc, ensure_ascii=False).encode("utf-8") + b"\n"


@dataclass(frozen=True)
class StartOffset:
    """Where ``--offset`` starts each partition: ``kind`` is "earliest", "latest",
    "absolute" (``value`` is the offset), "from-end" (``value`` records before the end) or
    "timestamp" (``value`` ms since the epoch: the first record at or after it)."""

    kind: str
    value: int = 0


def parse_offset(spec: str) -> StartOffset:
    """kcat's ``-o``: ``earliest``/``beginning``, ``latest``/``end``, ``N``, ``-N``, ``@TS``."""
    s = spec.strip().lower()
    if s in ("earliest", "beginning"):
        return StartOffset("earliest")
    if s in ("latest", "end"):
        return StartOffset("latest")
    try:
        if s.startswith("@"):
            ts = int(s[1:])
            if ts < 0:
                raise ValueError
            return StartOffset("timestamp", ts)
        n = int(s)
    except ValueError:
        raise ValueError(f"offset must be earliest, latest, N, -N or @TIMESTAMP_MS, got {spec!r}") from None
    return StartOffset("from-end", -n) if n < 0 else StartOffset("absolute", n)


def start_positions(start: StartOffset, earliest: dict[int, int], latest: dict[int, int], by_time: dict[int, int] | None = None) -> dict[int, int]:
    """Per partition, the offset to start at, clamped to [log start, end] as kcat does
    (an absolute offset past the end waits at the end, -N never goes below the log start).
    ``by_time`` holds the timestamp lookup's answers (-1: no record that late: the end)."""
    out: dict[int, int] = {}
    for p, lo in earliest.items():
        hi = latest[p]
        if start.kind == "earliest":
            pos = lo
        elif start.kind == "latest":
            pos = hi
        elif start.kind == "absolute":
            pos = start.value
        elif start.kind == "from-end":
            pos = hi - start.value
        else:
            found = (by_time or {}).get(p, -1)
            pos = hi if found < 0 else found
        out[p] = max(lo, min(hi, pos))
    return out


def parse_headers(items: tuple[str, ...] | list[str]) -> list[tuple[str, bytes]]:
    """``-H key=value`` (repeatable) as record headers; a key may repeat, as in Kafka."""
    headers = []
    for item in items:
        key, found, value = item.partition("=")
        if not found or not key:
            raise ValueError(f"header must be KEY=VALUE, got {item!r}")
        headers.append((key, value.encode()))
    return headers


@dataclass(frozen=True)
class ResetSpec:
    """Where ``groups reset-offsets`` moves a group's committed offsets: ``kind`` is
    "earliest", "latest", "explicit" (``offsets`` {partition: offset}), "timestamp"
    (``value`` ms) or "shift" (``value`` records, negative to go back)."""

    kind: str
    value: int = 0
    offsets: tuple[tuple[int, int], ...] = ()


def parse_datetime_ms(text: str) -> int:
    """``--to-datetime``: ISO 8601 (``2026-11-23T10:00:00``, ``...Z``, ``...+01:00``); without
    a zone it is local time, as kafka-consumer-groups.sh reads it."""
    from datetime import datetime

    try:
        dt = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"expected an ISO 8601 date and time such as 2026-11-23T10:00:00 or 2026-11-23T10:00:00Z, got {text!r}") from None
    return int(dt.timestamp() * 1000)


def plan_reset(
    spec: ResetSpec,
    earliest: dict[int, int],
    latest: dict[int, int],
    committed: dict[int, int | None],
    by_time: dict[int, int] | None = None,
) -> dict[int, tuple[int | None, int | None]]:
    """{partition: (committed now, new offset)} for one topic. ``explicit`` offsets must lie
    within [log start, high watermark] (ValueError naming the first that does not); shifts
    and timestamps are clamped into it, as kafka-consumer-groups.sh does. A shift leaves a
    partition without a committed offset alone (new is None): there is nothing to shift."""
    plan: dict[int, tuple[int | None, int | None]] = {}
    if spec.kind == "explicit":
        for p, off in spec.offsets:
            if p not in earliest:
                raise ValueError(f"no partition {p} (the topic has {len(earliest)})")
            if not earliest[p] <= off <= latest[p]:
                raise ValueError(f"offset {off} for partition {p} is outside [{earliest[p]}, {latest[p]}] (log start, high watermark)")
            plan[p] = (committed.get(p), off)
        return plan
    for p in sorted(earliest):
        lo, hi, now = earliest[p], latest[p], committed.get(p)
        if spec.kind == "earliest":
            new: int | None = lo
        elif spec.kind == "latest":
            new = hi
        elif spec.kind == "timestamp":
            found = (by_time or {}).get(p, -1)
            new = hi if found < 0 else found
        elif spec.kind == "shift":
            new = None if now is None else now + spec.value
        else:
            raise ValueError(f"unknown reset kind {spec.kind!r}")
        plan[p] = (now, None if new is None else max(lo, min(hi, new)))
    return plan
