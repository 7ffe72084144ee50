"""Order statistics for benchmark samples: medians and nearest-rank percentiles, the same
definition in every benchmark so their figures compare."""

from __future__ import annotations

import math
import statistics
from typing import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile, ``q`` in [0, 1]; NaN for no samples. With fewer than 1/(1-q)
    samples the top percentiles are the maximum (say so next to the figure: ``samples``)."""
    if not values:
        return math.nan
    s = sorted(values)
    rank = max(1, math.ceil(q * len(s)))
    return float(s[min(len(s), rank) - 1])


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else math.nan


def summary(values: Sequence[float], digits: int = 2) -> dict:
    """p50/p99/p999/max/mean and the sample count, rounded: how latencies are reported."""
    if not values:
        return {"samples": 0}
    return {
        "p50": round(percentile(values, 0.50), digits),
        "p99": round(percentile(values, 0.99), digits),
        "p999": round(percentile(values, 0.999), digits),
        "max": round(max(values), digits),
        "mean": round(statistics.fmean(values), digits),
        "samples": len(values),
    }


def ratio(value: float | None, baseline: float | None, digits: int = 3) -> float | None:
    """``value / baseline``, None when either is missing or the baseline is 0."""
    if value is None or baseline is None or not baseline or math.isnan(value) or math.isnan(baseline):
        return None
    return round(value / baseline, digits)
