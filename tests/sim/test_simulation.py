"""The deterministic cluster simulation, over many seeds (see simulation.py).

Each seed is one run: a scenario drawn from the seed, faults, healing, and the invariant
checks of checks.py. A failure prints the seed, what broke, the last events, and the
command that replays it (``python -m tests.sim.run --seed N --verbose``).

``KCOORD_SIM_SEEDS`` picks the seeds: a count (``2000`` = seeds 0..1999), a range
(``5000-5999``) or a list (``17,42``); the default is 700. ``KCOORD_SIM_JOBS`` sets the
processes (default: the machine's cores, at most 4).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .run import code_digest, parse_seeds, run_many, simulated_modules
from .sim_config import SimConfig
from .simulation import Simulation, run_seed

DEFAULT_SEEDS = 700  # the CI suite's share of its 35-minute budget; `make sim` runs more
CHUNKS = 10
REPO = Path(__file__).resolve().parents[2]


def _seeds() -> list[int]:
    spec = os.environ.get("KCOORD_SIM_SEEDS", "").strip()
    return parse_seeds(spec) if spec else list(range(DEFAULT_SEEDS))


def _jobs() -> int:
    return int(os.environ.get("KCOORD_SIM_JOBS", "0")) or min(4, os.cpu_count() or 1)


SEEDS = _seeds()


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_seeds(chunk: int) -> None:
    seeds = SEEDS[chunk::CHUNKS]
    if not seeds:
        pytest.skip("no seeds in this chunk")
    results = run_many(seeds, jobs=_jobs())
    failed = [report for _, ok, report, _ in results if not ok]
    assert not failed, f"{len(failed)} of {len(seeds)} seeds failed:\n\n" + "\n\n".join(failed[:5])


# Seeds outside the default range whose failures were fixed (docs/simulation.md, "What it
# found"); each run is a fraction of a second.
FOUND_SEEDS = (395, 921, 1336, 1637, 1829, 3039, 6383, 6594, 7161, 7734, 8536, 9377, 11536, 15851, 18705, 18876, 19208, 21425, 23499, 28240, 29065, 34993, 43725, 50353, 54968, 57242, 60942, 68272, 90283, 100472, 114477, 131426, 200061)


def test_the_seeds_that_found_bugs_still_pass() -> None:
    results = run_many(list(FOUND_SEEDS), jobs=1)
    failed = [report for _, ok, report, _ in results if not ok]
    assert not failed, f"{len(failed)} found seeds fail again:\n\n" + "\n\n".join(failed[:3])


# Seeds with an admin altering users and ACLs through the controller (security.py);
# KCOORD_SIM_SECURITY_SEEDS picks them like KCOORD_SIM_SEEDS (default 60).
SECURITY_SEEDS = parse_seeds(os.environ.get("KCOORD_SIM_SECURITY_SEEDS", "").strip() or "60")


def test_security_metadata_survives_controller_crashes_and_store_failures() -> None:
    results = run_many(SECURITY_SEEDS, jobs=_jobs(), security=True)
    failed = [report for _, ok, report, _ in results if not ok]
    assert not failed, f"{len(failed)} of {len(SECURITY_SEEDS)} seeds failed:\n\n" + "\n\n".join(failed[:5])


# Seeds with a transactional producer and a read_committed reader (transactions.py);
# KCOORD_SIM_TXN_SEEDS picks them like KCOORD_SIM_SEEDS (default 60).
TXN_SEEDS = parse_seeds(os.environ.get("KCOORD_SIM_TXN_SEEDS", "").strip() or "60")


def test_transactions_hold_their_invariants_through_faults() -> None:
    results = run_many(TXN_SEEDS, jobs=_jobs(), transactions=True)
    failed = [report for _, ok, report, _ in results if not ok]
    assert not failed, f"{len(failed)} of {len(TXN_SEEDS)} seeds failed:\n\n" + "\n\n".join(failed[:5])


# Transactional seeds outside the default range whose failures were fixed (docs/simulation.md).
FOUND_TXN_SEEDS = (1891, 2139, 2740, 3128, 3486, 9103, 9397)


def test_the_transactional_seeds_that_found_bugs_still_pass() -> None:
    results = run_many(list(FOUND_TXN_SEEDS), jobs=1, transactions=True)
    failed = [report for _, ok, report, _ in results if not ok]
    assert not failed, f"{len(failed)} found seeds fail again:\n\n" + "\n\n".join(failed[:3])


# Seeds 4 and 332 with transactions (329 and 367 until implicit adds became the sweep's
# default): an operator turned unclean.leader.election.enable on and a stale replica was
# elected (4: four times), truncating committed transactions (allowed, as Kafka does); in 332
# the ledger needs that allowance (txn-lost and txn-unsent without it).
UNCLEAN_TXN_SEEDS = (4, 332)


def _pass_through(seeds: tuple[int, ...], stat: str, transactions: bool = True) -> None:
    """Each seed (transactional unless told) still takes the path its ``stat`` counts, and holds."""
    for seed in seeds:
        r = run_seed(seed, transactions=transactions)
        assert r.stats[stat] > 0, f"seed {seed} no longer takes the path {stat} counts: pick another"
        assert r.ok, f"seed {seed}: " + "; ".join(str(v) for v in r.violations[:3])


def test_an_unclean_election_may_lose_committed_transactions() -> None:
    _pass_through(UNCLEAN_TXN_SEEDS, "unclean_elections")


# Seed 436 with transactions: a plain idempotent producer's first batch (sequence 0) was
# committed, its answer lost, and a leader whose log start was past that batch -- restarted
# after DeleteRecords with no producer snapshot past its log start -- took the retry as new
# (as Kafka does). Seed 641 took it through a replica that began at its leader's log start
# after retention, until slow replica creations moved its schedule (none of 0-699 does now).
# With implicit adds the default no seed of 0-3000 takes the path, so 436 runs with explicit
# adds (the schedule it was found on; the path is the plain producer's, not the apps').
FORGOTTEN_PRODUCER_TXN_SEEDS = (436,)


def test_a_leader_whose_log_start_passed_a_producer_may_write_its_retry_again(monkeypatch) -> None:
    from . import txn_clients

    monkeypatch.setattr(txn_clients, "IMPLICIT_ADDS", False)
    _pass_through(FORGOTTEN_PRODUCER_TXN_SEEDS, "forgotten_recommits")


# Seed 154 with transactions (383 until implicit adds became the sweep's default; the only one
# of 0-1999 now): the transactional producer's retry of seq 15 came after a late write under
# its identity (seq 26) had landed behind its later batches, so the leader's window of the
# producer's last 5 batches no longer held seq 15 and the retry was refused
# OUT_OF_ORDER_SEQUENCE_NUMBER (as Kafka would): not a lost acknowledged batch.
def test_a_late_write_may_push_a_retry_out_of_the_dedup_window() -> None:
    _pass_through((154,), "late_window_stops")


# Seed 903 with transactions: a late write (txn_verify.py) was acknowledged at 39 by t0-0's
# deposed leader (epoch 0; broker 2 had been elected uncleanly at epoch 1), after that
# leader's markers; it was truncated away and the transaction's marker went in at 21 on the
# new leader: lost with the unclean election (allowed), not a transaction no marker ends.
def test_a_late_write_lost_to_an_unclean_election_is_not_late() -> None:
    _pass_through((903,), "late_writes_voided")


# Seed 3932 (plain; transactional seed 1558 until the controller's election left unheard
# members out of the new ISR, and no transactional seed of 0-11999 takes the path since):
# producer0's batch seq 12 was written at t0-0@12 (RF 1) with its answer lost, its later
# batches were acknowledged at 13-16, and DeleteRecords moved the log start to 15. The leader
# restarted with the producer's state rebuilt from its log from 15, so the retry of seq 12
# was behind and not one of its last 5 batches: OUT_OF_ORDER_SEQUENCE_NUMBER (as Kafka
# would), not a lost acknowledged batch.
def test_a_retry_of_a_batch_below_the_log_start_may_be_refused_as_behind() -> None:
    _pass_through((3932,), "deleted_retry_stops", transactions=False)


# Seed 1397 with transactions: tx1's commit marker was written at t0-0@16 by leader 0 (ISR
# [0]) and acknowledged; broker 1 (LEO 16) was then elected uncleanly and the marker was
# truncated away, leaving the transaction open at that partition with its coordinator
# done (Kafka the same: an unclean election may lose a marker; an operator aborts it).
def test_a_marker_lost_to_an_unclean_election_may_leave_a_transaction_hanging() -> None:
    _pass_through((1397,), "txa_unclean_hanging")


# Seed 599 with transactions: a zombie instance's produce was answered INVALID_PRODUCER_EPOCH
# (abortable, KIP-588) while its AddOffsetsToTxn was in flight; that answer (CONCURRENT_TRANSACTIONS)
# scheduled a retry which, finding the transaction no longer IN_TRANSACTION, returned without
# ending it: the app sat in ABORTABLE_ERROR with nothing in flight. It aborts now (and is fenced).
def test_an_abortable_error_during_add_offsets_still_ends_the_transaction() -> None:
    r = run_seed(599, transactions=True)
    assert r.ok, "; ".join(str(v) for v in r.violations[:3])


def _catching(invariants: tuple[str, ...], start: int, want: int = 2, limit: int = 40, **kw) -> list[int]:
    """The first ``want`` seeds from ``start`` (at most ``limit`` tried) whose run violates
    one of ``invariants``. A planted bug must be found within a few seeds; starting from a
    seed known to catch it keeps the test cheap, scanning on keeps it true when an unrelated
    change moves the schedules (pinned seeds moved with every change to the transaction world)."""
    found: list[int] = []
    for s in range(start, start + limit):
        if any(v.invariant in invariants for v in run_seed(s, **kw).violations):
            found.append(s)
            if len(found) == want:
                break
    return found


def test_transactional_runs_commit_abort_and_read_committed() -> None:
    # seeds 4 and 10: since the leaders verify (KIP-890), seed 6's producer ends one transaction only
    stats = [run_seed(s, transactions=True).stats for s in (4, 10)]
    assert all(st["txn_aborts"] > 0 and st["txn_markers"] > st["txn_aborts"] and st["committed_records_read"] > 0 for st in stats), stats


def test_planted_read_committed_past_the_lso_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A leader that shows read_committed readers the HW as the LSO hands them transactions
    before their outcome: ones that then abort are an aborted read."""
    from kcoord.log.base import BaseLog

    monkeypatch.setattr(BaseLog, "last_stable_offset", lambda self, hw: hw)
    assert _catching(("txn-g1a",), 6, want=1, transactions=True)


