"""The processes a benchmark started (its Ray cluster, actors, workers, Spark JVMs) and the
CPU they used: counting only this tree keeps CPU-per-record figures comparable between a
busy and a quiet machine, since other load does not count."""

from __future__ import annotations

import psutil


def tree() -> list[psutil.Process]:
    """This process and all its descendants."""
    me = psutil.Process()
    return [me, *me.children(recursive=True)]


def tree_cpu() -> dict[int, float]:
    """CPU seconds (user + system) used so far by each process of the tree, by pid."""
    out = {}
    for proc in tree():
        try:
            t = proc.cpu_times()
            out[proc.pid] = t.user + t.system
        except psutil.Error:  # exited meanwhile
            pass
    return out


def running(pid: int) -> bool:
    """The process exists and has not exited (a zombie waiting for its parent has)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
