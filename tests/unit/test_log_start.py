"""The log start offset (DeleteRecords, followers learning it), retention by policy,
segment.ms rolling on a timer and live config changes."""

from __future__ import annotations

import pytest

from kcoord.log import LogConfig, MemoryLog, OffsetOutOfRange
from kcoord.records import iter_records

from log_helpers import NOW, batch, fill, headers, where  # noqa: F401  (fixture)


def test_advance_log_start_offset_hides_records_and_survives_reopen(where):
    log = where.open("l", segment_bytes=700)
    fill(log, 12)  # 36 records, several segments
    log.checkpoint_high_watermark(36)
    assert log.advance_log_start_offset(20)
    assert log.log_start_offset == 20
    assert log.segments[0].base_offset <= 20 < log.segments[0].next_offset  # whole segments below it went
    with pytest.raises(OffsetOutOfRange) as err:
        log.read(19, 1 << 20)
    assert err.value.log_start_offset == 20
    recs = [r.offset for r in iter_records(log.read(20, 1 << 20), from_offset=20)]
    assert recs == list(range(20, 36))
    assert not log.advance_log_start_offset(10)  # never backwards
    log.close()
    again = where.open("l", segment_bytes=700)
    assert again.log_start_offset == 20
    # recovery after an unclean stop too
    again._mark_closed()
    again._release_storage()
    third = where.open("l", segment_bytes=700)
    assert third.log_start_offset == 20 and third.log_end_offset == 36
    third.close()


def test_log_start_is_clamped_to_the_log_end(where):
    log = where.open("l")
    fill(log, 2)
    log.advance_log_start_offset(100)
    assert log.log_start_offset == log.log_end_offset == 6
    log.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW)
    assert log.read(6, 1 << 20)


def test_retention_follows_cleanup_policy(where):
    for policy, deletes in (("delete", True), ("compact", False), ("compact,delete", True)):
        log = where.open(policy, segment_bytes=300, retention_bytes=300)
        fill(log, 10)
        log.update_config(LogConfig(segment_bytes=300, retention_bytes=300, cleanup_policy=policy, index_interval_bytes=256))
        log.checkpoint_high_watermark(log.log_end_offset)
        n = log.apply_retention(NOW, log.high_watermark)
        assert (n > 0) == deletes, policy
        assert (log.log_start_offset > 0) == deletes
        log.close()


def test_segment_ms_rolls_an_idle_segment_on_the_timer(where):
    log = where.open("l", segment_ms=1000)
    fill(log, 2)
    assert not log.maybe_roll(NOW + 999)
    assert log.maybe_roll(NOW + 1000)
    assert len(log.segments) == 2 and log.segments[-1].size_bytes == 0
    assert not log.maybe_roll(NOW + 5000)  # an empty active segment is not rolled
    # and time retention can now delete the idle data
    log.update_config(LogConfig(segment_ms=1000, retention_ms=10, index_interval_bytes=256))
    log.checkpoint_high_watermark(log.log_end_offset)
    assert log.apply_retention(NOW + 6000, log.high_watermark) == 1
    assert log.log_start_offset == log.log_end_offset == 6


def test_update_config_applies_without_reopening(where):
    log = where.open("l", max_batch_bytes=10_000)
    fill(log, 1)
    log.update_config(LogConfig(max_batch_bytes=50))
    with pytest.raises(Exception) as err:
        log.append_as_leader(batch(3), leader_epoch=0, now_ms=NOW)
    assert err.value.code == 10  # MESSAGE_TOO_LARGE
    log.update_config(LogConfig(cleanup_policy="compact"))
    with pytest.raises(Exception) as err:
        log.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW)  # no key
    assert err.value.code == 87


def test_a_new_follower_takes_the_batch_holding_the_leaders_log_start(where):
    leader = where.open("leader")
    fill(leader, 4)  # batches of 3: 0-2, 3-5, 6-8, 9-11
    leader.checkpoint_high_watermark(12)
    leader.advance_log_start_offset(4)  # inside batch 3-5
    follower = where.open("follower")
    follower.truncate_fully_and_start_at(leader.log_start_offset)  # what following.py does
    follower.append_as_follower(leader.read(4, 1 << 20), now_ms=NOW)
    assert follower.log_start_offset == 4 and follower.log_end_offset == 12
    assert [h.base_offset for h in headers(follower.read(4, 1 << 20))] == [3, 6, 9]
    follower.close()
    again = where.open("follower")
    assert again.log_start_offset == 4


