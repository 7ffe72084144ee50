"""Log compaction (kcoord/log/cleaner.py): what stays, what goes, offsets, crash safety."""

from __future__ import annotations

import errno
import random
from pathlib import Path

import pytest

from kcoord import records as R
from kcoord.kafka.batches import build_kafka_batch
from kcoord.log import Log, LogConfig, LogStorageError
from kcoord.log.cleaner import CompactableLog, compact
from sim.disk import SimDisk

T0 = 1_000_000


def compact_log(path, fs=None, **cfg) -> Log:
    cfg.setdefault("segment_bytes", 600)
    cfg.setdefault("cleanup_policy", "compact")
    cfg.setdefault("min_cleanable_dirty_ratio", 0.0)
    cfg.setdefault("index_interval_bytes", 64)
    return Log(path, LogConfig(**cfg), now_ms=T0, fs=fs)


def write(log: Log, n: int, keys: int = 7, *, tombstone_every: int = 0, kafka: bool = False, start_ts: int = T0):
    """n single-record batches, key i % keys; returns the expected last value per key."""
    last = {}
    for i in range(n):
        off = log.log_end_offset
        k = b"k%d" % (off % keys)
        v = None if tombstone_every and off % tombstone_every == 0 else b"v%d" % off
        ts = start_ts + off
        if kafka:
            data = build_kafka_batch([(k, v, [], ts)])
        else:
            data = R.build_batch([(k, v)], timestamp_ms=ts)
        log.append_as_leader(data, leader_epoch=0, now_ms=ts)
        last[k] = (off, v)
    log.checkpoint_high_watermark(log.log_end_offset)
    return last


def records(log: Log) -> list[R.Record]:
    return list(R.iter_records(log.read(log.log_start_offset, 1 << 30))) if log.log_end_offset > log.log_start_offset else []


def state(recs) -> dict:
    out = {}
    for r in recs:
        out[r.key] = (r.offset, r.value)
    return out


@pytest.mark.parametrize("kafka", [False, True], ids=["kcoord", "kafka-v2"])
def test_keeps_the_last_record_per_key_below_the_active_segment_offsets_unchanged(tmp_path, kafka):
    log = compact_log(tmp_path, delete_retention_ms=10**9)
    before = records(log) or []
    expect = write(log, 80, kafka=kafka)
    before = {r.offset: r for r in records(log)}
    active_base = log.segments[-1].base_offset
    result = log.clean(T0 + 1000)
    assert result.segments_cleaned > 0 and result.records_removed > 0
    after = records(log)
    # every surviving record is the very record that was at that offset
    assert all(before[r.offset] == r for r in after)
    # below the active segment: exactly one record per key; the active segment untouched
    cleaned = [r for r in after if r.offset < active_base]
    assert len({r.key for r in cleaned}) == len(cleaned)
    assert [r.offset for r in after if r.offset >= active_base] == list(range(active_base, log.log_end_offset))
    assert state(after) == expect
    assert log.log_start_offset == 0 and log.log_end_offset == 80
    # reopening (clean and after a crash-like reopen) finds the same log
    log.close()
    again = compact_log(tmp_path)
    assert records(again) == after and not again.recovery_report.cut
    again.close()


def test_reading_into_a_gap_returns_the_next_batch(tmp_path):
    log = compact_log(tmp_path)
    write(log, 60, keys=3)
    log.clean(T0 + 1000)
    offsets = [r.offset for r in records(log)]
    gap = next(o for o in range(60) if o not in offsets)
    data = log.read(gap, 1 << 20)
    assert R.read_header(data).base_offset > gap
    assert log.read(0, 1 << 20)  # the start offset may be inside a gap too


def test_tombstones_stay_for_delete_retention_ms_then_go(tmp_path):
    log = compact_log(tmp_path, delete_retention_ms=500)
    write(log, 70, keys=5, tombstone_every=4)
    active = log.segments[-1].base_offset
    below = state(r for r in records(log) if r.offset < active)
    log.clean(T0 + 100)  # tombstones are younger than 500 ms: the last ones per key stay
    active = log.segments[-1].base_offset
    kept = [r for r in records(log) if r.offset < active]
    assert any(r.value is None for r in kept)
    result = log.clean(T0 + 10_000, force=True)  # now they are old
    assert result.tombstones_removed > 0
    assert not [r for r in records(log) if r.offset < active and r.value is None]
    # a key whose last record below the active segment was a tombstone is gone from there
    deleted = {k for k, (_, v) in below.items() if v is None}
    assert deleted and not [r for r in records(log) if r.offset < active and r.key in deleted]
    assert state(r for r in records(log) if r.offset < active) == {k: ov for k, ov in below.items() if k not in deleted}