def test_planted_lso_past_an_unreplicated_marker_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kafka's unreplicated transactions, forgotten: a transaction counts as stable as soon as
    its marker is appended, so readers are served it before the marker is committed."""
    from kcoord.log.producer_state import ProducerStateManager

    original = ProducerStateManager._end_transaction

    def forgetting(self, h, control):
        done = original(self, h, control)
        self._unreplicated.clear()
        return done

    monkeypatch.setattr(ProducerStateManager, "_end_transaction", forgetting)
    assert len(_catching(("txn-g1a",), 0, transactions=True)) == 2  # 9 of 0-15 caught it


def test_planted_leader_without_kip890_verification_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Leaders that append a transaction's first batch unverified (kcoord before KIP-890 at
    the leader): the late write of an ended transaction opens one no marker ends."""
    from kcoord.log.producer_state import OK, ProducerStateManager

    monkeypatch.setattr(ProducerStateManager, "needs_verification", lambda self, h: False)
    monkeypatch.setattr(ProducerStateManager, "_verified", lambda self, h, guard: OK)
    assert len(_catching(("txn-late",), 0, transactions=True)) == 2  # 9 of seeds 0-14 caught it


def test_planted_consumer_keeping_aborted_batches_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    from kcoord.client.consumer.segments import AbortedFilter

    monkeypatch.setattr(AbortedFilter, "drops", lambda self, data, pos, h: bool(h.attributes & 0x20))
    assert _catching(("txn-g1a",), 6, want=1, transactions=True)


