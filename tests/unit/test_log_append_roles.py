"""The log's two appends: as the leader (assigns offsets, stamps the epoch, hands back the
parsed header) and as a follower (keeps the leader's offsets); and the leader's produce
path, which parses a batch's header once per request."""

from __future__ import annotations

import pytest
from replication_helpers import batch, lai, leader_and_isr, make_replica, produce, replies

from kcoord import record
from kcoord.log import LogConfig, MemoryLog
from kcoord.protocol.errors import ErrorCode, KafkaError
from kcoord.record import header as header_module
from kcoord.replication.config import LOG_APPEND_TIME, ReplicationConfig


def test_a_leader_append_assigns_offsets_from_the_log_end_and_stamps_the_epoch():
    log = MemoryLog(LogConfig())
    first, second = batch(3, b"a"), batch(2, b"b")
    info = log.append_as_leader(first, 4, now_ms=10)
    assert (info.base_offset, info.last_offset, info.duplicate) == (0, 2, False)
    assert info.header == record.read_header(first)  # the batch as the producer sent it
    info = log.append_as_leader(second, 5, now_ms=11)
    assert (info.base_offset, info.last_offset) == (3, 4)
    stored = [h for _, h in record.iter_headers(log.read(0, 1 << 20))]
    assert [(h.base_offset, h.leader_epoch) for h in stored] == [(0, 4), (3, 5)]
    assert log.epoch_cache.entries == [(4, 0), (5, 3)]


def test_a_leader_append_takes_the_callers_parsed_header_and_parses_nothing(monkeypatch):
    data = batch(3)
    h = record.read_header(data)
    log = MemoryLog(LogConfig())
    parses = count_parses(monkeypatch)
    info = log.append_as_leader(data, 1, now_ms=10, header=h)
    assert parses == [] and info.header is h and info.base_offset == 0


def test_a_duplicate_leader_append_reports_the_original_offsets_and_the_header():
    log = MemoryLog(LogConfig())
    data = batch(2, producer_id=9, producer_epoch=0, base_sequence=0)
    log.append_as_leader(batch(1), 1, now_ms=1)
    first = log.append_as_leader(data, 1, now_ms=2)
    again = log.append_as_leader(data, 1, now_ms=3)
    assert again.duplicate and (again.base_offset, again.last_offset) == (first.base_offset, first.last_offset) == (1, 2)
    assert again.header == record.read_header(data) and log.log_end_offset == 3


def test_a_follower_append_keeps_the_leaders_offsets_and_bytes():
    leader = MemoryLog(LogConfig())
    for i in range(3):
        leader.append_as_leader(batch(2, b"%d" % i), 2, now_ms=i)
    fetched = leader.read(0, 1 << 20)
    follower = MemoryLog(LogConfig())
    info = follower.append_as_follower(fetched, now_ms=5)
    assert (info.base_offset, info.last_offset, info.record_count, info.header) == (0, 5, 6, None)
    assert follower.read(0, 1 << 20) == fetched and follower.epoch_cache.entries == [(2, 0)]
    # a leader's batches after a gap (a compacted log) keep their offsets; going back is refused
    later = record.stamp(batch(1), 9, 3)
    assert follower.append_as_follower(later, now_ms=6).base_offset == 9 and follower.log_end_offset == 10
    with pytest.raises(KafkaError) as err:
        follower.append_as_follower(record.stamp(batch(1), 4, 3), now_ms=7)
    assert err.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_a_follower_append_refuses_unstamped_producer_bytes_at_the_wrong_offset():
    follower = MemoryLog(LogConfig())
    follower.append_as_follower(record.stamp(batch(2), 0, 1), now_ms=0)
    with pytest.raises(KafkaError) as err:  # an unstamped batch says base offset 0: behind the LEO
        follower.append_as_follower(batch(1), now_ms=1)
    assert err.value.code == ErrorCode.OFFSET_OUT_OF_RANGE and follower.log_end_offset == 2


# -- the leader's produce path parses each request's batch header once ------------------------


def count_parses(monkeypatch) -> list[int]:
    """Record every batch header parse (every parse goes through header.HEADER)."""
    calls: list[int] = []
    real = header_module.HEADER

    class Counting:
        size = real.size

        def unpack_from(self, buf, pos=0):
            calls.append(pos)
            return real.unpack_from(buf, pos)

    monkeypatch.setattr(header_module, "HEADER", Counting())
    return calls


def leader(**cfg):
    r = make_replica(0, ReplicationConfig(**cfg))
    resp, _ = leader_and_isr(r, lai(0, 1, (0,)), 0)
    assert resp.error_code == 0 and r.role == "leader"
    return r


@pytest.mark.parametrize("timestamp_type", ["CreateTime", LOG_APPEND_TIME])
@pytest.mark.parametrize("acks", [1, -1])
def test_a_produce_request_parses_its_batch_header_once(monkeypatch, acks, timestamp_type):
    r = leader(message_timestamp_type=timestamp_type)
    produce(r, batch(2, producer_id=7, producer_epoch=0, base_sequence=0), "warm", 0, acks=acks)
    parses = count_parses(monkeypatch)
    out = replies(produce(r, batch(3, producer_id=7, producer_epoch=0, base_sequence=2), "p", 1, acks=acks))
    assert out["p"].error_code == 0 and out["p"].base_offset == 2
    assert len(parses) == 1, f"the header was parsed {len(parses)} times"


def test_a_held_batch_is_not_parsed_again_when_its_predecessor_arrives(monkeypatch):
    r = leader()
    parses = count_parses(monkeypatch)
    early = batch(1, b"c", producer_id=7, producer_epoch=0, base_sequence=2)
    assert replies(produce(r, early, "early", 0, acks=1)) == {}
    out = replies(produce(r, batch(2, producer_id=7, producer_epoch=0, base_sequence=0), "first", 1, acks=1))
    assert (out["first"].base_offset, out["early"].base_offset) == (0, 2)
    assert len(parses) == 2, "one parse per request"
