"""Transaction coordinators in the simulation: processes running the production driver.

A :class:`TxnCoordinatorProcess` is transaction coordinator ``i``: the same
:class:`~kcoord.txn.driver.TransactionCoordinatorDriver` over the same
:class:`~kcoord.txn.coordinator.TransactionCoordinatorState` the Ray actor
(``actors/txn_coordinator.py``) runs, on partition ``i`` of a replicated ``__transaction_state``
whose replicas are ordinary simulated replicas (so leader crashes, power losses and store
faults reach it as they reach ``__consumer_offsets``). It sends its markers to the real
partition leaders and group coordinators.

:class:`TxnFaults` adds what the main nemesis does not do to these processes (it knows only
the group coordinators): crashes (Ray restarts the actor after 50-1500 ms), pauses, twins
(the old process runs on 0.5-4 s beside the next one, cut off from the controller and, half
the time, from its ``__transaction_state`` partition: ``Simulation.twin``), and a crash just
after an EndTxn reached the coordinator, while it persists PREPARE_* or writes the markers. Its choices come from a side generator seeded by the seed, so runs without
``--transactions`` are unchanged.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from kcoord.group.placement import coordinator_for as group_coordinator_for
from kcoord.protocol import names
from kcoord.protocol.codec import Message
from kcoord.protocol.errors import ErrorCode as E
from kcoord.protocol.txn import AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse
from kcoord.txn import TransactionCoordinatorState, TxnConfig
from kcoord.txn.driver import TransactionCoordinatorDriver
from kcoord.replication.roles import LEADER
from kcoord.txn.placement import TRANSACTION_STATE_TOPIC
from kcoord.txn.records import replay

from .kernel import Call, resume
from .log_reading import read_log, records_of
from .processes import CLUSTER, HEAD, Process, _Ghost, partition_owner_io, start_partition_owner
from .scenario import TopicSpec

if TYPE_CHECKING:
    from .simulation import Simulation

# Small enough that a transaction a crashed or fenced client left open is aborted well
# within the heal phase; markers retried quickly; busy ids hold requests below the clients'
# call timeout (1000 ms).
TXN_CONFIG = TxnConfig(
    transaction_max_timeout_ms=60_000, marker_retry_backoff_ms=50, marker_max_backoff_ms=500, append_retry_backoff_ms=100,
    metadata_refresh_backoff_ms=100, concurrent_transactions_hold_ms=400,
)


def transaction_state_spec(partitions: int, brokers: int) -> TopicSpec:
    """``__transaction_state`` as the cluster creates it: internal, fsync, RF up to 3."""
    rf = min(3, brokers)
    return TopicSpec(TRANSACTION_STATE_TOPIC, partitions, rf, min(2, rf), False, "fsync", internal=True)


class TxnCoordinatorProcess(Process):
    def __init__(self, sim: "Simulation", index: int, count: int) -> None:
        super().__init__(sim, names.transaction_coordinator(CLUSTER, index))
        self.index = index
        self.count = count
        # the leaders' KIP-890 checks this coordinator answered, by answer (txa_verify_*)
        self.verify = {"ok": 0, "refused": 0, "misrouted": 0}
        self.holds_due_on_resume = 0  # checks that found a hold run out in a pause (txa_holds_due_on_resume)

    @property
    def core(self) -> TransactionCoordinatorState | None:
        return None if self.driver is None else self.driver.core

    def start(self) -> None:
        sim = self.sim
        self._begin()
        self.machine = sim.machines[HEAD]
        core = TransactionCoordinatorState(TXN_CONFIG, partition=self.index, num_partitions=self.count, offsets_partitions=max(1, sim.scenario.coordinators))
        start_partition_owner(self, TransactionCoordinatorDriver(CLUSTER, core, **partition_owner_io(self)))

    def receive(self, call: Call, request: Message) -> None:
        if isinstance(request, AddOffsetsToTxnRequest) or (isinstance(request, AddPartitionsToTxnRequest) and not request.verify_only):
            assert self.driver is not None
            driver = self.driver

            def answered(response: Message) -> None:
                self._check_added(driver, request, response)
                self.sim.net.reply(call, response)

            driver.serve(request, answered)
            self.after()
            return
        if not (isinstance(request, AddPartitionsToTxnRequest) and request.verify_only):
            super().receive(call, request)
            return

        def reply(response: Message) -> None:
            code = response.error_code if isinstance(response, AddPartitionsToTxnResponse) else E.UNKNOWN_SERVER_ERROR
            # NOT_COORDINATOR for an id the leaders should have sent elsewhere (a wrong N)
            self.verify["ok" if code == E.NONE else "misrouted" if code == E.NOT_COORDINATOR else "refused"] += 1
            self.sim.net.reply(call, response)

        assert self.driver is not None
        self.driver.serve(request, reply)
        self.after()

    def twin_ghost(self) -> tuple["TxnCoordinatorGhost", list[str], tuple[str, int]]:
        """For the ``twin`` fault (``Simulation.twin``): the ghost, the callers that may
        still reach it (the applications, and the replicas whose leaders verify with it), and
        its ``__transaction_state`` partition."""
        sim = self.sim
        world = sim.txn_world
        callers = [a.name for s in world.slots for a in s.instances] + [r.name for r in sim.replica_list]
        return TxnCoordinatorGhost(self), callers, (TRANSACTION_STATE_TOPIC, self.index)

    def _check_added(self, driver: TransactionCoordinatorDriver, request: Message, response: Message) -> None:
        """txn-hold-none: an add answered NONE (at once, or after being held while its id was
        busy) names the id's current transaction: ONGOING at the request's producer id and
        epoch, holding what it added."""
        if getattr(response, "error_code", None) != E.NONE or driver.closed:
            return
        core = driver.core
        v = core.snapshot().get(request.transactional_id)
        if isinstance(request, AddOffsetsToTxnRequest):
            added = {(names.OFFSETS_TOPIC, group_coordinator_for(request.group_id, core.offsets_partitions))}
        else:
            added = {(t, p) for t, ps in request.topics.items() for p in ps}
        if v is None or v.state.value != "Ongoing" or (v.producer_id, v.producer_epoch) != (request.producer_id, request.producer_epoch) or not added <= set(v.partitions):
            found = None if v is None else (v.state.value, v.producer_id, v.producer_epoch, sorted(v.partitions))
            self.sim.history.fail("txn-hold-none", self.sim.kernel.now, f"{self.name}: {type(request).__name__} of {request.transactional_id!r} (producer {request.producer_id} epoch {request.producer_epoch}, {sorted(added)}) answered NONE; the id is {found}")

    def observe(self) -> None:
        # txn-hold-deadline: a request held while its id is busy never outlives its hold
        # (answered CONCURRENT_TRANSACTIONS at its deadline at the latest). A pause that
        # outlived a hold leaves its expiry among the events handled on resuming: not yet due.
        # At the deadline's own ms another timer of the process may fire first (seed 2740).
        if self.driver is not None and not self.driver.closed:
            core, now = self.driver.core, self.sim.kernel.now
            for tid in core.held_ids():
                late = [d for _, d in core.held_requests(tid) if d < now]
                if late and self.catching_up:
                    self.holds_due_on_resume += 1
                elif late:
                    self.sim.history.fail("txn-hold-deadline", now, f"{self.name}: {tid!r} holds a request past its deadline {min(late)}")
        self._check_state_log()
        world = getattr(self.sim, "txn_world", None)
        if world is not None:
            world.ledger.observe_coordinator(self)

    def _check_state_log(self) -> None:
        """txn-state-log: with none of its writes in flight, the coordinator's memory of every
        id is what a replay of its ``__transaction_state`` partition rebuilds (the leader's
        log, every record below its HW): a COMPLETE_* appended with the next transaction's
        first add (Markers.complete) lands with it or not at all, and memory follows the log.
        Checked for the current process (a twin's ghost is superseded: its memory is stale
        by design) and an incarnation none of whose appends failed yet: a failed append (a
        timeout) may still have landed, and memory catches up only with the id's next write."""
        driver = self.driver
        if getattr(self, "is_ghost", False) or driver is None or driver.closed or not driver.loaded or driver.core.pending_persists() or driver.core.stats.persist_failures:
            return
        sim = self.sim
        tp = (TRANSACTION_STATE_TOPIC, self.index)
        p = sim.stored_partition(*tp)
        rp = None if p is None or p.leader < 0 else sim.replicas.get((tp[0], tp[1], p.leader))
        r = None if rp is None else rp.replica
        if r is None or r.role != LEADER or r.hw != r.log.log_end_offset:
            return
        data = read_log(sim.history, tp, p.leader, r.log, r.log.log_start_offset, r.hw)
        logged = replay([kv for _, kv in sorted(records_of(data).items())])
        memory = driver.core.snapshot()
        if logged != memory:
            ids = sorted(t for t in set(logged) | set(memory) if logged.get(t) != memory.get(t))
            diff = "; ".join(f"{t}: memory {_brief(memory.get(t))}, log {_brief(logged.get(t))}" for t in ids)
            sim.history.fail("txn-state-log", sim.kernel.now, f"{self.name}: memory is not the replay of {tp[0]}-{tp[1]}: {diff}")


    def busy(self) -> str | None:
        """Why this coordinator is not quiet: not loaded, or a transaction not complete."""
        if self.driver is None or not self.driver.loaded:
            return "not loaded"
        core = self.driver.core
        if core.held_ids():
            return f"requests held for {core.held_ids()}"
        for tid, v in sorted(core.snapshot().items()):
            if v.state.value not in ("Empty", "CompleteCommit", "CompleteAbort", "Dead"):
                return f"{tid} is {v.state.value} (partitions {sorted(v.partitions)}, markers pending {sorted(core.pending_markers(tid))})"
        return None


