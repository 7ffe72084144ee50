"""GcsStore on a real Ray GCS: JSON records round-trip, a damaged one reads as {}, and
put-if-absent and prefix deletion carry the controller's fenced metadata log."""

from __future__ import annotations

import uuid

import pytest

from kcoord.actors.gcs_store import GcsStore
from kcoord.replication.fenced_store import FencedStore, StoreFenced
from kcoord.replication.metadata import is_controller_key

pytestmark = pytest.mark.ray


def test_json_records_round_trip_and_damaged_ones_read_as_empty(ray_session):
    store = GcsStore.for_cluster(f"gcs-{uuid.uuid4().hex[:6]}")
    assert store.namespace.startswith("kcoord/gcs-")
    try:
        assert store.get_json_dict("info") == {}, "missing"
        store.put_json("info", {"brokers": 3, "nodes": ["a"]})
        assert store.get_json_dict("info") == {"brokers": 3, "nodes": ["a"]}
        store.put("info", b"{not json")
        assert store.get_json_dict("info") == {}, "not JSON"
        store.put_json("info", [1, 2])
        assert store.get_json_dict("info") == {}, "not an object"
    finally:
        store.clear()
    assert store.keys() == []


def test_put_if_absent_and_a_fenced_log_on_the_gcs(ray_session):
    store = GcsStore.for_cluster(f"gcs-{uuid.uuid4().hex[:6]}")
    try:
        assert store.put_if_absent("meta/x", b"1") and not store.put_if_absent("meta/x", b"2")
        assert store.get("meta/x") == b"1"
        store.put("meta/y", b"3")
        store.put_json("deploy-info", {"brokers": 3})
        store.delete_prefix("meta/")
        assert store.keys() == ["deploy-info"]
        store.put("partition/t/0", b"plain")  # a store written before the log
        a = FencedStore(store, "a", compact_every=3, legacy=is_controller_key)
        assert a.load() == {"partition/t/0": b"plain"}
        for i in range(7):
            a.put(f"topic/t{i}", b"v")
        b = FencedStore(store, "b", compact_every=3, legacy=is_controller_key)
        assert b.load() == {"partition/t/0": b"plain", **{f"topic/t{i}": b"v" for i in range(7)}}
        with pytest.raises(StoreFenced):
            a.put("topic/late", b"v")
        assert "topic/late" not in FencedStore(store, "c", legacy=is_controller_key).load()
    finally:
        store.clear()
