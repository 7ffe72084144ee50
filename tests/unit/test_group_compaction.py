"""__consumer_offsets is compacted: a coordinator loads the same groups and offsets from its
partition after the log cleaner ran as before (gaps between batches, tombstones kept or
expired, values written after a tombstone of the same key), and the driver loads and fences
on a cleaned partition. Real logs on disk (kcoord.log.Log and its cleaner); no Ray."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from kcoord import records as batch_format
from kcoord.group import GroupConfig, GroupCoordinatorState
from kcoord.group.loading import take_in, well_formed
from kcoord.group.records import (
    GroupKey,
    GroupValue,
    MemberValue,
    OffsetKey,
    OffsetValue,
    Record,
    coordinator_epoch_record,
    group_record,
    offset_record,
)
from kcoord.log import Log, LogConfig
from kcoord.log.cleaner import CleanResult
from kcoord.protocol.errors import DecodeError
from kcoord.protocol.group import DeleteGroupsRequest

try:
    from .test_group_harness import FAST, REBALANCE, SESSION, T0, Shell
except ImportError:
    from test_group_harness import FAST, REBALANCE, SESSION, T0, Shell

DAY_MS = 24 * 3600 * 1000


def write_log(path: Path, records: list[Record], rng: random.Random, *, delete_retention_ms: int = DAY_MS) -> Log:
    """``records`` in batches of 1-6, one timestamp per batch (1 ms apart from T0), into a
    compacted log with small segments so that most of it is cleanable."""
    log = Log(
        path,
        LogConfig(segment_bytes=2048, cleanup_policy="compact", min_cleanable_dirty_ratio=0.0, delete_retention_ms=delete_retention_ms),
        now_ms=T0,
    )
    i = 0
    while i < len(records):
        chunk = records[i : i + rng.randint(1, 6)]
        ts = T0 + i
        batch = batch_format.build_batch_columns([v for _, v in chunk], [k for k, _ in chunk], timestamp_ms=ts, producer_id=0, producer_epoch=0, base_sequence=i)
        log.append_as_leader(batch, leader_epoch=0, now_ms=ts)
        i += len(chunk)
    log.checkpoint_high_watermark(log.log_end_offset)
    return log


def read_back(log: Log, fetch_bytes: int = 1500) -> list[Record]:
    """The partition as a loading coordinator reads it: fetch after fetch from the log start
    (small fetches, so that some start inside a gap the cleaner left)."""
    out: list[Record] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, fetch_bytes)
        assert data, f"empty read at {offset} below the log end {log.log_end_offset}"
        records, offset, _ = take_in(data, offset, producer_id=0)
        out.extend(records)
    return out


def loaded(records: list[Record], now_ms: int, config: GroupConfig = FAST) -> GroupCoordinatorState:
    core = GroupCoordinatorState(config, 0, 1)
    core.load(well_formed(records, on_malformed=lambda exc: pytest.fail(str(exc))), now_ms)
    return core


def snapshot(core: GroupCoordinatorState) -> dict:
    """Everything load() rebuilds of each group."""
    out = {}
    for gid in core.group_ids():
        g = core.group(gid)
        members = sorted((m, x.assignment, x.group_instance_id) for m, x in g.members.items())
        out[gid] = (g.state, g.generation_id, g.protocol_type, g.protocol, g.leader, g.state_timestamp_ms, members, core.committed_offsets(gid))
    return out


def clean_until_done(log: Log, now_ms: int) -> CleanResult:
    total = CleanResult()
    while True:
        r = log.clean(now_ms)
        if not r.segments_cleaned:
            return total
        total.records_removed += r.records_removed
        total.tombstones_removed += r.tombstones_removed


# -- hand-made histories ---------------------------------------------------------------------


def _member(member_id: str) -> MemberValue:
    return MemberValue(member_id, None, "client", "/host", 30_000, 10_000, b"sub", b"assigned-" + member_id.encode())


def history() -> list[Record]:
    """Offsets superseded many times, an offset tombstoned and committed again, an offset
    tombstoned for good, a group deleted and created again, a group deleted for good, and
    filler that pushes all of it below the active segment."""
    g0, g1, g2 = OffsetKey("g", "t", 0), OffsetKey("g", "t", 1), OffsetKey("g", "t", 2)
    recs: list[Record] = []
    for i in range(50):
        recs.append(offset_record(g0, OffsetValue(i, commit_timestamp_ms=T0 + i)))
        recs.append(offset_record(g1, OffsetValue(100 + i, commit_timestamp_ms=T0 + i)))
    recs.append(offset_record(g0, None))  # expired ...
    recs.append(offset_record(g0, OffsetValue(7, "after", 3, T0 + 60)))  # ... and committed again
    recs.append(offset_record(g1, None))  # gone for good
    recs.append(offset_record(g2, OffsetValue(5, commit_timestamp_ms=T0 + 61)))
    recs.append(group_record(GroupKey("g"), GroupValue("consumer", 1, "range", "a", T0, [_member("a")])))
    recs.append(group_record(GroupKey("g"), None))  # deleted ...
    recs.append(group_record(GroupKey("g"), GroupValue("consumer", 4, "range", "b", T0 + 70, [_member("b")])))  # ... re-created
    recs.append(group_record(GroupKey("gone"), GroupValue("consumer", 2, None, None, T0, [])))
    recs.append(offset_record(OffsetKey("gone", "t", 0), OffsetValue(9, commit_timestamp_ms=T0)))
    recs.append(offset_record(OffsetKey("gone", "t", 0), None))
    recs.append(group_record(GroupKey("gone"), None))
    recs.append(coordinator_epoch_record(0, 0))
    for i in range(60):  # another group's commits, so the records above get sealed and cleaned
        recs.append(offset_record(OffsetKey("filler", "t", i % 3), OffsetValue(i, commit_timestamp_ms=T0 + 100 + i)))
        recs.append(coordinator_epoch_record(0, i + 1))
    return recs


@pytest.mark.parametrize("tombstones", ["kept", "expired"])
def test_a_cleaned_partition_loads_the_same_groups_and_offsets(tmp_path, tombstones):
    recs = history()
    log = write_log(tmp_path, recs, random.Random(1))
    now = T0 + (2 * DAY_MS if tombstones == "expired" else 1_000)
    result = clean_until_done(log, T0 + 1_000)
    if tombstones == "expired":  # first passed above; by now delete.retention.ms (a day) is over
        later = log.clean(now)  # due however clean the log is (KIP-534)
        result.records_removed += later.records_removed
        result.tombstones_removed += later.tombstones_removed
    compacted = read_back(log)
    assert result.records_removed > len(recs) // 2 and len(compacted) < len(recs) // 3
    if tombstones == "expired":
        assert result.tombstones_removed > 0 and all(v is not None for _, v in compacted[: len(compacted) // 2])
    else:
        assert any(v is None for _, v in compacted)
    # the offsets are not contiguous any more: a coordinator read it across gaps
    assert log.read(0, 1 << 20) and batch_format.read_header(log.read(1, 1 << 20)).base_offset > 1

    before, after = loaded(recs, now), loaded(compacted, now)
    assert snapshot(after) == snapshot(before)
    assert {tp: o.offset for tp, o in after.committed_offsets("g").items()} == {("t", 0): 7, ("t", 2): 5}
    assert after.committed_offsets("g")[("t", 0)].metadata == "after"
    g = after.group("g")
    assert g.generation_id == 4 and list(g.members) == ["b"] and g.members["b"].assignment == b"assigned-b"
    assert "gone" not in after.group_ids()


def test_a_partition_left_with_only_a_key_s_tombstone_loads_without_it(tmp_path):
    """A tombstone that is the only record left of its key (the values before it cleaned)
    removes nothing and creates nothing on load."""
    recs = [offset_record(OffsetKey("g", "t", 0), OffsetValue(i)) for i in range(40)]
    recs += [offset_record(OffsetKey("g", "t", 0), None), group_record(GroupKey("g"), None)]
    recs += [coordinator_epoch_record(0, i) for i in range(60)]
    log = write_log(tmp_path, recs, random.Random(2))
    clean_until_done(log, T0 + 1_000)
    compacted = read_back(log)
    assert [v for k, v in compacted if k == recs[0][0]] == [None]
    assert loaded(compacted, T0 + 1_000).group_ids() == []


def test_malformed_records_in_a_cleaned_partition_are_skipped_not_fatal(tmp_path):
    recs = [offset_record(OffsetKey("g", "t", 0), OffsetValue(i)) for i in range(30)]
    recs.append((recs[0][0], b"\xc1garbage"))  # the last value of that key is corrupt
    recs.append(offset_record(OffsetKey("g", "t", 1), OffsetValue(3)))
    recs += [coordinator_epoch_record(0, i) for i in range(60)]
    log = write_log(tmp_path, recs, random.Random(3))
    clean_until_done(log, T0 + 1_000)
    bad: list[DecodeError] = []
    good = well_formed(read_back(log), bad.append)
    assert len(bad) == 1 and "not msgpack" in str(bad[0])
    core = GroupCoordinatorState(FAST, 0, 1)
    core.load(good, T0)
    assert {tp: o.offset for tp, o in core.committed_offsets("g").items()} == {("t", 1): 3}


# -- random histories through the coordinator ------------------------------------------------


def random_history(seed: int) -> Shell:
    """Commits to a few groups (simple and by members of a generation), rebalances, leaves,
    DeleteGroups and retention expiry, all persisted."""
    rng = random.Random(seed)
    s = Shell()
    members: dict[str, tuple[list[str], int]] = {}
    for _ in range(150):
        op = rng.random()
        gid = rng.choice(["a", "b", "c", "d"])
        if op < 0.45:
            if gid in members:
                ms, gen = members[gid]
                s.commit(gid, {("t", rng.randrange(4)): rng.randrange(10_000)}, gen, rng.choice(ms))
            elif s.group(gid) is None or not s.group(gid).members:
                s.commit(gid, {("t", rng.randrange(4)): rng.randrange(10_000), ("u", 0): rng.randrange(10)})
        elif op < 0.55 and gid not in members and (s.group(gid) is None or not s.group(gid).members):
            ms, gen, _ = s.form_group(gid, rng.randint(1, 2))
            members[gid] = (ms, gen)
        elif op < 0.65 and gid in members:
            ms, _ = members.pop(gid)
            s.leave(gid, *[(m, None) for m in ms])
        elif op < 0.75 and gid not in members:
            s.call(DeleteGroupsRequest([gid]))
        else:
            s.advance(rng.choice([10, 1_000, 30_000, 600_000, 600_000, 3_700_000]))  # retention: 60 min
        s.replies.clear()
    s.advance(REBALANCE + SESSION)
    s.replies.clear()
    s.commit("e", {("t", 0): seed})  # a group with an offset at the end, whatever happened
    return s


@pytest.mark.parametrize("seed", range(12))
def test_random_histories_load_the_same_after_cleaning(tmp_path, seed):
    s = random_history(seed)
    rng = random.Random(seed)
    recs = list(s.log) + [coordinator_epoch_record(0, i) for i in range(40)]  # seal the history
    log = write_log(tmp_path, recs, rng, delete_retention_ms=rng.choice([0, DAY_MS]))
    result = clean_until_done(log, s.now)
    compacted = read_back(log)
    assert result.records_removed > 0 and len(compacted) < len(recs)
    before, after = loaded(recs, s.now), loaded(compacted, s.now)
    assert snapshot(after) == snapshot(before), seed
    # and both equal the coordinator that wrote the log (what it serves now)
    def offsets(core: GroupCoordinatorState) -> dict:
        return {g: o for g in core.group_ids() if (o := core.committed_offsets(g))}

    assert offsets(after) == offsets(s.coord) and offsets(after), seed


# -- the driver on a cleaned partition -------------------------------------------------------


def test_the_driver_reloads_a_cleaned_partition_and_fences_above_the_old_incarnation(tmp_path):
    """A coordinator commits the same partitions over and over; the cleaner runs; the next
    incarnation reads the cleaned partition (across its gaps), serves exactly the last
    offsets, and fences at a producer epoch above the old one (the old fence record is the
    last of its key, so the cleaner keeps the epoch the next incarnation must beat)."""
    from kcoord.protocol.errors import ErrorCode
    from kcoord.protocol.group import OffsetCommitPartition, OffsetCommitRequest

    try:
        from .manual_clock import ManualClock
        from .test_group_driver import Leader, driver_on, fetch_offset
    except ImportError:
        from manual_clock import ManualClock
        from test_group_driver import Leader, driver_on, fetch_offset

    clock = ManualClock(T0)
    log = Log(tmp_path, LogConfig(segment_bytes=4096, cleanup_policy="compact", min_cleanable_dirty_ratio=0.0), now_ms=T0)
    leader = Leader(clock, log)
    first = driver_on(leader, clock)
    clock.run_until(clock.now + 1_000)
    assert first.loaded
    last: dict[int, int] = {}
    for i in range(300):
        p = i % 3
        got: list = []
        first.serve(OffsetCommitRequest("g", -1, "", topics={"t": {p: OffsetCommitPartition(i)}}), got.append)
        clock.run_until(clock.now + 10)
        assert got and got[0].topics["t"][p] == ErrorCode.NONE
        last[p] = i
    first.close()
    end = log.log_end_offset
    result = log.clean(clock.now, leader.replica.state.hw)
    assert result.records_removed > 250 and log.log_end_offset == end
    second = driver_on(leader, clock)
    clock.run_until(clock.now + 1_000)
    assert second.loaded and second.producer_epoch > first.producer_epoch
    assert second.load_info["records"] < 60, second.load_info  # not the 301 records written
    answer = fetch_offset(second, clock, "g")
    assert {p: v.offset for p, v in answer.offsets["t"].items()} == last
    got = []
    second.serve(OffsetCommitRequest("g", -1, "", topics={"t": {0: OffsetCommitPartition(1_000)}}), got.append)
    clock.run_until(clock.now + 10)
    assert got[0].topics["t"][0] == ErrorCode.NONE


def test_the_newest_producer_epoch_survives_cleaning_so_the_next_incarnation_fences_above_it(tmp_path):
    """An incarnation moves to a new producer epoch after an append with an unknown outcome,
    then writes only tombstones, and the partition idles until they expire and the segment
    rolls. Were the cleaner to remove them all, the next incarnation's replay would see the
    older epoch only and fence at the epoch the leader already holds (taken for a duplicate)
    -- and reads below the log end would find no batch. The log's last record stays, with its
    batch's epoch."""
    from kcoord.protocol.errors import ErrorCode
    from kcoord.protocol.group import DeleteGroupsResponse, OffsetCommitPartition, OffsetCommitRequest

    try:
        from .manual_clock import ManualClock
        from .test_group_driver import Leader, driver_on
    except ImportError:
        from manual_clock import ManualClock
        from test_group_driver import Leader, driver_on

    clock = ManualClock(T0)
    cfg = LogConfig(segment_bytes=4096, segment_ms=1_000, cleanup_policy="compact", min_cleanable_dirty_ratio=0.0, delete_retention_ms=1_000)
    log = Log(tmp_path, cfg, now_ms=T0)
    leader = Leader(clock, log)
    first = driver_on(leader, clock)
    clock.run_until(clock.now + 1_000)
    got: list = []
    first.serve(OffsetCommitRequest("g", -1, "", topics={"t": {0: OffsetCommitPartition(5)}}), got.append)
    clock.run_until(clock.now + 10)
    assert got[0].topics["t"][0] == ErrorCode.NONE
    leader.refuse = lambda req: ErrorCode.REQUEST_TIMED_OUT  # outcome unknown: a new epoch
    first.serve(OffsetCommitRequest("g", -1, "", topics={"t": {0: OffsetCommitPartition(6)}}), got.append)
    clock.run_until(clock.now + 5_000)
    leader.refuse = lambda req: None
    assert first.producer_epoch == 1
    first.serve(DeleteGroupsRequest(["g"]), got.append)  # tombstones only, at epoch 1
    clock.run_until(clock.now + 10)
    assert isinstance(got[-1], DeleteGroupsResponse) and got[-1].results == {"g": ErrorCode.NONE}
    first.close()
    clock.run_until(clock.now + 1_000)
    log.maybe_roll(clock.now)
    assert log.clean(clock.now, leader.replica.state.hw).tombstones_removed == 0  # first passed now
    clock.run_until(clock.now + 5_000)
    result = log.clean(clock.now, leader.replica.state.hw)
    assert result.tombstones_removed == 1 and log.segments[-1].size_bytes == 0  # the offset's; the group's is the last
    headers = [h for _, h in batch_format.iter_headers(log.read(0, 1 << 20))]
    assert headers[-1].producer_epoch == 1 and headers[-1].next_offset == log.log_end_offset

    second = driver_on(leader, clock)
    clock.run_until(clock.now + 2_000)
    assert second.loaded and second.producer_epoch == 2
    assert leader.replica.state.log.producer_state.get(0).epoch == 2  # its fence record landed
    got = []
    second.serve(OffsetCommitRequest("g", -1, "", topics={"t": {0: OffsetCommitPartition(7)}}), got.append)
    clock.run_until(clock.now + 10)
    assert got[0].topics["t"][0] == ErrorCode.NONE