def test_transactional_offset_commits_commit_abort_and_survive_coordinator_crashes() -> None:
    """Groups runs with --transactions carry a transactional offset committer (txn_groups.py)."""
    # seeds 1, 5, 13 (9 ends no transaction with an abort since the seeds 383/599 harness fixes moved its schedule)
    stats = [run_seed(s, kind="groups", transactions=True).stats for s in (1, 5, 13)]
    assert all(st["txg_commits"] > 0 and st["txg_aborts"] > 0 and st["txg_crashes"] > 0 for st in stats), stats
    assert sum(st["txg_unstable"] for st in stats) > 0, stats
    assert sum(st["txg_expired"] for st in stats) > 0, stats  # idle producers' [5] records expire


def test_planted_expiry_of_a_producer_with_pending_offsets_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A group coordinator that expires a producer's fencing record while its offsets are
    pending (the [5, producer_id] expiry must wait for the marker)."""
    from kcoord.group.txn_offsets import TxnOffsetStore

    monkeypatch.setattr(TxnOffsetStore, "_busy", lambda self, pid: False)
    assert _catching(("txg-expiry",), 8, want=1, kind="groups", transactions=True)  # 8, 16, 21, 31 of 0-39 caught it


def test_planted_replay_forgetting_pending_offsets_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A coordinator that does not rebuild pending transactional offsets on load: their
    COMMIT markers find nothing after a failover."""
    import kcoord.group.coordinator as coordinator

    original = coordinator.replay

    def forgetful(records):
        replayed = original(records)
        replayed.txn_offsets.clear()
        return replayed

    monkeypatch.setattr(coordinator, "replay", forgetful)
    assert len(_catching(("txg-durable", "txg-final", "txg-stable"), 1, kind="groups", transactions=True)) == 2