def test_dirty_ratio_and_compaction_lag(tmp_path):
    log = compact_log(tmp_path, min_cleanable_dirty_ratio=0.9)
    write(log, 60)
    assert log.clean(T0 + 1000).segments_cleaned > 0  # everything is dirty: ratio 1.0
    write(log, 8)  # a little more: most of the cleanable log is clean now
    r = log.clean(T0 + 1000)
    assert r.segments_cleaned == 0 and "dirty ratio" in r.skipped
    lagged = compact_log(tmp_path / "lag", min_compaction_lag_ms=10_000)
    write(lagged, 60)
    assert lagged.clean(T0 + 100).skipped == "no cleanable segment"
    assert lagged.clean(T0 + 20_000).segments_cleaned > 0


def test_never_above_the_high_watermark_and_not_for_delete_policy(tmp_path):
    log = compact_log(tmp_path)
    write(log, 60)
    log.checkpoint_high_watermark(5)
    r = log.clean(T0 + 1000)
    assert r.segments_cleaned == 0
    plain = compact_log(tmp_path / "d", cleanup_policy="delete")
    write(plain, 60)
    assert plain.clean(T0 + 1000).skipped.startswith("cleanup.policy")


def test_records_without_keys_are_refused_on_a_compacted_topic(tmp_path):
    log = compact_log(tmp_path)
    with pytest.raises(Exception) as err:
        log.append_as_leader(R.build_batch([(None, b"x")]), leader_epoch=0, now_ms=T0)
    assert err.value.code == R.ErrorCode.INVALID_RECORD
    assert log.log_end_offset == 0


def test_compacted_log_replicates_to_a_follower_and_survives_reopen(tmp_path):
    leader = compact_log(tmp_path / "leader")
    write(leader, 90, keys=4)
    leader.clean(T0 + 1000)
    follower = compact_log(tmp_path / "follower", segment_bytes=300)
    pos = 0
    while follower.log_end_offset < leader.log_end_offset:
        data = leader.read(max(follower.log_end_offset, leader.log_start_offset), 200)
        follower.append_as_follower(data, now_ms=T0)
        pos += 1
    assert records(follower) == records(leader)
    follower.close()
    again = compact_log(tmp_path / "follower", segment_bytes=300)
    assert records(again) == records(leader) and not again.recovery_report.cut


def test_idempotent_producer_batches_keep_their_sequences(tmp_path):
    log = compact_log(tmp_path)
    for seq in range(0, 60, 3):
        recs = [(b"k%d" % ((seq + i) % 2), b"v%d" % (seq + i)) for i in range(3)]
        log.append_as_leader(R.build_batch(recs, producer_id=5, producer_epoch=0, base_sequence=seq, timestamp_ms=T0), leader_epoch=0, now_ms=T0)
    log.checkpoint_high_watermark(log.log_end_offset)
    log.clean(T0 + 1000)
    for pos, h in R.iter_headers(log.read(0, 1 << 30), check_crc=True):
        if h.base_offset < log.segments[-1].base_offset:
            assert h.base_sequence == h.base_offset  # sequence i was written at offset i
    # the producer goes on where it was
    info = log.append_as_leader(R.build_batch([(b"k", b"x")], producer_id=5, producer_epoch=0, base_sequence=60, timestamp_ms=T0), leader_epoch=0, now_ms=T0)
    assert not info.duplicate and info.base_offset == 60


# -- crash safety ---------------------------------------------------------------------------


def _prepared(disk: SimDisk) -> Log:
    log = compact_log(Path("/sim/c"), fs=disk)
    write(log, 60, keys=5)
    log.flush()
    return log


@pytest.mark.parametrize("torn", [0.0, 0.5, 1.0])
def test_power_loss_at_every_io_call_of_a_cleaning_pass_leaves_the_old_or_the_new_segment(torn):
    probe_disk = SimDisk(random.Random(1))
    probe = _prepared(probe_disk)
    old = records(probe)
    start = probe_disk.op_count
    probe.clean(T0 + 1000)
    new = records(probe)
    calls = probe_disk.op_count - start
    assert calls > 5 and new != old
    old_by = {r.offset: r for r in old}
    for k in range(calls + 1):
        disk = SimDisk(random.Random(k))
        log = _prepared(disk)
        crash_at = disk.op_count + 1 + k
        disk.fault_hook = lambda _op, _path: errno.EIO if disk.op_count >= crash_at else None
        try:
            log.clean(T0 + 1000)
        except LogStorageError:
            assert log.offline
        disk.fault_hook = None
        disk.power_loss(torn=torn)
        again = compact_log(Path("/sim/c"), fs=disk)
        got = records(again)
        # every segment is either as it was or as cleaned: every record is one that was
        # there, at its offset; nothing acknowledged (flushed) is lost as a key's last value
        assert all(old_by[r.offset] == r for r in got), k
        assert state(got) == state(old), k
        assert again.log_end_offset == 60 and not again.recovery_report.cut, (k, again.recovery_report)
        # and it can be cleaned to the end after the crash
        again.clean(T0 + 1000, force=True)
        assert records(again) == new, k
        again.close()


