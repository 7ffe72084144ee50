"""kcoord.streaming.state without Ray: key and state encodings, the changelog partition of
a key, and one partition's updates (input order, changed keys only, tombstones, bad
returns named)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from kcoord.client.producer.partitioner import partition_for_key
from kcoord.spark.stream import SINK_COLUMNS
from kcoord.streaming import state as S


def spec(update, partitions=1, key="key"):
    return S.StateSpec("q", key, update, partitions)


def rows(*records):
    """(key, value, partition, offset) tuples as the source's columns."""
    return pd.DataFrame(
        {
            "key": [r[0] for r in records],
            "value": [r[1] for r in records],
            "topic": ["in"] * len(records),
            "partition": [r[2] for r in records],
            "offset": [r[3] for r in records],
        }
    )


def count(key, group, state):
    n = (state or 0) + len(group)
    return pd.DataFrame({"key": [key], "value": [str(n).encode()]}), n


def test_keys_and_states_round_trip_through_msgpack_with_numpy_values():
    assert S.encode_key(np.int64(7)) == S.encode_key(7)
    assert S.encode_key(float("nan")) == S.encode_key(None)
    assert S.decode_state(S.encode_state(b"k", {"n": np.int64(3), "xs": np.arange(3)})) == {"n": 3, "xs": [0, 1, 2]}
    assert S.decode_state(S.encode_state(b"k", (1, "a"))) == [1, "a"]


def test_a_state_the_changelog_cannot_hold_names_the_key():
    with pytest.raises(TypeError, match=r"key b'k1'.*msgpack value"):
        S.encode_state(b"k1", object())


def test_a_keys_partition_is_the_producers_partitioner_on_its_encoding():
    keys = [b"a", b"b", "c", 5, None]
    assert S.partitions_of(keys, 7) == [partition_for_key(S.encode_key(k), 7) for k in keys]
    batch = pa.record_batch({"key": pa.array([b"a", b"b"]), "value": pa.array([b"1", b"2"])})
    out = S.with_partitions(batch, "key", 7)
    assert out.column(S.PARTITION_COLUMN).to_pylist() == S.partitions_of([b"a", b"b"], 7)
    with pytest.raises(KeyError, match="no column 'user'"):
        S.with_partitions(batch, "user", 7)


@pytest.mark.parametrize("column", [
    pa.array([b"a", None, b"b", b"a", b""] * 40 + [f"k{i}".encode() for i in range(300)]),
    pa.array(["x", None, "y", "x"] * 30 + [str(i) for i in range(100)]),
    pa.array([5, None, -3, 5, 2**40] * 20),
    pa.array([1.5, float("nan"), None, 1.5]),
    pa.array([[1, 2], None, [1, 2], []]),  # no dictionary encoding for lists: row by row
    pa.chunked_array([[b"a", b"b"], [b"a", None]]),
], ids=["binary", "string", "int", "float", "list", "chunked"])
def test_a_columns_partitions_are_each_rows_keys_partition(column):
    # hashed once per distinct key, the same partitions as key by key
    keys = column.to_pylist()
    want = [partition_for_key(S.encode_key(k), 7) for k in keys]
    table = pa.table({"key": column, "value": pa.array([b"v"] * len(keys))})
    assert S.with_partitions(table, "key", 7).column(S.PARTITION_COLUMN).to_pylist() == want
    if not isinstance(column, pa.ChunkedArray):
        batch = pa.RecordBatch.from_arrays([column], names=["key"])
        assert S.with_partitions(batch, "key", 7).column(S.PARTITION_COLUMN).to_pylist() == want


def test_updates_see_each_keys_rows_in_input_order_and_their_previous_state():
    seen = {}

    def update(key, group, state):
        seen[key] = (list(group["offset"]), state)
        return None, (state or []) + list(group["value"])

    states = {S.encode_key(b"a"): S.encode_state(b"a", [b"old"])}
    batch = rows((b"a", b"x", 1, 5), (b"b", b"y", 0, 9), (b"a", b"z", 0, 7), (b"a", b"w", 1, 2))
    table, changed = S.apply_updates(spec(update), 0, batch, states, SINK_COLUMNS)
    assert table is None
    # by source partition, then offset
    assert seen[b"a"] == ([7, 2, 5], [b"old"])
    assert seen[b"b"] == ([9], None)
    assert S.decode_state(changed[S.encode_key(b"a")]) == [b"old", b"z", b"w", b"x"]
    assert states == {S.encode_key(b"a"): S.encode_state(b"a", [b"old"])}  # not modified