def test_planted_abort_marker_committing_offsets_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    from kcoord.group.txn_offsets import TxnOffsetStore

    original = TxnOffsetStore._resolve
    monkeypatch.setattr(TxnOffsetStore, "_resolve", lambda self, req, *rest: original(self, dataclasses.replace(req, commit=True), *rest))
    assert len(_catching(("txg-visible",), 0, kind="groups", transactions=True)) == 2


def test_planted_require_stable_ignoring_pending_offsets_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    from kcoord.group.metadata import GroupMetadata

    monkeypatch.setattr(GroupMetadata, "has_pending_txn_offset", lambda self, tp: False)
    assert len(_catching(("txg-stable",), 0, kind="groups", transactions=True)) == 2  # 10 of 0-15 caught it


def test_planted_index_divergence_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A follower that does not index the aborts it replicates."""
    from kcoord.log.base import BaseLog

    original = BaseLog.append_as_follower

    def forgetful(self, data, now_ms=None, **options):
        info = original(self, data, now_ms, **options)
        self.txn_index.clear()
        return info

    monkeypatch.setattr(BaseLog, "append_as_follower", forgetful)
    assert _catching(("txn-index",), 15, want=1, transactions=True)  # 15, 24: RF 3 transactional topics


# Issue 32: seeds that showed one bug each under its fault model (docs/simulation.md, "What
# it found"); every one passes with the fixes (schedules have moved since, so some no longer
# reach the bug: they stay as regression seeds).
ISSUE_32_SEEDS = {
    "finding 1 (an ELR kept across a lowered min.insync.replicas or a flush.messages change)": (7, 68, 192, 201),
    "finding 2 (a vouch for an old process brings it back; a twin process's fetches)": (47, 1979, 2400, 2690),
    "finding 3 (a new leader proposes out followers within replica.lag.time.max.ms)": (0, 1, 3, 14),
    "finding 4 (a late LeaderAndIsr rolls a topic config back)": (1086, 1410, 1613),
    "finding 5 (DeleteRecords answered before the low watermark passed it)": (80, 233, 295, 352),
    "finding 7 (a half-finished ISR write leaves an ISR member replaced)": (3041,),
    "finding 8 (the cleaner drops a producer's last batch)": (1676, 2864),
    "finding 9 (a client's write into __consumer_offsets is acknowledged)": (58, 84, 120),
    "follower below its log start (an unclean leader's log ends below it)": (531, 2005, 2408, 4431),
    "twin follower (the leader counts an ISR member's old process for its HW)": (47, 432, 541, 902),
    "restarted unseen (an ISR member's new process never counted)": (69, 218),
    "dedup window (the cleaner removed or split one of a producer's last five batches)": (108, 1855, 3039),
}


@pytest.mark.parametrize("seeds", [pytest.param(seeds, id=name.split(" (")[0].replace(" ", "")) for name, seeds in ISSUE_32_SEEDS.items()])
def test_the_seeds_that_found_issue_32s_bugs_pass(seeds: tuple[int, ...]) -> None:
    results = run_many(list(seeds), jobs=1)
    failed = [report for _, ok, report, _ in results if not ok]
    assert not failed, f"{len(failed)} of {len(seeds)} seeds fail:\n\n" + "\n\n".join(failed[:2])


def test_seeds_without_issue_32s_draws_replay_as_before() -> None:
    """Issue 32's kinds come from the side generator: a seed that draws none of them draws
    the scenario it drew before they existed, and its main generator goes on exactly as it
    did, so the nemesis picks the same faults (values recorded on 21e55c5, the commit
    before them; there the two seeds' full traces were byte-identical too)."""
    from .kernel import Kernel
    from .scenario import Scenario

    before = {
        4: (
            "replication brokers=3 bound t0[p=1 rf=3 min.isr=1 unclean fsync] producers=1+1(acks=1) in_flight=2 drop=0.002 dup=0.0 "
            "delay<=30ms fault_gap=(150, 700) faults[crash_replica=5,crash_leader=3,power_loss=3,zombie=2,split=1,one_way=1,rebalance=1]",
            0.8447892263967683,
        ),
        8: (
            "replication brokers=3 t0[p=1 rf=3 min.isr=1 fsync] producers=1+0(acks=1) in_flight=1 drop=0.002 dup=0.01 delay<=60ms "
            "fault_gap=(150, 700) faults[crash_replica=5,crash_leader=1,crash_controller=1,pause=2,split=1,one_way=1,storage=1,store=1,rebalance=1]",
            0.9020643004116283,
        ),
    }
    for seed, (described, next_draw) in before.items():
        rng = Kernel(seed).rng
        scenario = Scenario.draw(rng)
        assert not scenario.broker_config and not any(scenario.fault_weights[k] for k in ("alter_config", "delete_records", "twin")), seed
        assert scenario.describe() == described, f"seed {seed} draws another scenario"
        assert rng.random() == next_draw, f"seed {seed}'s main generator moved on differently"


def test_same_seed_same_run() -> None:
    for seed in (1, 2, 5):
        a = Simulation(SimConfig(seed=seed)).run()
        b = Simulation(SimConfig(seed=seed)).run()
        assert a.fingerprint() == b.fingerprint(), f"seed {seed} is not deterministic"
    assert run_seed(1).digest != run_seed(2).digest


def test_run_does_not_depend_on_hash_randomization() -> None:
    """Set/dict iteration over str keys changes with PYTHONHASHSEED; a run must not."""
    code = "from tests.sim.simulation import run_seed; print(run_seed(6).digest)"
    digests = set()
    for hash_seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=hash_seed)
        out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True)
        digests.add(out.stdout.strip())
    assert len(digests) == 1, digests


