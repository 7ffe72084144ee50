"""Invariant **6**: what the simulation records of consumer groups (commits, offset fetches,
assignments), and the check of every Stable group a coordinator holds."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kcoord.group.metadata import STABLE
from kcoord.protocol.group import Assignment

if TYPE_CHECKING:
    from .checks import History
    from .processes import CoordinatorProcess


class GroupHistory:
    """Invariant 6, per (group, partition). Commits are numbered in the order members sent
    them. A fetch sent at time t must return the offset of the latest-sent commit that had
    been acknowledged by t, or of one sent after it (it may have been applied meanwhile) --
    never an older one: that would be a commit the coordinator lost (a load that skipped
    it) or one of a fenced generation or coordinator landing after a newer one."""

    def __init__(self, history: "History") -> None:
        self.history = history
        # (group, tp) -> [(offset, generation, acked)] in the order sent
        self.commits: dict[tuple[str, tuple[str, int]], list[list]] = {}
        self.owners: dict[tuple[str, int], dict[tuple[str, int], str]] = {}
        self.commits_acked = 0
        self.fetches_checked = 0

    def floor(self, group: str, tp: tuple[str, int]) -> int:
        """Index of the latest-sent acknowledged commit (-1: none yet)."""
        commits = self.commits.get((group, tp), ())
        for i in range(len(commits) - 1, -1, -1):
            if commits[i][2]:
                return i
        return -1

    def on_commit_sent(self, group: str, tp: tuple[str, int], offset: int, generation: int) -> int:
        commits = self.commits.setdefault((group, tp), [])
        commits.append([offset, generation, False])
        return len(commits) - 1

    def on_commit_acked(self, group: str, tp: tuple[str, int], index: int, now: int) -> None:
        self.commits_acked += 1
        self.commits[(group, tp)][index][2] = True

    def on_fetched(self, group: str, tp: tuple[str, int], offset: int, floor: int, sent: int, now: int) -> None:
        self.fetches_checked += 1
        if floor < 0:
            return
        commits = self.commits[(group, tp)]
        if offset == commits[floor][0] or any(c[0] == offset for c in commits[floor + 1 :]):
            return
        self.history.fail(
            "6",
            now,
            f"group {group} {tp[0]}-{tp[1]}: an offset fetch sent at {sent} ms returned {offset}, but the latest commit "
            f"acknowledged before it was {commits[floor][0]} (generation {commits[floor][1]}), and no commit sent since was {offset}",
        )

    def on_assignment(self, group: str, generation: int, member: str, owned: list[tuple[str, int]], now: int) -> None:
        owners = self.owners.setdefault((group, generation), {})
        for tp in owned:
            other = owners.setdefault(tp, member)
            if other != member:
                self.history.fail("6", now, f"group {group} generation {generation}: members {other} and {member} were both assigned {tp[0]}-{tp[1]}")

    def check_stable(self, proc: "CoordinatorProcess", topics: dict[str, int], now: int) -> None:
        core = proc.core
        if core is None:
            return
        for group_id in core.group_ids():
            g = core.group(group_id)
            if g is None or g.state != STABLE or not g.members:
                continue
            owned: dict[tuple[str, int], str] = {}
            subscribed: set[str] = set()
            for m in g.members.values():
                try:
                    from kcoord.protocol.group import Subscription

                    subscribed.update(Subscription.decode(m.metadata_for(g.protocol)).topics)
                except Exception:
                    pass
                if not m.assignment:
                    continue
                for tp in Assignment.decode(m.assignment).topic_partitions():
                    other = owned.setdefault(tp, m.member_id)
                    if other != m.member_id:
                        self.history.fail("6", now, f"group {group_id} is Stable in generation {g.generation_id} with {tp[0]}-{tp[1]} owned by {other} and {m.member_id}")
            wanted = {(t, p) for t in subscribed if t in topics for p in range(topics[t])}
            missing = wanted - set(owned)
            if missing:
                self.history.fail("6", now, f"group {group_id} is Stable in generation {g.generation_id} but nobody owns {sorted(missing)}")
