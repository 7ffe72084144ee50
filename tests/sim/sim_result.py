"""What one run found: its violations, its figures and a digest of everything it did."""

from __future__ import annotations

from dataclasses import dataclass, field

from .checks import Violation
from .scenario import Scenario
from .sim_config import SimConfig


@dataclass
class SimResult:
    config: SimConfig
    scenario: Scenario
    violations: list[Violation]
    stats: dict[str, int]
    trace_tail: list[str] = field(default_factory=list)
    digest: str = ""  # over every traced event, the final logs and the metadata store

    @property
    def ok(self) -> bool:
        return not self.violations

    def fingerprint(self) -> tuple:
        """Equal for two runs of the same seed (the determinism check)."""
        return (self.digest, tuple(sorted(self.stats.items())), tuple(str(v) for v in self.violations))

    def summary(self) -> str:
        s = self.stats
        faults = ",".join(f"{k}={v}" for k, v in sorted(s.items()) if k.startswith("fault_") and v)
        return (
            f"seed {self.config.seed}: {'OK' if self.ok else 'FAILED'} [{self.scenario.describe()}] "
            f"events={s['events']} sim_ms={s['sim_ms']} acked_batches={s['acked_batches']} appends={s['leader_appends']} "
            f"commits={s['commits_acked']} offset_checks={s['offset_checks']} epochs_max={s['max_epoch']} "
            f"store_failures={s['store_failures']} {faults.replace('fault_', '')}"
        )

    def report(self) -> str:
        lines = [self.summary()]
        lines += [f"  {v}" for v in self.violations[:20]]
        if len(self.violations) > 20:
            lines.append(f"  ... and {len(self.violations) - 20} more")
        if self.violations and self.trace_tail:
            lines.append("  last events:")
            lines += [f"    {line}" for line in self.trace_tail[-60:]]
        lines.append(f"  replay: {self.config.replay_command()}")
        return "\n".join(lines)
