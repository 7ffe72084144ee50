"""Metadata store on Ray's GCS key/value store (the one Ray Serve checkpoints into).

``ray.experimental.internal_kv`` is private Ray API, so it is used here and nowhere else.
It has no compare-and-swap; its put-if-absent is enough for the controller's metadata log
(``kcoord.replication.fenced_store``), which fences a deposed controller process.
"""

from __future__ import annotations

import json
from typing import Any

from ray.experimental import internal_kv as _kv


class GcsStore:
    def __init__(self, namespace: str) -> None:
        self.namespace = namespace

    @classmethod
    def for_cluster(cls, cluster: str) -> "GcsStore":
        """The namespace every record of kcoord cluster ``cluster`` lives in."""
        return cls(f"kcoord/{cluster}")

    def get(self, key: str) -> bytes | None:
        return _kv._internal_kv_get(key, namespace=self.namespace)

    def put(self, key: str, value: bytes) -> None:
        _kv._internal_kv_put(key, value, overwrite=True, namespace=self.namespace)

    def put_if_absent(self, key: str, value: bytes) -> bool:
        """True if this call stored ``value`` (the GCS checks and writes in one step)."""
        return not _kv._internal_kv_put(key, value, overwrite=False, namespace=self.namespace)

    def get_json_dict(self, key: str) -> dict[str, Any]:
        """A JSON object stored with :meth:`put_json`; {} when missing or not an object
        (a damaged record must not stop a deploy or a coordinator start)."""
        raw = self.get(key)
        if not raw:
            return {}
        try:
            value = json.loads(raw)
        except ValueError:
            return {}
        return dict(value) if isinstance(value, dict) else {}

    def put_json(self, key: str, value: Any) -> None:
        self.put(key, json.dumps(value).encode())

    def delete(self, key: str) -> None:
        _kv._internal_kv_del(key, namespace=self.namespace)

    def delete_prefix(self, prefix: str) -> None:
        _kv._internal_kv_del(prefix, del_by_prefix=True, namespace=self.namespace)

    def keys(self, prefix: str = "") -> list[str]:
        found = _kv._internal_kv_list(prefix, namespace=self.namespace)
        return sorted(k.decode() if isinstance(k, bytes) else k for k in found)

    def clear(self) -> None:
        for key in self.keys():
            self.delete(key)
