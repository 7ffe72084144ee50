"""A retried bulk writer (explicit producer identity) answered OUT_OF_ORDER_SEQUENCE_NUMBER:
what the leader's DescribeProducers answer makes of the batch (idempotence.resume_verdict)."""

from __future__ import annotations

from kcoord.client.producer.batch import ProducerBatch
from kcoord.client.producer.idempotence import REFUSED, SEND, WAIT, WRITTEN, resume_verdict
from kcoord.protocol.replication import DescribeProducersResponse, ProducerState


def batch(first: int, n: int, pid: int = 7, epoch: int = 0) -> ProducerBatch:
    b = ProducerBatch("t", 0, 0.0, values=[b"v"] * n, producer_id=pid, producer_epoch=epoch, base_sequence=first)
    return b


def leader(last_seq: int, last_offset: int, hw: int, pid: int = 7, epoch: int = 0) -> DescribeProducersResponse:
    return DescribeProducersResponse(producers=[ProducerState(pid, epoch, last_seq, last_offset)], high_watermark=hw)


def test_a_batch_the_leader_holds_committed_was_written_by_an_earlier_attempt():
    assert resume_verdict(batch(0, 10), leader(99, 500, hw=501)) == WRITTEN
    assert resume_verdict(batch(90, 10), leader(99, 500, hw=501)) == WRITTEN  # exactly its last batch


def test_held_but_not_yet_committed_is_asked_again():
    """The leader may fail before replicating it: counting it written could lose it."""
    assert resume_verdict(batch(0, 10), leader(99, 500, hw=500)) == WAIT


def test_the_next_batch_is_sent_again():
    assert resume_verdict(batch(100, 10), leader(99, 500, hw=501)) == SEND
    assert resume_verdict(batch(0, 10), DescribeProducersResponse(high_watermark=0)) == SEND


def test_a_gap_a_straddle_or_another_epoch_fails_the_batch():
    assert resume_verdict(batch(120, 10), leader(99, 500, hw=501)) == REFUSED  # a gap: batches lost
    assert resume_verdict(batch(95, 10), leader(99, 500, hw=501)) == REFUSED  # not the batches it sent
    assert resume_verdict(batch(0, 10), leader(99, 500, hw=501, epoch=1)) == REFUSED
    assert resume_verdict(batch(5, 10), DescribeProducersResponse(high_watermark=0)) == REFUSED
    assert resume_verdict(batch(0, 10), leader(99, 500, hw=501, pid=8)) == SEND  # another producer only
