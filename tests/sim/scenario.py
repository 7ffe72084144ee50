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

Kinds added later (``wipe``) are drawn from a side generator seeded by the kernel's state,
so that the main sequence is unchanged: a seed draws the scenario it drew before they
existed, and where they weigh nothing the nemesis picks faults as it did.
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
)


@dataclass
class TopicSpec:
    name: str
    partitions: int
    rf: int
    min_insync: int
    unclean: bool
    mode: str

    @property
    def lossy(self) -> bool:
        return self.mode != "fsync"

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
    txn_producers: int = 0  # transactional producers with a read_committed reader: SimConfig.transactions

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
        )

    def describe(self) -> str:
        w = ",".join(f"{k}={v}" for k, v in self.fault_weights.items() if v)
        topics = " ".join(
            f"{t.name}[p={t.partitions} rf={t.rf} min.isr={t.min_insync}{' unclean' if t.unclean else ''} {t.mode}]" for t in self.topics
        )
        groups = f" groups[coordinators={self.coordinators} members={self.members} offsets={self.offsets_mode}]" if self.coordinators else ""
        return (
            f"{self.kind} brokers={self.brokers}{' bound' if self.bound else ''} {topics}{groups} "
            f"producers={self.producers}+{self.acks1_producers}(acks=1){f'+{self.txn_producers}(txn)' if self.txn_producers else ''} in_flight={self.max_in_flight} "
            f"drop={self.drop_rate} dup={self.duplicate_rate} delay<={self.max_delay_ms}ms "
            f"fault_gap={self.fault_gap_ms} faults[{w}]"
        )


def _side_rng(rng: random.Random) -> random.Random:
    """A generator for draws added after seeds were recorded: seeded from ``rng``'s state
    (a string seed is hashed with SHA-512, the same on every run), never drawing from it."""
    state = rng.getstate()[1]
    return random.Random(f"side:{state[0]}:{state[1]}:{state[2]}")
