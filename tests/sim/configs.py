"""Topic config versions: what operators asked for, in order, and what each replica runs.

Invariant **config**: a topic config the controller stored is never replaced by an older one
on any replica. The versions are the configs the controller stores, in its order (version 0
is the creation config): operators' alters of one topic go one at a time, each retried
until it is acknowledged (:class:`~tests.sim.admin.Admin`), but a copy of an earlier alter
the network delivers late is applied after later ones (the controller's alters are
last-writer-wins, as Kafka's are: sim seed 57242), and everything after it builds on it. A
replica runs version i when its log and replication settings are those of version i.
Versions repeat (flush.messages on, off, on again), so a replica's version is followed step
by step: when its settings change, it moves to the earliest later version with those
settings; settings that only an earlier version had mean it went back.

The number is kept per replica, not per process, and checked while the replica takes part
(leads or follows). A process Ray restarts runs on its creation arguments, an older config,
until a LeaderAndIsr brings the current one; until then it must not act on it: no
retention or cleaner pass may change its log (issue 32, finding 4 -- a restarted replica
that deletes by a retention the operator has since turned off). Ghosts (older processes
still running, cut off from the controller) are not checked: they cannot hear of changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kcoord.log import LogConfig
from kcoord.replication.config import ReplicationConfig

if TYPE_CHECKING:
    from .checks import History
    from .processes import ReplicaProcess
    from .scenario import TopicSpec


def settings(config: dict[str, str]) -> tuple:
    """What a replica runs with, from a topic config: the log's and replication's."""
    return (LogConfig.from_topic_config(config), ReplicationConfig.from_topic_config(config))


class ConfigHistory:
    def __init__(self, history: "History", broker_config: dict[str, str]) -> None:
        self.history = history
        self.broker_config = dict(broker_config)
        self.versions: dict[str, list[dict[str, str]]] = {}
        self.running: dict[tuple[str, int, int], int] = {}  # replica -> version (of _stored) it runs
        # the settings of each config the controller stored, in its order, and when
        self._stored: dict[str, list[tuple]] = {}
        self._stored_at: dict[str, list[int]] = {}
        self._stored_version: dict[str, int] = {}
        self._seen: dict[str, tuple] = {}  # process -> (log config, replication config) objects checked
        self._stale: dict[str, tuple] = {}  # process running an older version, not taking part -> its log then
        self.checks = 0

    def add_topic(self, spec: "TopicSpec") -> None:
        base = {**self.broker_config, **spec.config()}
        self.versions[spec.name] = [base]
        self._stored[spec.name] = [settings(base)]
        self._stored_at[spec.name] = [0]
        self._stored_version[spec.name] = 0

    def latest(self, topic: str) -> dict[str, str]:
        return self.versions[topic][-1]

    def propose(self, topic: str, changes: dict[str, str | None], now: int) -> int:
        cfg = dict(self.versions[topic][-1])
        for k, v in changes.items():
            if v is None:
                cfg.pop(k, None)
            else:
                cfg[k] = v
        self.versions[topic].append(cfg)
        if ReplicationConfig.from_topic_config(cfg).min_insync_replicas < 2:
            for part in self.history.parts.values():
                if part.tp[0] == topic and part.spec.lossy:
                    part.weakened_at.append(now)  # from now the controller may apply it
        return len(self.versions[topic]) - 1

    def on_stored(self, topic: str, config_version: int, config: dict[str, str], now: int) -> None:
        """The controller stored ``topic``'s record: a new config version if its version grew."""
        if topic not in self._stored or config_version <= self._stored_version[topic]:
            return
        self._stored_version[topic] = config_version
        self._stored[topic].append(settings(config))
        self._stored_at[topic].append(now)

    def check(self, proc: "ReplicaProcess", now: int) -> None:
        r = proc.replica
        if r is None or proc.is_ghost:
            return
        if r.role.value not in ("leader", "follower"):
            self._check_idle(proc, now)
            return
        self._stale.pop(proc.incarnation_id, None)
        log_config, replication = r.log.config, r.config
        ident = (log_config, replication)
        seen = self._seen.get(proc.incarnation_id)
        if seen is not None and seen[0] is ident[0] and seen[1] is ident[1]:
            return
        self._seen[proc.incarnation_id] = ident
        self.checks += 1
        topic = proc.topic
        versions = self._stored.get(topic)
        if versions is None:
            return
        key = (topic, proc.partition, proc.broker)
        current = self.running.get(key)
        running = (log_config, replication)
        matches = [i for i, v in enumerate(versions) if v == running]
        if current is None and matches:
            self.running[key] = matches[0]  # the earliest: versions repeat, and it only moves on
            return
        if current in matches:
            return
        later = [i for i in matches if current is None or i > current]
        if later:
            self.running[key] = later[0]
            return
        if current is None:
            self.history.fail("config", now, f"{topic}-{proc.partition}: replica {proc.broker} runs settings of no config version: {_diff(versions[-1], running)}")
            return
        what = f"version {matches[-1]}" if matches else "settings of no version"
        how = "a new process of it took part with" if seen is None else "it now runs"
        self.history.fail(
            "config",
            now,
            f"{topic}-{proc.partition}: replica {proc.broker} ran config version {current} "
            f"({self._describe(topic, current)}), and {how} {what}"
            + (f" ({self._describe(topic, matches[-1])})" if matches else f": {_diff(versions[current], running)}")
            + f" ({proc.incarnation_id}, role {r.role.value if hasattr(r.role, 'value') else r.role})",
        )
        if matches:
            self.running[key] = matches[-1]

    def _check_idle(self, proc: "ReplicaProcess", now: int) -> None:
        """A process not taking part (not told its role yet) that runs an older version than
        its replica ran must not act on it: its log's start and segments stay as they are."""
        r = proc.replica
        key = (proc.topic, proc.partition, proc.broker)
        current = self.running.get(key)
        versions = self._stored.get(proc.topic)
        if current is None or versions is None or r.role.value == "offline":
            return
        log = r.log
        segments = getattr(log, "_segments", None)
        state = (log.log_start_offset, segments[0].base_offset if segments else -1, r.last_clean)
        running = (log.config, r.config)
        if (
            running == versions[current]
            or log.config == versions[current][0]  # only replication settings differ: its upkeep is right
            or any(i > current for i, v in enumerate(versions) if v == running)
        ):
            self._stale.pop(proc.incarnation_id, None)  # told the current config (or runs one as good)
            return
        stale = self._stale.get(proc.incarnation_id)
        if stale is None:
            self._stale[proc.incarnation_id] = state
            return
        moved = state[:2] != stale[:2]
        cleaned = state[2] is not stale[2] and state[2] is not None and state[2].segments_cleaned > 0
        if moved or cleaned:
            self._stale[proc.incarnation_id] = state
            self.history.fail(
                "config",
                now,
                f"{proc.topic}-{proc.partition}: replica {proc.broker} ran config version {current} ({self._describe(proc.topic, current)}); "
                f"a new process of it ({proc.incarnation_id}), not told its role yet, runs an older config and acted on it: "
                + (
                    f"retention moved its log start from {stale[0]} to {state[0]} (first segment {stale[1]} -> {state[1]})"
                    if moved
                    else f"the cleaner rewrote segments {state[2].segments}"
                ),
            )

    def _describe(self, topic: str, index: int) -> str:
        """Version ``index`` of the controller's order: what changed, and when it was stored."""
        if index == 0:
            return "the creation config"
        prev, cur = self._stored[topic][index - 1], self._stored[topic][index]
        return f"{_diff(prev, cur)}, stored at {self._stored_at[topic][index]} ms"


def _diff(want: tuple, got: tuple) -> str:
    out = []
    for a, b in zip(want, got):
        for name in a.__dataclass_fields__:
            x, y = getattr(a, name), getattr(b, name)
            if x != y:
                out.append(f"{name} {x!r} vs {y!r}")
    return "; ".join(out) or "no difference"


__all__ = ["ConfigHistory", "settings"]
