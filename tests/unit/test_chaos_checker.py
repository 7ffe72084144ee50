"""The chaos checker (tests/chaos/checker.py) on hand-made histories, without Ray: a clean
history passes, and each property, broken on purpose, is caught (so every check is shown
able to fail). Also: the nemesis schedule is a function of its seed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chaos import checker
from chaos.history import History
from chaos.nemesis import WEIGHTS, schedule

T = 1000.0


class Hist:
    """A small, consistent run: producer p0 wrote 0..5 into partitions 0 and 1, a member
    consumed and committed everything, the observer saw one leader per partition."""

    def __init__(self, d: Path) -> None:
        self.d = d
        # partition -> [(offset, value)]
        self.log = {0: [(0, "p0:0"), (1, "p0:2"), (2, "p0:4")], 1: [(0, "p0:1"), (1, "p0:3"), (2, "p0:5")]}
        self.acks = [[0, 0, 0, T + 1], [1, 1, 0, T + 1], [2, 0, 1, T + 1], [3, 1, 1, T + 1], [4, 0, 2, T + 2], [5, 1, 2, T + 2]]
        self.invokes = [(0, 4, T), (4, 6, T + 1.5)]
        self.infos: list = []
        self.member = [
            {"type": "start", "t": T},
            {"type": "assign", "t": T, "gen": 1, "member": "m1", "partitions": [0, 1]},
            {"type": "poll", "t": T + 3, "gen": 1, "member": "m1", "recs": {"0": [[0, "p0:0"], [1, "p0:2"], [2, "p0:4"]]}, "hw": {"0": 3}},
            {"type": "commit", "t": T + 3.1, "phase": "ok", "gen": 1, "member": "m1", "offsets": {"0": 3}},
            {"type": "poll", "t": T + 4, "gen": 1, "member": "m1", "recs": {"1": [[0, "p0:1"], [1, "p0:3"], [2, "p0:5"]]}, "hw": {"1": 3}},
            {"type": "commit", "t": T + 4.1, "phase": "ok", "gen": 1, "member": "m1", "offsets": {"1": 3}},
            {"type": "end", "t": T + 10},
        ]
        self.member2: list = []
        self.groups = [
            {"t": T + 2, "state": "Stable", "gen": 1, "members": {"m1": [0, 1]}, "committed": {}},
            {"t": T + 3.5, "state": "Stable", "gen": 1, "members": {"m1": [0, 1]}, "committed": {"0": 3}},
            {"t": T + 5, "state": "Stable", "gen": 1, "members": {"m1": [0, 1]}, "committed": {"0": 3, "1": 3}},
        ]
        self.replicas = []
        for i in range(12):
            for p in (0, 1):
                self.replicas.append({"t": T + i, "topic": "chaos", "partition": p, "leader": 0, "epoch": 1, "isr": [0, 1, 2],
                                      "replicas": [[0, "a", "leader", 1, min(3, i), 3], [1, "b", "follower", 1, min(3, i), 3]],
                                      "live_leader": True})
        self.final = {"topic": "chaos", "end_offsets": {"0": 3, "1": 3}, "committed": {"0": 3, "1": 3}, "healed": True, "drained": True,
                      "divergent": [], "epochs_decrease": [], "client_crashes": {}}
        self.faults = [{"type": "fault", "kind": "kill-leader", "ok": True, "t": T + 2}, {"type": "fault", "kind": "pause-controller", "ok": True, "t": T + 3},
                       {"type": "fault", "kind": "node-loss", "ok": True, "t": T + 4}, {"type": "fault", "kind": "kill-follower", "ok": False, "t": T + 5}]

    def write(self) -> Path:
        h = History(self.d / "producer-p0.jsonl")
        h.write("start", t=T, producer="p0")
        for lo, hi, t in self.invokes:
            h.write("invoke", t=t, lo=lo, hi=hi)
        h.write("ok", t=T + 2, acks=self.acks)
        if self.infos:
            h.write("info", t=T + 3, seqs=self.infos)
        h.write("end", t=T + 10)
        for name, events in (("c0-0", self.member), ("c1-0", self.member2)):
            if events:
                h = History(self.d / f"member-{name}.jsonl")
                for ev in events:
                    h.write(**ev)
        h = History(self.d / "observer.jsonl")
        for r in self.replicas:
            h.write("replicas", **r)
        for g in self.groups:
            h.write("group", **g)
        h = History(self.d / "nemesis.jsonl")
        for f in self.faults:
            h.write(**f)
        with open(self.d / "final-log.jsonl", "w") as f:
            for p, recs in self.log.items():
                for o, v in recs:
                    f.write(json.dumps([p, o, v]) + "\n")
        (self.d / "final.json").write_text(json.dumps(self.final))
        return self.d


@pytest.fixture
def hist(tmp_path) -> Hist:
    return Hist(tmp_path)


def run_check(h: Hist, **kw) -> checker.Report:
    return checker.check(checker.load(h.write()), **kw)


def only(rep: checker.Report, *kinds: str) -> None:
    bad = {k: v for k, v in rep.counts.items() if v}
    assert set(bad) == set(kinds), (bad, dict(rep.examples))


def test_a_clean_history_passes_and_the_cli_says_so(hist, capsys):
    rep = run_check(hist)
    only(rep)
    assert rep.figures["acked"] == 6 and rep.figures["polled"] == 6 and rep.figures["kills"] == 1
    assert rep.figures["pauses"] == 1 and rep.figures["node_losses"] == 1
    assert checker.main([str(hist.d)]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("chaos-check ") and last.endswith(" OK") and " lost=0 " in last


def test_lost_acked_write(hist, capsys):
    hist.log[1] = hist.log[1][:2]  # offset 2 of partition 1 (p0:5, acked) is gone
    hist.member[4]["recs"]["1"] = hist.member[4]["recs"]["1"][:2]
    hist.member[5]["offsets"]["1"] = 2
    hist.groups[-1]["committed"]["1"] = 2
    hist.final["committed"]["1"] = 2
    hist.final["end_offsets"]["1"] = 2
    rep = run_check(hist)
    only(rep, "lost")
    assert checker.main([str(hist.d)]) == 1
    assert capsys.readouterr().out.strip().endswith("FAILED")


def test_acked_write_at_another_offset_is_lost(hist):
    hist.acks[5] = [5, 1, 7, T + 2]  # acknowledged at offset 7, which does not exist
    only(run_check(hist), "lost")


def test_indeterminate_writes_may_be_missing_but_not_doubled(hist):
    hist.invokes.append((6, 8, T + 3))
    hist.infos = [[6, "timeout"], [7, "timeout"]]
    hist.log[0].append((3, "p0:6"))
    hist.member.insert(5, {"type": "poll", "t": T + 5, "gen": 1, "member": "m1", "recs": {"0": [[3, "p0:6"]]}, "hw": {"0": 4}})
    hist.final["end_offsets"]["0"] = 4
    hist.final["committed"]["0"] = 4
    only(run_check(hist))
    hist.log[0].append((4, "p0:6"))
    hist.final["end_offsets"]["0"] = 5
    hist.final["drained"] = True
    hist.member.insert(6, {"type": "poll", "t": T + 5.5, "gen": 1, "member": "m1", "recs": {"0": [[4, "p0:6"]]}, "hw": {"0": 5}})
    hist.final["committed"]["0"] = 5
    only(run_check(hist), "duplicated")


def test_duplicate(hist):
    hist.log[0].append((3, "p0:2"))
    hist.member[2]["recs"]["0"].append([3, "p0:2"])
    hist.final["end_offsets"]["0"] = 4
    only(run_check(hist), "duplicated", "reordered")  # a second p0:2 after p0:4 is also out of order


def test_reordered_within_a_partition(hist):
    hist.log[0] = [(0, "p0:0"), (1, "p0:4"), (2, "p0:2")]
    hist.acks[2] = [2, 0, 2, T + 1]
    hist.acks[4] = [4, 0, 1, T + 2]
    hist.member[2]["recs"]["0"] = [[0, "p0:0"], [1, "p0:4"], [2, "p0:2"]]
    only(run_check(hist), "reordered")


def test_phantom_value(hist):
    hist.log[0].append((3, "p9:1"))
    hist.member[2]["recs"]["0"].append([3, "p9:1"])
    only(run_check(hist), "phantom")


def test_stale_read_a_record_seen_that_later_disappears(hist):
    hist.member[2]["recs"]["0"][2] = [2, "p0:99"]  # read at offset 2, gone from the final log
    only(run_check(hist), "stale_reads")


def test_non_monotonic_poll(hist):
    hist.member.insert(3, {"type": "poll", "t": T + 3.05, "gen": 1, "member": "m1", "recs": {"0": [[1, "p0:2"]]}, "hw": {"0": 3}})
    only(run_check(hist), "nonmonotonic")


def test_a_new_assignment_may_start_over(hist):
    hist.member.insert(4, {"type": "revoke", "t": T + 3.2, "gen": 1, "member": "m1", "partitions": [0, 1]})
    hist.member.insert(5, {"type": "assign", "t": T + 3.3, "gen": 2, "member": "m1", "partitions": [0, 1]})
    hist.member.insert(6, {"type": "poll", "t": T + 3.4, "gen": 2, "member": "m1", "recs": {"0": [[1, "p0:2"]]}, "hw": {"0": 3}})
    only(run_check(hist))


def test_skipped_offsets_within_an_assignment(hist):
    hist.member[2]["recs"]["0"] = [[0, "p0:0"], [2, "p0:4"]]
    only(run_check(hist), "skipped", "unconsumed")


def test_unconsumed_record_after_draining(hist):
    hist.member[4]["recs"]["1"] = [[0, "p0:1"], [1, "p0:3"]]
    only(run_check(hist), "unconsumed")


def test_committed_offset_goes_backwards(hist):
    hist.groups.append({"t": T + 6, "state": "Stable", "gen": 1, "members": {"m1": [0, 1]}, "committed": {"0": 1, "1": 3}})
    hist.groups.append({"t": T + 7, "state": "Stable", "gen": 1, "members": {"m1": [0, 1]}, "committed": {"0": 3, "1": 3}})
    only(run_check(hist), "commits_backwards", "acked_commits_lost")


def test_acknowledged_commit_lost_at_the_end(hist):
    hist.final["committed"]["1"] = 2
    hist.groups = hist.groups[:2]  # no snapshot after the ack of partition 1's commit
    only(run_check(hist), "acked_commits_lost")


def test_two_members_own_one_partition_in_one_generation(hist):
    hist.member2 = [
        {"type": "start", "t": T},
        {"type": "assign", "t": T + 1, "gen": 1, "member": "m2", "partitions": [1]},
        {"type": "end", "t": T + 10},
    ]
    only(run_check(hist), "double_owners")


def test_a_stable_group_must_own_each_partition_once(hist):
    hist.groups.append({"t": T + 6, "state": "Stable", "gen": 2, "members": {"m1": [0, 1], "m2": [1]}, "committed": {"0": 3, "1": 3}})
    only(run_check(hist), "double_owners")
    hist.groups[-1] = {"t": T + 6, "state": "Stable", "gen": 2, "members": {"m1": [0]}, "committed": {"0": 3, "1": 3}}
    only(run_check(hist), "double_owners")


def test_two_leaders_in_one_epoch(hist):
    hist.replicas[5]["replicas"][1] = [1, "b", "leader", 1, 3, 3]
    only(run_check(hist), "leader_conflicts")


def test_hw_goes_back_within_a_tenure(hist):
    hist.replicas[-2]["replicas"][0] = [0, "a", "leader", 1, 1, 3]
    only(run_check(hist), "hw_regressions")


def test_replica_epoch_goes_back(hist):
    hist.replicas[-1]["replicas"][1] = [1, "b", "follower", 0, 3, 3]
    only(run_check(hist), "epoch_regressions")


def test_divergent_replicas_and_unhealed_undrained_runs(hist):
    hist.final["divergent"] = [1]
    only(run_check(hist), "divergent")
    hist.final["divergent"] = []
    hist.final["healed"] = False
    hist.final["drained"] = False
    only(run_check(hist), "not_healed", "not_drained")


def test_a_history_cut_short_without_final_json_is_not_healed(hist):
    d = hist.write()
    (d / "final.json").unlink()
    rep = checker.check(checker.load(d))
    assert rep.counts["not_healed"] == 1 and "no final.json" in rep.examples["not_healed"][0]


def test_client_crash(hist):
    hist.final["client_crashes"] = {"member c0-1": 1}
    only(run_check(hist), "client_crashes")


def test_stall_with_a_live_leader_but_not_without_one(hist):
    # p0:5 acknowledged 100 s after it was sent (T+1.5)
    hist.acks[5] = [5, 1, 2, T + 101.5]
    sample = hist.replicas[-1]
    hist.replicas = [{**sample, "partition": p, "t": T + i * 10} for i in range(12) for p in (0, 1)]
    only(run_check(hist, stall_threshold=60))  # samples 10 s apart: the leader's state is unknown
    hist.replicas = [{**sample, "partition": p, "t": T + i * 0.5} for i in range(240) for p in (0, 1)]
    rep = run_check(hist, stall_threshold=60)
    only(rep, "stalls")  # a live leader all along
    assert rep.figures["producer_max_wait_s"] == pytest.approx(100.0, abs=0.1)
    for r in hist.replicas:  # partition 1 without a live leader from T+10 to T+95
        if r["partition"] == 1 and T + 10 <= r["t"] <= T + 95:
            r["live_leader"] = False
    rep = run_check(hist, stall_threshold=60)
    only(rep)
    assert rep.figures["producer_max_wait_s"] == pytest.approx(15.0, abs=1.0)


def test_a_torn_last_line_is_skipped(hist):
    d = hist.write()
    with open(d / "member-c0-0.jsonl", "a") as f:
        f.write('{"type":"poll","t":1,"recs":{"0":[[0,')
    only(checker.check(checker.load(d)))


def test_the_schedule_is_a_function_of_the_seed():
    a = schedule(7, 600)
    assert a == schedule(7, 600) and a != schedule(8, 600)
    assert [f.at for f in a] == sorted(f.at for f in a) and a[-1].at < 600
    kinds = {f.kind for f in a}
    assert kinds == set(WEIGHTS) | {"node-loss"}
    assert all(f.duration > 2.0 for f in a if f.kind.startswith("pause-"))  # longer than the session timeout
    kills = sum(f.kind.startswith("kill-") for f in schedule(1, 160))
    assert kills >= 110, kills  # the CI run's budget: >= 100 kills even if a few find no target


def test_the_schedules_reserve_extends_it_without_changing_the_planned_part():
    base = schedule(11, 160)
    longer = schedule(11, 160, overtime=0.3)
    assert [f for f in longer if f.at < 160 and f.kind != "node-loss"] == [f for f in base if f.kind != "node-loss"]
    reserve = [f for f in longer if f.at >= 160]
    assert reserve and all(f.kind != "node-loss" for f in reserve) and max(f.at for f in reserve) < 160 * 1.3
    assert sum(f.kind.startswith("kill-") for f in reserve) >= 25, reserve


def scripted_nemesis(succeeds):
    """A Nemesis with its schedule logic alone: ``succeeds(fault, injected_so_far)`` says
    whether an injection lands; nothing touches Ray."""
    import threading

    from chaos.nemesis import Nemesis

    class Scripted(Nemesis):
        def __init__(self):
            self.injected = []
            self._stop = threading.Event()
            self._lock = threading.Lock()
            self._return_due = None
            self._node_down = threading.Event()

        def _quiesce(self, timeout):
            pass

        def inject(self, fault):
            self.injected.append(fault)
            return succeeds(fault, self.injected)

    return Scripted()


def test_the_nemesis_retries_a_skipped_kill_and_uses_the_reserve_only_when_short_of_kills():
    from chaos.nemesis import Fault

    def restarting_below_half(fault, _injected):  # a kill whose pick is below 0.5 finds its target restarting
        return fault.pick >= 0.5

    plan = [Fault(0.0, "kill-leader", 0.2), Fault(1.1, "pause-leader", 0.9, duration=3),
            Fault(1.6, "kill-follower", 0.7), Fault(1.65, "kill-controller", 0.8)]
    n = scripted_nemesis(restarting_below_half)
    assert n.run(plan, seconds=1.5, min_kills=2) == 2  # the reserve was needed for the 2nd kill, not a 3rd
    assert [(f.kind, f.pick) for f in n.injected] == [("kill-leader", 0.2), ("kill-leader", 0.7), ("pause-leader", 0.9),
                                                      ("kill-follower", 0.7)]
    n = scripted_nemesis(restarting_below_half)
    assert n.run(plan, seconds=1.5, min_kills=1) == 1  # enough kills: the reserve stays unused
    assert [f.kind for f in n.injected] == ["kill-leader", "kill-leader", "pause-leader"]


def test_the_nemesis_plans_a_skipped_node_loss_again_until_one_lands(monkeypatch):
    from chaos import nemesis
    from chaos.nemesis import Fault

    monkeypatch.setattr(nemesis, "NODE_LOSS_RETRY_S", 0.2)

    def first_two_node_losses_find_no_victim(fault, injected):
        return fault.kind != "node-loss" or sum(f.kind == "node-loss" for f in injected) > 2

    plan = [Fault(0.0, "node-loss", 0.5, duration=1), Fault(0.1, "kill-leader", 0.7), Fault(0.5, "node-loss", 0.5, duration=1)]
    n = scripted_nemesis(first_two_node_losses_find_no_victim)
    n.run(plan, seconds=0.6, min_kills=1)
    losses = [round(f.at, 1) for f in n.injected if f.kind == "node-loss"]
    assert losses == [0.0, 0.2, 0.4, 0.5], "planned again until one landed, and the second one as planned"


def test_a_consumer_wait_leaves_out_time_the_group_had_no_live_coordinator(hist):
    # p0:0 (partition 0, acked at T+1) is first polled at T+50
    hist.member[2] = {**hist.member[2], "t": T + 50}
    hist.member[3] = {**hist.member[3], "t": T + 50.1}
    sample = hist.replicas[-1]
    hist.replicas = [{**sample, "partition": p, "t": T + i * 0.5} for i in range(140) for p in (0, 1)]
    rep = run_check(hist, stall_threshold=30)
    only(rep, "stalls")  # no coordinator samples (an older history): all 49 s count
    assert rep.figures["consumer_max_wait_s"] == pytest.approx(49.0, abs=0.6)
    assert rep.figures["group_unserved_s"] is None
    # the group's coordinator answered but had not loaded from T+5 to T+40
    coordinator = [{"t": T + i * 0.5, "index": 0, "live": not (T + 5 <= T + i * 0.5 <= T + 40)} for i in range(140)]
    d = hist.write()
    h = History(d / "observer.jsonl")
    for c in coordinator:
        h.write("coordinator", **c)
    h.close()
    rep = checker.check(checker.load(d), stall_threshold=30)
    only(rep)
    assert rep.figures["consumer_max_wait_s"] == pytest.approx(14.0, abs=1.1)
    assert rep.figures["consumer_max_wait_raw_s"] == pytest.approx(49.0, abs=0.1)
    assert rep.figures["consumer_max_wait"]["group_unserved"] == pytest.approx(35.0, abs=1.1)
    # ... and its __consumer_offsets partition had no live leader from T+40 to T+46
    h = History(d / "observer.jsonl")
    for i in range(140):
        t = T + i * 0.5
        h.write("replicas", **{**sample, "topic": "__consumer_offsets", "partition": 0, "t": t, "live_leader": not (T + 40 < t <= T + 46)})
    h.close()
    rep = checker.check(checker.load(d), stall_threshold=30)
    assert rep.figures["consumer_max_wait_s"] == pytest.approx(7.0, abs=1.1)
    # a producer's wait does not depend on the group
    assert rep.figures["producer_max_wait_s"] == pytest.approx(rep.figures["producer_max_wait_raw_s"], abs=0.01)


def test_a_consumer_wait_leaves_out_time_the_offsets_partition_was_below_min_insync_replicas(hist):
    """Members commit between polls: while the coordinator's __consumer_offsets partition has
    fewer live replicas than its min.insync.replicas no commit can be acknowledged, and the
    member's next poll waits for it (the chaos run's 13.7 s consumer wait, issue 32)."""
    hist.member[2] = {**hist.member[2], "t": T + 50}
    hist.member[3] = {**hist.member[3], "t": T + 50.1}
    sample = hist.replicas[-1]
    assert len(sample["replicas"]) >= 2
    hist.replicas = [{**sample, "partition": p, "t": T + i * 0.5} for i in range(140) for p in (0, 1)]
    # the coordinator is live throughout; only its leader answers from T+10 to T+30
    hist.replicas += [
        {**sample, "topic": "__consumer_offsets", "partition": 0, "t": T + i * 0.5,
         "replicas": sample["replicas"][:1] if T + 10 < T + i * 0.5 <= T + 30 else sample["replicas"]}
        for i in range(140)
    ]
    d = hist.write()
    h = History(d / "observer.jsonl")
    for i in range(140):
        h.write("coordinator", t=T + i * 0.5, index=0, live=True)
    h.close()
    hist.final.pop("min_insync_replicas", None)
    rep = checker.check(checker.load(d), stall_threshold=60)
    assert rep.figures["consumer_max_wait_s"] == pytest.approx(49.0, abs=0.6), "an older history: no min ISR known"
    hist.final["offsets_min_insync_replicas"] = 2
    d = hist.write()
    h = History(d / "observer.jsonl")
    for i in range(140):
        h.write("coordinator", t=T + i * 0.5, index=0, live=True)
    h.close()
    rep = checker.check(checker.load(d), stall_threshold=60)
    only(rep)
    assert rep.figures["consumer_max_wait_s"] == pytest.approx(29.0, abs=1.1)
    assert rep.figures["consumer_max_wait"]["group_unserved"] == pytest.approx(20.0, abs=1.1)


def test_a_producer_wait_leaves_out_time_below_min_insync_replicas_alive(hist):
    # p0:5 (partition 1, sent T+1.5) acknowledged at T+31.5; from T+5 to T+25 only its leader
    # answered the observer (both followers dead): no acks=all write could be acknowledged
    hist.acks[5] = [5, 1, 2, T + 31.5]
    sample = hist.replicas[-1]
    hist.replicas = [{**sample, "partition": p, "t": T + i * 0.5} for i in range(80) for p in (0, 1)]
    for r in hist.replicas:
        if r["partition"] == 1 and T + 5 <= r["t"] <= T + 25:
            r["replicas"] = r["replicas"][:1]
    rep = run_check(hist, stall_threshold=20)
    only(rep, "stalls")  # an older history (no min_insync_replicas): the live leader is all that counts
    assert rep.figures["producer_max_wait_s"] == pytest.approx(30.0, abs=0.1)
    hist.final["min_insync_replicas"] = 2
    rep = run_check(hist, stall_threshold=20)
    only(rep)
    assert rep.figures["producer_max_wait_s"] == pytest.approx(9.0, abs=1.1)
    assert rep.figures["producer_max_wait_live_leader_s"] == pytest.approx(30.0, abs=0.1)
    assert rep.figures["producer_max_wait_live_replicas_s"] == pytest.approx(9.0, abs=1.1)  # dead: left out too
    assert rep.figures["producer_max_wait_raw_s"] == pytest.approx(30.0, abs=0.1)


def test_a_producer_wait_leaves_out_time_the_isr_was_below_min_insync_replicas(hist):
    """The chaos run of 2026-11-29 (seed 933430): partition 1's leader was alone in its ISR
    for 8 s while its recreated followers answered the observer with no role yet (the
    controller that would make them followers was being restarted); an acks=all write
    cannot be acknowledged with the ISR below min.insync.replicas, live replicas or not."""
    hist.acks[5] = [5, 1, 2, T + 31.5]
    sample = hist.replicas[-1]
    hist.replicas = [{**sample, "partition": p, "t": T + i * 0.5} for i in range(80) for p in (0, 1)]
    for r in hist.replicas:
        if r["partition"] == 1 and T + 5 <= r["t"] <= T + 25:
            r["isr"] = [0]
    hist.final["min_insync_replicas"] = 2
    rep = run_check(hist, stall_threshold=20)
    only(rep)
    assert rep.figures["producer_max_wait_s"] == pytest.approx(9.0, abs=1.1)
    assert rep.figures["producer_max_wait_live_leader_s"] == pytest.approx(30.0, abs=0.1)
    # the replicas were live all along: the stricter figure counts the ISR's 20 s too
    assert rep.figures["producer_max_wait_live_replicas_s"] == pytest.approx(30.0, abs=0.1)


def test_a_consumer_wait_leaves_out_time_the_isr_was_below_min_insync_replicas(hist):
    """The same run: offset 15843 of partition 0 was acknowledged by leader 2 just before it
    was killed; the new leader, alone in the ISR for 12 s, could not move its HW past it
    (KIP-966: the HW advances only with min.insync.replicas in the ISR), so no consumer could
    read it."""
    hist.member[2] = {**hist.member[2], "t": T + 40}
    hist.member[3] = {**hist.member[3], "t": T + 40.1}
    sample = hist.replicas[-1]
    hist.replicas = [{**sample, "partition": p, "t": T + i * 0.5} for i in range(120) for p in (0, 1)]
    for r in hist.replicas:
        if r["partition"] == 0 and T + 10 < r["t"] <= T + 30:
            r["isr"] = [0]
    rep = run_check(hist, stall_threshold=60)
    assert rep.figures["consumer_max_wait_s"] == pytest.approx(39.0, abs=0.6), "no min ISR known: nothing left out"
    hist.final["min_insync_replicas"] = 2
    rep = run_check(hist, stall_threshold=60)
    only(rep)
    assert rep.figures["consumer_max_wait_s"] == pytest.approx(19.0, abs=1.1)
    assert rep.figures["consumer_max_wait_live_replicas_s"] == pytest.approx(39.0, abs=0.6)


def test_the_drain_waits_while_commits_move_and_gives_up_when_they_stop():
    from chaos.waits import wait_while_progressing

    figures = iter(range(5))  # moves five times, then stands still
    last = [0]

    def progress() -> int:
        last[0] = next(figures, last[0])
        return last[0]

    ok, err = wait_while_progressing("work", lambda: False, progress, stall_timeout=0.05, cap=30, interval=0.01)
    assert not ok and "no progress" in err and "progress 4" in err
    ok, err = wait_while_progressing("work", lambda: False, lambda: 0, stall_timeout=30, cap=0.05, interval=0.01)
    assert not ok and "still going after" in err
    calls = iter([False, False, True])
    assert wait_while_progressing("work", lambda: next(calls), lambda: 0, stall_timeout=30, cap=30, interval=0.01) == (True, None)


def test_coordinator_loads_say_where_the_unserved_time_went(hist):
    """A coordinator killed at T+10: silent until T+14 (its process restarting), answering
    but loading until T+20; each incarnation's load phases summed."""
    d = hist.write()
    h = History(d / "observer.jsonl")
    for i in range(60):
        r, t = i * 0.5, T + i * 0.5
        if r < 10:
            h.write("coordinator", t=t, index=0, live=True, incarnation="a", pid=1, load={"load_ms": 900, "phases_ms": {"fetch": 400, "fence": 500}})
        elif r < 14:
            h.write("coordinator", t=t, index=0, live=False)
        elif r < 20:
            h.write("coordinator", t=t, index=0, live=False, incarnation="b", pid=2, load={}, loading={"phase": "epoch"})
        else:
            h.write("coordinator", t=t, index=0, live=True, incarnation="b", pid=2, load={"load_ms": 6_000, "phases_ms": {"fetch": 1_000, "epoch": 5_000}})
    h.close()
    loads = checker.check(checker.load(d)).figures["coordinator_loads"]
    assert (loads["incarnations"], loads["max_ms"]) == (2, 6_000)
    assert loads["phases_s"] == {"epoch": 5.0, "fence": 0.5, "fetch": 1.4}
    assert loads["down_spells"] == 1
    assert loads["down_silent_s"] == pytest.approx(4.0) and loads["down_loading_s"] == pytest.approx(6.0)
