"""Run the replication simulation for one seed (or a range), e.g. to replay a failure:

    python -m tests.sim.run --seed 17 --verbose          # faults, roles, elections, ISR changes
    python -m tests.sim.run --seed 17 -vv                # ... and every message
    python -m tests.sim.run --seeds 0-999 --events 30000 # longer runs, more seeds

Exit status 1 when any seed violates an invariant.
"""

from __future__ import annotations

import argparse
import sys
import time

from .simulation import LOSSY_MODELS, MODES, run_seed


def _seeds(spec: str) -> list[int]:
    out: list[int] = []
    for part in spec.split(","):
        if "-" in part:
            lo, hi = part.split("-", 1)
            out += range(int(lo), int(hi) + 1)
        elif part:
            out.append(int(part))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.sim.run", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--seed", type=int, help="one seed")
    group.add_argument("--seeds", help="seeds like 0-99 or 1,5,9")
    ap.add_argument("--mode", choices=MODES, help="durability mode (default: chosen by the seed)")
    ap.add_argument("--model", choices=LOSSY_MODELS, default="supported", help="failure model of the lossy modes (default: supported)")
    ap.add_argument("--events", type=int, help="event budget of the fault phase (also lifts its time bound)")
    ap.add_argument("--ms", type=int, help="simulated time bound of the fault phase")
    ap.add_argument("--verbose", "-v", action="count", default=0, help="print traced events (-vv: every message too)")
    args = ap.parse_args(argv)
    seeds = [args.seed] if args.seed is not None else _seeds(args.seeds)
    failed = 0
    started = time.perf_counter()
    for seed in seeds:
        result = run_seed(seed, args.mode, args.events, args.verbose, args.model, args.ms)
        if not result.ok:
            failed += 1
            print(result.report())
        elif len(seeds) == 1 or args.verbose:
            print(result.summary())
    if len(seeds) > 1:
        print(f"{len(seeds)} seeds, {failed} failed, {time.perf_counter() - started:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