def test_the_last_record_stays_when_the_active_segment_is_empty(tmp_path):
    """A segment rolled while idle leaves the active segment empty; were the cleaner to
    remove the expired tombstones at the end of the log, a read between the last surviving
    batch and the log end would find nothing (it raised IndexError)."""
    log = compact_log(tmp_path, delete_retention_ms=10, segment_ms=1_000)
    log.append_as_leader(R.build_batch([(b"a", b"1")], timestamp_ms=T0), leader_epoch=0, now_ms=T0)
    log.append_as_leader(R.build_batch([(b"b", None), (b"c", None), (b"d", None)], timestamp_ms=T0), leader_epoch=0, now_ms=T0)
    log.checkpoint_high_watermark(log.log_end_offset)
    assert log.maybe_roll(T0 + 5_000) and log.segments[-1].size_bytes == 0
    assert log.clean(T0 + 5_000).tombstones_removed == 0  # first passed now: kept
    result = log.clean(T0 + 5_010, force=True)
    assert result.tombstones_removed == 2  # b and c go, d is the log's last record
    assert [(r.offset, r.key, r.value) for r in records(log)] == [(0, b"a", b"1"), (3, b"d", None)]
    for offset in range(1, log.log_end_offset):
        assert R.read_header(log.read(offset, 1 << 20)).base_offset == 3


# -- idempotent producers' last batches (issue 32, finding 8) ----------------------------------


def _batch(recs, kafka: bool, **producer) -> bytes:
    if kafka:
        return build_kafka_batch([(k, v, [], T0) for k, v in recs], **producer)
    return R.build_batch(recs, timestamp_ms=T0, **producer)


def _replicate(leader: Log, follower: Log) -> None:
    """A new replica fetching the leader's (compacted) log from its start."""
    while follower.log_end_offset < leader.log_end_offset:
        follower.append_as_follower(leader.read(max(follower.log_end_offset, leader.log_start_offset), 300), now_ms=T0)


def _superseded_producer(tmp_path, kafka: bool, last_keys: list[bytes], superseded: list[bytes]) -> tuple[Log, bytes, int]:
    """Producer 5 writes a batch then its last batch (keys ``last_keys``); another writer
    then supersedes ``superseded`` and fills segments, and the cleaner runs. Returns the
    log, producer 5's last batch as sent, and where it went."""
    log = compact_log(tmp_path / "leader")
    p5 = dict(producer_id=5, producer_epoch=0)
    log.append_as_leader(_batch([(b"a", b"a0")], kafka, base_sequence=0, **p5), leader_epoch=0, now_ms=T0)
    last = _batch([(k, k + b"0") for k in last_keys], kafka, base_sequence=1, **p5)
    at = log.append_as_leader(last, leader_epoch=0, now_ms=T0).base_offset
    for k in superseded:
        log.append_as_leader(_batch([(k, k + b"1")], kafka), leader_epoch=0, now_ms=T0)
    write(log, 40, keys=3, kafka=kafka)  # other keys: several segments, all below the HW
    result = log.clean(T0 + 1000)
    assert result.segments_cleaned and at < log.segments[-1].base_offset
    return log, last, at


