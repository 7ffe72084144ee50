"""Old path of :mod:`kcoord.group.coordinator_driver` (named like the replica's and the
controller's drivers); kept for callers outside this repository."""

from .coordinator_driver import CoordinatorTimeouts, GroupCoordinatorDriver

__all__ = ["CoordinatorTimeouts", "GroupCoordinatorDriver"]
