"""The roles a partition replica can have at a leader epoch.

A ``str`` enum: the role travels in heartbeat answers as its value, and compares equal to
it, so logs and the wire read "leader" rather than a number.
"""

from __future__ import annotations

import enum


class Role(str, enum.Enum):
    LEADER = "leader"
    FOLLOWER = "follower"
    NONE = "none"  # not told yet, or the partition is offline
    OFFLINE = "offline"  # its log had an I/O error: it serves nothing until restarted

    def __str__(self) -> str:
        return self.value


LEADER = Role.LEADER
FOLLOWER = Role.FOLLOWER
NONE = Role.NONE
OFFLINE = Role.OFFLINE
