"""The controller's metadata store in the simulation, with write failures.

Ray's GCS key/value store can refuse a write or time out on it; a timed-out write may or
may not have been applied. :class:`FaultyStore` injects both while ``fail_rate`` is set:
the write raises :class:`~kcoord.replication.metastore.StoreFailure`, and for a
timeout the seed decides whether the value landed anyway.

The controller writes it directly, not through the fenced metadata log production uses
(``kcoord.replication.fenced_store``, tested on its own over interleaved writers): one
controller process at a time writes here, and no write lands late.
"""

from __future__ import annotations

import random

from kcoord.replication.metastore import StoreFailure


class FaultyStore:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.data: dict[str, bytes] = {}
        self.writes = 0
        self.failures = 0
        self.fail_rate = 0.0
        self.on_write = None  # called with (key, value-or-None) for every applied write

    def load(self) -> dict[str, bytes]:
        return dict(self.data)

    def get(self, key: str) -> bytes | None:
        return self.data.get(key)

    def keys(self, prefix: str = "") -> list[str]:
        return sorted(k for k in self.data if k.startswith(prefix))

    def put(self, key: str, value: bytes) -> None:
        self._write(key, bytes(value))

    def delete(self, key: str) -> None:
        self._write(key, None)

    def _write(self, key: str, value: bytes | None) -> None:
        if self.fail_rate > 0 and self.rng.random() < self.fail_rate:
            self.failures += 1
            timed_out = self.rng.random() < 0.5
            if timed_out and self.rng.random() < 0.5:
                self._apply(key, value)  # the write landed; its caller will never know
            raise StoreFailure(f"metadata store {'timed out on' if timed_out else 'refused'} the write of {key!r}")
        self._apply(key, value)

    def _apply(self, key: str, value: bytes | None) -> None:
        self.writes += 1
        if value is None:
            self.data.pop(key, None)
        else:
            self.data[key] = value
        if self.on_write is not None:
            self.on_write(key, value)
