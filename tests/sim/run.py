"""Run the cluster simulation for one seed or many, e.g. to replay a failure:

    python -m tests.sim.run --seed 17 --verbose          # faults, roles, elections, ISR changes
    python -m tests.sim.run --seed 17 -vv                # ... and every message
    python -m tests.sim.run --seeds 0-999 --jobs 2       # many seeds on two processes
    python -m tests.sim.run --seeds 0-99 --events 30000  # longer runs

Exit status 1 when any seed violates an invariant.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import sys
import time
from pathlib import Path

from .sim_config import KINDS, MODES
from .simulation import run_seed


def parse_seeds(spec: str) -> list[int]:
    """``"2000"`` = seeds 0..1999; ``"5000-5999"``; ``"17,42"``."""
    spec = spec.strip()
    if spec.isdigit():
        return list(range(int(spec)))
    out: list[int] = []
    for part in spec.split(","):
        if "-" in part:
            lo, hi = part.split("-", 1)
            out += range(int(lo), int(hi) + 1)
        elif part.strip():
            out.append(int(part))
    return out


def quiet_logs(verbose: int = 0) -> None:
    """The drivers log what an operator would want to see; in a simulated run that is
    noise (``--verbose`` traces the run instead)."""
    logging.getLogger("kcoord").setLevel(logging.WARNING if verbose >= 2 else logging.CRITICAL)


# Modules that drive a run from outside: they choose seeds and print, and cannot change what
# a seed does, so editing them does not start a new version of the simulated code.
_DRIVERS = ("tests.sim.run", "tests.sim.test_simulation")


def simulated_modules() -> dict[str, Path]:
    """Module name -> source file of everything a run executes: the kcoord cores and the
    simulation harness, as loaded after a short seed ran."""
    run_seed(0, None, None, 10, 0, None)
    return {
        name: Path(module.__file__)
        for name, module in sorted(sys.modules.items())
        if name.startswith(("kcoord", "tests.sim")) and name not in _DRIVERS and getattr(module, "__file__", None)
    }


def code_digest() -> str:
    """A short hash of the sources of :func:`simulated_modules`, so that the seeds of a long
    run split over several sessions and commits can be shown to have run one version of the
    code."""
    modules = simulated_modules()
    h = hashlib.sha256()
    for name, path in modules.items():
        h.update(name.encode() + b"\0" + path.read_bytes())
    return f"{h.hexdigest()[:12]} over {len(modules)} modules"


class _Hasher:
    """A stdout stand-in that keeps only a hash of what is written."""

    def __init__(self) -> None:
        self.h = hashlib.sha256()

    def write(self, text: str) -> int:
        self.h.update(text.encode())
        return len(text)

    def flush(self) -> None:
        pass


def trace_digest(seed: int, kind=None, mode=None, events=None, ms=None, security: bool = False, transactions: bool = False) -> str:
    """A hash of everything ``-vv`` prints for ``seed`` (every event and message, in order):
    equal digests before and after a refactoring show that it changed nothing a run does."""
    import contextlib

    out = _Hasher()
    with contextlib.redirect_stdout(out):  # type: ignore[arg-type]
        result = run_seed(seed, kind, mode, events, 2, ms, security, transactions)
    out.write(result.summary())
    return out.h.hexdigest()[:16]


def _one(args: tuple) -> tuple[int, bool, str, float]:
    seed, kind, mode, events, ms, security, transactions, digest = args
    quiet_logs()
    started = time.perf_counter()
    if digest:
        return seed, True, f"{seed} {trace_digest(seed, kind, mode, events, ms, security, transactions)}", time.perf_counter() - started
    result = run_seed(seed, kind, mode, events, 0, ms, security, transactions)
    return seed, result.ok, result.report() if not result.ok else result.summary(), time.perf_counter() - started


def run_many(
    seeds: list[int], *, kind=None, mode=None, events=None, ms=None, jobs: int = 1, on_result=None, security: bool = False, digest: bool = False, transactions: bool = False
) -> list[tuple[int, bool, str, float]]:
    """Run ``seeds`` on ``jobs`` processes; results in seed order (``digest``: each result's
    text is the seed's trace digest instead of its summary)."""
    work = [(s, kind, mode, events, ms, security, transactions, digest) for s in seeds]
    if jobs <= 1:
        results = []
        for w in work:
            r = _one(w)
            results.append(r)
            if on_result is not None:
                on_result(r)
        return results
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(jobs) as pool:
        results = []
        for r in pool.imap(_one, work, chunksize=4):
            results.append(r)
            if on_result is not None:
                on_result(r)
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.sim.run", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--seed", type=int, help="one seed")
    group.add_argument("--seeds", help="seeds: a count (1000), a range (0-999) or a list (1,5,9)")
    ap.add_argument("--kind", choices=KINDS, help="scenario kind (default: chosen by the seed)")
    ap.add_argument("--mode", choices=MODES, help="durability of every topic (default: chosen by the seed)")
    ap.add_argument("--events", type=int, help="event budget of the fault phase (also lifts its time bound)")
    ap.add_argument("--ms", type=int, help="simulated time bound of the fault phase")
    ap.add_argument("--jobs", "-j", type=int, default=1, help=f"processes (default 1; this machine has {os.cpu_count()} cores)")
    ap.add_argument("--verbose", "-v", action="count", default=0, help="print traced events (-vv: every message too)")
    ap.add_argument("--security", action="store_true", help="an admin also alters users and ACLs through the controller (tests/sim/security.py)")
    ap.add_argument("--transactions", action="store_true", help="a transactional producer and a read_committed reader join (tests/sim/transactions.py)")
    ap.add_argument(
        "--trace-digest",
        metavar="FILE",
        help="write '<seed> <hash of its -vv trace>' per seed to FILE and print one hash over them all "
        "(compare before and after a change that must not change what runs)",
    )
    args = ap.parse_args(argv)
    quiet_logs(args.verbose)
    if args.trace_digest:
        seeds = [args.seed] if args.seed is not None else parse_seeds(args.seeds)
        results = run_many(seeds, kind=args.kind, mode=args.mode, events=args.events, ms=args.ms, jobs=args.jobs, security=args.security, digest=True, transactions=args.transactions)
        lines = "".join(r[2] + "\n" for r in results)
        Path(args.trace_digest).write_text(lines)
        print(f"{len(seeds)} seeds, traces digest {hashlib.sha256(lines.encode()).hexdigest()[:16]} (per seed: {args.trace_digest})")
        return 0
    if args.seed is not None:
        result = run_seed(args.seed, args.kind, args.mode, args.events, args.verbose, args.ms, args.security, args.transactions)
        print(result.report() if not result.ok else result.summary())
        return 0 if result.ok else 1
    seeds = parse_seeds(args.seeds)
    print(f"code {code_digest()}", flush=True)
    started = time.perf_counter()
    failed = []

    def show(r: tuple) -> None:
        if not r[1]:
            failed.append(r[0])
            print(r[2], flush=True)

    run_many(seeds, kind=args.kind, mode=args.mode, events=args.events, ms=args.ms, jobs=args.jobs, on_result=show, security=args.security, transactions=args.transactions)
    elapsed = time.perf_counter() - started
    print(f"{len(seeds)} seeds, {len(failed)} failed, {elapsed:.1f} s ({len(seeds) / elapsed:.1f} seeds/s)" + (f"; failed: {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
