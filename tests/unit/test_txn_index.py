"""The last stable offset and the aborted-transaction index (docs/transactions.md section 1):
Kafka's 34-byte entries per segment, surviving restart, crash recovery, retention,
DeleteRecords, truncation and the cleaner; the file log and the memory log agree."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from kcoord import records as R
from kcoord.log import Log, LogConfig, MemoryLog
from kcoord.log.txn_index import ENTRY_SIZE, AbortedTxn, CorruptTxnIndex, TxnIndex, decode, encode, txn_index_path
from sim.disk import SimDisk

T = 1_700_000_000_000
DIR = Path("/sim/txn")


class Writer:
    """Transactional producers writing to one log as its leader."""

    def __init__(self, log):
        self.log = log
        self.seq: dict[int, int] = {}
        self.epoch: dict[int, int] = {}

    def data(self, pid: int, n: int = 2, *, key: bytes = b"k", txn: bool = True) -> int:
        seq = self.seq.get(pid, 0)
        b = R.build_batch([(key, b"v%d" % i) for i in range(n)], producer_id=pid, producer_epoch=self.epoch.get(pid, 0), base_sequence=seq, timestamp_ms=T, transactional=txn)
        self.seq[pid] = seq + n
        return self.log.append_as_leader(b, 0, T).base_offset

    def end(self, pid: int, commit: bool, coordinator_epoch: int = 0) -> int:
        info = self.log.append_control_as_leader(commit=commit, producer_id=pid, producer_epoch=self.epoch.get(pid, 0), coordinator_epoch=coordinator_epoch, leader_epoch=0, now_ms=T)
        return info.base_offset

    def plain(self, n: int = 1, key: bytes = b"k") -> int:
        return self.log.append_as_leader(R.build_batch([(key, b"p")] * n, timestamp_ms=T), 0, T).base_offset


def test_entries_have_kafkas_34_byte_layout_and_bad_files_are_corrupt():
    e = AbortedTxn(7, 10, 20, 21)
    assert ENTRY_SIZE == 34 and encode([e]) == b"\x00\x00" + (7).to_bytes(8, "big") + (10).to_bytes(8, "big") + (20).to_bytes(8, "big") + (21).to_bytes(8, "big")
    assert decode(encode([e, e._replace(last_offset=30)])) == [e, e._replace(last_offset=30)]
    with pytest.raises(CorruptTxnIndex):
        decode(encode([e])[:-1])
    with pytest.raises(CorruptTxnIndex):
        decode(b"\x00\x01" + encode([e])[2:])


def test_collect_returns_the_aborted_transactions_overlapping_a_fetch():
    idx = TxnIndex([AbortedTxn(1, 0, 5, 3), AbortedTxn(2, 3, 9, 10), AbortedTxn(3, 12, 14, 15)])
    assert [e.producer_id for e in idx.collect(0, 4)] == [1, 2]
    assert [e.producer_id for e in idx.collect(6, 12)] == [2]
    assert [e.producer_id for e in idx.collect(6, 13)] == [2, 3]
    assert idx.collect(15, 20) == []
    assert not idx.add(AbortedTxn(9, 9, 9, 10))  # one entry per marker offset


def test_the_lso_is_the_first_unstable_offset_or_the_high_watermark():
    log = MemoryLog(LogConfig(), now_ms=T)
    w = Writer(log)
    w.plain(2)  # 0-1
    assert log.last_stable_offset(2) == 2
    first = w.data(1)  # 2-3, ongoing
    w.plain(1)  # 4
    assert log.last_stable_offset(5) == first == 2 and log.last_stable_offset(1) == 1
    marker = w.end(1, commit=True)  # 5
    # decided, but the marker is not below the HW yet: a failover could still undo it
    assert log.last_stable_offset(5) == 2
    assert log.last_stable_offset(6) == 6
    assert log.last_stable_offset(5) == 5  # once stable, always: the HW only moves up
    assert marker == 5


def test_an_abort_adds_an_entry_with_the_lso_of_the_other_ongoing_transactions():
    log = MemoryLog(LogConfig(), now_ms=T)
    w = Writer(log)
    a = w.data(1)  # 0-1
    b = w.data(2)  # 2-3
    m = w.end(1, commit=False)  # 4
    assert log.txn_index.entries() == [AbortedTxn(1, a, m, b)]
    m2 = w.end(2, commit=False)
    assert log.txn_index.entries()[-1] == AbortedTxn(2, b, m2, m2 + 1)
    w.end(3, commit=True)  # commits are not indexed
    assert len(log.txn_index) == 2


def open_log(disk, **cfg):
    cfg.setdefault("segment_bytes", 400)
    return Log(DIR, LogConfig(**cfg), now_ms=T, fs=disk)


def txn_workload(log) -> list[AbortedTxn]:
    """Aborted and committed transactions of three producers across several segments."""
    w = Writer(log)
    for round_ in range(6):
        for pid in (1, 2, 3):
            w.data(pid)
        w.plain()
        for pid in (1, 2, 3):
            w.end(pid, commit=(pid + round_) % 2 == 0)
    return log.txn_index.entries()


def on_disk(disk, log) -> list[AbortedTxn]:
    out = []
    for seg in log.segments:
        path = txn_index_path(DIR, seg.base_offset)
        if disk.exists(path):
            entries = decode(disk.read_file(path))
            assert all(seg.base_offset <= e.last_offset < seg.next_offset for e in entries)
            out.extend(entries)
    return out


def test_each_segment_file_holds_the_aborts_whose_markers_it_holds_and_reopen_keeps_them():
    disk = SimDisk(random.Random(0), torn=0.0)
    log = open_log(disk)
    entries = txn_workload(log)
    assert len(log.segments) > 3 and len(entries) == 9
    assert on_disk(disk, log) == entries
    memory = MemoryLog(LogConfig(segment_bytes=400), now_ms=T)
    assert txn_workload(memory) == entries  # the memory log keeps the same index
    ongoing = log.producer_state.ongoing_transactions()
    log.close()
    again = open_log(disk)
    assert again.txn_index.entries() == entries and again.producer_state.ongoing_transactions() == ongoing


@pytest.mark.parametrize("sync", ["flush", "sealed"])
def test_a_power_loss_rebuilds_the_index_after_the_recovery_point(sync):
    disk = SimDisk(random.Random(1), torn=0.0)
    log = open_log(disk, segment_bytes=1500)
    entries = txn_workload(log)
    if sync == "flush":
        log.flush()  # the active segment is durable, its index file is not
    else:
        log.sync_sealed_segments()  # the active segment's data is lost
    rp = log._recovery_point
    assert any(e.last_offset >= rp for e in entries) and any(e.last_offset < rp for e in entries)
    disk.power_loss()
    again = open_log(disk, segment_bytes=1500)
    kept = [e for e in entries if e.last_offset < again.log_end_offset]
    assert again.txn_index.entries() == kept and on_disk(disk, again) == kept
    assert again.log_end_offset == (log.log_end_offset if sync == "flush" else rp)


def test_a_corrupt_index_file_below_the_recovery_point_is_rebuilt():
    disk = SimDisk(random.Random(2), torn=0.0)
    log = open_log(disk)
    entries = txn_workload(log)
    log.close()
    victim = next(s.base_offset for s in log.segments if any(s.base_offset <= e.last_offset < s.next_offset for e in entries))
    path = txn_index_path(DIR, victim)
    fd = disk.open(path, 0o1 | 0o100 | 0o1000)  # O_WRONLY | O_CREAT | O_TRUNC
    disk.write(fd, b"garbage")
    disk.close(fd)
    again = open_log(disk)
    assert again.txn_index.entries() == entries and on_disk(disk, again) == entries
    assert any("aborted-transaction index" in n for n in again.recovery_report.notes)


def test_retention_and_delete_records_drop_the_entries_of_what_they_delete():
    disk = SimDisk(random.Random(3), torn=0.0)
    log = open_log(disk, retention_bytes=1)
    entries = txn_workload(log)
    mid = entries[4].last_offset
    log.advance_log_start_offset(mid)
    assert log.txn_index.entries() == [e for e in entries if e.last_offset >= mid]
    log.apply_retention(T, log.log_end_offset)
    start = log.log_start_offset
    assert log.txn_index.entries() == [e for e in entries if e.last_offset >= start]
    assert on_disk(disk, log) == log.txn_index.entries()
    assert not [n for n in disk.listdir(DIR) if n.endswith(".txnindex") and int(n[:20]) < log.segments[0].base_offset]
    log.close()
    assert open_log(disk).txn_index.entries() == [e for e in entries if e.last_offset >= start]


def test_truncation_drops_entries_past_the_new_end_and_the_producer_state_follows():
    disk = SimDisk(random.Random(4), torn=0.0)
    log = open_log(disk)
    entries = txn_workload(log)
    cut = entries[5].last_offset  # the marker at ``cut`` goes, its transaction is open again
    log.truncate_to(cut)
    assert log.txn_index.entries() == entries[:5] and on_disk(disk, log) == entries[:5]
    assert entries[5].producer_id in log.producer_state.ongoing_transactions()
    log.close()
    again = open_log(disk)
    assert again.txn_index.entries() == entries[:5]
    assert again.producer_state.ongoing_transactions() == log.producer_state.ongoing_transactions()


def test_truncate_fully_removes_every_index_file():
    disk = SimDisk(random.Random(5), torn=0.0)
    log = open_log(disk)
    txn_workload(log)
    log.truncate_fully_and_start_at(1000)
    assert len(log.txn_index) == 0 and not [n for n in disk.listdir(DIR) if n.endswith(".txnindex")]


def compacted(seed: int):
    disk = SimDisk(random.Random(seed), torn=0.0)
    return disk, open_log(disk, cleanup_policy="compact", segment_bytes=300, min_cleanable_dirty_ratio=0.0, delete_retention_ms=0)


def test_the_cleaner_removes_aborted_data_compacts_committed_data_keeps_markers_and_lets_no_aborted_write_supersede():
    disk, log = compacted(6)
    w = Writer(log)
    w.plain(1, key=b"a")  # 0: a's value before the transactions
    w.data(1, 1, key=b"a")  # 1: a, in a transaction that aborts
    w.data(2, 1, key=b"c")  # 2: c, in a transaction that commits
    w.data(2, 1, key=b"c")  # 3
    m1 = w.end(1, commit=False)  # 4
    m2 = w.end(2, commit=True)  # 5
    for _ in range(20):
        w.plain(1, key=b"b")  # superseded b's, enough to roll segments
    entries = log.txn_index.entries()
    result = log.clean(T + 10, log.log_end_offset, force=True)
    data = log.read(0, 1 << 20)
    records = [(r.offset, r.key) for r in R.iter_records(data)]
    assert (0, b"a") in records  # the aborted write superseded nothing...
    assert (1, b"a") not in records and result.aborted_removed == 1  # ...and is gone
    assert (2, b"c") not in records and (3, b"c") in records  # committed transactional data compacts
    kept = {h.base_offset: h for _, h in R.iter_headers(data)}
    assert kept[m1].attributes & R.CONTROL_BIT and kept[m2].attributes & R.CONTROL_BIT  # markers stay
    assert kept[1].record_count == 0 and kept[1].producer_id == 1  # producer 1's last batch, emptied
    assert sum(1 for _, k in records if k == b"b") < 20  # plain records were compacted
    assert log.txn_index.entries() == entries and on_disk(disk, log) == entries
    log.close()
    again = open_log(disk, cleanup_policy="compact", segment_bytes=300)
    assert again.txn_index.entries() == entries and again.producer_state.ongoing_transactions() == {}


def test_nothing_at_or_past_an_open_transaction_is_cleaned():
    disk, log = compacted(7)
    w = Writer(log)
    for _ in range(6):
        w.plain(1, key=b"b")
    first = w.data(1, 1, key=b"x")  # open
    for _ in range(20):
        w.plain(1, key=b"b")
    result = log.clean(T + 10, log.log_end_offset, force=True)
    assert 0 < result.cleanable_end <= first
    records = [(r.offset, r.key) for r in R.iter_records(log.read(0, 1 << 20))]
    assert sum(1 for o, k in records if k == b"b" and o > first) == 20  # nothing after it touched


def test_a_crash_after_the_log_start_passed_the_recovery_point_keeps_the_producers_it_deleted():
    """Producer state outlives its batches (KIP-360): after DeleteRecords past everything a
    producer wrote and a crash, the log reopens from the snapshot at its log start even
    though the recovery point is below it, so a retry of the producer's last batch is still
    a duplicate (sim seed 34 on stage's fault model: it was OUT_OF_ORDER_SEQUENCE_NUMBER)."""
    disk = SimDisk(random.Random(8), torn=0.0)
    log = open_log(disk)
    w = Writer(log)
    while len(log.segments) < 2:
        w.data(7, txn=False)  # an idempotent producer (its last batch rolled a segment)
    last_seq = w.seq[7] - 1
    while len(log.segments) < 3:
        w.plain()  # others after it, until the next roll
    log.advance_log_start_offset(log.segments[-1].base_offset)  # below: all of producer 7's
    assert log.producer_state.get(7) is not None and log._recovery_point < log.log_start_offset
    disk.kill()  # the process dies; the page cache stays
    again = open_log(disk)
    entry = again.producer_state.get(7)
    assert entry is not None and entry.last_seq == last_seq
    retry = R.build_batch([(b"k", b"v0"), (b"k", b"v1")], producer_id=7, producer_epoch=0, base_sequence=last_seq - 1, timestamp_ms=T)
    assert again.append_as_leader(retry, 0, T).duplicate


def test_a_topic_written_only_in_transactions_compacts():
    """A stateful query's changelog is written only in committed transactions: it must
    compact like any other topic, to the last value of each key."""
    disk, log = compacted(9)
    w = Writer(log)
    for i in range(60):  # 60 transactions of producers 1-3 over keys x, y
        pid = 1 + i % 3
        w.data(pid, 1, key=b"xy"[i % 2 : i % 2 + 1])
        w.end(pid, commit=True)
    w.plain(1, key=b"z")  # the active segment's
    before = [r.offset for r in R.iter_records(log.read(0, 1 << 20)) if r.key in (b"x", b"y")]
    result = log.clean(T + 10, log.log_end_offset, force=True)
    after = [(r.offset, r.key) for r in R.iter_records(log.read(0, 1 << 20)) if r.key in (b"x", b"y")]
    assert result.records_removed > 0 and len(after) < len(before) // 2
    assert after[-2:] == [(before[-2], b"x"), (before[-1], b"y")]  # the last value of each key stays
