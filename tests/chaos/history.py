"""Histories of the chaos suite: one JSON object per line, appended by one process.

Every process of a chaos run (producers, consumer-group members, the observer, the
nemesis) appends its own file in the run's history directory; the checker
(:mod:`tests.chaos.checker`) reads them all back. Lines are written whole and flushed at
once, so a process killed with SIGKILL leaves at most its last line torn, which
:func:`read_lines` skips. Times are wall-clock seconds (``time.time()``), comparable
across the processes of one machine.

File names (the checker finds them by prefix):

* ``producer-<id>.jsonl``: ``start``; ``invoke`` {lo, hi, t} for values ``"<id>:<seq>"``
  with lo <= seq < hi, sent together; ``ok`` {acks: [[seq, partition, offset, t_ack]]};
  ``info`` {seqs: [[seq, error]]} (outcome unknown: timed out or failed after sending);
  ``end``.
* ``member-<id>-<incarnation>.jsonl``: ``start``; ``assign``/``revoke`` {gen, member,
  partitions}; ``poll`` {gen, member, recs: {partition: [[offset, value], ...]}, hw:
  {partition: hw}}; ``commit`` {gen, member, offsets, result: ok|fail|info}; ``end``.
* ``observer.jsonl``: ``replicas`` (each replica of a partition as described by itself)
  and ``group`` (describe_group) snapshots.
* ``nemesis.jsonl``: every fault with its time, kind, target and outcome.
* ``final.json`` and ``final-log.jsonl``: what the run found once the cluster had healed
  (see :mod:`tests.chaos.run`).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Iterator


class History:
    """Append-only JSON-lines writer, safe to use from several threads of one process."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._lock = threading.Lock()

    def write(self, type: str, t: float | None = None, **fields: Any) -> None:
        line = json.dumps({"type": type, "t": time.time() if t is None else t, **fields}, separators=(",", ":")) + "\n"
        data = line.encode()
        with self._lock:
            if self._fd < 0:
                return
            os.write(self._fd, data)  # one write per line: a kill tears at most the last one

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


def read_lines(path: str | os.PathLike) -> Iterator[dict]:
    """The objects of a history file; a torn (unparseable) line is skipped."""
    with open(path, "rb") as f:
        for raw in f:
            raw = raw.strip()
            if not raw:
                continue
            try:
                yield json.loads(raw)
            except ValueError:
                continue


def value_of(producer: str, seq: int) -> str:
    return f"{producer}:{seq}"


def parse_value(value: str) -> tuple[str, int] | None:
    producer, sep, seq = value.rpartition(":")
    if not sep or not seq.isdigit():
        return None
    return producer, int(seq)
