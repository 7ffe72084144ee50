"""__transaction_state records: round trips, tombstones, keys a newer kcoord wrote, the
coordinator-epoch fence record, and garbage -- each malformed record a DecodeError
(CORRUPT_MESSAGE), never anything else. Plus the state table and its transitions."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcoord.protocol.errors import DecodeError, ErrorCode
from kcoord.txn import records as r
from kcoord.txn.state import (
    MAX_PRODUCER_EPOCH,
    PERSISTED_STATES,
    VALID_PREVIOUS,
    IllegalStateTransition,
    TransactionState,
    check_transition,
    is_epoch_exhausted,
)

S = TransactionState

VALUE = r.TxnValue(
    producer_id=1000,
    producer_epoch=7,
    state=S.ONGOING,
    timeout_ms=60_000,
    last_update_ms=1_700_000_000_123,
    partitions=(("__consumer_offsets", 2), ("out", 0), ("out", 3)),
    start_ms=1_700_000_000_000,
    start_epoch=7,
    prev_producer_id=1000,
    next_producer_id=-1,
    last_producer_epoch=6,
    two_phase=False,
    bump_epoch=True,
)


def _value_obj(**changes):
    obj = msgpack.unpackb(r.encode_value(VALUE), raw=False)
    obj.update(changes)
    return obj


def test_record_round_trip_and_tombstone():
    key, value = r.txn_record("etl-1", VALUE)
    assert r.decode_record(key, value) == (r.TxnKey("etl-1"), VALUE)
    key, value = r.txn_record("etl-1", None)
    assert value is None and r.decode_record(key, value) == (r.TxnKey("etl-1"), None)
    # one logical key packs to one byte string (what compaction keys on)
    assert r.txn_record("etl-1", VALUE)[0] == r.txn_record("etl-1", None)[0] == msgpack.packb([1, "etl-1"])


@given(
    st.builds(
        r.TxnValue,
        producer_id=st.integers(0, 2**63 - 1),
        producer_epoch=st.integers(0, MAX_PRODUCER_EPOCH),
        state=st.sampled_from(sorted(PERSISTED_STATES, key=lambda s: s.kafka_id)),
        timeout_ms=st.integers(1, 2**31 - 1),
        last_update_ms=st.integers(0, 2**45),
        partitions=st.lists(st.tuples(st.text(min_size=1, max_size=8), st.integers(0, 10_000)), unique=True).map(lambda ps: tuple(sorted(ps))),
        start_ms=st.integers(-1, 2**45),
        start_epoch=st.integers(-1, MAX_PRODUCER_EPOCH),
        prev_producer_id=st.integers(-1, 2**63 - 1),
        next_producer_id=st.integers(-1, 2**63 - 1),
        last_producer_epoch=st.integers(-1, MAX_PRODUCER_EPOCH),
        two_phase=st.booleans(),
        bump_epoch=st.booleans(),
    )
)
def test_any_value_round_trips(value):
    assert r.decode_value(r.encode_value(value)) == value


def test_unknown_key_versions_and_the_coordinator_epoch_record_are_skipped():
    future = (msgpack.packb([9, "whatever", 1]), b"\xc1 anything")
    fence = r.coordinator_epoch_record(4, 17)
    assert r.decode_record(*future) is None and r.decode_record(*fence) is None
    assert r.replay([r.txn_record("a", VALUE), future, fence]) == {"a": VALUE}


def test_replay_keeps_the_last_record_of_each_key_and_tombstones_remove():
    later = r.TxnValue(1000, 8, S.EMPTY, 60_000, 5)
    log = [r.txn_record("a", VALUE), r.txn_record("b", VALUE), r.txn_record("a", later), r.txn_record("b", None)]
    assert r.replay(log) == {"a": later}
    assert r.replay(log + [r.txn_record("b", VALUE)]) == {"a": later, "b": VALUE}
    assert r.replay([r.txn_record("gone", None)]) == {}


def test_unknown_value_fields_are_ignored_and_versions_read_by_name():
    obj = _value_obj(v=2, from_the_future=[1, 2])
    assert r.decode_value(msgpack.packb(obj, use_bin_type=True)) == VALUE


GARBAGE_KEYS = [
    b"\xc1",  # not msgpack
    msgpack.packb("text"),
    msgpack.packb([]),
    msgpack.packb(["1", "x"]),
    msgpack.packb([1]),
    msgpack.packb([1, 5]),
    msgpack.packb([1, ""]),
    msgpack.packb([1, "x", "extra"]),
]


@pytest.mark.parametrize("key", GARBAGE_KEYS)
def test_malformed_keys_are_corrupt(key):
    with pytest.raises(DecodeError) as info:
        r.decode_record(key, None)
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE


GARBAGE_VALUES = [
    b"\xc1",
    b"",
    msgpack.packb([1, 2]),
    msgpack.packb({"pid": 1}),  # no version
    msgpack.packb(_value_obj(v="1")),
    msgpack.packb(_value_obj(state=99)),  # no such state
    msgpack.packb(_value_obj(state=S.DEAD.kafka_id)),  # never written: a tombstone instead
    msgpack.packb(_value_obj(state=S.PREPARE_EPOCH_FENCE.kafka_id)),  # a transition in flight
    msgpack.packb(_value_obj(pid=-1)),
    msgpack.packb(_value_obj(epoch=MAX_PRODUCER_EPOCH + 1)),
    msgpack.packb(_value_obj(epoch=-1)),
    msgpack.packb(_value_obj(pid="1000")),
    msgpack.packb(_value_obj(two_phase=1)),
    msgpack.packb(_value_obj(partitions=[["out"]])),
    msgpack.packb(_value_obj(partitions=[["out", -1]])),
    msgpack.packb(_value_obj(partitions=[[1, 0]])),
    msgpack.packb(_value_obj(partitions="out")),
    msgpack.packb({k: v for k, v in _value_obj().items() if k != "timeout_ms"}),
]


@pytest.mark.parametrize("value", GARBAGE_VALUES)
def test_malformed_values_are_corrupt(value):
    key = r.encode_key(r.TxnKey("a"))
    with pytest.raises(DecodeError) as info:
        r.decode_record(key, value)
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE
    with pytest.raises(DecodeError):
        r.replay([r.txn_record("ok", VALUE), (key, value)])


@given(st.binary(max_size=64), st.one_of(st.none(), st.binary(max_size=64)))
def test_any_bytes_decode_or_raise_decode_error(key, value):
    try:
        r.decode_record(key, value)
    except DecodeError as exc:
        assert exc.code == ErrorCode.CORRUPT_MESSAGE


# -- the states ------------------------------------------------------------------------------


def test_states_carry_kafkas_names_and_ids():
    assert [(s.value, s.kafka_id) for s in sorted(S, key=lambda s: s.kafka_id)] == [
        ("Empty", 0), ("Ongoing", 1), ("PrepareCommit", 2), ("PrepareAbort", 3),
        ("CompleteCommit", 4), ("CompleteAbort", 5), ("Dead", 6), ("PrepareEpochFence", 7),
    ]
    assert all(S.from_kafka_id(s.kafka_id) is s for s in S)
    with pytest.raises(ValueError):
        S.from_kafka_id(8)
    assert {s for s in S if s.expiration_allowed} == {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}


# Kafka 4.0's table, written out independently of the module's.
KAFKA_4_0 = {
    S.EMPTY: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.ONGOING: {S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.PREPARE_COMMIT: {S.ONGOING},
    S.PREPARE_ABORT: {S.ONGOING, S.PREPARE_EPOCH_FENCE, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.COMPLETE_COMMIT: {S.PREPARE_COMMIT},
    S.COMPLETE_ABORT: {S.PREPARE_ABORT},
    S.DEAD: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.PREPARE_EPOCH_FENCE: {S.ONGOING},
}


@pytest.mark.parametrize("target", list(S), ids=lambda s: s.value)
@pytest.mark.parametrize("current", list(S), ids=lambda s: s.value)
def test_every_transition_is_allowed_exactly_as_in_kafka(current, target):
    assert VALID_PREVIOUS[target] == KAFKA_4_0[target]
    if current in KAFKA_4_0[target]:
        check_transition(current, target)
    else:
        with pytest.raises(IllegalStateTransition):
            check_transition(current, target)


def test_a_new_id_starts_empty():
    check_transition(None, S.EMPTY)
    for target in set(S) - {S.EMPTY}:
        with pytest.raises(IllegalStateTransition):
            check_transition(None, target)


def test_epochs_run_out_one_before_the_maximum():
    assert not is_epoch_exhausted(MAX_PRODUCER_EPOCH - 2)
    assert is_epoch_exhausted(MAX_PRODUCER_EPOCH - 1) and is_epoch_exhausted(MAX_PRODUCER_EPOCH)
