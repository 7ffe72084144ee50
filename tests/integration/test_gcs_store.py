"""GcsStore on a real Ray GCS: JSON records round-trip, and a damaged one reads as {}."""

from __future__ import annotations

import uuid

import pytest

from kcoord.actors.gcs_store import GcsStore

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