@pytest.mark.parametrize("kafka", [False, True], ids=["kcoord", "kafka-v2"])
def test_a_producers_last_batch_stays_emptied_so_a_rebuilt_replica_still_deduplicates_its_retry(tmp_path, kafka):
    """Kafka's cleaner keeps the last batch of every producer in the producer state, emptied
    of records if none survives, so its sequence and epoch survive. A new replica rebuilds
    producer state from the compacted log; the producer's retry of that batch must be a
    duplicate there, not appended again after the newer values."""
    leader, last, at = _superseded_producer(tmp_path, kafka, [b"b", b"c"], [b"b", b"c"])
    kept = [h for _, h in R.iter_headers(leader.read(0, 1 << 30), check_crc=True) if h.producer_id == 5]
    assert [(h.base_offset, h.base_sequence, h.last_sequence, h.record_count) for h in kept] == [(0, 0, 0, 1), (at, 1, 2, 0)]
    assert not [r for r in records(leader) if at <= r.offset <= at + 1]  # its records are gone
    follower = compact_log(tmp_path / "follower")
    _replicate(leader, follower)
    assert records(follower) == records(leader)
    assert follower.producer_state.get(5).last_seq == 2
    info = follower.append_as_leader(last, leader_epoch=1, now_ms=T0)
    assert info.duplicate and info.base_offset == at and follower.log_end_offset == leader.log_end_offset
    # reopened from its files (no snapshot past the data), it still knows the batch
    follower.close()
    for p in (tmp_path / "follower").glob("*.producer-snapshot"):
        p.unlink()
    again = compact_log(tmp_path / "follower")
    assert again.append_as_leader(last, leader_epoch=1, now_ms=T0).duplicate


@pytest.mark.parametrize("kafka", [False, True], ids=["kcoord", "kafka-v2"])
@pytest.mark.parametrize("superseded", [[b"d"], [b"c"], [b"b", b"d"]], ids=["tail", "middle", "ends"])
def test_a_producers_partly_superseded_last_batch_stays_whole(tmp_path, kafka, superseded):
    """Sim seed 3039: split into runs of kept records (and an empty batch over a removed
    tail), a batch of the dedup window no longer matched the producer's retry on a replica
    that rebuilt producer state from the compacted log, which refused it as
    OUT_OF_ORDER_SEQUENCE_NUMBER. A batch of the window keeps all its records while any
    survives (superseded ones too, as a replica may), so the retry is a duplicate."""
    leader, last, at = _superseded_producer(tmp_path, kafka, [b"b", b"c", b"d"], superseded)
    assert {r.key for r in records(leader) if at <= r.offset <= at + 2} == {b"b", b"c", b"d"}
    follower = compact_log(tmp_path / "follower")
    _replicate(leader, follower)
    assert records(follower) == records(leader)
    assert follower.producer_state.get(5).last_seq == 3
    info = follower.append_as_leader(last, leader_epoch=1, now_ms=T0)
    assert info.duplicate and info.base_offset == at
    nxt = _batch([(b"e", b"e0")], kafka, producer_id=5, producer_epoch=0, base_sequence=4)
    assert not follower.append_as_leader(nxt, leader_epoch=1, now_ms=T0).duplicate  # it goes on where it was


# -- the compaction interface (CompactableLog): what a pass may use of a Log ------------------

_INTERFACE = {name for name in dir(CompactableLog) if not name.startswith("_")} | set(CompactableLog.__annotations__)


class _OnlyTheInterface:
    """A log seen through CompactableLog alone: any other attribute a pass asks for fails."""

    def __init__(self, log: Log) -> None:
        self._log = log

    def __getattr__(self, name: str):
        if name not in _INTERFACE:
            raise AttributeError(f"the cleaner used Log.{name}, which is not in its interface")
        return getattr(self._log, name)


def test_a_pass_uses_nothing_of_the_log_but_the_compaction_interface(tmp_path):
    assert _INTERFACE == {
        "config", "producer_state", "txn_index", "high_watermark", "log_end_offset", "cleaner_offset",
        "log_segments", "sync_sealed_segments", "replace_segment", "checkpoint_cleaner_offset",
        "tombstone_horizon", "note_tombstones_removed", "tombstone_clock", "note_cleaner_pass",
    }
    through, direct = compact_log(tmp_path / "a"), compact_log(tmp_path / "b")
    write(through, 80, tombstone_every=5)
    write(direct, 80, tombstone_every=5)
    result = compact(_OnlyTheInterface(through), T0 + 1000)
    assert result.segments_cleaned > 0
    assert result == direct.clean(T0 + 1000)
    again = compact(_OnlyTheInterface(through), T0 + 10**9, force=True)  # the tombstones expired
    assert again.tombstones_removed > 0 and again == direct.clean(T0 + 10**9, force=True)
    assert records(through) == records(direct)


def test_the_cleaner_offset_is_checkpointed_where_the_pass_ended(tmp_path):
    log = compact_log(tmp_path)
    write(log, 60)
    assert log.cleaner_offset == 0
    result = log.clean(T0 + 1000)
    assert result.cleanable_end > 0 and log.cleaner_offset == result.cleanable_end
    log.checkpoint_cleaner_offset(result.cleanable_end + 1)
    log.close()
    again = compact_log(tmp_path)
    assert again.cleaner_offset == result.cleanable_end + 1
    again.close()


