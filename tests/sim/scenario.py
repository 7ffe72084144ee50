"""What a seed decides before the run starts: the cluster, its topics, clients and faults.

Everything is drawn from the kernel's one ``random.Random``, in a fixed order, so a seed
names one scenario. Scenarios mix:

* cluster shape: 3 or 5 brokers, either logical on one machine (Ray restarts crashed
  replicas; no power loss) or bound one per machine with a spare (replicas die with their
  machine, the controller re-binds and recreates them: placement is exercised);
* topics: 1-2 user topics of 1-3 partitions, RF 1, 3 or 5, ``min.insync.replicas`` 1 or 2,
  unclean election on or off, durability ``fsync`` (flush.messages=1), ``pagecache`` (no
  flush) or ``flushms`` (flush.ms); RF 1 topics always fsync (one copy is all there is);
* clients: idempotent acks=all producers, plain acks=1 producers, readers, and -- in group
  scenarios -- consumer-group members over 1-2 group coordinators whose
  ``__consumer_offsets`` partitions are replicated like any topic;
* faults: their kinds, weights and pace, message loss, delay, duplication, store failures.

Kinds added later (``wipe``, then issue 32's operator actions, background work and two
live processes) are drawn from a side generator seeded by the kernel's state, so that the
main sequence is unchanged: a seed draws the scenario it drew before they existed, and
where they weigh nothing the nemesis picks faults as it did and the run is the same.

Issue 32's additions (about three seeds in four; the rest run exactly as before):

* operators: ``alter_config`` (min.insync.replicas down and up, flush.messages on and off,
  unclean election on and off, retention.ms/retention.bytes, segment sizes and ages),
  ``create_partitions`` (replication scenarios: groups would need to rebalance onto them),
  ``delete_records``;
* background work on short intervals (``log.retention.check.interval.ms`` and
  ``log.cleaner.backoff.ms`` as broker configs): time and size retention on user topics, a
  compacted topic ``c0`` written by keyed idempotent producers, and ``__consumer_offsets``
  compacted (as deployments create it) under its live coordinators;
* ``twin``: two live processes of one replica or coordinator for a while;
* ``stray_write``: a client's produce into ``__consumer_offsets`` (group scenarios).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

MODES = ("fsync", "pagecache", "flushms")

FAULT_KINDS = (
    "crash_replica",
    "crash_leader",
    "crash_controller",
    "crash_coordinator",
    "pause",
    "power_loss",
    "zombie",
    "split",
    "one_way",
    "storage",
    "store",
    "rebalance",
    "member",
    "wipe",
    "alter_config",
    "create_partitions",
    "delete_records",
    "twin",
    "stray_write",
)


@dataclass
class TopicSpec:
    name: str
    partitions: int
    rf: int
    min_insync: int
    unclean: bool
    mode: str
    # issue 32 (drawn from the side generator; the defaults are what older seeds drew)
    compact: bool = False  # cleanup.policy=compact, written by keyed producers
    keys: int = 0  # key space of the keyed producers (compacted topics)
    retention_ms: int | None = None
    retention_bytes: int | None = None
    segment_ms: int | None = None
    delete_retention_ms: int | None = None  # how long the cleaner keeps a tombstone (default 24 h)
    clock_skew_ms: int = 0  # its keyed producers' clocks run this far behind (stamps never below 0)
    flush_toggles: bool = False  # operators turn flush.messages=1 on and off
    min_isr_alterable: bool = False  # operators move min.insync.replicas between 1 and 2
    alterable: bool = False  # operators change its configs at all
    internal: bool = False  # __consumer_offsets

    def describe(self) -> str:
        extra = []
        if self.compact:
            extra.append(f"compact keys={self.keys}")
        if self.retention_ms is not None:
            extra.append(f"retention.ms={self.retention_ms}")
        if self.retention_bytes is not None:
            extra.append(f"retention.bytes={self.retention_bytes}")
        if self.segment_ms is not None:
            extra.append(f"segment.ms={self.segment_ms}")
        if self.delete_retention_ms is not None:
            extra.append(f"delete.retention.ms={self.delete_retention_ms}")
        if self.clock_skew_ms:
            extra.append(f"clock-skew={self.clock_skew_ms}")
        if self.flush_toggles:
            extra.append("flush-toggled")
        if self.min_isr_alterable:
            extra.append("min.isr-altered")
        return f"p={self.partitions} rf={self.rf} min.isr={self.min_insync}{' unclean' if self.unclean else ''} {self.mode}" + "".join(f" {e}" for e in extra)

    @property
    def lossy(self) -> bool:
        """Whether a power loss may cost its replicas acknowledged appends: not every
        append is fsynced, now or at some time (an operator may turn flush.messages off)."""
        return self.mode != "fsync" or self.flush_toggles

    def config(self) -> dict[str, str]:
        cfg = {
            "min.insync.replicas": str(self.min_insync),
            "unclean.leader.election.enable": "true" if self.unclean else "false",
            "replica.lag.time.max.ms": "1000",
            "replica.fetch.wait.max.ms": "200",
            "replica.fetch.backoff.ms": "50",
            "replica.high.watermark.checkpoint.interval.ms": "500",
            "segment.bytes": "4096",
            "index.interval.bytes": "256",
        }
        if self.mode == "fsync":
            cfg["flush.messages"] = "1"
        elif self.mode == "flushms":
            cfg["flush.ms"] = "300"
        if self.compact:
            cfg["cleanup.policy"] = "compact"
            cfg["min.cleanable.dirty.ratio"] = "0.2"
        if self.internal and self.compact:
            cfg["retention.ms"] = "-1"  # as cluster/groups.py creates it
            cfg["retention.bytes"] = "-1"
        if self.retention_ms is not None:
            cfg["retention.ms"] = str(self.retention_ms)
        if self.retention_bytes is not None:
            cfg["retention.bytes"] = str(self.retention_bytes)
        if self.segment_ms is not None:
            cfg["segment.ms"] = str(self.segment_ms)
        if self.delete_retention_ms is not None:
            cfg["delete.retention.ms"] = str(self.delete_retention_ms)
        return cfg


@dataclass
class Scenario:
    kind: str  # "replication" | "groups"
    brokers: int
    bound: bool  # brokers bound one per machine (plus a spare), or logical on one machine
    topics: list[TopicSpec]
    coordinators: int  # 0 without groups
    offsets_mode: str
    producers: int
    acks1_producers: int
    members: int
    max_in_flight: int
    max_batch: int
    produce_gap_ms: tuple[int, int]
    fault_gap_ms: tuple[int, int]
    fault_weights: dict[str, int] = field(default_factory=dict)
    drop_rate: float = 0.0
    duplicate_rate: float = 0.0
    max_delay_ms: int = 10
    store_fail_rate: float = 0.0
    # issue 32 (side generator)
    keyed_producers: int = 0  # idempotent producers writing keyed records to compacted topics
    broker_config: dict[str, str] = field(default_factory=dict)  # upkeep intervals
    offsets_compacted: bool = False
    txn_producers: int = 0  # transactional producers with a read_committed reader: SimConfig.transactions
    # the longest a replica actor's creation may take to report back (Ray's GCS under load);
    # 0: at once
    ensure_delay_ms: int = 0

    @classmethod
    def draw(cls, rng, kind: str | None = None, mode: str | None = None) -> "Scenario":
        kind = kind or rng.choice(["replication", "replication", "groups"])
        brokers = rng.choice([3, 3, 3, 5])
        bound = rng.random() < 0.5
        topics = []
        for i in range(rng.choice([1, 1, 2])):
            rf = rng.choice([r for r in (1, 3, 3, 3, 5) if r <= brokers])
            min_insync = rng.choice([1, 2]) if rf > 1 else 1
            topic_mode = "fsync" if rf == 1 else (mode or rng.choice(MODES))
            topics.append(
                TopicSpec(
                    name=f"t{i}",
                    partitions=rng.choice([1, 1, 2, 3]) if kind == "replication" else rng.choice([1, 2]),
                    rf=rf,
                    min_insync=min_insync,
                    unclean=rng.random() < 0.15,
                    mode=topic_mode,
                )
            )
        weights = {
            "crash_replica": rng.choice([1, 3, 5]),
            "crash_leader": rng.choice([1, 3, 5]),
            "crash_controller": rng.choice([0, 1, 2]),
            "crash_coordinator": rng.choice([0, 2, 3]) if kind == "groups" else 0,
            "pause": rng.choice([0, 1, 2]),
            "power_loss": rng.choice([0, 1, 3]) if bound else 0,
            "zombie": rng.choice([0, 1, 2]),
            "split": rng.choice([0, 1, 2]),
            "one_way": rng.choice([0, 1, 2]),
            "storage": rng.choice([0, 1, 2]),
            "store": rng.choice([0, 1]),
            "rebalance": rng.choice([0, 1]),
            "member": rng.choice([1, 2]) if kind == "groups" else 0,
        }
        side = _side_rng(rng)
        weights["wipe"] = side.choice([0, 0, 0, 1, 2])
        extra = _draw_operations(side, kind, brokers, topics, weights)
        return cls(
            kind=kind,
            brokers=brokers,
            bound=bound,
            topics=topics,
            coordinators=rng.choice([1, 2]) if kind == "groups" else 0,
            offsets_mode=mode or rng.choice(MODES),
            producers=rng.choice([1, 2, 3]),
            acks1_producers=rng.choice([0, 0, 1]),
            members=rng.choice([2, 3]) if kind == "groups" else 0,
            max_in_flight=rng.choice([1, 1, 2, 5]),
            max_batch=rng.choice([1, 3]),
            produce_gap_ms=rng.choice([(5, 40), (20, 150)]),
            fault_gap_ms=rng.choice([(150, 700), (300, 1500), (800, 3000)]),
            fault_weights=weights,
            drop_rate=rng.choice([0.0, 0.0, 0.002, 0.01, 0.03]),
            duplicate_rate=rng.choice([0.0, 0.0, 0.01]),
            max_delay_ms=rng.choice([3, 10, 30, 60]),
            store_fail_rate=rng.choice([0.05, 0.2]),
            **extra,
        )

    def describe(self) -> str:
        w = ",".join(f"{k}={v}" for k, v in self.fault_weights.items() if v)
        topics = " ".join(f"{t.name}[{t.describe()}]" for t in self.topics)
        groups = (
            f" groups[coordinators={self.coordinators} members={self.members} offsets={self.offsets_mode}{' compacted' if self.offsets_compacted else ''}]"
            if self.coordinators
            else ""
        )
        return (
            f"{self.kind} brokers={self.brokers}{' bound' if self.bound else ''} {topics}{groups} "
            f"producers={self.producers}+{self.acks1_producers}(acks=1){f'+{self.keyed_producers}(keyed)' if self.keyed_producers else ''}{f'+{self.txn_producers}(txn)' if self.txn_producers else ''} in_flight={self.max_in_flight} "
            f"drop={self.drop_rate} dup={self.duplicate_rate} delay<={self.max_delay_ms}ms "
            f"fault_gap={self.fault_gap_ms} faults[{w}]"
            + (f" ensure<={self.ensure_delay_ms}ms" if self.ensure_delay_ms else "")
            + (f" upkeep[{','.join(f'{k}={v}' for k, v in sorted(self.broker_config.items()))}]" if self.broker_config else "")
        )


def _draw_operations(side: random.Random, kind: str, brokers: int, topics: list[TopicSpec], weights: dict[str, int]) -> dict:
    """Issue 32's part of a scenario, from the side generator (which older seeds never read
    past ``wipe``). About one seed in four draws none of it and runs as before."""
    for k in ("alter_config", "create_partitions", "delete_records", "twin", "stray_write"):
        weights[k] = 0
    if side.random() < 0.25:
        return {}
    weights["alter_config"] = side.choice([0, 1, 2, 3])
    weights["delete_records"] = side.choice([0, 1, 2])
    weights["create_partitions"] = side.choice([0, 1]) if kind == "replication" else 0
    weights["twin"] = side.choice([0, 1, 2])
    for t in topics:
        t.alterable = True
        if side.random() < 0.35:
            if side.random() < 0.6:
                t.retention_ms = side.choice([800, 2000, 4000])
            else:
                t.retention_bytes = side.choice([8192, 16384])
            t.segment_ms = side.choice([300, 1000])
        t.flush_toggles = t.rf > 1 and side.random() < 0.3
        t.min_isr_alterable = t.rf >= 3 and side.random() < 0.5
    extra: dict = {
        "broker_config": {
            "log.retention.check.interval.ms": str(side.choice([200, 500, 1000])),
            "log.cleaner.backoff.ms": str(side.choice([200, 500, 1000])),
        }
    }
    if side.random() < 0.5:
        rf = side.choice([r for r in (3, 3, 5) if r <= brokers])
        topics.append(
            TopicSpec(
                name="c0",
                partitions=side.choice([1, 1, 2]),
                rf=rf,
                min_insync=side.choice([1, 2]),
                unclean=False,
                mode=side.choice(MODES),
                compact=True,
                keys=side.choice([3, 8, 20]),
                flush_toggles=side.random() < 0.3,
                min_isr_alterable=side.random() < 0.5,
                alterable=True,
            )
        )
        extra["keyed_producers"] = side.choice([1, 2, 3])
    if kind == "groups":
        extra["offsets_compacted"] = side.random() < 0.8
        weights["stray_write"] = side.choice([0, 1])
    if side.random() < 0.2:  # drawn last, so that the draws above stay as they were
        extra["ensure_delay_ms"] = side.choice([30, 300, 1200])
    for t in topics:  # after those: tombstones that expire while the run goes on
        if t.compact:
            t.delete_retention_ms = side.choice([None, 200, 1000])
    for t in topics:  # after those: producers whose records carry old timestamps (KIP-534)
        if t.compact:
            t.clock_skew_ms = side.choice([0, 0, 1000, 5000])
    return extra


def _side_rng(rng: random.Random) -> random.Random:
    """A generator for draws added after seeds were recorded: seeded from ``rng``'s state
    (a string seed is hashed with SHA-512, the same on every run), never drawing from it."""
    state = rng.getstate()[1]
    return random.Random(f"side:{state[0]}:{state[1]}:{state[2]}")
