"""Waiting for a chaos run's cluster and workloads to get somewhere, with deadlines:
a predicate polled until it holds, or until the work it waits on stops moving."""

from __future__ import annotations

import time

from tests.chaos.settings import OFFSETS, TOPIC, log


def healed(cluster, extra_topics: tuple[str, ...] = ()) -> bool:
    """Every partition of the chaos topic, ``__consumer_offsets`` and ``extra_topics`` has
    its full ISR and one leader (the one the metadata names), every replica's log ends at
    the leader's high watermark, and the controller waits to create no replica."""
    import ray

    for topic in (TOPIC, OFFSETS, *extra_topics):
        for pm in cluster.topic(topic, refresh=True).partitions:
            if pm.leader < 0 or sorted(pm.isr) != sorted(pm.replicas):
                return False
            infos = ray.get([cluster.replica(topic, pm.partition, b, fresh=True).describe.remote() for b in pm.replicas], timeout=10)
            leaders = [i for i in infos if i["role"] == "leader"]
            if len(leaders) != 1 or leaders[0]["broker"] != pm.leader:
                return False
            if any(i["log_end_offset"] != leaders[0]["high_watermark"] for i in infos):
                return False
    return not ray.get(cluster.controller.placement.remote(), timeout=10).get("waiting")


def wait_for(what: str, predicate, timeout: float, interval: float = 1.0) -> tuple[bool, str | None]:
    """Poll ``predicate`` every ``interval`` s until it holds (True, None) or ``timeout`` s
    pass (False, why; logged). An exception counts as not yet and is kept for the why."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            if predicate():
                return True, None
        except Exception as exc:  # noqa: BLE001
            last = repr(exc)[:300]
        time.sleep(interval)
    log(f"timed out after {timeout:.0f} s waiting for {what} (last error {last})")
    return False, f"timed out waiting for {what} (last error {last})"


def wait_while_progressing(what: str, predicate, progress, stall_timeout: float, cap: float,
                           interval: float = 1.0) -> tuple[bool, str | None]:
    """:func:`wait_for` ``predicate`` for as long as ``progress()`` (a figure that changes while
    work gets done, such as the sum of committed offsets) keeps changing: give up when it has
    not changed for ``stall_timeout`` s, or after ``cap`` s in all. A backlog the nemesis left
    takes its time to drain; a stuck workload does not get longer than a stalled one."""
    start = time.monotonic()
    last_change, seen, last_err = start, None, None
    while True:
        now = time.monotonic()
        try:
            if predicate():
                return True, None
            p = progress()
            if p != seen:
                seen, last_change = p, now
        except Exception as exc:  # noqa: BLE001
            last_err = repr(exc)[:300]
        if now - last_change >= stall_timeout or now - start >= cap:
            why = f"no progress for {now - last_change:.0f} s" if now - last_change >= stall_timeout else f"still going after {cap:.0f} s"
            log(f"gave up waiting for {what}: {why} (progress {seen}, last error {last_err})")
            return False, f"gave up waiting for {what}: {why} (progress {seen}, last error {last_err})"
        time.sleep(interval)