def test_replace_segment_swaps_a_sealed_segments_batches_and_refuses_the_active_one(tmp_path):
    log = compact_log(tmp_path)
    write(log, 40, keys=40)
    segments = log.log_segments()
    assert len(segments) > 2 and segments is not log.log_segments()  # a copy: the pass keeps its view
    first, active = segments[0], segments[-1]
    first_batch = log.read(first.base_offset, 1)  # one whole batch
    h = R.read_header(first_batch)
    size = log.size_bytes
    new = log.replace_segment(first, first_batch, [h], [0])
    assert log.log_segments()[0] is new and new.base_offset == first.base_offset
    assert log.size_bytes == size - first.size + len(first_batch)
    # the offsets the batch dropped now read from the next segment; nothing else moved
    assert log.read(0, 1 << 20)[: len(first_batch)] == first_batch
    assert R.read_header(log.read(h.next_offset, 1)).base_offset == segments[1].base_offset
    with pytest.raises(ValueError, match="active segment"):
        log.replace_segment(active, b"", [], [])
    log.close()
    again = compact_log(tmp_path)
    assert again.read(0, 1 << 20)[: len(first_batch)] == first_batch and not again.recovery_report.cut
    again.close()
def test_a_batch_older_than_a_producers_last_five_still_goes_whole(tmp_path):
    log = compact_log(tmp_path / "leader")
    p5 = dict(producer_id=5, producer_epoch=0)
    at = [log.append_as_leader(_batch([(b"p%d" % i, b"0")], False, base_sequence=i, **p5), leader_epoch=0, now_ms=T0).base_offset for i in range(6)]
    for i in range(6):
        log.append_as_leader(_batch([(b"p%d" % i, b"1")], False), leader_epoch=0, now_ms=T0)
    write(log, 40, keys=3)
    assert log.clean(T0 + 1000).segments_cleaned
    kept = [h for _, h in R.iter_headers(log.read(0, 1 << 30)) if h.producer_id == 5]
    assert [h.base_offset for h in kept] == at[1:]  # the oldest went entirely; the last five stay emptied


@pytest.mark.parametrize("kafka", [False, True], ids=["kcoord", "kafka-v2"])
def test_a_retry_of_any_of_a_producers_last_five_batches_stays_a_duplicate_on_a_rebuilt_replica(tmp_path, kafka):
    """Sim seeds 108, 1855: a producer's batch (seq 68-70) went unanswered while its four
    later batches were acknowledged; the cleaner removed that batch (its keys superseded)
    before a restarted replica fetched past it, so the replica, elected, remembered only
    the later four and refused the retry as OUT_OF_ORDER_SEQUENCE_NUMBER -- though it was
    in the log. The cleaner keeps every batch the producer state remembers (the dedup
    window of five), emptied, as it keeps the last (Kafka's RETAIN_EMPTY)."""
    log = compact_log(tmp_path / "leader")
    p5 = dict(producer_id=5, producer_epoch=0)
    sent = [_batch([(b"p%d" % i, b"0")], kafka, base_sequence=i, **p5) for i in range(5)]
    at = [log.append_as_leader(b, leader_epoch=0, now_ms=T0).base_offset for b in sent]
    for i in range(5):
        log.append_as_leader(_batch([(b"p%d" % i, b"1")], kafka), leader_epoch=0, now_ms=T0)
    write(log, 40, keys=3, kafka=kafka)
    assert log.clean(T0 + 1000).segments_cleaned and at[-1] < log.segments[-1].base_offset
    follower = compact_log(tmp_path / "follower")
    _replicate(log, follower)
    for b, offset in zip(sent, at):
        info = follower.append_as_leader(b, leader_epoch=1, now_ms=T0)
        assert info.duplicate and info.base_offset == offset
    assert follower.log_end_offset == log.log_end_offset


def test_a_truncation_below_emptied_segments_leaves_no_log_without_batches(tmp_path):
    """The cleaner emptied every sealed segment (all superseded); a truncation that cut the
    later records away used to leave every segment empty below the log end, a log no
    read could find a batch in. Below the cleaner offset the log now starts over."""
    log = compact_log(tmp_path / "l")
    write(log, 40, keys=3)
    log.checkpoint_high_watermark(log.log_end_offset)
    assert log.clean(T0 + 1000).segments_cleaned
    first_kept = R.read_header(log.read(0, 0)).base_offset
    assert first_kept > 1 and log.cleaner_offset > first_kept - 1
    log.truncate_to(first_kept - 1)
    assert (log.log_start_offset, log.log_end_offset) == (0, 0)
    assert log.read(0, 1 << 20) == b""


