"""The leader role of a partition replica (:class:`Leader`, in :mod:`.core`) and its parts."""

from .core import Leader
from .deletes import DeleteWaiter
from .fetch import FetchWaiter
from .isr_proposals import UNKNOWN_OUTCOME
from .produce import MAX_PARKED_PER_PRODUCER, ParkedBatch
from .watermark import ProduceWaiter

__all__ = ["Leader", "DeleteWaiter", "FetchWaiter", "ParkedBatch", "ProduceWaiter", "MAX_PARKED_PER_PRODUCER", "UNKNOWN_OUTCOME"]
