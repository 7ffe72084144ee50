"""The file log: append/read, rolls, retention, truncation, config. Reopening and
recovery from damage are in test_log_recovery.py. Tests taking ``where`` run on the real
disk and on the simulated one (tests/sim/disk.py)."""

from __future__ import annotations

import pytest

from kcoord.log import LogConfig, OffsetOutOfRange
from kcoord.protocol.errors import ErrorCode, KafkaError
from kcoord.records import HEADER_SIZE, CorruptRecordError, decode_batch, stamp

from log_helpers import NOW, batch, fill, headers, where  # noqa: F401  (where: a fixture)


# -- append / read -------------------------------------------------------------------------


def test_leader_append_stamps_offsets_and_epochs(where):
    log = where.open()
    infos = [log.append_as_leader(batch(n), leader_epoch=e, now_ms=NOW) for n, e in [(3, 0), (1, 0), (5, 2)]]
    assert [(i.base_offset, i.last_offset, i.record_count) for i in infos] == [(0, 2, 3), (3, 3, 1), (4, 8, 5)]
    assert all(not i.duplicate and i.log_append_time == NOW for i in infos)
    assert log.log_end_offset == 9
    data = log.read(0, 1 << 20)
    assert [(h.base_offset, h.leader_epoch, h.record_count) for h in headers(data)] == [(0, 0, 3), (3, 0, 1), (4, 2, 5)]
    assert log.epoch_cache.entries == [(0, 0), (2, 4)]
    # the record payload is untouched and still decodes
    assert [r.offset for r in decode_batch(data, 0).records()] == [0, 1, 2]


def test_read_returns_the_batch_containing_the_offset(where):
    log = where.open()
    stored = fill(log, 5)  # offsets 0..14, 3 per batch
    assert log.read(4, 1 << 20) == b"".join(stored[1:])
    assert log.read(3, 1 << 20) == b"".join(stored[1:])
    assert log.read(14, 1 << 20) == stored[4]
    assert log.read(15, 1 << 20) == b""  # LEO


def test_read_max_bytes_and_at_least_one_batch(where):
    log = where.open()
    stored = fill(log, 4)
    size = len(stored[0])
    assert log.read(0, size) == stored[0]
    assert log.read(0, size * 2 - 1) == stored[0]
    assert log.read(0, size * 2) == stored[0] + stored[1]
    assert log.read(0, 1) == stored[0]  # bigger than max_bytes, but the first batch always comes
    assert log.read(0, 0) == stored[0]
    assert log.read(3, 10) == stored[1]


def test_read_max_offset(where):
    log = where.open()
    stored = fill(log, 4)  # batches end at 2, 5, 8, 11
    assert log.read(0, 1 << 20, max_offset=6) == stored[0] + stored[1]
    assert log.read(0, 1 << 20, max_offset=5) == stored[0]  # batch 3..5 reaches offset 5
    assert log.read(0, 1 << 20, max_offset=2) == b""  # first batch not entirely below
    assert log.read(6, 1 << 20, max_offset=6) == b""
    assert log.read(0, 1, max_offset=3) == stored[0]
    assert log.read(0, 1 << 20, max_offset=100) == b"".join(stored)


def test_offset_out_of_range(where):
    log = where.open()
    fill(log, 2)
    with pytest.raises(OffsetOutOfRange) as err:
        log.read(7, 100)
    assert err.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert "[0, 6]" in str(err.value)
    assert isinstance(err.value, KafkaError)
    log.truncate_fully_and_start_at(50)
    with pytest.raises(OffsetOutOfRange):
        log.read(49, 100)
    assert log.read(50, 100) == b""


def test_roll_by_size_and_read_across_segments(where):
    log = where.open(segment_bytes=1000)
    stored = fill(log, 20)
    segs = log.segments
    assert len(segs) == 4  # 192-byte batches, 5 to a segment
    assert all(s.size_bytes <= 1000 for s in segs)
    assert [s.base_offset for s in segs[1:]] == [s.next_offset for s in segs[:-1]]
    assert log.read(0, 1 << 20) == b"".join(stored)
    for i, want in enumerate(stored):  # every batch from its own offsets, across boundaries
        for off in range(3 * i, 3 * i + 3):
            assert log.read(off, 1) == want
    assert log.size_bytes == sum(len(s) for s in stored)
    # reading continues into the next segment while max_bytes allows
    two = log.read(segs[1].base_offset - 3, 2 * len(stored[0]))
    assert headers(two)[1].base_offset == segs[1].base_offset