def test_a_truncation_below_the_cleaned_part_starts_the_log_over(tmp_path):
    """The cleaner removes a record for a later one of its key, below the HW. An unclean
    election can still take that later record (the new leader never had it): a follower
    truncating to below it would keep a log with neither value of the key, which is no
    log the leader holds. Below the cleaner offset the log starts over empty at its log
    start and fetches again; a truncation above it keeps the log."""
    log = compact_log(tmp_path, delete_retention_ms=10**9)
    write(log, 80)  # keys k0..k6 over and over: every early record is superseded
    result = log.clean(T0 + 1000)
    assert result.records_removed > 0
    cleaned_to = log.cleaner_offset
    assert 0 < cleaned_to < 80
    assert not any(r.offset == 0 for r in records(log))  # k0's first value went
    assert log.truncate_to(cleaned_to + 1)  # above it: an ordinary truncation
    assert (log.log_start_offset, log.log_end_offset) == (0, cleaned_to + 1)
    assert log.truncate_to(cleaned_to - 1)
    assert (log.log_start_offset, log.log_end_offset) == (0, 0)
    assert log.cleaner_offset == 0 and log.epoch_cache.entries == []
    write(log, 10)  # fetched again: compacts from scratch
    assert [r.offset for r in records(log)] == list(range(10))
    log.close()
    again = compact_log(tmp_path)
    assert (again.log_start_offset, again.log_end_offset, again.cleaner_offset) == (0, 10, 0)
    again.close()


def test_a_follower_that_fetched_a_compacted_log_starts_over_when_cut_below_the_leaders_hw(tmp_path):
    """A follower fetching a leader's compacted log holds what the leader's cleaner kept:
    records superseded by later ones of their key below the leader's HW are gone, wherever
    those later records lie. If an unclean election takes them (the new leader's log ends
    below that HW) the follower's prefix has neither value of the key, like a log cut below
    its own cleaner offset (sim seed 54968: a follower that had fetched the whole compacted
    log kept no record at all below the cut, joined the ISR and led a clean election). Cut
    below the HW of a leader whose compacted log it fetched, the log starts over; so it
    does when it fetched only part of it and the cut is past its end, and after a reopen."""
    leader = compact_log(tmp_path / "leader", delete_retention_ms=10**9)
    write(leader, 80)  # keys k0..k6 over and over: every early record is superseded
    assert leader.clean(T0 + 1000).records_removed > 0
    hw = leader.log_end_offset
    whole = leader.read(0, 1 << 30)

    f = compact_log(tmp_path / "f1")
    f.append_as_follower(whole, now_ms=T0, leader_high_watermark=hw)
    assert not any(r.offset == 0 for r in records(f))  # k0's first value came compacted away
    assert f.truncate_to(40)  # the new leader's log ends at 40: below the HW the data came under
    assert (f.log_start_offset, f.log_end_offset) == (0, 0)
    f.close()
    again = compact_log(tmp_path / "f1")
    assert (again.log_start_offset, again.log_end_offset) == (0, 0)
    write(again, 10)  # fetched again from the new leader: kept as it comes
    assert again.truncate_to(5) and again.log_end_offset == 5, "an uncompacted fetch: an ordinary cut"
    again.close()

    part = leader.read(0, 1 << 30, max_offset=hw - 10)  # the first batches only: their log ends below the HW
    f2 = compact_log(tmp_path / "f2")
    f2.append_as_follower(part, now_ms=T0, leader_high_watermark=hw)
    assert f2.log_end_offset == hw - 10
    f2.close()
    f2 = compact_log(tmp_path / "f2")  # the bound survives a reopen
    assert f2.truncate_to(hw - 5)  # past its end, below the HW: later records its prefix lacks are gone too
    assert (f2.log_start_offset, f2.log_end_offset) == (0, 0)
    f2.close()

    f3 = compact_log(tmp_path / "f3")
    f3.append_as_follower(whole, now_ms=T0, leader_high_watermark=hw)
    assert not f3.truncate_to(hw), "a cut at the HW keeps the log: every later record is there"
    assert f3.log_end_offset == hw
    f3.close()
    leader.close()


