"""File hints: Log.locate() points at exactly the bytes Log.read() returns, and
read_hinted() trusts those bytes only when they check out."""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from kcoord import records
from kcoord.log import Log, LogConfig, MemoryLog
from kcoord.log.hints import read_hinted
from kcoord.protocol.replication import FetchRequest
from kcoord.replication.replica import Replica

from replication_helpers import lai, produce, replies, leader_and_isr, list_offsets, offsets_for_epoch


def filled_log(tmp_path, batches=30, per=20, segment_bytes=1200) -> Log:
    log = Log(tmp_path / "log", LogConfig(segment_bytes=segment_bytes))
    for i in range(batches):
        log.append_as_leader(records.build_batch_columns([b"v%d-%d" % (i, j) for j in range(per)]), leader_epoch=1)
    return log


def test_locate_points_at_what_read_returns_across_segments(tmp_path):
    log = filled_log(tmp_path)
    assert len(log.segments) > 3
    for start in (0, 7, 150, 333, 599):
        for max_bytes in (1, 500, 5000, 1 << 20):
            for max_offset in (None, 420):
                expected = log.read(start, max_bytes, max_offset)
                spans = log.locate(start, max_bytes, max_offset)
                got = read_hinted(spans, start) if spans else b""
                assert got == expected, (start, max_bytes, max_offset)
    log.close()


@settings(max_examples=60, deadline=None)
@given(start=st.integers(0, 599), max_bytes=st.integers(1, 20000))
def test_locate_matches_read_property(tmp_path_factory, start, max_bytes):
    log = filled_log(tmp_path_factory.mktemp("p"), segment_bytes=900)
    try:
        spans = log.locate(start, max_bytes)
        assert (read_hinted(spans, start) if spans else b"") == log.read(start, max_bytes)
    finally:
        log.close()


def test_memory_log_has_no_files():
    log = MemoryLog()
    log.append_as_leader(records.build_batch_columns([b"x"]), leader_epoch=0)
    assert log.locate(0, 100) is None


def test_read_hinted_rejects_bytes_that_do_not_check_out(tmp_path):
    log = filled_log(tmp_path, batches=3, per=5, segment_bytes=1 << 20)
    spans = log.locate(0, 1 << 20)
    path, pos, length = spans[0]
    assert read_hinted(spans, 0) is not None
    assert read_hinted(spans, 7) is None, "first batch must hold the fetch offset"
    assert read_hinted([(path + ".gone", pos, length)], 0) is None, "missing file"
    assert read_hinted([(path, pos, length + 10)], 0) is None, "short read"
    assert read_hinted([(path, pos + 1, length - 1)], 0) is None, "not at a batch boundary"
    log.close()
    with open(path, "r+b") as f:  # the leader's file changed under the reader
        f.seek(pos + length - 3)
        f.write(b"\xff\xff\xff")
    assert read_hinted(spans, 0) is None, "CRC mismatch"
    os.truncate(path, 10)
    assert read_hinted(spans, 0) is None, "truncated file"


def test_replica_answers_same_node_fetch_with_hints_only(tmp_path):
    log = Log(tmp_path / "r", LogConfig())
    r = Replica("t", 0, 0, log, node_id="node-A")
    leader_and_isr(r, lai(0, 1, (0, 1)), 0)
    produce(r, records.build_batch_columns([b"a", b"b"]), "p", 0, acks=1)
    same = replies(r.fetch(FetchRequest("t", 0, 0, max_wait_ms=0, replica_id=1, current_leader_epoch=1, node_id="node-A"), "f1", 1))["f1"]
    other = replies(r.fetch(FetchRequest("t", 0, 0, max_wait_ms=0, replica_id=1, current_leader_epoch=1, node_id="node-B"), "f2", 2))["f2"]
    assert same.records == b"" and same.file_hint
    assert read_hinted(same.file_hint, 0) == other.records and other.file_hint is None
    log.close()
