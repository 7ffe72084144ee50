"""``kcoord consume``'s output formats and ``--offset`` rules, and ``produce``'s headers:
pure functions, checked byte for byte."""

from __future__ import annotations

import json

import pytest

from kcoord.cli.formats import StartOffset, compile_format, parse_headers, parse_offset, record_json, start_positions
from kcoord.client.types import ConsumerRecord


def rec(key=b"k1", value=b"v\xff1", headers=None):
    return ConsumerRecord("t", 2, 41, 1700000000123, 0, key, value, headers or [("h", b"x"), ("h", b"y")])


def test_format_tokens_and_escapes_are_bytes_exact():
    r = rec()
    assert compile_format("%t/%p@%o %T %k=%s|%v (%K,%S) [%h] 100%%\\n")(r) == b"t/2@41 1700000000123 k1=v\xff1|v\xff1 (2,3) [h=x,h=y] 100%\n"
    assert compile_format("%k\\t%s\\r\\\\")(rec(key=None, value=None)) == b"\t\r\\"
    assert compile_format("%K %S")(rec(key=None, value=None)) == b"-1 -1"


@pytest.mark.parametrize("fmt", ["%x", "value %", "%s %q"])
def test_unknown_format_token_is_named(fmt):
    with pytest.raises(ValueError, match="unknown format token"):
        compile_format(fmt)


def test_json_line_keeps_text_as_text_and_bytes_as_base64():
    doc = json.loads(record_json(rec(key="ключ".encode(), value=b"\x00\xff", headers=[("a", b"1")])))
    assert doc == {"topic": "t", "partition": 2, "offset": 41, "timestamp": 1700000000123, "key": "ключ", "value": {"base64": "AP8="}, "headers": [["a", "1"]]}
    assert json.loads(record_json(rec(key=None, value=None, headers=[])))["key"] is None


@pytest.mark.parametrize(
    "spec,want",
    [("earliest", StartOffset("earliest")), ("beginning", StartOffset("earliest")), ("END", StartOffset("latest")),
     ("7", StartOffset("absolute", 7)), ("-3", StartOffset("from-end", 3)), ("@1700000000000", StartOffset("timestamp", 1700000000000))],
)
def test_parse_offset(spec, want):
    assert parse_offset(spec) == want


@pytest.mark.parametrize("spec", ["", "soon", "@", "@-5", "1.5"])
def test_parse_offset_rejects_with_the_accepted_forms(spec):
    with pytest.raises(ValueError, match="earliest, latest, N, -N or @TIMESTAMP_MS"):
        parse_offset(spec)


def test_start_positions_clamp_to_the_log_like_kcat():
    earliest, latest = {0: 10, 1: 0}, {0: 20, 1: 3}
    assert start_positions(StartOffset("absolute", 15), earliest, latest) == {0: 15, 1: 3}
    assert start_positions(StartOffset("absolute", 2), earliest, latest) == {0: 10, 1: 2}
    assert start_positions(StartOffset("from-end", 5), earliest, latest) == {0: 15, 1: 0}
    assert start_positions(StartOffset("timestamp", 99), earliest, latest, {0: 12, 1: -1}) == {0: 12, 1: 3}
    assert start_positions(StartOffset("earliest"), earliest, latest) == {0: 10, 1: 0}
    assert start_positions(StartOffset("latest"), earliest, latest) == {0: 20, 1: 3}


def test_parse_headers():
    assert parse_headers(["a=1", "a=2", "b="]) == [("a", b"1"), ("a", b"2"), ("b", b"")]
    for bad in ("novalue", "=x"):
        with pytest.raises(ValueError, match="KEY=VALUE"):
            parse_headers([bad])


# -- groups reset-offsets: the plan ---------------------------------------------------------
from kcoord.cli.formats import ResetSpec, parse_datetime_ms, plan_reset  # noqa: E402

EARLIEST, LATEST = {0: 5, 1: 0}, {0: 50, 1: 10}


def test_plan_reset_to_the_ends_and_by_time():
    committed = {0: 20}
    assert plan_reset(ResetSpec("earliest"), EARLIEST, LATEST, committed) == {0: (20, 5), 1: (None, 0)}
    assert plan_reset(ResetSpec("latest"), EARLIEST, LATEST, committed) == {0: (20, 50), 1: (None, 10)}
    assert plan_reset(ResetSpec("timestamp", 123), EARLIEST, LATEST, committed, {0: 30, 1: -1}) == {0: (20, 30), 1: (None, 10)}


def test_plan_reset_shift_clamps_and_skips_partitions_without_a_commit():
    assert plan_reset(ResetSpec("shift", -100), EARLIEST, LATEST, {0: 20}) == {0: (20, 5), 1: (None, None)}
    assert plan_reset(ResetSpec("shift", 7), EARLIEST, LATEST, {0: 20, 1: 9}) == {0: (20, 27), 1: (9, 10)}


def test_plan_reset_explicit_offsets_must_be_in_the_log():
    assert plan_reset(ResetSpec("explicit", offsets=((1, 3),)), EARLIEST, LATEST, {1: 9}) == {1: (9, 3)}
    with pytest.raises(ValueError, match=r"offset 4 for partition 0 is outside \[5, 50\]"):
        plan_reset(ResetSpec("explicit", offsets=((0, 4),)), EARLIEST, LATEST, {})
    with pytest.raises(ValueError, match="no partition 2"):
        plan_reset(ResetSpec("explicit", offsets=((2, 0),)), EARLIEST, LATEST, {})


def test_parse_datetime_ms():
    assert parse_datetime_ms("2026-11-23T10:00:00Z") == 1795428000000
    assert parse_datetime_ms("2026-11-23T11:00:00+01:00") == 1795428000000
    with pytest.raises(ValueError, match="ISO 8601"):
        parse_datetime_ms("yesterday")
