"""Producer ids kept for an owner, with an epoch handed to one incarnation at a time.

A group coordinator fences its predecessors through the producer epoch it writes
``__consumer_offsets`` with: the partition leader refuses older epochs. The epoch must come
from an authority that hands each incarnation a higher one exactly once; the coordinator's
own reading of the log is no such authority (an old incarnation, cut off but running, read
the same log). So the controller keeps, per owner, the producer id, its epoch and the
incarnation that holds it, persisted before it answers (Kafka's transaction coordinator
keeps a transactional id's producer id and epoch the same way):

- an incarnation's first request (holding no epoch) gets the next epoch, and the previous
  holder is retired: a retired incarnation is answered PRODUCER_FENCED from then on;
- the holder may ask again, presenting the id and epoch it holds (after an append whose
  outcome it could not learn, so that append cannot land behind later ones): it gets the
  next epoch; anyone else presenting an epoch is answered PRODUCER_FENCED;
- a retry of either (the answer was lost) gets the same answer again;
- past epoch 32767 the owner moves to a fresh producer id at epoch 0.

Pure: ``grant`` returns the new record (to persist) and the answer.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable

import msgpack

from ..protocol.controller import InitProducerIdRequest, InitProducerIdResponse
from ..protocol.errors import ErrorCode

MAX_PRODUCER_EPOCH = 32767  # int16 in the batch header
RETIRED_KEPT = 16  # incarnations remembered as replaced (older ones: see the docstring)

PREFIX = "producer/"


def owned_producer_key(owner: str) -> str:
    return PREFIX + owner


@dataclass
class OwnedProducer:
    producer_id: int
    epoch: int
    incarnation: str
    retired: list[str] = field(default_factory=list)

    def encode(self) -> bytes:
        return msgpack.packb(asdict(self), use_bin_type=True)

    @classmethod
    def decode(cls, data: bytes) -> "OwnedProducer":
        return cls(**msgpack.unpackb(data, raw=False))


def _answer(record: OwnedProducer) -> InitProducerIdResponse:
    return InitProducerIdResponse(producer_id=record.producer_id, producer_epoch=record.epoch, count=1)


def grant(
    record: OwnedProducer | None, req: InitProducerIdRequest, fresh_id: Callable[[], int]
) -> tuple[OwnedProducer | None, InitProducerIdResponse]:
    """The owner's record after ``req`` (None: unchanged) and the answer. ``fresh_id()``
    allocates a producer id (only called when the epochs of the current one run out)."""
    inc = req.incarnation
    if not inc:
        return None, InitProducerIdResponse(ErrorCode.INVALID_REQUEST, "an owner's producer needs the requester's incarnation")
    if req.producer_epoch < 0:  # an incarnation's first request
        if record is not None and record.incarnation == inc:
            return None, _answer(record)  # a retry
        if record is not None and inc in record.retired:
            return None, InitProducerIdResponse(ErrorCode.PRODUCER_FENCED, f"incarnation {inc} of {req.owner} was replaced by {record.incarnation}")
        if record is None:
            if req.producer_id < 0:
                return None, InitProducerIdResponse(ErrorCode.INVALID_REQUEST, f"{req.owner} has no producer id yet: name the one to start from")
            return _next(req.producer_id, max(0, req.min_epoch), inc, [], fresh_id)
        retired = (record.retired + [record.incarnation])[-RETIRED_KEPT:]
        return _next(record.producer_id, max(record.epoch + 1, req.min_epoch), inc, retired, fresh_id)
    if record is None or record.incarnation != inc:
        holder = record.incarnation if record is not None else "nobody"
        return None, InitProducerIdResponse(ErrorCode.PRODUCER_FENCED, f"incarnation {inc} of {req.owner} does not hold its producer ({holder} does)")
    held = (req.producer_id, req.producer_epoch)
    current = (record.producer_id, record.epoch)
    if held == current:
        return _next(record.producer_id, max(record.epoch + 1, req.min_epoch), inc, record.retired, fresh_id)
    if req.producer_id != record.producer_id or req.producer_epoch < record.epoch:
        return None, _answer(record)  # a retry of a request already granted
    return None, InitProducerIdResponse(ErrorCode.INVALID_REQUEST, f"{req.owner}: epoch {req.producer_epoch} was never handed out (current {record.epoch})")


def _next(pid: int, epoch: int, inc: str, retired: list[str], fresh_id: Callable[[], int]) -> tuple[OwnedProducer, InitProducerIdResponse]:
    if epoch > MAX_PRODUCER_EPOCH:
        pid, epoch = fresh_id(), 0
    record = OwnedProducer(pid, epoch, inc, list(retired))
    return record, _answer(record)
