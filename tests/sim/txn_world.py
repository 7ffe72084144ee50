"""The transaction coordinators' part of a ``--transactions`` run, wired into the simulation.

:class:`TxnWorld` holds 1-2 transaction coordinators (``txn_coordinators.py``) on a replicated
``__transaction_state``, two transactional ids whose instances write transactions to the
user topics' partitions (and commit a group's offsets in groups runs, ``txn_clients.py``),
a read_committed reader per partition they write, and the ledger with the invariants
(``txn_ledger.py``). The simulation calls it at a few points: building (the topic, the
nodes), starting, healing, "is it quiet?", the final checks and the stats. Its choices come
from a side generator seeded by the seed.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from kcoord.replication.roles import LEADER

from .scenario import TopicSpec
from .txn_clients import TxnSlot
from .txn_coordinators import TxnCoordinatorProcess, TxnFaults, transaction_state_spec
from .txn_ledger import AppLedger, AppReader

if TYPE_CHECKING:
    from .simulation import Simulation

IDS = 2


def state_topic(sim: "Simulation") -> TopicSpec:
    """``__transaction_state`` for this seed: 1 or 2 partitions (= coordinators)."""
    side = random.Random(f"txn-world:{sim.config.seed}")
    return transaction_state_spec(side.choice([1, 2]), sim.scenario.brokers)


class TxnWorld:
    def __init__(self, sim: "Simulation", spec: TopicSpec) -> None:
        self.sim = sim
        self.side = random.Random(f"txn-world-run:{sim.config.seed}")
        self.coordinators = [TxnCoordinatorProcess(sim, i, spec.partitions) for i in range(spec.partitions)]
        self.faults = TxnFaults(sim, self.coordinators)
        self.ledger = AppLedger(sim)
        self.outputs = [(t.name, p) for t in sim.scenario.topics if not t.compact for p in range(t.partitions)]
        self.readers = [AppReader(sim, i, t, p, self.ledger) for i, (t, p) in enumerate(self.outputs)]
        self._hanging_reported = False
        self.unclean_hanging: set[tuple[str, int]] = set()  # hanging where an unclean election was
        self.slots = [TxnSlot(sim, i, spec.partitions, self.outputs, self.ledger, self.faults) for i in range(IDS)]

    def nodes(self) -> list[Any]:
        return [*self.coordinators]

    def start(self) -> None:
        k = self.sim.kernel
        for c in self.coordinators:
            k.after(self.side.randint(1, 50), c.start)
        for s in self.slots:
            k.after(self.side.randint(200, 1000), s.new_instance)
        self.faults.start()

    def heal(self) -> None:
        self.faults.heal()

    def busy(self) -> str | None:
        for c in self.coordinators:
            why = c.busy()
            if why is not None:
                return f"{c.name}: {why}"
        for s in self.slots:
            why = s.busy()
            if why is not None:
                return why
        return None

    def hanging(self) -> str | None:
        """Once every producer is idle and every coordinator has completed its transactions,
        a partition the applications write whose LSO stays below its HW holds a transaction
        nobody will end (txn-hanging): its read_committed reader can never catch up."""
        if self.busy() is not None:
            return None
        sim = self.sim
        for tp in self.outputs:
            p = sim.stored_partition(*tp)
            r = None if p is None or p.leader < 0 else sim.replicas[(tp[0], tp[1], p.leader)].replica
            if r is None or r.role != LEADER or r.hw != r.log.log_end_offset:
                continue
            lso = r.log.last_stable_offset(r.hw)
            part = sim.history.parts.get(tp)
            if lso < r.hw and part is not None and part.lost_any:
                # an unclean election may have truncated a marker away (Kafka's too)
                self.unclean_hanging.add(tp)
                continue
            if lso < r.hw:
                why = f"{tp[0]}-{tp[1]}: LSO {lso} below HW {r.hw} with every transaction complete at its coordinator"
                if not self._hanging_reported:
                    self._hanging_reported = True
                    sim.history.fail("txn-hanging", sim.kernel.now, why)
                return why
        return None

    def final_checks(self) -> None:
        self.ledger.final_checks(self.slots, self.outputs)

    def stats(self) -> dict[str, int]:
        out = {f"txa_{k}": v for k, v in sorted(self.ledger.stats.items())}
        out.update({f"txa_{k}": v for k, v in self.faults.counts.items()})
        out["txa_stale_ends"] = sum(s.stale_ends for s in self.slots)
        for k in ("ok", "refused", "misrouted"):
            out[f"txa_verify_{k}"] = sum(c.verify[k] for c in self.coordinators)
        out["txa_holds_due_on_resume"] = sum(c.holds_due_on_resume for c in self.coordinators)
        out["txa_unclean_hanging"] = len(self.unclean_hanging)
        out["txa_markers_sent"] = sum(getattr(c.driver, "markers_sent", 0) for c in self.coordinators)
        # held adds appended with the completion they waited for (the live incarnations')
        out["txa_adds_with_completion"] = sum(c.core.stats.adds_with_completion for c in self.coordinators if c.core is not None)
        out["txa_implicit_adds"] = sum(c.core.stats.implicit_adds for c in self.coordinators if c.core is not None)
        return out
