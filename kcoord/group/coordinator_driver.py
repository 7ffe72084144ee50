"""The one driver of a group coordinator: partition ``i`` of ``__consumer_offsets``.

:class:`GroupCoordinatorDriver` owns one :class:`~kcoord.group.coordinator.GroupCoordinatorState`.
Loading the partition, fencing older incarnations, the one-in-flight append pipeline and the
timer are :class:`~kcoord.coordination.PartitionOwnerDriver`'s, shared with the transaction
coordinator's driver (its docstring states the rules); this class names the topic and its
records, and serves FindCoordinator while loading. The Ray actor
(``actors/group_coordinator.py``) and the simulation run this same class.
"""

from __future__ import annotations

import logging

from ..coordination.partition_owner import CoordinatorTimeouts, PartitionOwnerDriver
from ..protocol.codec import Message
from ..protocol.group import FindCoordinatorRequest, error_response
from ..protocol.services import GROUP_COORDINATOR
from ..runtime.actions import Action
from .coordinator import GroupCoordinatorState
from .records import OFFSETS_TOPIC, Record, coordinator_epoch_record, decode_record

logger = logging.getLogger("kcoord.group")


class GroupCoordinatorDriver(PartitionOwnerDriver):
    service = GROUP_COORDINATOR
    topic = OFFSETS_TOPIC
    role = "coordinator"
    logger = logger
    core: GroupCoordinatorState

    def _decode_record(self, key: bytes, value: bytes | None) -> object:
        return decode_record(key, value)

    def _epoch_record(self, epoch: int) -> Record:
        return coordinator_epoch_record(self.index, epoch)

    def _load_core(self, records: list[Record], now_ms: int) -> list[Action]:
        # The group core's load arms its timers; the tick right after the load runs them.
        self.core.load(records, now_ms)
        return []

    def _loaded_what(self) -> str:
        return f"{len(self.core.group_ids())} groups"

    def _serves_while_loading(self, request: Message) -> bool:
        return isinstance(request, FindCoordinatorRequest)

    def _error_response(self, request: Message, code: int, message: str) -> Message:
        return error_response(request, code, message)

    def _served(self, request: Message, token: int, actions: list[Action]) -> None:
        self._perform(actions)
        if self._on_change is not None:
            group_id = getattr(request, "group_id", None)
            self._on_change(group_id if isinstance(group_id, str) else None)


__all__ = ["CoordinatorTimeouts", "GroupCoordinatorDriver"]
