"""Metadata store on Ray's GCS key/value store (the one Ray Serve checkpoints into).

``ray.experimental.internal_kv`` is private Ray API, so it is used here and nowhere else.
It has no compare-and-swap; kcoord does not need one because the FailoverCoordinator is the
single writer and leader epochs fence stale actors.
"""

from __future__ import annotations

from ray.experimental import internal_kv as _kv


class GcsStore:
    def __init__(self, namespace: str) -> None:
        self.namespace = namespace

    def get(self, key: str) -> bytes | None:
        return _kv._internal_kv_get(key, namespace=self.namespace)

    def put(self, key: str, value: bytes) -> None:
        _kv._internal_kv_put(key, value, overwrite=True, namespace=self.namespace)

    def delete(self, key: str) -> None:
        _kv._internal_kv_del(key, namespace=self.namespace)

    def keys(self, prefix: str = "") -> list[str]:
        found = _kv._internal_kv_list(prefix, namespace=self.namespace)
        return sorted(k.decode() if isinstance(k, bytes) else k for k in found)

    def clear(self) -> None:
        for key in self.keys():
            self.delete(key)