def test_roll_by_time(where):
    log = where.open(segment_ms=100)
    log.append_as_leader(batch(), leader_epoch=0, now_ms=NOW)
    log.append_as_leader(batch(), leader_epoch=0, now_ms=NOW + 99)
    assert len(log.segments) == 1
    log.append_as_leader(batch(), leader_epoch=0, now_ms=NOW + 100)
    assert [s.base_offset for s in log.segments] == [0, 6]
    assert log.segments[1].created_ms == NOW + 100
    log.append_as_leader(batch(), leader_epoch=0, now_ms=NOW + 150)
    assert len(log.segments) == 2


def test_message_too_large(where):
    log = where.open(max_batch_bytes=500)
    with pytest.raises(KafkaError) as err:
        log.append_as_leader(batch(20), leader_epoch=0)
    assert err.value.code == ErrorCode.MESSAGE_TOO_LARGE
    assert log.log_end_offset == 0 and log.size_bytes == 0


def test_corrupt_crc_is_refused_and_nothing_appended(where):
    log = where.open()
    fill(log, 1)
    bad = bytearray(batch())
    bad[HEADER_SIZE + 3] ^= 0xFF
    with pytest.raises(CorruptRecordError) as err:
        log.append_as_leader(bytes(bad), leader_epoch=0)
    assert err.value.code == ErrorCode.CORRUPT_MESSAGE
    follower_data = stamp(batch(), 3, 0) + stamp(bytes(bad), 6, 0)
    with pytest.raises(CorruptRecordError):
        log.append_as_follower(follower_data)
    assert log.log_end_offset == 3
    assert len(headers(log.read(0, 1 << 20))) == 1


def test_leader_append_takes_exactly_one_batch(where):
    log = where.open()
    with pytest.raises(KafkaError) as err:
        log.append_as_leader(batch() + batch(), leader_epoch=0)
    assert err.value.code == ErrorCode.INVALID_RECORD
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(batch()[:-1], leader_epoch=0)


def test_leader_append_with_stale_epoch_is_fenced(where):
    log = where.open()
    log.append_as_leader(batch(), leader_epoch=3)
    with pytest.raises(KafkaError) as err:
        log.append_as_leader(batch(), leader_epoch=2)
    assert err.value.code == ErrorCode.FENCED_LEADER_EPOCH
    assert log.log_end_offset == 3


def test_follower_append_keeps_bytes_and_checks_contiguity(where):
    leader = where.open("leader", segment_bytes=700)
    stored = fill(leader, 6, epoch=4)
    follower = where.open("follower", segment_bytes=700)
    chunk = leader.read(0, 3 * len(stored[0]))
    info = follower.append_as_follower(chunk)
    assert (info.base_offset, info.last_offset, info.record_count, info.size_bytes) == (0, 8, 9, len(chunk))
    with pytest.raises(KafkaError) as err:  # before our LEO (a gap after it is allowed: compaction)
        follower.append_as_follower(stored[2])
    assert err.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    with pytest.raises(KafkaError) as err:  # going back between batches
        follower.append_as_follower(stored[3] + stored[2])
    assert err.value.code == ErrorCode.INVALID_RECORD
    with pytest.raises(CorruptRecordError):  # torn
        follower.append_as_follower(stored[3] + stored[4][:-5])
    with pytest.raises(KafkaError):
        follower.append_as_follower(b"")
    assert follower.log_end_offset == 9
    follower.append_as_follower(b"".join(stored[3:]))  # splits across segments as needed
    assert follower.read(0, 1 << 20) == leader.read(0, 1 << 20)
    assert all(s.size_bytes <= 700 for s in follower.segments)
    assert follower.epoch_cache.entries == [(4, 0)]


