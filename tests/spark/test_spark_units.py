"""The Ray- and Spark-free parts of kcoord.spark: offset specs, range splitting, session
settings, and the Arrow conversions the executor tasks use (no Ray, no JVM: fast)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from kcoord import records
from kcoord.client.producer.partitioner import partition_for_key
from kcoord.spark import tasks
from kcoord.spark.offsets import OffsetRange, OffsetSpecError, parse_spec, split_ranges
from kcoord.spark.session import JAVA_OPTIONS, auto_executor_cpu, spark_configs

PARTS = [0, 1, 2]


@pytest.mark.parametrize(
    "spec,expected",
    [
        ("earliest", "earliest"),
        (" LATEST ", "latest"),
        ("group:g1", "group:g1"),
        ('{"t": {"0": 23, "1": -2}}', {0: 23, 1: -2}),
        ({"t": {"2": -1}}, {2: -1}),
        ({0: 5, 2: -2}, {0: 5, 2: -2}),
        ({}, {}),
    ],
)
def test_starting_offset_specs(spec, expected):
    assert parse_spec(spec, "starting_offsets", "t", PARTS) == expected


@pytest.mark.parametrize(
    "spec,needle",
    [
        ("earliest", "would read nothing"),
        ("group:g", "only starting_offsets"),
        ({"t": {"0": -2}}, "-2 (earliest) is not allowed as an ending offset"),
    ],
)
def test_ending_offset_specs_refused(spec, needle):
    with pytest.raises(OffsetSpecError) as err:
        parse_spec(spec, "ending_offsets", "t", PARTS)
    assert needle in str(err.value)


@pytest.mark.parametrize(
    "spec,needle",
    [
        ("oldest", "is not understood"),
        ("{not json", "not valid JSON"),
        ({"u": {"0": 1}}, "names topic(s) ['u']"),
        ({"t": {"x": 1}}, "partition 'x' of topic 't' is not an integer"),
        ({"t": {"3": 1}}, "has no partition 3 (it has 3: 0..2)"),
        ({"t": {"0": "5"}}, "must be an integer"),
        ({"t": {"0": True}}, "must be an integer"),
        ({"t": {"0": -3}}, "is negative"),
        ({"t": [1, 2]}, "must map partitions to offsets"),
        ("group:  ", "names no group"),
        (None, "must be a string or a dict"),
    ],
)
def test_bad_starting_offset_specs(spec, needle):
    with pytest.raises(OffsetSpecError) as err:
        parse_spec(spec, "starting_offsets", "t", PARTS)
    assert needle in str(err.value)


def test_split_ranges_reaches_min_partitions_without_empty_pieces():
    ranges = [OffsetRange("t", 0, 0, 1000), OffsetRange("t", 1, 10, 110), OffsetRange("t", 2, 5, 5), OffsetRange("t", 3, 0, 2)]
    out = split_ranges(ranges, 10)
    assert len(out) == 10
    assert all(r.size > 0 for r in out)
    for p, (lo, hi) in {0: (0, 1000), 1: (10, 110), 3: (0, 2)}.items():
        pieces = [r for r in out if r.partition == p]
        assert pieces[0].start == lo and pieces[-1].end == hi
        assert all(a.end == b.start for a, b in zip(pieces, pieces[1:]))
        assert max(r.size for r in pieces) - min(r.size for r in pieces) <= 1
    # The big range takes most of the pieces.
    assert len([r for r in out if r.partition == 0]) >= 7
    assert split_ranges(ranges, None) == [r for r in ranges if r.size]
    # Never more pieces than records.
    assert len(split_ranges([OffsetRange("t", 0, 0, 3)], 10)) == 3


def test_session_settings():
    assert auto_executor_cpu(2, 1, 2) == 0.5  # the probe's fix on a 2-CPU node
    assert auto_executor_cpu(1, 1, 2) == 1.0
    assert auto_executor_cpu(2, 2, 16) == 2.0
    assert auto_executor_cpu(4, 1, 2) == 0.25
    conf = spark_configs("10.0.0.1:6379", 2, 1, executor_cpu=0.5, configs={"spark.executor.extraJavaOptions": "-Dx=1", "spark.ui.enabled": True})
    assert conf["spark.ray.raydp_spark_executor.actor.resource.cpu"] == "0.5"
    assert conf["spark.executorEnv.RAY_ADDRESS"] == "10.0.0.1:6379"
    assert conf["spark.ui.enabled"] == "true"
    for key in ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions", "spark.ray.raydp_app_master.extraJavaOptions"):
        assert all(opt in conf[key] for opt in JAVA_OPTIONS)
    assert conf["spark.executor.extraJavaOptions"].endswith("-Dx=1")


def _log(*batches: bytes) -> bytes:
    """Batches stamped with consecutive offsets, as a leader returns them."""
    out, offset = [], 0
    for b in batches:
        h = records.read_header(b)
        out.append(records.stamp(b, offset, 3))
        offset += h.record_count
    return b"".join(out)


def test_records_to_arrow_trims_to_the_range_and_mixes_batch_shapes():
    plain = records.build_batch_columns([b"a", b"b", b"c"], timestamp_ms=1000)
    keyed = records.build_batch_columns([b"d", None], keys=[b"k1", None], headers=[[("h", b"1")], None], timestamps=[2000, 2001])
    appended = records.set_log_append_time(records.build_batch_columns([b"e", b"f"], timestamp_ms=5), 9000)
    data = _log(plain, keyed, appended)
    rb = tasks.records_to_arrow("topic-x", 4, data, 1, 6)
    assert rb.schema == tasks.ARROW_SCHEMA
    rows = rb.to_pylist()
    assert [r["offset"] for r in rows] == [1, 2, 3, 4, 5]
    assert [r["value"] for r in rows] == [b"b", b"c", b"d", None, b"e"]
    assert [r["key"] for r in rows] == [None, None, b"k1", None, None]
    assert [r["headers"] for r in rows] == [[], [], [{"key": "h", "value": b"1"}], [], []]
    assert [int(r["timestamp"].timestamp() * 1000) for r in rows] == [1000, 1000, 2000, 2001, 9000]
    assert [r["timestampType"] for r in rows] == [0, 0, 0, 0, 1]
    assert {r["topic"] for r in rows} == {"topic-x"} and {r["partition"] for r in rows} == {4}
    assert tasks.records_to_arrow("t", 0, data, 7, 9) is None


def test_encode_and_header_columns():
    strings = pa.array(["x", None, "é"])
    assert tasks.encode_column(strings, "value") == [b"x", None, "é".encode()]
    structs = pa.array([{"a": 1, "b": "z"}, None])
    assert [json.loads(v) if v else v for v in tasks.encode_column(structs, "value")] == [{"a": 1, "b": "z"}, None]
    import msgpack

    assert msgpack.unpackb(tasks.encode_column(structs, "value", "msgpack")[0]) == {"a": 1, "b": "z"}
    with pytest.raises(TypeError, match="must be binary, string"):
        tasks.encode_column(pa.array([1, 2]), "value")
    as_list = pa.array([[{"key": "a", "value": b"1"}, {"key": "b", "value": None}], [], None], type=pa.list_(tasks.HEADER_TYPE))
    assert tasks.headers_column(as_list) == [[("a", b"1"), ("b", None)], None, None]
    as_map = pa.array([[("a", "1")], None, [("c", "3"), ("d", "4")]], type=pa.map_(pa.string(), pa.string()))
    assert tasks.headers_column(as_map) == [[("a", b"1")], None, [("c", b"3"), ("d", b"4")]]
    # A slice keeps its own rows.
    assert tasks.headers_column(as_map.slice(2)) == [[("c", b"3"), ("d", b"4")]]


def test_null_partitions_are_filled_deterministically():
    keys = [b"k1", None, b"k2", None]
    out = tasks._fill_partitions([2, None, None, None], keys, 5, seed=7)
    assert out == [2, (7 + 1) % 5, partition_for_key(b"k2", 5), (7 + 3) % 5]
    assert out == tasks._fill_partitions([2, None, None, None], keys, 5, seed=7)


def test_records_to_arrow_skips_a_batch_emptied_by_the_cleaner():
    first = records.stamp(records.build_batch_columns([b"a"], timestamp_ms=1000), 0, 3)
    emptied = records.empty_batch(records.read_header(records.stamp(records.build_batch_columns([b"b", b"c"], timestamp_ms=1000), 1, 3)))
    last = records.stamp(records.build_batch_columns([b"d"], timestamp_ms=1000), 3, 3)
    data = first + emptied + last
    assert [r["offset"] for r in tasks.records_to_arrow("t", 0, data, 0, 4).to_pylist()] == [0, 3]
    assert [r["offset"] for r in tasks.records_to_arrow("t", 0, data, 2, 4).to_pylist()] == [3]
    assert tasks.records_to_arrow("t", 0, data, 1, 3) is None


def test_executors_get_the_drivers_ray_token_authentication(monkeypatch):
    """Spark executors join the driver's Ray: its token authentication mode, and the token's
    path (or value) when the driver was given it that way (issue 36)."""
    import importlib

    S = importlib.import_module("kcoord.spark.session")

    monkeypatch.setattr(S, "token_auth_enabled", lambda: True)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", "/etc/ray/token")
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    assert S.ray_auth_configs() == {"spark.executorEnv.RAY_AUTH_MODE": "token", "spark.executorEnv.RAY_AUTH_TOKEN_PATH": "/etc/ray/token"}
    monkeypatch.setattr(S, "token_auth_enabled", lambda: False)
    assert S.ray_auth_configs() == {"spark.executorEnv.RAY_AUTH_MODE": "disabled"}


def test_partition_number_takes_ints_and_their_strings_only() -> None:
    from kcoord.spark.offsets import partition_number

    assert [partition_number(k) for k in (0, 7, "3", " 4 ")] == [0, 7, 3, 4]
    assert [partition_number(k) for k in (True, "1.0", "x", None, "")] == [None] * 5


def test_read_tasks_one_per_rows_per_task_within_the_ranges():
    from kcoord.spark.frames import ROWS_PER_READ_TASK, read_tasks

    assert read_tasks(0, 3) == 1  # a batch that only commits positions still needs a task count
    assert read_tasks(800, 3) == 1  # a small micro-batch: one task, one output transaction
    assert read_tasks(ROWS_PER_READ_TASK, 3) == 1
    assert read_tasks(ROWS_PER_READ_TASK + 1, 3) == 2
    assert read_tasks(10 * ROWS_PER_READ_TASK, 3) == 3  # never more than one task per range
    assert read_tasks(250, 6, rows_per_task=100) == 3


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2"])
def test_read_plan_refuses_a_bad_task_count(bad):
    from kcoord.spark.frames import read_plan
    from kcoord.spark.offsets import OffsetPlan

    plan = OffsetPlan("t", {}, {}, {}, {}, ranges=[OffsetRange("t", 0, 0, 10)])
    with pytest.raises(ValueError, match="tasks must be a positive int"):
        read_plan(None, None, plan, tasks=bad)
