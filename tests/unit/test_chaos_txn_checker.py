"""The chaos suite's transaction checks (tests/chaos/txn_checker.py, issue 34) on hand-made
histories, without Ray: a clean history passes, and each check, broken on purpose, fails
(G1a, precommitted read, torn transaction, lost and duplicated committed writes, phantoms,
offsets moved without a commit, non-monotonic reads, not drained). Also the history files'
round trip through ``load_txn``."""

from __future__ import annotations

import json

import pytest

from chaos import checker
from chaos.history import History
from chaos.txn_checker import TXN_VIOLATIONS, Txn, TxnRun, check_txn, load_txn
from chaos.txn_clients import output_value, parse_output

T = 1000.0
# the input topic's final log: partition -> offset -> value
INPUT = {0: {0: "p0:0", 1: "p0:2", 2: "p0:4"}, 1: {0: "p0:1", 1: "p0:3", 2: "p0:5"}}


def out(txn: str, p: int, o: int) -> str:
    return output_value(txn, p, o, INPUT[p][o])


def clean() -> TxnRun:
    """w/0 read partition 0 offsets 0-1 and partition 1 offset 0 and committed; w/1 read
    partition 1 offset 1 and was aborted; w/2 (a new instance) read it again with
    partition 0 offset 2 and committed. A reader saw everything committed, after the
    commits."""
    txns = {
        "w/0": Txn("w/0", {0: (0, 2), 1: (0, 1)}, 3, T, T + 1, "ok"),
        "w/1": Txn("w/1", {1: (1, 2)}, 1, T + 2, T + 2.5, "aborted"),
        "w/2": Txn("w/2", {0: (2, 3), 1: (1, 2)}, 2, T + 3, T + 4, "ok"),
    }
    # output partitions: w/0 spread over 0 and 1, w/1's aborted record at 0/1 (skipped by
    # read_committed), w/2 after it
    committed = [(0, 0, out("w/0", 0, 0)), (1, 0, out("w/0", 0, 1)), (1, 1, out("w/0", 1, 0)),
                 (0, 3, out("w/2", 0, 2)), (1, 3, out("w/2", 1, 1))]
    uncommitted = committed + [(0, 1, out("w/1", 1, 1))]
    reads = [[(T + 1.5, 0, 0, out("w/0", 0, 0)), (T + 1.5, 1, 0, out("w/0", 0, 1)), (T + 1.5, 1, 1, out("w/0", 1, 0)),
              (T + 5, 0, 3, out("w/2", 0, 2)), (T + 5, 1, 3, out("w/2", 1, 1))]]
    return TxnRun(txns=txns, reads=reads, committed_view=committed, uncommitted_view=uncommitted,
                  final_offsets={0: 3, 1: 2}, input_ends={0: 3, 1: 2})


def counts(run: TxnRun) -> dict[str, int]:
    rep = checker.Report()
    check_txn(run, INPUT, rep)
    return {k: v for k, v in rep.counts.items() if v}


def test_a_clean_history_passes():
    rep = checker.Report()
    check_txn(clean(), INPUT, rep)
    assert {k: v for k, v in rep.counts.items() if v} == {}
    assert set(TXN_VIOLATIONS) <= set(rep.counts)
    assert rep.figures["txn"]["outcomes"] == {"ok": 2, "aborted": 1}
    assert rep.figures["txn"]["committed_visible"] == 2


def test_output_values_round_trip():
    assert parse_output(output_value("t0/7", 2, 41, "p1:9")) == ("t0/7", 2, 41, "p1:9")
    assert parse_output("garbage") is None


def test_g1a_a_reader_given_an_aborted_record():
    run = clean()
    run.reads[0].insert(3, (T + 3, 0, 1, out("w/1", 1, 1)))  # the aborted transaction's record
    assert counts(run) == {"txn_aborted_reads": 1}


def test_g1a_an_acknowledged_abort_visible_to_read_committed():
    run = clean()
    run.txns["w/1"] = Txn("w/1", {1: (1, 2)}, 1, T + 2, T + 2.5, "aborted")
    run.committed_view.append((0, 1, out("w/1", 1, 1)))
    c = counts(run)
    assert c["txn_aborted_reads"] == 1
    assert c["txn_duplicated"] == 1  # input 1/1 now has two committed outputs


def test_precommitted_read():
    run = clean()
    t, p, o, v = run.reads[0][3]
    run.reads[0][3] = (T + 3.5, p, o, v)  # w/2's record read before w/2 asked to commit
    assert counts(run) == {"txn_precommitted_reads": 1}


def test_torn_transaction():
    run = clean()
    run.committed_view = [r for r in run.committed_view if r[:2] != (1, 3)]  # half of w/2
    c = counts(run)
    assert c["txn_torn"] == 1
    assert c["txn_lost"] == 1  # and its input 1/1 has no output
    assert c["txn_aborted_reads"] == 1  # the reader read the missing half