def test_follower_append_can_skip_crc(where):
    log = where.open()
    bad = bytearray(stamp(batch(), 0, 1))
    bad[HEADER_SIZE] ^= 1
    with pytest.raises(CorruptRecordError):
        log.append_as_follower(bytes(bad))
    log.append_as_follower(bytes(bad), verify_crc=False)
    assert log.log_end_offset == 3


# -- idempotence on the leader path --------------------------------------------------------


def test_duplicate_batch_is_not_appended_again(where):
    log = where.open()
    first = batch(2, producer_id=9, producer_epoch=0, base_sequence=0)
    second = batch(2, producer_id=9, producer_epoch=0, base_sequence=2)
    assert log.append_as_leader(first, leader_epoch=0).base_offset == 0
    assert log.append_as_leader(second, leader_epoch=0).base_offset == 2
    dup = log.append_as_leader(first, leader_epoch=0)
    assert dup.duplicate and (dup.base_offset, dup.last_offset) == (0, 1)
    assert log.log_end_offset == 4
    with pytest.raises(KafkaError) as err:
        log.append_as_leader(batch(2, producer_id=9, producer_epoch=0, base_sequence=7), leader_epoch=0)
    assert err.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    log.append_as_leader(batch(1, producer_id=9, producer_epoch=1, base_sequence=0), leader_epoch=0)
    with pytest.raises(KafkaError) as err:
        log.append_as_leader(batch(1, producer_id=9, producer_epoch=0, base_sequence=4), leader_epoch=0)
    assert err.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert log.log_end_offset == 5


# -- retention -----------------------------------------------------------------------------


def test_retention_by_size(where):
    log = where.open(segment_bytes=1000, retention_bytes=2500)
    stored = fill(log, 20)
    before = log.segments
    deleted = log.apply_retention(NOW)
    assert deleted > 0
    after = log.segments
    assert after == before[deleted:]
    assert log.size_bytes >= 2500 and log.size_bytes - after[0].size_bytes < 2500
    assert log.log_start_offset == after[0].base_offset
    with pytest.raises(OffsetOutOfRange):
        log.read(0, 100)
    i = log.log_start_offset // 3
    assert log.read(log.log_start_offset, 1 << 20) == b"".join(stored[i:])
    assert not where.exists(f"{0:020d}.log")


def test_retention_by_time_and_high_watermark(where):
    log = where.open(segment_bytes=700, retention_ms=1000)
    for i in range(12):
        log.append_as_leader(batch(ts=NOW + 100 * i), leader_epoch=0, now_ms=NOW + 100 * i)
    segs = log.segments
    assert len(segs) >= 4
    assert log.apply_retention(NOW + 1000) == 0  # nothing older than 1000 ms yet
    cutoff = NOW + 2000
    # segments whose newest record is older than cutoff - 1000 can go, but the HW pins them
    expired = [s for s in segs[:-1] if cutoff - s.max_timestamp > 1000]
    assert len(expired) >= 2
    hw = expired[0].next_offset
    assert log.apply_retention(cutoff, high_watermark=hw) == 1
    assert log.log_start_offset == hw
    assert log.apply_retention(cutoff) == len(expired) - 1
    assert log.log_start_offset == expired[-1].next_offset
    # the active segment is never deleted, even when everything is expired
    log.apply_retention(NOW + 10**9)
    assert len(log.segments) == 1 and log.log_end_offset == 36


def test_retention_advances_epoch_cache_start(where):
    log = where.open(segment_bytes=700, retention_bytes=0)
    fill(log, 4, epoch=1)
    fill(log, 4, epoch=2)
    assert [s.base_offset for s in log.segments] == [0, 9, 18]  # 3 batches of 3 per segment
    assert log.epoch_cache.entries == [(1, 0), (2, 12)]
    assert log.apply_retention(NOW) == 2
    assert log.log_start_offset == 18
    assert log.epoch_cache.entries == [(2, 18)]  # epoch 1 is gone, epoch 2 clipped
    log.close()
    assert where.open().epoch_cache.entries == [(2, 18)]


# -- truncation ----------------------------------------------------------------------------


