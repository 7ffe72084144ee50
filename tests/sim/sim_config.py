"""What one run is: its seed, what the command line fixes instead of the seed (kind,
durability mode, opt-in workloads), its bounds and timeouts, and the command that replays
it."""

from __future__ import annotations

from dataclasses import dataclass


KINDS = ("replication", "groups")
MODES = ("fsync", "pagecache", "flushms")


@dataclass
class SimConfig:
    seed: int = 0
    kind: str | None = None  # "replication" or "groups"; None lets the seed choose
    mode: str | None = None  # durability of every replicated topic; None lets the seed choose
    max_events: int = 4_000  # the fault phase ends after this many events...
    fault_ms: int = 6_000  # ...or this much simulated time
    heal_timeout_ms: int = 60_000
    call_timeout_ms: int = 1000  # the drivers' per-call timeouts, scaled down for the sim
    produce_timeout_ms: int = 1500
    client_backoff_ms: int = 50
    consumer_wait_ms: int = 200
    verbose: int = 0  # 1: trace events (faults, roles, elections); 2: also every message
    security: bool = False  # an admin alters users and ACLs through the controller (security.py)
    # A transactional producer and a read_committed reader join the seed's scenario
    # (transactions.py); opt-in, so that every seed without it runs as before.
    transactions: bool = False

    def replay_command(self) -> str:
        cmd = f"python -m tests.sim.run --seed {self.seed}"
        if self.kind is not None:
            cmd += f" --kind {self.kind}"
        if self.mode is not None:
            cmd += f" --mode {self.mode}"
        if self.max_events != SimConfig.max_events:
            cmd += f" --events {self.max_events}"
        if self.fault_ms != SimConfig.fault_ms:
            cmd += f" --ms {self.fault_ms}"
        if self.security:
            cmd += " --security"
        if self.transactions:
            cmd += " --transactions"
        return cmd + " --verbose"