def test_an_expired_tombstone_stays_while_a_record_it_superseded_does(tmp_path):
    """A batch of a producer's dedup window stays whole while any of its records survives,
    superseded ones too. The tombstone that superseded such a record must then stay past
    delete.retention.ms: removing it would bring the deleted value back as the key's last."""
    log = compact_log(tmp_path, delete_retention_ms=100)
    # offsets 0-1: the idempotent producer's last batch (its dedup window keeps it whole)
    log.append_as_leader(R.build_batch_columns([b"old-a", b"b"], [b"a", b"b"], timestamp_ms=T0, producer_id=7, producer_epoch=0, base_sequence=0), leader_epoch=0, now_ms=T0)
    log.append_as_leader(R.build_batch([(b"a", None)], timestamp_ms=T0), leader_epoch=0, now_ms=T0)  # 2: delete a
    write(log, 40, keys=5, start_ts=T0)  # others' keys: seal the segments below
    assert log.clean(T0 + 10_000).segments_cleaned
    log.clean(T0 + 20_000, force=True)  # a's tombstone has expired by now
    after = state(records(log))
    assert after.get(b"a", (None, None))[1] is None, after.get(b"a")  # a stays deleted
    assert after[b"b"] == (1, b"b")


def test_removing_tombstones_persists_the_tombstone_horizon_first(tmp_path):
    """A replica that lacks a removed tombstone must be able to tell: the log keeps one past
    the newest tombstone its cleaner removed, across a reopen; a log that starts over has
    removed none."""
    log = compact_log(tmp_path, delete_retention_ms=100)
    assert log.tombstone_horizon == 0
    log.append_as_leader(R.build_batch([(b"a", b"1")], timestamp_ms=T0), leader_epoch=0, now_ms=T0)  # 0
    log.append_as_leader(R.build_batch([(b"a", None)], timestamp_ms=T0), leader_epoch=0, now_ms=T0)  # 1: delete a
    write(log, 40, keys=5, start_ts=T0)
    assert log.clean(T0 + 10_000).tombstones_removed == 0 and log.tombstone_horizon == 0  # first passed
    result = log.clean(T0 + 20_000, force=True)
    assert result.tombstones_removed >= 1 and b"a" not in state(records(log))
    assert log.tombstone_horizon == result.tombstone_end >= 2
    log.close()
    again = compact_log(tmp_path, delete_retention_ms=100)
    assert again.tombstone_horizon == result.tombstone_end
    again.truncate_fully_and_start_at(0)
    assert again.tombstone_horizon == 0
    again.close()
    assert compact_log(tmp_path).tombstone_horizon == 0


def test_an_expired_tombstone_stays_after_a_value_before_it_in_its_own_batch(tmp_path):
    """Sim seed 7161: a batch of a producer's dedup window held a key's value and then its
    tombstone; kept whole while in the window, it later left it, when the key was no longer
    in any dirty section: the value looked like the key's newest and stayed, and the expired
    tombstone after it in the same batch went. The value must not be the key's last again."""
    log = compact_log(tmp_path, delete_retention_ms=100)
    log.append_as_leader(R.build_batch_columns([b"old-a", b"x", None], [b"a", b"x", b"a"], timestamp_ms=T0, producer_id=7, producer_epoch=0, base_sequence=0), leader_epoch=0, now_ms=T0)
    write(log, 30, keys=5, start_ts=T0)
    log.clean(T0 + 50)  # the batch is the producer's last: kept whole
    for s in range(3, 8):  # five later batches: it leaves the dedup window
        log.append_as_leader(R.build_batch_columns([b"w"], [b"w"], timestamp_ms=T0, producer_id=7, producer_epoch=0, base_sequence=s), leader_epoch=0, now_ms=T0)
    write(log, 30, keys=5, start_ts=T0)
    log.clean(T0 + 10_000)
    after = state(records(log))
    assert after.get(b"a", (None, None))[1] is None, after.get(b"a")  # a stays deleted


# -- KIP-534: a tombstone's retention counts from the first pass that covered it -------------


def test_a_tombstone_stamped_in_the_past_stays_delete_retention_ms_after_its_first_pass(tmp_path):
    """A producer whose clock runs behind stamps its tombstones in the past. Counted from the
    timestamp they went at the first pass (sim: the tombstone-early invariant), before a
    consumer reading the log could see the deletion; counted from the first pass that
    covered them, they stay for delete.retention.ms whatever the stamp."""
    log = compact_log(tmp_path, delete_retention_ms=1_000)
    old = 1  # a clock far behind
    write(log, 60, keys=5, tombstone_every=4, start_ts=old)
    first = log.clean(T0)
    assert first.segments_cleaned and first.tombstones_removed == 0 and log.tombstone_horizon == 0
    assert log.tombstone_clock.first_passed(0) == T0
    assert log.clean(T0 + 999, force=True).tombstones_removed == 0  # not yet 1,000 ms
    assert log.clean(T0 + 1_000, force=True).tombstones_removed > 0