def test_only_changed_keys_are_written_and_none_removes_a_state():
    states = {S.encode_key(k): S.encode_state(k, v) for k, v in ((b"same", 1), (b"gone", 2))}

    def update(key, group, state):
        return None, {b"same": 1, b"gone": None, b"new": 3}[key]

    _, changed = S.apply_updates(spec(update), 0, rows((b"same", b"", 0, 0), (b"gone", b"", 0, 1), (b"new", b"", 0, 2)), states, SINK_COLUMNS)
    assert changed == {S.encode_key(b"gone"): None, S.encode_key(b"new"): S.encode_state(b"new", 3)}


def test_outputs_are_gathered_into_the_sinks_columns():
    table, changed = S.apply_updates(spec(count), 0, rows((b"a", b"", 0, 0), (b"a", b"", 0, 1), (b"b", b"", 0, 2)), {}, SINK_COLUMNS)
    assert table.column_names == ["key", "value"]
    assert table.to_pydict() == {"key": [b"a", b"b"], "value": [b"2", b"1"]}
    assert {S.decode_state(v) for v in changed.values()} == {1, 2}


@pytest.mark.parametrize(
    "update, error, match",
    [
        (lambda k, g, s: 5, TypeError, "must return \\(output DataFrame or None, new state or None\\)"),
        (lambda k, g, s: ("text", 1), TypeError, "must be a pandas DataFrame or None"),
        (lambda k, g, s: (pd.DataFrame({"v": [1]}), 1), ValueError, "has no 'value' column"),
        (lambda k, g, s: (pd.DataFrame({"value": [b"1"], "extra": [1]}), 1), ValueError, "does not take: \\['extra'\\]"),
        (lambda k, g, s: (None, object()), TypeError, "cannot hold"),
    ],
)
def test_a_bad_update_state_is_named(update, error, match):
    with pytest.raises(error, match=match):
        S.apply_updates(spec(update), 0, rows((b"a", b"", 0, 0)), {}, SINK_COLUMNS)


def test_a_key_outside_the_tasks_partition_is_refused():
    key = next(k for k in (b"a", b"b", b"c", b"d") if S.partitions_of([k], 2)[0] == 1)
    with pytest.raises(AssertionError, match="not its own"):
        S.apply_updates(spec(count, partitions=2), 0, rows((key, b"", 0, 0)), {}, SINK_COLUMNS)


def test_a_partitions_counts_say_what_the_batch_did_to_its_state():
    def update(key, group, state):
        if key == "gone":
            return None, None  # removes the key's state
        if key == "same":
            return None, state  # unchanged: not an update
        return None, (state or 0) + len(group)

    states = {S.encode_key(k): S.encode_state(k, v) for k, v in (("old", 1), ("gone", 5), ("same", 2))}
    _, changed = S.apply_updates(spec(update), 0, rows(("old", b"a", 0, 0), ("new", b"b", 0, 1), ("gone", b"c", 0, 2), ("same", b"d", 0, 3)), states, SINK_COLUMNS)
    counts = S.count_changes(states, changed, 0)
    # old updated, new added, gone removed, same untouched: old, new, same remain
    assert counts == S.StateCounts(((0, 3),), updated=2, removed=1)
    # a removal of a key that had no state removes nothing
    assert S.count_changes({}, {S.encode_key("x"): None}, 1) == S.StateCounts(((1, 0),), 0, 0)


def test_state_counts_travel_in_the_task_rows_and_add_up_per_partition():
    from types import SimpleNamespace

    from kcoord.spark import tasks as T

    task_rows = []
    for partition, counts in ((1, S.StateCounts(((1, 7),), 3, 1)), (0, S.StateCounts(((0, 2),), 2, 0))):
        stats = T.stats_batch(partition, 0, 9, {0: [4, 1, 0], 1: [2, 1, 0]}, "tid", 0).to_pandas()  # a task's rows: one per sink partition
        task_rows += [SimpleNamespace(**r) for r in S.with_counts(stats, counts).to_dict("records")]
    assert len(task_rows) == 4 and set(S.COUNT_COLUMNS) <= set(vars(task_rows[0]))
    assert S.counts_of_rows(task_rows) == S.StateCounts(((0, 2), (1, 7)), updated=5, removed=1)
    assert S.counts_of_rows([]) == S.StateCounts((), 0, 0)
