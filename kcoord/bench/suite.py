"""The whole suite, in order: describe the machine, run every benchmark script (one at a
time: they would measure each other otherwise), write ``results.json`` after each one (an
interrupted run keeps what it measured), then draw the plots from it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import machine, plots, results, runner
from .targets import evaluate

DEFAULT_TIMEOUT_S = {True: 600.0, False: 1800.0}  # per benchmark, by --quick


class UnknownBenchmark(ValueError):
    pass


@dataclass
class SuiteOptions:
    out_dir: Path
    benchmarks_dir: Path
    quick: bool = False
    only: tuple[str, ...] = ()
    timeout_s: float | None = None
    argv: list[str] = field(default_factory=list)

    @property
    def repo(self) -> Path:
        return self.benchmarks_dir.parent


def select(scripts: list[Path], only: tuple[str, ...]) -> list[Path]:
    if not only:
        return scripts
    known = {p.stem for p in scripts}
    unknown = sorted(set(only) - known)
    if unknown:
        raise UnknownBenchmark(f"no benchmark named {unknown[0]!r} (have: {', '.join(sorted(known))})")
    return [p for p in scripts if p.stem in only]


def run(options: SuiteOptions, progress: Callable[[str], None] = lambda line: None) -> dict:
    """Run the suite; returns the results document (also in ``out_dir/results.json``)."""
    scripts = select(runner.discover(options.benchmarks_dir), options.only)
    if not scripts:
        raise UnknownBenchmark(f"no benchmark scripts in {options.benchmarks_dir}")
    out_dir = options.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / "results.json"
    previous = _previous(target) if options.only else None
    info = machine.collect(options.repo).to_dict()
    started_at, start = results.utc_now(), time.perf_counter()
    run_opts = runner.RunOptions(
        out_dir=out_dir,
        quick=options.quick,
        timeout_s=options.timeout_s or DEFAULT_TIMEOUT_S[options.quick],
        repo=options.repo,
        commit=info["git"]["commit"],
    )
    runs: list[results.BenchmarkRun] = []

    def document() -> dict:
        suite = results.SuiteRun(options.quick, started_at, results.utc_now(), round(time.perf_counter() - start, 1), list(options.argv))
        doc = results.build(suite, info, runs)
        if previous is not None:
            doc = results.merge(previous, doc)
        doc["targets"] = [o.to_dict() for o in evaluate(doc)]
        return doc

    for i, script in enumerate(scripts, 1):
        progress(f"[{i}/{len(scripts)}] {script.stem} ...")
        one = runner.run_script(script, run_opts)
        runs.append(one)
        progress(f"[{i}/{len(scripts)}] {script.stem}: {'ok' if one.ok else 'FAILED: ' + str(one.error)} ({one.seconds:.0f} s)")
        results.save(document(), target)
    doc = document()
    try:
        doc["plots"] = {**doc.get("plots", {}), **plots.draw_all(doc, out_dir)}
    except plots.PlotsUnavailable as exc:
        doc["plots_error"] = str(exc)
    results.save(doc, target)
    return doc


def _previous(path: Path) -> dict | None:
    """An earlier results.json in the same place, to merge an ``--only`` run into."""
    if not path.exists():
        return None
    try:
        return results.load(path)
    except (OSError, ValueError):
        return None