def test_every_scenario_kind_and_fault_occurs_in_the_default_seeds() -> None:
    """The seeds CI runs cover what the simulation claims to cover."""
    from .scenario import FAULT_KINDS, Scenario
    from .kernel import Kernel

    kinds, rfs, min_isrs, modes, unclean, bound = set(), set(), set(), set(), set(), set()
    weights = {k: 0 for k in FAULT_KINDS}
    for seed in SEEDS[:300]:
        sc = Scenario.draw(Kernel(seed).rng)
        kinds.add(sc.kind)
        bound.add(sc.bound)
        for t in sc.topics:
            rfs.add(t.rf)
            min_isrs.add(t.min_insync)
            modes.add(t.mode)
            unclean.add(t.unclean)
        for k, w in sc.fault_weights.items():
            weights[k] += w
    assert kinds == {"replication", "groups"} and bound == {True, False}
    assert rfs == {1, 3, 5} and min_isrs == {1, 2} and modes == {"fsync", "pagecache", "flushms"} and unclean == {True, False}
    assert all(weights[k] > 0 for k in FAULT_KINDS), weights


def test_failure_report_names_the_seed_and_the_replay_command(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plant a bug (followers never truncate a diverging tail) and make sure the simulation
    catches it and says how to replay it."""
    from kcoord.replication.follower import Follower

    monkeypatch.setattr(Follower, "truncate", lambda self, offset: None)
    failed = next((r for r in (run_seed(s, kind="replication", mode="fsync") for s in range(40)) if not r.ok), None)
    assert failed is not None, "a follower that never truncates must break an invariant in some run of 40"
    report = failed.report()
    assert f"seed {failed.config.seed}:" in report
    assert f"python -m tests.sim.run --seed {failed.config.seed} --kind replication --mode fsync --verbose" in report


def test_planted_hw_bug_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A leader that acknowledges acks=all writes as soon as they are appended (HW = its own
    LEO) must lose acknowledged records when it crashes."""
    from kcoord.replication.isr import IsrState

    monkeypatch.setattr(IsrState, "high_watermark_candidate", lambda self, leo: leo)
    assert _catching(("1", "2", "4", "isr", "kip497"), 0, want=1, kind="replication", mode="fsync")


def test_planted_alter_partition_mismatch_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The AlterPartition bug of issue 12, put back: an answer ends the wait for whatever
    proposal is in flight. The KIP-497 check sees the controller's ISR outgrow the leader's
    maximal ISR (seeds found by running 400 replication seeds with the bug planted; re-found
    when issue 32's draws changed the schedules: 89, 129, 204, 237, 247, 275 of 0-799)."""
    from kcoord.replication.leader import Leader

    original = Leader.on_alter_partition_response

    def sloppy(self, request, response, now_ms):
        if self.isr.alter_request is not None and request is not self.isr.alter_request:
            request = self.isr.alter_request  # take any answer for the proposal in flight
        return original(self, request, response, now_ms)

    monkeypatch.setattr(Leader, "on_alter_partition_response", sloppy)
    results = [run_seed(s, kind="replication") for s in (89, 129, 204, 237)]
    assert sum(any(v.invariant == "kip497" for v in r.violations) for r in results) >= 2


def test_planted_wiped_disk_leader_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hole directory ids close, put back: a replica back from a wiped disk counts as
    holding what it held. Its storage lineage is unchanged (same machine, same boot), so it
    is trusted on its ISR or ELR membership and leads with an empty log; the simulation's
    ``wipe`` fault exposes it as acknowledged records lost (seeds found with the hole
    planted: 4 of 2,000 when ``wipe`` came; re-found when heartbeat timing changed the
    schedules: 714, 729, 967, 1153 and 2803 of seeds 0-2999, none with the fix; when
    issue 32 changed them again (its fixes and its draws): 714 and 1722; and when the
    controller's election left unheard members out: 61, 714, 763 and 3990 of 0-3999)."""
    from kcoord.replication.trust import TrustLedger

    monkeypatch.setattr(TrustLedger, "holds_data", lambda self, rid: True)
    results = [run_seed(s) for s in (61, 714)]
    assert all(any(v.invariant == "1" for v in r.violations) for r in results)


def test_planted_coordinator_load_bug_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The group-coordinator load bug of issue 12, put back: a coordinator that starts
    serving once it has read up to the HW (even when the log goes further) loses commits,
    and offsets are seen going backwards.

    A second defense came later: a new leader shows consumers no HW until it reaches the
    start of its epoch, so the HW a coordinator reads already covers every acknowledged
    commit; with it the planted bug is harmless (no seed of 0-1999 catches it once
    coordinators take their epochs from the controller, issue 32). So that defense is
    removed too, and the coordinator's own rule is what stands: seeds 561, 809 and 966
    of 0-999 (groups kind, on trust-fixes' schedules) caught the pair, none the leader's
    hole alone (seed 7 did too until it drew slow replica creations); since the controller's
    election leaves unheard members out of the new ISR, 636, 725, 760, 966 and 974 do."""
    from kcoord.group import driver
    from kcoord.replication.leader.watermark import HighWatermark

    original = driver.GroupCoordinatorDriver._on_load_fetch

    def finish_at_hw(self, resp, outcome):
        if resp is not None and resp.error_code == 0 and not resp.records and self._load_offset >= resp.high_watermark:
            self._renew_epoch(self._finish_load)  # serve as soon as it holds an epoch, unfenced
            return None
        return original(self, resp, outcome)

    monkeypatch.setattr(HighWatermark, "stale", lambda self: False)
    monkeypatch.setattr(driver.GroupCoordinatorDriver, "_on_load_fetch", finish_at_hw)
    results = [run_seed(s, kind="groups") for s in (636, 725, 966)]
    assert all(any(v.invariant == "6" for v in r.violations) for r in results)


def test_the_code_digest_covers_the_cores_and_the_harness_but_not_the_seed_runner() -> None:
    modules = simulated_modules()
    for core in ("kcoord.replication.leader", "kcoord.replication.controller_driver", "kcoord.group.coordinator_driver", "kcoord.log.log", "tests.sim.checks"):
        assert core in modules, core
    assert "tests.sim.run" not in modules and "tests.sim.test_simulation" not in modules
    assert code_digest() == code_digest()


def test_planted_coordinator_own_epoch_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 32's finding 6, put back: a coordinator incarnation takes a producer epoch one
    above any it knows instead of asking the controller. A ``twin``'s old process whose
    append timed out (its partition's replicas cut off) lands on its successor's epoch, and
    restarts that load a lagging log do the same (check **6**: two incarnations on one
    epoch). Seeds found with the defect planted (groups kind, seeds 0-79): 48, 61, 74; 61
    only since the old process may lose its partition's replicas; since the controller's
    election leaves unheard members out of the new ISR, none of 0-79, and 20 of 0-999 (the
    first: 99, 112, 124)."""
    from kcoord.group import driver

    def own_epoch(self, then):
        if self.closed:
            return
        self.producer_epoch = max(self.producer_epoch, self._max_epoch_seen) + 1
        self._next_sequence = 0
        self._epoch_ready = True
        then()

    monkeypatch.setattr(driver.GroupCoordinatorDriver, "_renew_epoch", own_epoch)
    results = [run_seed(s, kind="groups") for s in (99, 112, 124)]
    assert all(any(v.invariant == "6" for v in r.violations) for r in results)


def test_planted_preferred_leader_check_that_never_runs_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The controller's periodic preferred-leader check, switched off: leadership that moved
    away during the faults stays away, and the quiet state's preferred-liveness condition
    (the check's own rule says it would still move) fails the run on liveness (22 of seeds
    0-29 with the check planted off; none without)."""
    from kcoord.replication.controller.liveness import Liveness

    monkeypatch.setattr(Liveness, "rebalance_due", lambda self, now_ms: [])
    for s in (1, 2):
        r = run_seed(s)
        assert any(v.invariant == "liveness" and "preferred-leader check" in str(v) for v in r.violations), r.report()


def test_planted_tombstone_expiry_at_the_first_pass_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cleaner before KIP-534, as a producer whose clock runs far behind makes it: every
    tombstone counts as expired at the first pass over it, so it goes before a consumer
    reading the log could see the deletion (tombstone-early)."""
    from kcoord.log.tombstone_clock import TombstoneClock

    monkeypatch.setattr(TombstoneClock, "expired", lambda self, offset, horizon_ms: True)
    assert _catching(("tombstone-early",), 15, want=1)