class TxnCoordinatorGhost(_Ghost, TxnCoordinatorProcess):
    """An older transaction coordinator process still running (the ``twin`` fault)."""

    def __init__(self, proc: TxnCoordinatorProcess) -> None:
        self.index = proc.index
        self.count = proc.count
        self.verify = proc.verify
        self.holds_due_on_resume = 0
        self._adopt(proc)


class TxnFaults:
    """Crashes and pauses of the transaction coordinators (see the module doc)."""

    def __init__(self, sim: "Simulation", coordinators: list[TxnCoordinatorProcess]) -> None:
        self.sim = sim
        self.coordinators = coordinators
        self.side = random.Random(f"txn-faults:{sim.config.seed}")
        self.counts = {"tc_crash": 0, "tc_pause": 0, "tc_crash_in_end": 0, "tc_twin": 0}

    def start(self) -> None:
        self.sim.kernel.after(self.side.randint(300, 1500), self._tick)

    def _tick(self) -> None:
        if self.sim.phase != "faults":
            return
        r = self.side.random()
        proc = self.side.choice(self.coordinators)
        if r < 0.35:
            self.crash(proc, "tc_crash")
        elif r < 0.5 and proc.up and not proc.paused:
            proc.paused = True
            incarnation = proc.incarnation
            duration = self.side.choice([300, 1000, 2500])
            self.counts["tc_pause"] += 1
            self.sim.trace(f"PAUSE {proc.name} for {duration} ms")
            self.sim.kernel.after(duration, self._resume, proc, incarnation)
        elif r < 0.6 and proc.up and not proc.paused and proc.driver is not None:
            # two live processes: Ray gave up on this one (its node lost the head) and
            # started the next, while applications and leaders may still reach the old one
            self.counts["tc_twin"] += 1
            self.sim.twins.twin(proc, self.side.choice([500, 1500, 4000]))
        self.sim.kernel.after(self.side.randint(300, 1500), self._tick)

    def _resume(self, proc: TxnCoordinatorProcess, incarnation: int) -> None:
        if proc.up and proc.paused and proc.incarnation == incarnation:
            self.sim.trace(f"RESUME {proc.name} ({len(proc.deferred)} events waiting)")
            resume(proc)

    def crash(self, proc: TxnCoordinatorProcess, kind: str) -> None:
        if self.sim.phase != "faults" or not proc.up:
            return
        self.counts[kind] += 1
        proc.crash("crashed" if kind == "tc_crash" else "crashed in the middle of an EndTxn")
        self.sim.restart_later(proc, self.side.choice([50, 300, 1_500]))

    def crash_during_end(self, index: int) -> None:
        """An EndTxn was just sent to coordinator ``index``: crash it soon, now and then,
        while it persists PREPARE_* or writes markers."""
        if self.side.random() < 0.2:
            self.sim.kernel.after(self.side.randint(0, 40), self.crash, self.coordinators[index], "tc_crash_in_end")

    def heal(self) -> None:
        for proc in self.coordinators:
            if proc.up and proc.paused:
                resume(proc)
            if not proc.up:
                proc.start()


def _brief(v: Any) -> str:
    return "none" if v is None else f"{v.state.value} {v.producer_id}/{v.producer_epoch} {sorted(v.partitions)}"
