"""Render the report from a results.json that ``kcoord bench`` wrote (not a benchmark:
``kcoord bench`` skips files starting with ``_``).

    python benchmarks/_report.py --markdown bench-results/results.json
        print PERFORMANCE.md's figure tables
    python benchmarks/_report.py --markdown bench-results/results.json --update PERFORMANCE.md
        replace the tables between <!-- bench:begin --> and <!-- bench:end --> in place
    python benchmarks/_report.py --plots docs/bench bench-results/results.json
        (re)draw the PNG plots into a directory

Benchmarks import :func:`shutdown` and :func:`emit` from here for their common tail.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kcoord.bench import markdown, plots, results  # noqa: E402


def shutdown(name: str, started_ray: bool, *, spark: bool = True) -> None:
    """A benchmark's teardown: stop this process's RayDP session (``spark``), delete the
    cluster ``name`` with its data, and shut Ray down if the benchmark started it; each
    step runs even if the one before it raised."""
    from kcoord.cluster.deploy import teardown

    try:
        if spark:
            from kcoord import spark as ks

            ks.stop()
    finally:
        try:
            teardown(name, delete_data=True, address=None)
        finally:
            if started_ray:
                import ray

                ray.shutdown()


def emit(results: dict, out: str | Path | None = None) -> None:
    """Print a benchmark's JSON on stdout (and write it to ``out`` if given)."""
    text = json.dumps(results, indent=2)
    print(text)
    if out:
        Path(out).write_text(text + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="a results.json written by kcoord bench")
    parser.add_argument("--markdown", action="store_true", help="print the figure tables as markdown")
    parser.add_argument("--update", type=Path, metavar="FILE", help="with --markdown: replace the generated section of FILE instead of printing")
    parser.add_argument("--plots", type=Path, metavar="DIR", help="draw the plots into DIR")
    args = parser.parse_args(argv)
    doc = results.load(args.results)
    if not (args.markdown or args.plots):
        parser.error("nothing to do: give --markdown and/or --plots DIR")
    if args.markdown:
        if args.update:
            args.update.write_text(markdown.update(args.update.read_text(), doc))
            print(f"updated {args.update}", file=sys.stderr)
        else:
            print(markdown.render(doc), end="")
    if args.plots:
        args.plots.mkdir(parents=True, exist_ok=True)
        for name, outcome in plots.draw_all(doc, args.plots).items():
            print(f"{name}: {outcome}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
