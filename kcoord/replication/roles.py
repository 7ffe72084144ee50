"""The roles a partition replica can have at a leader epoch."""

LEADER = "leader"
FOLLOWER = "follower"
NONE = "none"  # not told yet, or the partition is offline
