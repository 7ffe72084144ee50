"""__consumer_offsets record format, coordinator placement, and the timer heap."""

from __future__ import annotations

import msgpack
import pytest

from kcoord.group.config import GroupConfig
from kcoord.group.placement import coordinator_for, java_string_hash
from kcoord.group.records import (
    GroupKey,
    GroupValue,
    MemberValue,
    OffsetKey,
    OffsetValue,
    decode_group_value,
    decode_key,
    decode_offset_value,
    decode_record,
    encode_group_value,
    encode_key,
    encode_offset_value,
    group_record,
    offset_record,
)
from kcoord.group.timers import Timers
from kcoord.protocol.errors import DecodeError, ErrorCode

# -- records -------------------------------------------------------------------------------


def test_offset_record_round_trip():
    key = OffsetKey("g", "t", 3)
    value = OffsetValue(42, "meta", 7, 1_000, 2_000)
    assert decode_key(encode_key(key)) == key
    assert decode_offset_value(encode_offset_value(value)) == value
    assert decode_record(*offset_record(key, value)) == (key, value)
    assert decode_record(*offset_record(key, None)) == (key, None)


def test_group_record_round_trip():
    members = [
        MemberValue("m1", "i1", "c1", "h1", 30_000, 10_000, b"sub", b"asg"),
        MemberValue("m2", None, "c2", "h2", 30_000, 10_000, b"", b""),
    ]
    value = GroupValue("consumer", 5, "range", "m1", 123, members)
    assert decode_group_value(encode_group_value(value)) == value
    assert decode_record(*group_record(GroupKey("g"), value)) == (GroupKey("g"), value)
    empty = GroupValue("consumer", 6, None, None, 456)
    assert decode_group_value(encode_group_value(empty)) == empty


def test_keys_are_canonical_bytes():
    # Compaction keeps the last value per key bytes: equal keys must pack identically and
    # the two kinds must never collide.
    assert encode_key(OffsetKey("g", "t", 0)) == encode_key(OffsetKey("g", "t", 0))
    assert encode_key(GroupKey("g")) != encode_key(OffsetKey("g", "", 0))
    assert msgpack.unpackb(encode_key(OffsetKey("g", "t", 1))) == [1, "g", "t", 1]
    assert msgpack.unpackb(encode_key(GroupKey("g"))) == [2, "g"]


def test_unknown_key_version_decodes_to_none():
    assert decode_key(msgpack.packb([7, "anything"])) is None
    assert decode_record(msgpack.packb([7]), b"whatever") is None


@pytest.mark.parametrize(
    "key",
    [b"\xc1", msgpack.packb("text"), msgpack.packb([]), msgpack.packb([1, "g", "t"]), msgpack.packb([1, "g", "t", "0"]),
     msgpack.packb([2, 5]), msgpack.packb(["1", "g"])],
)
def test_malformed_keys_are_corrupt(key):
    with pytest.raises(DecodeError) as info:
        decode_key(key)
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize(
    "value",
    [b"\xc1", msgpack.packb([1, 2]), msgpack.packb({"offset": 1}), msgpack.packb({"v": 1, "offset": "x"}),
     msgpack.packb({"v": 1, "offset": 1, "metadata": "", "leader_epoch": -1, "commit_ts": 0})],
)
def test_malformed_offset_values_are_corrupt(value):
    with pytest.raises(DecodeError) as info:
        decode_offset_value(value)
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE


def test_malformed_group_values_are_corrupt():
    good = msgpack.unpackb(encode_group_value(GroupValue("consumer", 1, "r", "m", 0, [
        MemberValue("m", None, "c", "h", 1, 1, b"", b"")])))
    for mutate in (
        lambda o: o.pop("generation"),
        lambda o: o.__setitem__("members", "nope"),
        lambda o: o["members"].__setitem__(0, 5),
        lambda o: o["members"][0].__setitem__("assignment", "str"),
    ):
        obj = msgpack.unpackb(msgpack.packb(good))
        mutate(obj)
        with pytest.raises(DecodeError):
            decode_group_value(msgpack.packb(obj, use_bin_type=True))


def test_values_ignore_fields_added_later():
    obj = msgpack.unpackb(encode_offset_value(OffsetValue(1, "", -1, 5)))
    obj["v"] = 2
    obj["new_field"] = True
    assert decode_offset_value(msgpack.packb(obj)) == OffsetValue(1, "", -1, 5)


# -- placement -----------------------------------------------------------------------------


def test_java_string_hash_matches_java():
    # Values of "...".hashCode() in Java.
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("test") == 3556498
    assert java_string_hash("hello world") == 1794106052
    assert java_string_hash("polygenelubricants") == -2147483648  # Integer.MIN_VALUE
    assert java_string_hash("é") == 233 and java_string_hash("😀") == 31 * 0xD83D + 0xDE00  # UTF-16 surrogates


def test_coordinator_for_is_stable_and_in_range():
    assert coordinator_for("polygenelubricants", 7) == 0  # Kafka's Utils.abs(MIN_VALUE) == 0
    assert coordinator_for("test", 50) == 3556498 % 50
    assert coordinator_for("hello world", 1) == 0
    seen = {coordinator_for(f"group-{i}", 8) for i in range(200)}
    assert seen == set(range(8))
    with pytest.raises(ValueError):
        coordinator_for("g", 0)


# -- timers --------------------------------------------------------------------------------


def test_timers_replace_cancel_and_pop_in_order():
    t = Timers()
    assert t.next_deadline() is None and t.pop_due(10**12) is None
    t.set("a", 30)
    t.set("b", 10)
    t.set("c", 20)
    t.set("a", 5)  # re-armed earlier
    t.cancel("c")
    assert t.next_deadline() == 5 and len(t) == 2 and "c" not in t and t.get("a") == 5
    assert t.pop_due(4) is None
    assert t.pop_due(100) == "a" and t.pop_due(100) == "b" and t.pop_due(100) is None


def test_timers_ties_pop_in_insertion_order_and_heap_stays_small():
    t = Timers()
    for k in ("x", "y", "z"):
        t.set(k, 7)
    assert [t.pop_due(7) for _ in range(3)] == ["x", "y", "z"]
    for i in range(10_000):  # a member heartbeating for a long time
        t.set("member", i)
    assert len(t._heap) < 200 and t.next_deadline() == 9_999


# -- config --------------------------------------------------------------------------------


def test_config_from_kafka_style_properties():
    cfg = GroupConfig.from_properties(
        {"group.initial.rebalance.delay.ms": "0", "offsets.retention.minutes": 5, "log.dirs": "/x", "group_max_size": 9}
    )
    assert cfg.group_initial_rebalance_delay_ms == 0 and cfg.offsets_retention_ms == 300_000
    assert cfg.group_max_size == 9 and cfg.group_min_session_timeout_ms == 6_000
