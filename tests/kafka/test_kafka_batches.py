"""Kafka v2 batches stored as they came (magic 2) and converted where formats differ."""

from __future__ import annotations

import pytest

from kcoord import records as R
from kcoord.kafka import batches as B

RECS = [
    (
        b"k%d" % i if i % 2 else None,
        b"v" * 100 if i % 3 else None,
        [("h", b"x"), ("n", None)] if i % 5 == 0 else [],
        1_700_000_000_000 + i,
    )
    for i in range(300)
]


def rows(batch: bytes) -> list:
    return [(r.offset, r.key, r.value, list(r.headers), r.timestamp) for b in R.iter_batches(batch) for r in b.records()]


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_kafka_batch_decodes_to_the_same_records(codec):
    kb = R.stamp(B.build_kafka_batch(RECS, compression=codec, producer_id=7, producer_epoch=1, base_sequence=5), 100, 3)
    h = R.validate_batch(kb)
    assert (h.magic, h.producer_id, h.producer_epoch, h.base_sequence, h.base_offset, h.leader_epoch) == (2, 7, 1, 5, 100, 3)
    assert rows(kb) == [(100 + i, k, v, list(hs), t) for i, (k, v, hs, t) in enumerate(RECS)]


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_kcoord_batch_converts_to_kafka_with_offsets_producer_and_codec(codec):
    kc = R.stamp(R.build_batch(RECS, compression=codec, producer_id=9, producer_epoch=2, base_sequence=11), 50, 4)
    kafka = R.stamp(B.build_kafka_batch(RECS), 50 + len(RECS), 4)
    out = B.to_kafka(kc + kafka)
    heads = [h for _, h in R.iter_headers(out, check_crc=True)]
    assert [h.magic for h in heads] == [2, 2]
    h = heads[0]
    assert (h.base_offset, h.leader_epoch, h.producer_id, h.producer_epoch, h.base_sequence, h.compression) == (50, 4, 9, 2, 11, codec)
    assert out.endswith(kafka)  # Kafka batches pass through as bytes
    assert rows(out)[: len(RECS)] == rows(kc)


def test_log_append_time_survives_both_ways():
    kb = R.set_log_append_time(R.stamp(B.build_kafka_batch(RECS), 0, 0), 1_800_000_000_000)
    assert {r[4] for r in rows(kb)} == {1_800_000_000_000}
    assert R.read_header(kb).timestamp_type == R.LOG_APPEND_TIME
    kc = B.to_kafka(R.set_log_append_time(R.stamp(R.build_batch(RECS), 0, 0), 1_800_000_000_001))
    assert R.read_header(kc).timestamp_type == R.LOG_APPEND_TIME
    assert {r[4] for r in rows(kc)} == {1_800_000_000_001}


def test_wrong_crc32c_is_corrupt():
    bad = bytearray(B.build_kafka_batch(RECS))
    bad[-1] ^= 1
    with pytest.raises(R.CorruptRecordError, match="CRC"):
        R.validate_batch(bytes(bad))


def test_partial_trailing_batch_passes_through():
    kc = R.stamp(R.build_batch(RECS), 0, 0)
    out = B.to_kafka(kc + kc[:30])
    assert out.endswith(kc[:30]) and R.read_header(out).magic == 2
