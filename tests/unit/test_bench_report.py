"""The pure parts of ``kcoord bench`` (no Ray): machine info, merging results into one
document, targets, the markdown tables and the plots, on a document shaped like the one the
benchmark scripts produce."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kcoord.bench import figures, machine, markdown, results, runner, stats, targets
from waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def produce_result(send_batch_all_rf3: float = 1_200_000) -> dict:
    cases = []
    for acks in ("0", "1", "all"):
        for rf in (1, 3):
            for api in ("send", "send_batch"):
                rps = send_batch_all_rf3 if (acks, rf, api) == ("all", 3, "send_batch") else (350_000 if api == "send" else 1_500_000)
                cases.append({"acks": acks, "rf": rf, "api": api, "records_per_s": rps, "mb_per_s": rps * 100 / 1e6,
                              "ratio_vs_raw_actor": round(rps / 2_000_000, 3), "ratio_vs_queue_put_batch": round(rps / 500_000, 3)})
    return {"benchmark": "produce_matrix", "partitions": 6, "cases": cases,
            "baselines": {"raw_actor": {"records_per_s": 2_000_000}, "queue_put_batch": {"records_per_s": 500_000}}}


def sample_results() -> dict[str, dict]:
    """One result per benchmark, in the layout each script prints (abridged)."""
    return {
        "produce_matrix": produce_result(),
        "latency": {"benchmark": "latency", "loads": [
            {"offered_records_per_s": rate, "achieved_records_per_s": rate * 0.99, "sent": rate, "received": rate,
             "latency_ms": {"p50": 2.0, "p99": p99, "p999": p99 * 2, "max": 40.0, "mean": 3.0, "samples": rate},
             "baseline_queue": {"achieved_records_per_s": rate, "latency_ms": {"p50": 0.5, "p99": 2.0, "p999": 4.0}},
             "ratios_vs_queue": {"p50": 4.0, "p99": p99 / 2.0, "p999": p99 / 2.0}}
            for rate, p99 in ((1000, 5.0), (10_000, 12.0), (50_000, 30.0))]},
        "client": {"benchmark": "client", "cases": {"consume": {"records_per_s": 900_000}, "consume_columns": {"records_per_s": 2_000_000},
                                                    "queue_get_batch": {"records_per_s": 400_000}},
                   "ratios": {"consume_vs_queue_get": 2.25, "consume_columns_vs_queue_get": 5.0}},
        "failover": {"benchmark": "failover", "kills": 4, "lost": 0, "samples_ms": [300, 350, 420, 1900],
                     "client_failover_ms": {"p50": 350, "p99": 1900, "max": 1900},
                     "baseline_ray_restart_ms": {"p50": 900, "p99": 1200, "samples_ms": [800, 900, 1200]},
                     "ratios_vs_ray_restart": {"client_p50": 0.39}},
        "groups": {"benchmark": "groups",
                   "join_to_stable_ms": {str(n): {"median_ms": 100.0 + 30 * n} for n in (1, 2, 4, 8, 16)},
                   "leave_to_stable_ms": {str(n): {"median_ms": 90.0 + 20 * n} for n in (2, 4, 8, 16)},
                   "baseline_barrier_ms": {str(n): {"median_ms": 1.0 + n / 10} for n in (1, 2, 4, 8, 16)},
                   "ratios_vs_barrier": {"join": {"16": 223.0}}},
        "spark": {"benchmark": "spark", "cases": {"write": {"rows_per_s": 300_000}, "read": {"rows_per_s": 900_000},
                                                  "ray_data_from_spark": {"rows_per_s": 200_000}, "ray_data_to_spark": {"rows_per_s": 450_000}},
                  "ratios": {"write_vs_from_spark": 1.5, "read_vs_to_spark": 2.0, "write_vs_from_spark_cpu": 1.1, "read_vs_to_spark_cpu": 1.3}},
        "capacity": {"benchmark": "capacity", "max_healthy_partitions": 8, "stop_reason": "reached --max-partitions 8",
                     "replica_memory": {"rss_mib": 120.0, "uss_mib": 60.0}, "baseline": {"bare_actor": {"rss_mib": 90.0, "uss_mib": 40.0}, "idle_cpu_three_bare_actors_whole_tree": 0.0179},
                     "memory_bound_partitions_24gib": 130, "cpu_bound_partitions": 40, "idle_cpu_per_partition_cores": 0.02,
                     "idle_cpu_per_partition_by_process": {"leaders": 0.006, "followers": 0.011, "controller": 0.002, "driver": 0.0},
                     "idle_cpu_replica_processes_vs_three_bare_actors": 1.21,
                     "idle_cpu_partition_processes_vs_three_bare_actors": 1.3,
                     "idle_cpu_per_partition_vs_three_bare_actors_whole_tree": 1.12,
                     "idle_cpu_three_bare_actors_same_windows": 0.0155,
                     "idle_cpu_per_partition_vs_three_bare_actors_same_windows": 1.29,
                     "idle_cpu_partition_vs_three_bare_actors_in_window": 1.17,
                     "idle_cpu_partition_vs_three_bare_actors_per_window": [1.31, 1.17, 1.12],
                     "steps": [{"partitions": 4, "replicas": 12, "seconds_to_full_isr": 3.0, "idle_cpu_cores": 0.1, "controller_rtt_ms": 5,
                                "under_replicated": 0, "healthy": True, "problems": []}]},
    }


def make_doc(result_by_name: dict[str, dict], failed: dict[str, str] | None = None, quick: bool = True) -> dict:
    runs = [results.BenchmarkRun(name, results.OK, "2026-01-01T00:00:00+00:00", 10.0, 0, result=r) for name, r in result_by_name.items()]
    runs += [results.BenchmarkRun(name, results.FAILED, "2026-01-01T00:00:00+00:00", 3.0, 1, error=err) for name, err in (failed or {}).items()]
    suite = results.SuiteRun(quick, "2026-01-01T00:00:00+00:00", "2026-01-01T00:02:00+00:00", 120.0, ["bench", "--quick"])
    info = {"cores": 2, "physical_cores": 1, "memory_gib": 23.4, "cpu_model": "Test CPU", "os": "Linux", "python": "3.11.7",
            "packages": {"ray": "2.60.0"}, "git": {"commit": "a" * 40, "branch": "bench9", "dirty": False}, "load_average": [1.0]}
    return results.build(suite, info, runs)


# -- machine ---------------------------------------------------------------------------------


def test_cpu_model_comes_from_cpuinfo_on_x86_and_arm():
    assert machine.parse_cpu_model("processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t: x\n") == "AMD EPYC 7B13"
    assert machine.parse_cpu_model("processor\t: 0\nModel\t: Raspberry Pi 4\n") == "Raspberry Pi 4"
    assert machine.parse_cpu_model("processor\t: 0\n") is None


def test_machine_info_names_the_hardware_the_versions_and_the_commit():
    info = machine.collect(REPO).to_dict()
    assert info["cores"] >= 1 and info["memory_bytes"] > 0 and info["memory_gib"] > 0
    assert info["cpu_model"] and info["os"] and info["python"].count(".") == 2
    assert set(machine.PACKAGES) <= set(info["packages"]) and info["packages"]["msgpack"]
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert info["git"]["commit"] == head and isinstance(info["git"]["dirty"], bool)
    json.dumps(info)  # it goes into results.json as is


def test_git_state_outside_a_checkout_is_empty_and_dirty_means_changed_tracked_files(tmp_path):
    assert machine.git_state(tmp_path) == machine.GitState()
    run = lambda *a: subprocess.run(["git", "-C", str(tmp_path), *a], check=True, capture_output=True)  # noqa: E731
    run("init", "-q")
    (tmp_path / "f").write_text("1")
    run("add", "f")
    run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    (tmp_path / "untracked").write_text("results do not make a checkout dirty")
    assert machine.git_state(tmp_path).dirty is False
    (tmp_path / "f").write_text("2")
    state = machine.git_state(tmp_path)
    assert state.dirty is True and len(state.commit or "") == 40


# -- results ----------------------------------------------------------------------------------


def test_build_lists_failures_and_keeps_every_result():
    doc = make_doc({"latency": {"x": 1}}, failed={"spark": "exit code 1: boom"})
    assert doc["schema"] == results.SCHEMA and doc["failures"] == ["spark"]
    assert results.result(doc, "latency") == {"x": 1} and results.result(doc, "spark") is None
    assert doc["benchmarks"]["spark"]["error"] == "exit code 1: boom" and doc["suite"]["quick"] is True


def test_merge_replaces_rerun_benchmarks_and_keeps_the_others():
    old = make_doc({"latency": {"v": 1}, "groups": {"v": 1}}, failed={"spark": "boom"})
    old["plots"] = {"latency": "latency.png"}
    new = make_doc({"spark": {"v": 2}, "latency": {"v": 2}})
    merged = results.merge(old, new)
    assert {n: results.result(merged, n) for n in ("latency", "groups", "spark")} == {"latency": {"v": 2}, "groups": {"v": 1}, "spark": {"v": 2}}
    assert merged["failures"] == [] and merged["plots"] == {"latency": "latency.png"}
    assert old["failures"] == ["spark"]  # inputs untouched
    with pytest.raises(ValueError):
        results.merge({"schema": 0}, new)


def test_save_and_load_round_trip(tmp_path):
    doc = make_doc(sample_results())
    results.save(doc, tmp_path / "results.json")
    assert results.load(tmp_path / "results.json") == json.loads(json.dumps(doc))
    (tmp_path / "other.json").write_text("{}")
    with pytest.raises(ValueError):
        results.load(tmp_path / "other.json")


def test_a_failing_script_is_a_recorded_failure_not_an_exception(tmp_path):
    bench = tmp_path / "benchmarks"
    bench.mkdir()
    (bench / "good.py").write_text("import argparse, json\np = argparse.ArgumentParser(); p.add_argument('--out'); p.add_argument('--quick', action='store_true')\n"
                                   "a = p.parse_args(); open(a.out, 'w').write(json.dumps({'quick': a.quick}))\n")
    (bench / "bad.py").write_text("import sys\nprint('some progress', file=sys.stderr)\nraise SystemExit('bad: cluster did not start')\n")
    (bench / "_helper.py").write_text("raise SystemExit('never run')\n")
    scripts = runner.discover(bench)
    assert [p.name for p in scripts] == ["bad.py", "good.py"]
    opts = runner.RunOptions(out_dir=tmp_path / "out", quick=True, timeout_s=60, repo=tmp_path)
    good, bad = runner.run_script(bench / "good.py", opts), runner.run_script(bench / "bad.py", opts)
    assert good.ok and good.result == {"quick": True} and (tmp_path / "out" / "good.json").exists()
    assert not bad.ok and bad.returncode == 1 and bad.error == "exit code 1: bad: cluster did not start"
    assert "some progress" in (tmp_path / "out" / "logs" / "bad.err").read_text()


# -- stats, figures and targets ---------------------------------------------------------------


def test_percentiles_are_nearest_rank():
    xs = list(range(1, 1001))
    assert (stats.percentile(xs, 0.5), stats.percentile(xs, 0.99), stats.percentile(xs, 0.999)) == (500, 990, 999)
    assert stats.percentile([7.0], 0.99) == 7.0 and stats.summary([])["samples"] == 0
    assert stats.ratio(3, 2) == 1.5 and stats.ratio(1, 0) is None and stats.ratio(None, 1) is None


def test_figures_read_every_benchmark_layout():
    doc = make_doc(sample_results())
    assert figures.produce(doc).case("all", 3, "send_batch").records_per_s == 1_200_000
    assert figures.latency_at(figures.latency(doc), 10_000).p99 == 12.0
    assert figures.failover(doc).baseline_p50_ms == 900
    assert [r.members for r in figures.rebalance(doc)] == [1, 2, 4, 8, 16] and figures.rebalance(doc)[0].leave_ms is None
    assert [(r.case, r.ratio) for r in figures.spark(doc)] == [("write", 1.5), ("read", 2.0)]
    assert figures.capacity(doc).cpu_bound_partitions == 40
    # where a partition's idle cost goes, per kind of process (nothing printed for 0)
    section = markdown.capacity_section(doc)
    assert "leaders 6.0 mCPU, followers 11.0 mCPU, controller 2.0 mCPU; the three replica processes alone 1.21x" in section
    assert "driver" not in section.split("of which, per kind of process")[1].split("\n")[0]
    # like for like: own processes against own, whole tree against whole tree
    assert "1.29x of three bare actors measured in the same windows as the steps (0.0155 cores); the partition's own processes (replicas, controller share) 1.30x of the bare actors' own; the whole tree's line 1.12x of what three bare actors cost the whole tree (0.0179 cores)" in section
    # issue 17's idle goal, window by window
    assert "1.17x (median of 3 steps, 1.12-1.31): the replicas' CPU in each step's window" in section
    assert figures.produce(make_doc({})) is None and figures.latency(make_doc({})) is None


def test_targets_say_met_missed_and_by_how_much():
    doc = make_doc({**sample_results(), "produce_matrix": produce_result(send_batch_all_rf3=600_000)})
    outcome = {o.key: o for o in targets.evaluate(doc)}
    assert outcome["send_batch_records_per_s"].met is False and outcome["send_batch_records_per_s"].margin == "-40% (0.60x of the target)"
    assert outcome["send_records_per_s"].met is True
    assert outcome["e2e_p99_ms_at_10k"].met is True and outcome["e2e_p99_ms_at_10k"].margin == "1.25x better than the target"
    assert outcome["failover_p50_ms"].met is True and outcome["failover_p99_ms"].met is True
    assert outcome["rebalance_16_members_ms"].measured == 580.0
    assert outcome["idle_partition_vs_three_bare_actors"].measured == 1.17 and outcome["idle_partition_vs_three_bare_actors"].met is True
    assert all(o.met is None and o.margin == "not measured" for o in targets.evaluate(make_doc({})))
    assert targets.margin(30, 15, higher_is_better=False) == "+100% over (2.00x the limit)"


# -- markdown ---------------------------------------------------------------------------------


def test_markdown_renders_every_table_from_results():
    text = markdown.render(make_doc(sample_results()))
    for fragment in ("**quick run**", "`aaaaaaaaaaaa`", "| send_batch() throughput | >= 1.00M records/s | 1.20M records/s | **met**",
                     "| all | 3 | 350.0k |", "| 10.0k | 9.9k | 10000/10000 | 2.00 | 12.00 | 24.00 | – / – |", "| 16 | 580.0 | 410.0 | 2.60 |",
                     "Acknowledged records lost: **0**", "| write | 300.0k | ray.data.from_spark | 200.0k | 1.50x | 1.10x |",
                     "RSS 120 MiB, USS 60 MiB", "~40 partitions", "| consume_columns | 2.00M |"):
        assert fragment in text, fragment


def test_markdown_names_the_start_and_commit_of_each_benchmark_of_a_merged_run():
    # `kcoord bench --only` merges a rerun into an earlier results.json: the run's header
    # is the last call's, so each benchmark's own start and commit must show
    doc = make_doc(sample_results())
    doc["benchmarks"]["latency"].update(started_at="2026-01-02T09:00:00+00:00", commit="b" * 40)
    text = markdown.render(doc)
    assert "| latency | ok | 2026-01-02T09:00:00+00:00 | `bbbbbbbbbbbb` |" in text
    assert "| client | ok | 2026-01-01T00:00:00+00:00 |" in text


def test_markdown_says_what_was_not_measured_and_why():
    text = markdown.render(make_doc({}, failed={"latency": "timed out after 600 s"}))
    assert "not measured (latency failed or did not run)" in text and "timed out after 600 s" in text
    assert "| send_batch() throughput | >= 1.00M records/s | – records/s | not measured |" in text


def test_update_replaces_only_the_generated_section():
    page = f"# Perf\nintro `{markdown.BEGIN}`\n{markdown.BEGIN}\nold tables\n{markdown.END}\nprose after, quoting `{markdown.END}`\n"
    new = markdown.update(page, make_doc(sample_results()))
    assert new.startswith(f"# Perf\nintro `{markdown.BEGIN}`\n{markdown.BEGIN}\n### The run")
    assert new.endswith(f"\n{markdown.END}\nprose after, quoting `{markdown.END}`\n")
    assert "old tables" not in new and "Produce throughput" in new
    with pytest.raises(ValueError):
        markdown.update("no markers", make_doc({}))


def test_report_script_prints_the_tables(tmp_path):
    results.save(make_doc(sample_results()), tmp_path / "results.json")
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "_report.py"), "--markdown", str(tmp_path / "results.json")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == markdown.render(results.load(tmp_path / "results.json"))


# -- plots ------------------------------------------------------------------------------------


def test_plots_are_pngs_and_missing_results_are_skipped(tmp_path):
    pytest.importorskip("matplotlib")
    from kcoord.bench import plots

    drawn = plots.draw_all(make_doc(sample_results()), tmp_path)
    assert drawn == {name: file for name, (file, _) in plots.PLOTS.items()}
    for file in drawn.values():
        data = (tmp_path / file).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 5000, file
    assert set(plots.draw_all(make_doc({}), tmp_path / "none").values()) == {"skipped: no results"}


def test_kcoord_imports_without_matplotlib():
    code = "import sys; sys.modules['matplotlib'] = None\nimport kcoord.bench.suite, kcoord.cli\nfrom kcoord.bench import plots\n" \
           "try:\n    plots.pyplot()\nexcept plots.PlotsUnavailable as e:\n    print('unavailable:', e)\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO,
                          env={**__import__("os").environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr
    assert "unavailable: matplotlib is not installed (pip install 'kcoord[bench]')" in proc.stdout


# -- profiles ---------------------------------------------------------------------------------


def test_speedscope_profiles_add_up_per_function_without_idle_waits():
    from kcoord.bench import speedscope

    frames = [{"name": "main", "file": "/x/app.py", "line": 1}, {"name": "pack", "file": "/x/records.py", "line": 9},
              {"name": "crc", "file": "/x/records.py", "line": 20}, {"name": "EpollSelector.select", "file": "/usr/selectors.py", "line": 3},
              {"name": "pack", "file": "/x/records.py", "line": 11}]
    profile = {"shared": {"frames": frames}, "profiles": [
        {"type": "sampled", "samples": [[0, 1, 2], [0, 1, 2], [0, 4], [0, 3], []], "weights": [1, 1, 3, 6, 1]}]}
    costs, samples = speedscope.top_costs(profile)
    assert samples == 3
    assert [(c.function, c.self_share, c.total_share) for c in costs] == [
        ("pack (records.py)", 0.6, 1.0), ("crc (records.py)", 0.4, 0.4)]


# -- the suite and the command, on stand-in benchmark scripts ---------------------------------


GOOD = "import argparse, json\np = argparse.ArgumentParser(); p.add_argument('--out'); p.add_argument('--quick', action='store_true')\n" \
       "a = p.parse_args(); open(a.out, 'w').write(json.dumps({'benchmark': 'ok'}))\n"


def stand_in_benchmarks(root: Path) -> Path:
    bench = root / "benchmarks"
    bench.mkdir()
    (bench / "alpha.py").write_text(GOOD)
    (bench / "beta.py").write_text("raise SystemExit('beta: no cluster')\n")
    (bench / "gamma.py").write_text(GOOD)
    return bench


def test_suite_runs_every_script_records_the_failure_and_merges_reruns(tmp_path):
    from kcoord.bench import suite

    bench, out = stand_in_benchmarks(tmp_path), tmp_path / "out"
    lines: list[str] = []
    doc = suite.run(suite.SuiteOptions(out_dir=out, benchmarks_dir=bench, quick=True), progress=lines.append)
    assert doc["failures"] == ["beta"] and results.result(doc, "gamma") == {"benchmark": "ok"}
    assert doc["benchmarks"]["beta"]["error"] == "exit code 1: beta: no cluster"
    assert results.load(out / "results.json")["failures"] == ["beta"] and (out / "alpha.json").exists()
    # the seconds vary with the machine's load (a stand-in script starts a Python process)
    assert any(re.fullmatch(r"\[2/3\] beta: FAILED: exit code 1: beta: no cluster \(\d+ s\)", line) for line in lines), lines
    assert doc["machine"]["git"]["commit"] is None  # not a checkout
    (bench / "beta.py").write_text(GOOD)
    rerun = suite.run(suite.SuiteOptions(out_dir=out, benchmarks_dir=bench, quick=True, only=("beta",)))
    assert rerun["failures"] == [] and set(rerun["benchmarks"]) == {"alpha", "beta", "gamma"}
    with pytest.raises(suite.UnknownBenchmark, match="no benchmark named 'delta'"):
        suite.run(suite.SuiteOptions(out_dir=out, benchmarks_dir=bench, only=("delta",)))


def test_kcoord_bench_fails_with_one_line_when_a_benchmark_fails(tmp_path, monkeypatch, capsys):
    from kcoord.cli import bench_cmds as bench_cmd
    from kcoord.cli import main

    bench = stand_in_benchmarks(tmp_path)
    monkeypatch.setattr(bench_cmd, "benchmarks_dir", lambda: bench)
    code = main(["bench", "--quick", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 1
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert errors == [f"error: 1 benchmark(s) failed: beta (first: exit code 1: beta: no cluster); details in {tmp_path / 'out' / 'results.json'} and {tmp_path / 'out' / 'logs'}/"]
    assert "Traceback" not in err and results.load(tmp_path / "out" / "results.json")["failures"] == ["beta"]


def test_a_process_counts_as_running_until_it_exits_even_before_it_is_reaped():
    from kcoord.bench.process_tree import running

    assert running(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    wait_until(lambda: not running(child.pid), timeout=30, what="the child exited (a zombie until reaped)")
    assert child.poll() == 0  # reaped only now: it was a zombie while running() said False
    assert not running(child.pid)