def test_the_tombstone_clock_survives_a_reopen_and_is_cut_with_the_cleaner_offset(tmp_path):
    log = compact_log(tmp_path, delete_retention_ms=1_000)
    write(log, 60, keys=5, tombstone_every=4)
    end = log.clean(T0).cleanable_end
    assert log.tombstone_clock.entries == [(end, T0)]
    log.close()
    again = compact_log(tmp_path, delete_retention_ms=1_000)
    assert again.tombstone_clock.entries == [(end, T0)]
    # a truncation that lowers the cleaner offset forgets what lies past it
    again.checkpoint_cleaner_offset(end - 3)
    assert again.tombstone_clock.entries == [(end - 3, T0)]
    again.close()
    reopened = compact_log(tmp_path, delete_retention_ms=1_000)
    assert reopened.tombstone_clock.entries == [(end - 3, T0)]
    reopened.truncate_fully_and_start_at(0)  # started over: nothing passed
    assert reopened.tombstone_clock.entries == []
    reopened.close()


def test_a_bad_tombstone_clock_checkpoint_counts_as_no_pass_yet(tmp_path):
    log = compact_log(tmp_path, delete_retention_ms=1_000)
    write(log, 60, keys=5, tombstone_every=4)
    log.clean(T0)
    log.close()
    (tmp_path / "tombstone-clock-checkpoint").write_bytes(b"0\n2\n5 7\n")
    again = compact_log(tmp_path, delete_retention_ms=1_000)
    assert again.tombstone_clock.entries == []
    assert any("tombstone clock" in n for n in again.recovery_report.notes)
    # the next pass is the first: tombstones wait another delete.retention.ms from it
    assert again.clean(T0 + 5_000, force=True).tombstones_removed == 0
    assert again.clean(T0 + 6_000, force=True).tombstones_removed > 0
    again.close()


def test_tombstone_clock_pairs_merge_toward_later_times():
    from kcoord.log.tombstone_clock import MAX_ENTRIES, TombstoneClock

    c = TombstoneClock()
    assert c.first_passed(0) is None and not c.expired(0, 10**12)
    assert c.note_pass(10, 100, 1_000) and not c.note_pass(10, 200, 1_000)  # no progress: unchanged
    c.note_pass(20, 300, 1_000)
    assert (c.first_passed(9), c.first_passed(10), c.first_passed(19), c.first_passed(20)) == (100, 300, 300, None)
    assert c.expired(5, 100) and not c.expired(5, 99) and not c.expired(15, 299)
    c.note_pass(30, 5_000, 1_000)  # both earlier pairs expired: they collapse into the newer one
    assert c.entries == [(20, 300), (30, 5_000)]
    for i in range(4, 4 + 2 * MAX_ENTRIES):
        c.note_pass(i * 10, 5_000 + i, 10**9)
        assert len(c.entries) <= MAX_ENTRIES
    # every offset's time is at least its true first pass (merging only delays removals)
    assert c.first_passed(0) == 300 and all(c.first_passed(i * 10 - 1) >= 5_000 + i for i in range(4, 4 + 2 * MAX_ENTRIES))
    t25 = c.first_passed(25)
    assert c.clip(25) and c.entries == [(20, 300), (25, t25)] and c.first_passed(25) is None
    assert not c.clip(25) and c.clip(0) and c.entries == []
    with pytest.raises(ValueError):
        TombstoneClock([(5, 1), (5, 2)])


def test_an_expired_tombstone_makes_a_pass_due_however_clean_the_log_is(tmp_path):
    """KIP-534: a log whose only change is that a kept tombstone has expired gets a pass,
    below min.cleanable.dirty.ratio too (else an idle log would keep it for good); reopened,
    its oldest pass stands in for when the waiting tombstones were first passed."""
    log = compact_log(tmp_path, delete_retention_ms=1_000, min_cleanable_dirty_ratio=0.5)
    write(log, 60, keys=5, tombstone_every=4)
    assert log.clean(T0).segments_cleaned and log.tombstone_clock.waiting_since == T0
    r = log.clean(T0 + 500)
    assert not r.segments_cleaned and "dirty ratio" in r.skipped  # nothing has expired yet
    log.close()
    again = compact_log(tmp_path, delete_retention_ms=1_000, min_cleanable_dirty_ratio=0.5)
    assert again.tombstone_clock.waiting_since == T0
    assert again.clean(T0 + 1_000).tombstones_removed > 0
    assert again.tombstone_clock.waiting_since is None  # none waits any more: no pass is due
    r = again.clean(T0 + 5_000)
    assert not r.segments_cleaned and "dirty ratio" in r.skipped
    again.close()