def test_truncate_mid_segment(where):
    log = where.open()
    stored = fill(log, 5)
    log.checkpoint_high_watermark(15)
    log.truncate_to(7)  # inside batch 6..8: that batch goes entirely
    assert log.log_end_offset == 6
    assert log.high_watermark == 6
    assert log.read(0, 1 << 20) == b"".join(stored[:2])
    assert log.size_bytes == sum(len(s) for s in stored[:2])
    log.truncate_to(100)  # no-op beyond LEO
    assert log.log_end_offset == 6
    fill(log, 1)
    assert log.log_end_offset == 9


def test_truncate_at_and_across_segment_boundaries(where):
    log = where.open(segment_bytes=1000)
    stored = fill(log, 20)
    segs = log.segments
    boundary = segs[2].base_offset
    log.truncate_to(boundary)
    assert log.log_end_offset == boundary
    assert [s.base_offset for s in log.segments] == [s.base_offset for s in segs[:3]]
    assert log.segments[-1].size_bytes == 0
    assert log.read(0, 1 << 20) == b"".join(stored[: boundary // 3])
    log.truncate_to(4)  # across segments, mid batch
    assert log.log_end_offset == 3
    assert len(log.segments) == 1
    assert where.names(".log") == [f"{0:020d}.log"]
    fill(log, 3)
    assert log.log_end_offset == 12
    log.truncate_to(0)
    assert log.log_end_offset == 0 and log.size_bytes == 0


def test_truncation_fixes_epoch_cache_and_producer_state(where):
    log = where.open(segment_bytes=600)
    for seq in range(0, 10, 2):
        log.append_as_leader(batch(2, producer_id=5, producer_epoch=0, base_sequence=seq), leader_epoch=1)
    for seq in range(10, 14, 2):
        log.append_as_leader(batch(2, producer_id=5, producer_epoch=0, base_sequence=seq), leader_epoch=3)
    assert log.epoch_cache.entries == [(1, 0), (3, 10)]
    log.truncate_to(9)
    assert log.epoch_cache.entries == [(1, 0)]
    assert log.log_end_offset == 8
    entry = log.producer_state.get(5)
    assert entry.last_seq == 7 and entry.batches[-1].last_offset == 7
    # the producer's retry of sequence 8..9 is now new, not a duplicate
    info = log.append_as_leader(batch(2, producer_id=5, producer_epoch=0, base_sequence=8), leader_epoch=4)
    assert not info.duplicate and info.base_offset == 8


def test_truncate_fully_and_start_at(where):
    log = where.open(segment_bytes=800)
    fill(log, 10, epoch=2)
    log.checkpoint_high_watermark(20)
    log.truncate_fully_and_start_at(1000)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (1000, 1000, 1000)
    assert log.size_bytes == 0 and log.epoch_cache.entries == [] and len(log.producer_state) == 0
    assert log.read(1000, 10) == b""
    stored = fill(log, 2, epoch=3)
    assert log.read(1000, 1 << 20) == b"".join(stored)
    assert log.epoch_cache.entries == [(3, 1000)]
    log.close()
    log = where.open()
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (1000, 1006, 1000)
    log.truncate_fully_and_start_at(0)
    assert log.log_end_offset == 0


# -- config --------------------------------------------------------------------------------


def test_config_from_topic_config():
    cfg = LogConfig.from_topic_config(
        {"segment.bytes": "1048576", "retention.ms": -1, "flush.messages": "1", "flush.ms": "", "cleanup.policy": "delete"}
    )
    assert cfg.segment_bytes == 1 << 20 and cfg.retention_ms == -1 and cfg.flush_messages == 1 and cfg.flush_ms is None
    assert LogConfig.from_topic_config({"flush.messages": str(2**63 - 1)}).flush_messages is None
    assert LogConfig.from_topic_config({}) == LogConfig()
    assert LogConfig.from_topic_config(cfg.to_topic_config()) == cfg


@pytest.mark.parametrize(
    "key,value",
    [("segment.bytes", "abc"), ("segment.bytes", "0"), ("segment.bytes", str(2**31)), ("retention.ms", "-2"),
     ("max.message.bytes", True), ("flush.messages", "0"), ("index.interval.bytes", 1.5), ("segment.ms", "")],
)
def test_config_bad_values_name_the_key(key, value):
    with pytest.raises(KafkaError) as err:
        LogConfig.from_topic_config({key: value})
    assert err.value.code == ErrorCode.INVALID_CONFIG and key in str(err.value)



def _truncate_at_the_log_end_drops_epochs_opened_there(log) -> None:
    fill(log, 2, epoch=1)  # offsets 0..5 in epoch 1
    log.epoch_cache.assign(4, 6)  # leader at epoch 4 from offset 6, nothing written yet
    assert log.truncate_to(6) is False
    assert log.epoch_cache.entries == [(1, 0)]
    log.epoch_cache.assign(5, 6)
    assert log.truncate_to(100) is False  # past the log end: as at the log end
    assert log.epoch_cache.entries == [(1, 0)] and log.log_end_offset == 6
    assert log.truncate_to(3) is True
    assert log.epoch_cache.entries == [(1, 0)] and log.log_end_offset == 3


def test_truncate_at_the_log_end_still_drops_epochs_opened_there(where):
    """An epoch this replica opened as leader at its log end without writing in it must go
    when a follower truncates to that offset, though no record goes (Kafka's truncateTo
    always truncates the epoch cache). truncate_to used to return early, and its caller
    had to remember to truncate the cache itself."""
    _truncate_at_the_log_end_drops_epochs_opened_there(where.open())


def test_truncate_at_the_log_end_still_drops_epochs_opened_there_in_memory():
    from kcoord.log import MemoryLog

    _truncate_at_the_log_end_drops_epochs_opened_there(MemoryLog(LogConfig()))


# -- idempotent producers across restarts ------------------------------------------------


@pytest.mark.parametrize("from_snapshot", [True, False], ids=["snapshot", "rebuilt"])
def test_the_last_five_batches_of_a_producer_stay_duplicates_across_a_reopen(where, from_snapshot):
    """What producer snapshots hold: every producer's last five batches, so that a retry of
    any of them is still answered as a duplicate with its original offsets after a restart,
    whether the state comes from the snapshot or is rebuilt from the batches."""
    from kcoord.log.checkpoint import PRODUCER_SNAPSHOT_SUFFIX

    log = where.open()
    sent = [batch(2, producer_id=5, producer_epoch=0, base_sequence=2 * i) for i in range(7)]
    offsets = [log.append_as_leader(b, leader_epoch=0, now_ms=NOW).base_offset for b in sent]
    log.close()
    if not from_snapshot:
        for name in where.names(PRODUCER_SNAPSHOT_SUFFIX):
            where.unlink(name)
    log = where.open()
    for b, offset in list(zip(sent, offsets))[2:]:
        info = log.append_as_leader(b, leader_epoch=0, now_ms=NOW)
        assert info.duplicate and (info.base_offset, info.last_offset) == (offset, offset + 1)
    for b in sent[:2]:  # older than the five: Kafka answers OUT_OF_ORDER_SEQUENCE_NUMBER
        with pytest.raises(KafkaError) as err:
            log.append_as_leader(b, leader_epoch=0, now_ms=NOW)
        assert err.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log.log_end_offset == 14


def test_a_producer_snapshot_in_the_first_format_still_loads(where):
    """Snapshots written so far (version 0: per producer its epoch and last batches as
    [first_seq, last_seq, base_offset, last_offset]) keep loading."""
    import msgpack

    from kcoord.log.checkpoint import PRODUCER_SNAPSHOT_SUFFIX

    log = where.open()
    log.append_as_leader(batch(2, producer_id=9, producer_epoch=3, base_sequence=0), leader_epoch=0, now_ms=NOW)
    log.close()
    (name,) = where.names(PRODUCER_SNAPSHOT_SUFFIX)
    old = msgpack.packb({"version": 0, "producers": {9: {"epoch": 3, "batches": [[0, 1, 0, 1]]}, 4: {"epoch": 0, "batches": [[7, 7, 0, 0]]}}})
    where.write_bytes(name, old)
    log = where.open()
    assert log.producer_state.get(4).last_seq == 7  # from the file, not from the batches
    assert log.append_as_leader(batch(2, producer_id=9, producer_epoch=3, base_sequence=0), leader_epoch=0, now_ms=NOW).duplicate