def test_memory_log_moves_its_start_the_same_way():
    log = MemoryLog(LogConfig(segment_bytes=300), now_ms=NOW)
    fill(log, 10)
    log.checkpoint_high_watermark(30)
    assert log.advance_log_start_offset(17)
    assert log.log_start_offset == 17
    with pytest.raises(OffsetOutOfRange):
        log.read(16, 100)
    crashed = log.crash()
    assert crashed.log_start_offset == 17


def test_truncating_below_the_log_start_restarts_the_log_empty_there(where):
    """Sim seeds 2005, 2173, 2408, 4431: after an unclean election the new leader's log
    ended (40) below a follower's log start (68, a DeleteRecords followed). A truncation
    clamped to the log start kept the follower fetching past the leader's end forever.
    Kafka's truncateTo: below the log start the log restarts empty at the offset."""
    log = where.open("l", segment_bytes=700)
    fill(log, 12, epoch=1)  # 36 records
    log.checkpoint_high_watermark(36)
    assert log.advance_log_start_offset(30)
    assert log.truncate_to(20) is True
    assert log.log_start_offset == log.log_end_offset == 20
    assert log.epoch_cache.entries == []
    log.append_as_leader(batch(2), leader_epoch=2, now_ms=NOW)
    assert [r.offset for r in iter_records(log.read(20, 1 << 20), from_offset=20)] == [20, 21]
    log.close()
    again = where.open("l", segment_bytes=700)
    assert again.log_start_offset == 20 and again.log_end_offset == 22
    again.close()


@pytest.mark.parametrize("cut", [7, 8])
def test_a_cut_inside_the_batch_holding_the_log_start_restarts_the_log_empty_at_its_start(where, cut):
    """Sim seed 19208: DeleteRecords left replica 2's log start (7) inside a batch (6-7);
    after an unclean election it truncated to 7, where its oldest epoch starts once clipped
    to the log start. The batch holding 7 went whole, so the log ended at 6, below its
    start, and took the leader's batch at 6 with its start still 7: unreadable from its
    first batch, its epoch below its start. No record at or past the log start survives
    a cut inside that batch, so the log restarts empty at its start and fetches the batch
    again whole."""
    from kcoord.log.epochs import EpochEntry

    log = where.open("l")
    fill(log, 4, epoch=1)  # batches of 3: 0-2, 3-5, 6-8, 9-11
    log.checkpoint_high_watermark(12)
    assert log.advance_log_start_offset(7)  # inside 6-8
    assert log.truncate_to(cut) is True
    assert log.log_start_offset == log.log_end_offset == 7
    assert log.epoch_cache.entries == []
    leader = where.open("leader")
    fill(leader, 4, epoch=1)
    leader.checkpoint_high_watermark(12)
    log.append_as_follower(leader.read(7, 1 << 20), now_ms=NOW)
    assert log.log_start_offset == 7 and log.log_end_offset == 12
    assert [r.offset for r in iter_records(log.read(7, 1 << 20), from_offset=7)] == list(range(7, 12))
    assert log.epoch_cache.entries == [EpochEntry(1, 7)]
    log.close()
    again = where.open("l")
    assert (again.log_start_offset, again.log_end_offset) == (7, 12)
    again.close()


def test_the_memory_log_restarts_empty_at_its_start_after_a_cut_inside_its_first_batch():
    log = MemoryLog(LogConfig(), now_ms=NOW)
    fill(log, 4)
    log.checkpoint_high_watermark(12)
    assert log.advance_log_start_offset(7)
    assert log.truncate_to(7) is True
    assert log.log_start_offset == log.log_end_offset == 7


def test_a_high_watermark_checkpointed_after_restarting_below_the_log_start_survives_reopen(where):
    """Found by the log's state machine: a log opened with no HW checkpoint took its log start
    (33) for the checkpointed HW; restarted empty below it (32), it took a later checkpoint of
    33 for one already written and skipped the write, so a reopen came back with HW 32."""
    from kcoord.records import stamp

    log = where.open("l", segment_bytes=700)
    log.truncate_fully_and_start_at(33)
    log.close()
    log = where.open("l", segment_bytes=700)
    assert log.truncate_to(32) is False
    log.append_as_follower(stamp(batch(1), 32, 0), now_ms=NOW)
    log.checkpoint_high_watermark(33)
    assert log.high_watermark == 33
    log.close()
    again = where.open("l", segment_bytes=700)
    assert (again.log_start_offset, again.log_end_offset, again.high_watermark) == (32, 33, 33)
    again.close()
