"""The controller (FailoverCoordinator's core), split by concept: see :mod:`.core`.

``from kcoord.replication.controller import ControllerState`` (and the names below) is the
import path every caller uses; the parts live in :mod:`.startup`, :mod:`.topics`,
:mod:`.isr_changes` and :mod:`.liveness`, sharing :class:`~.context.ControllerContext`.
"""

from ..controller_actions import (
    CREATED,
    EXISTS,
    FAILED,
    REPLACED,
    ControllerAction,
    CreateReplica,
    DeleteReplica,
    Persist,
    ReplicaId,
    Reply,
    SendHeartbeat,
    SendLeaderAndIsr,
)
from ..controller_config import ControllerConfig
from ..controller_metrics import ControllerMetrics
from ..topic_plan import LOG_KEYS, TOPIC_CONFIG_KEYS
from .context import ControllerContext
from .core import ControllerState

__all__ = [
    "CREATED",
    "EXISTS",
    "FAILED",
    "REPLACED",
    "ControllerAction",
    "ControllerConfig",
    "ControllerContext",
    "ControllerMetrics",
    "ControllerState",
    "CreateReplica",
    "DeleteReplica",
    "LOG_KEYS",
    "Persist",
    "ReplicaId",
    "Reply",
    "SendHeartbeat",
    "SendLeaderAndIsr",
    "TOPIC_CONFIG_KEYS",
]
