"""Partitioners without Ray: Kafka's murmur2 (Java client vectors), the vectorised hash, and
the built-in/user partitioner names."""

from __future__ import annotations

import os
import random

import pytest

from kcoord.client.producer import partitioner as part

# org.apache.kafka.common.utils.UtilsTest#testMurmur2 (Apache Kafka, clients module).
JAVA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize("key,expected", sorted(JAVA_MURMUR2.items()))
def test_murmur2_matches_the_java_client(key, expected):
    assert part.murmur2(key) == expected
    assert part.murmur2_unsigned(key) == expected & 0xFFFFFFFF


@pytest.mark.parametrize("key,expected", sorted(JAVA_MURMUR2.items()))
def test_partition_is_to_positive_murmur2_mod_n(key, expected):
    # BuiltInPartitioner.partitionForKey: Utils.toPositive(Utils.murmur2(key)) % numPartitions
    for n in (1, 2, 3, 6, 7, 12, 100):
        assert part.partition_for_key(key, n) == (expected & 0x7FFFFFFF) % n
    assert part.to_positive(expected) == expected & 0x7FFFFFFF


def test_to_positive_is_not_abs():
    # Integer.MIN_VALUE maps to 0 and -1 to Integer.MAX_VALUE, unlike abs().
    assert part.to_positive(-(2**31)) == 0
    assert part.to_positive(-1) == 2**31 - 1
    # A negative hash must not be folded with abs(): "foobar" hashes negative.
    h = JAVA_MURMUR2[b"foobar"]
    assert part.partition_for_key(b"foobar", 7) == (h & 0x7FFFFFFF) % 7 != abs(h) % 7


def test_empty_key_hashes_like_java():
    # No Java vector for b""; the algorithm reduces to the finaliser over seed ^ 0.
    assert part.murmur2_unsigned(b"") == part.murmur2_many([b""] * 100)[0]


def test_vectorised_hash_equals_scalar_for_all_lengths():
    rng = random.Random(7)
    keys = [os.urandom(rng.randrange(0, 70)) for _ in range(3000)] + list(JAVA_MURMUR2)
    assert part.murmur2_many(keys) == [part.murmur2_unsigned(k) for k in keys]
    assert part.partitions_for_keys(keys, 6) == [part.partition_for_key(k, 6) for k in keys]


def test_vectorised_hash_of_short_lists_and_java_vectors():
    keys = list(JAVA_MURMUR2)
    assert part.murmur2_many(keys) == [v & 0xFFFFFFFF for v in JAVA_MURMUR2.values()]
    many = keys * 20  # above the numpy threshold
    assert part.murmur2_many(many) == [JAVA_MURMUR2[k] & 0xFFFFFFFF for k in many]


def test_key_hash_cache_is_bounded_and_correct():
    cache = part.KeyHashCache(limit=4)
    for k in list(JAVA_MURMUR2) * 3:
        assert cache.partition(k, 6) == part.partition_for_key(k, 6)
    assert len(cache._cache) <= 4


def test_partitioner_names_and_callables():
    assert part.resolve(None) == part.DEFAULT
    assert part.resolve("murmur2") == part.DEFAULT
    assert part.resolve("round_robin") == part.ROUND_ROBIN

    def mine(key, all_partitions, available):
        return 0

    assert part.resolve(mine) is mine
    with pytest.raises(ValueError, match="partitioner must be"):
        part.resolve("consistent-hash")
    with pytest.raises(ValueError, match="partitioner must be"):
        part.resolve(42)
