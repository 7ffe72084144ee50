"""Top costs of a py-spy profile: ``py-spy record --format speedscope`` writes every sampled
stack; this adds them up per function, as self time (the function was on top of the stack)
and total time (it was anywhere on the stack), so "where the time goes" is a short table."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path


# Functions that wait rather than work: the asyncio loop's selector, and the main thread of
# a Ray actor, which sits in the core worker's task loop (native code, so py-spy cannot
# tell it is blocked) while an async actor's requests run on the event loop thread.
IDLE = ("select", "epoll_wait", "poll", "main_loop")


@dataclass
class Cost:
    function: str  # "name (file)"
    self_share: float  # of the samples counted
    total_share: float


def frame_label(frame: dict) -> str:
    """py-spy names a frame per line; costs are added up per function."""
    return f"{frame.get('name', '?')} ({Path(frame.get('file') or '?').name})"


def is_idle(frame: dict, idle: tuple[str, ...] = IDLE) -> bool:
    return str(frame.get("name", "")).rsplit(".", 1)[-1] in idle


def top_costs(profile: dict, limit: int = 15, idle: tuple[str, ...] = IDLE) -> tuple[list[Cost], int]:
    """The ``limit`` costliest functions by self time over every thread's samples, and the
    number of samples counted. Samples whose top frame is an idle wait are left out: they
    are not work."""
    frames = profile["shared"]["frames"]
    self_w: Counter[str] = Counter()
    total_w: Counter[str] = Counter()
    counted = 0.0
    samples = 0
    for prof in profile.get("profiles", []):
        for stack, weight in zip(prof.get("samples", []), prof.get("weights", [])):
            if not stack:
                continue
            top = frames[stack[-1]]
            if is_idle(top, idle):
                continue
            samples += 1
            counted += weight
            self_w[frame_label(top)] += weight
            for label in {frame_label(frames[i]) for i in stack}:
                total_w[label] += weight
    if not counted:
        return [], 0
    return [Cost(label, w / counted, total_w[label] / counted) for label, w in self_w.most_common(limit)], samples


def load(path: str | Path) -> dict:
    return json.loads(Path(path).read_text())