# -- transactional offsets (KIP-447) ---------------------------------------------------------


def random_txn_history(seed: int) -> Shell:
    """Transactional commits of three producers to a few groups, their COMMIT and ABORT
    markers, plain commits, DeleteGroups and retention, all persisted."""
    from kcoord.protocol.txn import TxnOffsetCommitRequest, TxnOffsetMarkerRequest
    from kcoord.protocol.group import OffsetCommitPartition

    rng = random.Random(seed)
    s = Shell()
    epochs = {11: 0, 12: 0, 13: 0}
    for _ in range(200):
        op = rng.random()
        gid = rng.choice(["a", "b", "c"])
        pid = rng.choice(list(epochs))
        if op < 0.4:
            topics = {"t": {rng.randrange(3): OffsetCommitPartition(rng.randrange(10_000))}}
            s.send(TxnOffsetCommitRequest("tx", gid, pid, epochs[pid], topics=topics))
        elif op < 0.55:
            s.commit(gid, {("t", rng.randrange(3)): rng.randrange(10_000)})
        elif op < 0.8:
            epochs[pid] += 1
            s.send(TxnOffsetMarkerRequest(pid, epochs[pid], 0, rng.random() < 0.6, 0))
        elif op < 0.85:
            s.send(DeleteGroupsRequest([gid]))
        else:
            s.advance(rng.choice([10, 1_000, 600_000, 3_700_000]))
        s.replies.clear()
    return s


