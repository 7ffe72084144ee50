"""Where the controller keeps cluster metadata: a tiny key/value interface.

Production uses Ray's GCS key/value store (``actors/gcs_store.py``), the same one Ray
Serve's controller checkpoints into; tests use :class:`FileStore` or :class:`MemoryStore`,
and the simulation a store that fails writes. None of them offers compare-and-swap, and none
needs to: the controller is the only writer, and a write that fails makes it reload from the
store (``controller_driver``) rather than go on with memory the store does not hold.
"""

from __future__ import annotations

import os
import tempfile
import urllib.parse
from pathlib import Path
from typing import Protocol


class MetadataStore(Protocol):
    def get(self, key: str) -> bytes | None: ...

    def put(self, key: str, value: bytes) -> None: ...

    def delete(self, key: str) -> None: ...

    def keys(self, prefix: str = "") -> list[str]: ...


class MemoryStore:
    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.writes = 0

    def get(self, key: str) -> bytes | None:
        return self.data.get(key)

    def put(self, key: str, value: bytes) -> None:
        self.writes += 1
        self.data[key] = bytes(value)

    def delete(self, key: str) -> None:
        self.data.pop(key, None)

    def keys(self, prefix: str = "") -> list[str]:
        return sorted(k for k in self.data if k.startswith(prefix))


class FileStore:
    """One file per key, replaced atomically (write, fsync, rename)."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        return self.directory / urllib.parse.quote(key, safe="")

    def get(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            return None

    def put(self, key: str, value: bytes) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(value)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self._path(key))
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise

    def delete(self, key: str) -> None:
        try:
            self._path(key).unlink()
        except FileNotFoundError:
            pass

    def keys(self, prefix: str = "") -> list[str]:
        out = []
        for p in self.directory.iterdir():
            if p.name.startswith(".tmp-"):
                continue
            key = urllib.parse.unquote(p.name)
            if key.startswith(prefix):
                out.append(key)
        return sorted(out)
