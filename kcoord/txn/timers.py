"""The transaction coordinator's timers: keys ``(kind, transactional_id, ...)`` in the keyed
deadline heap the group coordinator uses (:class:`kcoord.group.timers.Timers`)."""

from __future__ import annotations

from enum import Enum

from ..group.timers import Timers


class TimerKind(str, Enum):
    # (TIMEOUT, id): an ongoing transaction outlives its timeout; also a timed-out abort
    # whose write failed, tried again.
    TIMEOUT = "timeout"
    # (EXPIRE, id): an idle id reaches transactional.id.expiration.ms.
    EXPIRE = "expire"
    # (MARKER, id, topic, partition): re-send a marker that failed.
    MARKER = "marker"
    # (COMPLETE, id): every marker is written but the COMPLETE_* record failed: try again.
    COMPLETE = "complete"
    # (HOLD, id): the earliest deadline of the requests held while the id is busy.
    HOLD = "hold"


__all__ = ["TimerKind", "Timers"]