@pytest.mark.parametrize("seed", range(8))
def test_pending_transactional_offsets_load_the_same_after_cleaning(tmp_path, seed):
    """The cleaner keeps pending offsets ([4, ...] keys without a tombstone yet) and drops
    resolved ones: a coordinator loading the cleaned partition has the same pending and
    committed offsets and producer epochs as the one that wrote it."""
    s = random_txn_history(seed)
    rng = random.Random(seed)
    recs = list(s.log) + [coordinator_epoch_record(0, i) for i in range(40)]
    log = write_log(tmp_path, recs, rng, delete_retention_ms=rng.choice([0, DAY_MS]))
    result = clean_until_done(log, s.now)
    compacted = read_back(log)
    assert result.records_removed > 0
    after = loaded(compacted, s.now)
    groups = set(s.coord.group_ids()) | set(after.group_ids())
    assert {g: after.committed_offsets(g) for g in groups} == {g: s.coord.committed_offsets(g) for g in groups}
    def txn(core: GroupCoordinatorState) -> dict:
        return {g: {pid: dict(o) for pid, o in core.group(g).txn_offsets.items()} for g in groups if core.group(g) is not None}

    assert txn(after) == txn(s.coord)
    assert after.txn_producers() == s.coord.txn_producers()



def test_txn_histories_leave_pending_offsets_to_check():
    """The histories above are not vacuous: most end with offsets pending and committed."""
    ends = [random_txn_history(seed).coord for seed in range(8)]
    assert sum(any(c.pending_txn_offsets(g) for g in c.group_ids()) for c in ends) >= 5
    assert sum(any(c.committed_offsets(g) for g in c.group_ids()) for c in ends) >= 5