def test_lost_acknowledged_commit():
    run = clean()
    run.committed_view = [r for r in run.committed_view if not r[2].startswith("w/2|")]
    run.reads[0] = run.reads[0][:3]
    c = counts(run)
    assert c["txn_lost"] == 1 + 2  # w/2 acknowledged but invisible; inputs 0/2 and 1/1 without output


def test_duplicated_committed_write():
    run = clean()
    # a zombie's transaction w/3 re-processing input 0/2, committed
    run.txns["w/3"] = Txn("w/3", {0: (2, 3)}, 1, T + 3.2, T + 3.3, "ok")
    run.committed_view.append((2, 0, out("w/3", 0, 2)))
    assert counts(run) == {"txn_duplicated": 1}


def test_phantom_output():
    run = clean()
    run.committed_view.append((2, 0, output_value("w/0", 0, 1, "p9:9")))
    c = counts(run)
    assert c["txn_phantom"] == 1
    assert c["txn_torn"] == 1  # w/0 now shows 4 records for 3 inputs


def test_offsets_moved_by_an_aborted_transaction():
    run = clean()
    # the next instance went on after w/1's end although w/1 aborted: input 1/1 skipped
    run.txns["w/2"] = Txn("w/2", {0: (2, 3), 1: (2, 3)}, 2, T + 3, T + 4, "ok")
    run.committed_view = [r for r in run.committed_view if r[:2] != (1, 3)] + [(1, 3, out("w/2", 1, 2))]
    run.reads[0] = run.reads[0][:4]
    run.final_offsets = run.input_ends = {0: 3, 1: 3}
    c = counts(run)
    assert c == {"txn_offsets_without_commit": 1, "txn_lost": 1}


def test_final_offsets_without_a_commit():
    run = clean()
    run.final_offsets = {0: 3, 1: 1}  # below w/2's end: not where any committed transaction ended
    run.input_ends = {0: 3, 1: 1}
    c = counts(run)
    assert c["txn_offsets_without_commit"] >= 1


def test_nonmonotonic_reads():
    run = clean()
    run.reads[0].append((T + 6, 0, 0, out("w/0", 0, 0)))
    assert counts(run) == {"txn_nonmonotonic": 1}


def test_not_drained():
    run = clean()
    run.input_ends = {0: 3, 1: 5}
    assert counts(run) == {"txn_not_drained": 1}


def test_an_output_left_unreadable_is_a_liveness_failure_not_lost_writes():
    run = clean()
    run.committed_view = None
    assert counts(run) == {"txn_not_drained": 1}


def test_no_transactional_workload_adds_nothing_but_zero_counts():
    rep = checker.Report()
    check_txn(TxnRun(), INPUT, rep)
    assert not any(rep.counts.values())
    assert "txn" not in rep.figures


def test_load_txn_reads_the_workers_readers_and_final_files(tmp_path):
    run = clean()
    w = History(tmp_path / "txn-t0.jsonl")
    for name, t in run.txns.items():
        w.write("txn", t=t.begin_t, txn=name, phase="begin", inputs={str(p): list(r) for p, r in t.inputs.items()}, n=t.n)
        w.write("txn", t=t.commit_t, txn=name, phase="commit")
        w.write("txn", t=t.commit_t + 0.1, txn=name, phase=t.outcome)
    w.write("txn", txn="w/9", phase="begin", inputs={"0": [3, 4]}, n=1)  # killed before it committed
    w.close()
    r = History(tmp_path / "txnread-r0.jsonl")
    r.write("assign", positions={})
    for t, p, o, v in run.reads[0]:
        r.write("poll", t=t, recs={str(p): [[o, v]]})
    r.close()
    (tmp_path / "final-txn.json").write_text(json.dumps({
        "read_committed": run.committed_view, "read_uncommitted": run.uncommitted_view,
        "committed": {"0": 3, "1": 2}, "input_ends": {"0": 3, "1": 2},
    }))
    loaded = load_txn(tmp_path)
    assert loaded.txns["w/1"].outcome == "aborted" and loaded.txns["w/9"].outcome is None
    assert loaded.reads == run.reads
    assert counts(loaded) == {}


@pytest.mark.parametrize("kind", TXN_VIOLATIONS)
def test_every_check_has_a_failing_history_above(kind):
    """Each count is shown failing by one of the tests above (a guard against a check added
    without its bad history)."""
    import inspect
    import sys

    src = inspect.getsource(sys.modules[__name__])
    assert f'"{kind}"' in src.split("def test_every_check_has")[0].split("def test_a_clean_history_passes")[1]


def test_the_transactional_faults_are_scheduled_only_with_the_workload():
    from chaos.nemesis import TXN_WEIGHTS, WEIGHTS, schedule

    with_txn = schedule(5, 300, weights={**WEIGHTS, **TXN_WEIGHTS})
    assert {f.kind for f in with_txn} >= set(TXN_WEIGHTS)
    assert with_txn == schedule(5, 300, weights={**WEIGHTS, **TXN_WEIGHTS})  # a function of the seed
    assert not {f.kind for f in schedule(5, 300)} & set(TXN_WEIGHTS)
