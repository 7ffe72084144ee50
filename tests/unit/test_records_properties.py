"""Property-based tests of the batch codec: round trips and corruption detection."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kcoord.records import (
    CRC_START,
    CorruptRecordError,
    build_batch,
    build_batch_columns,
    decode_batch,
    read_header,
    stamp,
    validate_batch,
)

FAST = settings(max_examples=150, deadline=None)

blobs = st.one_of(st.none(), st.binary(max_size=40))
header_lists = st.lists(st.tuples(st.text(max_size=8), st.binary(max_size=12)), max_size=3)
timestamps = st.integers(-(2**40), 2**42)  # ms around the epoch, both signs
record = st.tuples(blobs, blobs, header_lists, timestamps)
compression = st.sampled_from([0, 1])


@FAST
@given(st.lists(record, min_size=1, max_size=12), compression, st.integers(0, 2**40), st.integers(0, 2**31 - 1))
def test_round_trip(recs, codec, base_offset, epoch):
    data = stamp(build_batch(recs, compression=codec), base_offset, epoch)
    h = validate_batch(data)
    assert (h.base_offset, h.leader_epoch, h.record_count, h.compression) == (base_offset, epoch, len(recs), codec)
    assert h.first_timestamp == recs[0][3] and h.max_timestamp == max(r[3] for r in recs)
    out = decode_batch(data).records()
    assert [(r.offset, r.key, r.value, list(r.headers), r.timestamp) for r in out] == [
        (base_offset + i, k, v, hs, ts) for i, (k, v, hs, ts) in enumerate(recs)
    ]


@FAST
@given(
    st.lists(st.binary(max_size=30), min_size=1, max_size=20),
    st.booleans(),
    compression,
    st.integers(0, 2**31 - 1),
    st.integers(0, 2**15 - 1),
    st.integers(0, 2**31 - 100),
)
def test_columns_round_trip(values, with_keys, codec, pid, pepoch, seq):
    keys = [v[:3] or None for v in values] if with_keys else None
    data = build_batch_columns(values, keys, timestamp_ms=123, compression=codec,
                               producer_id=pid, producer_epoch=pepoch, base_sequence=seq)
    h = read_header(data)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (pid, pepoch, seq)
    batch = decode_batch(data)
    assert batch.values == values
    assert [r.key for r in batch.records()] == (keys or [None] * len(values))
    assert all(r.timestamp == 123 for r in batch.records())


@FAST
@given(st.lists(record, min_size=1, max_size=6), compression, st.data())
def test_any_flipped_byte_after_the_stamped_fields_is_detected(recs, codec, data):
    batch = bytearray(build_batch(recs, compression=codec))
    pos = data.draw(st.integers(CRC_START, len(batch) - 1), label="position")
    flip = data.draw(st.integers(1, 255), label="xor")
    batch[pos] ^= flip
    try:
        validate_batch(bytes(batch))
    except CorruptRecordError:
        return
    raise AssertionError(f"flipping byte {pos} with {flip:#x} went unnoticed")


@FAST
@given(st.lists(record, min_size=1, max_size=6), st.data())
def test_truncated_batches_are_detected(recs, data):
    batch = build_batch(recs)
    cut = data.draw(st.integers(0, len(batch) - 1))
    try:
        validate_batch(batch[:cut])
    except CorruptRecordError:
        return
    raise AssertionError(f"batch cut to {cut} of {len(batch)} bytes went unnoticed")
