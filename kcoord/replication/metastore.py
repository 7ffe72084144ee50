"""Where the controller keeps cluster metadata: a tiny key/value interface.

Production uses Ray's GCS key/value store (``actors/gcs_store.py``), the same one Ray
Serve's controller checkpoints into; tests use :class:`FileStore` or :class:`MemoryStore`,
and the simulation a store that fails writes. The controller reaches them through a
:class:`~kcoord.replication.fenced_store.FencedStore`: a log over put-if-absent (the one
atomic step they all offer) that a deposed controller process cannot write to. A write
that fails makes the controller load the store again (``controller_driver``) rather than
go on with memory the store does not hold.
"""

from __future__ import annotations

import os
import tempfile
import urllib.parse
from pathlib import Path
from typing import Protocol


class StoreFailure(Exception):
    """A metadata-store write failed; it may have taken effect (a timeout) or not. The
    controller treats both alike and loads the store again."""


class MetadataStore(Protocol):
    def load(self) -> dict[str, bytes]:
        """Every key and value, read when the controller (re)starts."""
        ...

    def get(self, key: str) -> bytes | None: ...

    def put(self, key: str, value: bytes) -> None: ...

    def delete(self, key: str) -> None: ...

    def keys(self, prefix: str = "") -> list[str]: ...


class MemoryStore:
    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.writes = 0

    def load(self) -> dict[str, bytes]:
        return dict(self.data)

    def get(self, key: str) -> bytes | None:
        return self.data.get(key)

    def put(self, key: str, value: bytes) -> None:
        self.writes += 1
        self.data[key] = bytes(value)

    def put_if_absent(self, key: str, value: bytes) -> bool:
        if key in self.data:
            return False
        self.put(key, value)
        return True

    def delete(self, key: str) -> None:
        self.data.pop(key, None)

    def delete_prefix(self, prefix: str) -> None:
        for key in self.keys(prefix):
            del self.data[key]

    def keys(self, prefix: str = "") -> list[str]:
        return sorted(k for k in self.data if k.startswith(prefix))


class FileStore:
    """One file per key, replaced atomically (write, fsync, rename)."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        return self.directory / urllib.parse.quote(key, safe="")

    def load(self) -> dict[str, bytes]:
        return {k: v for k in self.keys() if (v := self.get(k)) is not None}

    def get(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            return None

    def _written(self, value: bytes) -> str:
        """A temporary file holding ``value``, on disk."""
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(value)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            os.unlink(tmp)
            raise
        return tmp

    def put(self, key: str, value: bytes) -> None:
        tmp = self._written(value)
        try:
            os.replace(tmp, self._path(key))
        except BaseException:
            os.unlink(tmp)
            raise

    def put_if_absent(self, key: str, value: bytes) -> bool:
        """A hard link fails if the name exists: the check and the write are one step."""
        tmp = self._written(value)
        try:
            os.link(tmp, self._path(key))
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)

    def delete(self, key: str) -> None:
        try:
            self._path(key).unlink()
        except FileNotFoundError:
            pass

    def delete_prefix(self, prefix: str) -> None:
        for key in self.keys(prefix):
            self.delete(key)

    def keys(self, prefix: str = "") -> list[str]:
        out = []
        for p in self.directory.iterdir():
            if p.name.startswith(".tmp-"):
                continue
            key = urllib.parse.unquote(p.name)
            if key.startswith(prefix):
                out.append(key)
        return sorted(out)
