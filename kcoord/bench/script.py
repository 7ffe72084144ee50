"""What every benchmark script shares: its command line (``--quick``, ``--out FILE``) and
its output (the JSON document on stdout and in ``--out``), so ``kcoord bench`` can run
any of them the same way."""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path


def parser(doc: str | None) -> argparse.ArgumentParser:
    """An argument parser with the two options every benchmark takes; the description is
    the first line of the script's docstring."""
    p = argparse.ArgumentParser(description=(doc or "").strip().splitlines()[0] if doc else None)
    p.add_argument("--quick", action="store_true", help="small sizes: a smoke run that finishes in well under a minute on a quiet machine")
    p.add_argument("--out", help="also write the JSON here")
    return p


def context() -> dict:
    """How busy the machine was: a shared machine's load changes every figure."""
    return {"cpus": os.cpu_count(), "load_average": [round(x, 1) for x in os.getloadavg()] if hasattr(os, "getloadavg") else []}


def emit(results: dict, out: str | None, started: float | None = None) -> None:
    """Print ``results`` as JSON and write it to ``out`` (if given)."""
    if started is not None:
        results["wall_seconds"] = round(time.perf_counter() - started, 1)
    text = json.dumps(results, indent=2)
    print(text, flush=True)
    if out:
        Path(out).write_text(text + "\n")
