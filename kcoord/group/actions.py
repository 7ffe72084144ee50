"""What the group coordinator state machine asks its shell to do.

Every entry point of :class:`~kcoord.group.coordinator.GroupCoordinatorState` returns a list
of these; the shell performs them in order. Pending client requests are identified by an
opaque ``token`` the shell chose when it passed the request in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..protocol.codec import Message


@dataclass(frozen=True)
class Reply:
    """Complete the pending request ``token`` with ``response``. JoinGroup and SyncGroup
    replies may come many calls after the request (the rebalance long-poll)."""

    token: Any
    response: Message


@dataclass(frozen=True)
class AppendRecords:
    """Append ``records`` (key, value-or-tombstone) to this coordinator's partition of
    ``__consumer_offsets`` with acks=all, then report the outcome with
    ``on_persisted(persist_id, error_code, now_ms)``.

    Appends must land in the order the AppendRecords actions were emitted (one append in
    flight, or an order-preserving pipeline); consecutive ones may be merged into one append
    as long as each id is reported. The state machine applies outcomes in emission order, so
    that its memory matches what a replay of the log would rebuild. (Not to be confused
    with the controller's ``Persist``, a metadata-store write.)"""

    persist_id: int
    records: list[tuple[bytes, bytes | None]] = field(default_factory=list)
    reason: str = ""


Action = Reply | AppendRecords
