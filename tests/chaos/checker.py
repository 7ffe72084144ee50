"""Jepsen-style checker of a chaos run's histories.

    python -m tests.chaos.checker HISTORY_DIR [--stall-threshold 60]

Reads what the clients, the observer and the nemesis appended to ``HISTORY_DIR`` (format
in :mod:`tests.chaos.history`), the final log of every partition and the group's final
committed offsets (``final.json``, ``final-log.jsonl``), and counts violations of:

producers (idempotent, acks=all) against the final log
  lost            an acknowledged record is not at the offset it was acknowledged with
  duplicated      a value is in the log more than once
  reordered       a producer's values in a partition are not in send order
  phantom         a value in the log that no producer sent
consumers (group members) against the final log and their own polls
  stale_reads     a record a consumer was given is not in the final log at that offset
                  (it was read above the HW, or the committed log changed under it)
  nonmonotonic    within one assignment of a partition a poll went back or repeated
  skipped         within one assignment a poll jumped over offsets
  unconsumed      an offset below the final log end no member ever processed
the group (observer snapshots and members' commits)
  commits_backwards   a partition's committed offset seen lower than seen before
  acked_commits_lost  a commit acknowledged to a member, later seen (or left) lower
  double_owners   two members own one partition in one generation (members' own
                  assignments), or a Stable group's partitions are not owned exactly once
the replicas (observer snapshots, final state)
  leader_conflicts  two brokers leading one partition in the same leader epoch
  hw_regressions    a leader's HW went back within its tenure
  epoch_regressions a replica's leader epoch went back within one incarnation
  divergent         replicas of a partition hold different bytes after healing
liveness
  not_healed / not_drained  the cluster did not heal, the group did not consume and
                  commit everything, within the run's timeouts
  stalls          a client waited longer than ``--stall-threshold`` seconds for a
                  partition while it had a live leader (see below)

Waits: a producer's wait for a record is send -> acknowledgement; a consumer's wait for an
offset is the producer's acknowledgement of it -> the first poll that returned it. A wait
counts only the time something could have served it: from a producer's wait the time the
partition had no live leader (the observer found no replica answering as the leader the
controller named, or did not sample for over ``GAP_S``) or fewer live replicas, or fewer
ISR members, than its ``min.insync.replicas`` (an acks=all write cannot be acknowledged
then; ``final.json``'s ``min_insync_replicas``) is subtracted; from a consumer's, the same
time (with the ISR below min.insync.replicas the HW cannot advance, KIP-966, so what was
acknowledged last before a failover stays unreadable),
the time the group had no live coordinator (the group's coordinator did not answer
the observer within a second or had not loaded its partition) and the time that
coordinator's ``__consumer_offsets`` partition had no live leader or fewer live replicas
than its ``min.insync.replicas`` (a rebalance cannot persist its assignment, nor a member
its commit -- which the members make between polls -- without them; ``final.json``'s
``offsets_min_insync_replicas``, else the data topic's, which every run so far gave both). Histories without coordinator or
``__consumer_offsets`` samples leave those out. The raw figures (nothing subtracted) are
reported next to them, and so are ``*_max_wait_live_replicas_s``: the same waits without
leaving out time the ISR alone was below min.insync.replicas while enough replicas were
live. That time is mostly the system's own (a restarted follower catching up, an ISR
expansion waiting for the controller), so issue 32's goal is judged on both.

Prints the violations found (a few of each) and one summary line; exits 1 on any
violation, 0 otherwise. Also writes ``check.json`` with the counts and examples.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from .history import parse_value, read_lines
from .txn_checker import check_txn, load_txn

GAP_S = 5.0  # observer samples further apart than this: the partition's state is unknown
OFFSETS = "__consumer_offsets"

VIOLATIONS = (
    "lost",
    "duplicated",
    "reordered",
    "phantom",
    "stale_reads",
    "nonmonotonic",
    "skipped",
    "unconsumed",
    "commits_backwards",
    "acked_commits_lost",
    "double_owners",
    "leader_conflicts",
    "hw_regressions",
    "epoch_regressions",
    "divergent",
    "not_healed",
    "not_drained",
    "stalls",
    "client_crashes",
)


@dataclass
class Producer:
    name: str
    invoked: list[tuple[int, int, float]] = field(default_factory=list)  # (lo, hi, t)
    ok: dict[int, tuple[int, int, float]] = field(default_factory=dict)  # seq -> (partition, offset, t_ack)
    info: dict[int, str] = field(default_factory=dict)
    ended: float | None = None
    last_t: float = 0.0

    def invoke_time(self, seq: int) -> float | None:
        i = bisect.bisect_right(self.invoked, (seq, float("inf"), float("inf"))) - 1
        if i >= 0 and self.invoked[i][0] <= seq < self.invoked[i][1]:
            return self.invoked[i][2]
        return None

    def was_invoked(self, seq: int) -> bool:
        return self.invoke_time(seq) is not None


@dataclass
class Run:
    producers: dict[str, Producer] = field(default_factory=dict)
    members: dict[str, list[dict]] = field(default_factory=dict)  # incarnation name -> events
    observer: list[dict] = field(default_factory=list)
    nemesis: list[dict] = field(default_factory=list)
    log: dict[int, dict[int, str]] = field(default_factory=dict)  # partition -> offset -> value
    final: dict = field(default_factory=dict)
    reader: list[tuple[int, int, str]] | None = None  # the fresh consumer's read after the run


def load(directory: str | os.PathLike) -> Run:
    d = Path(directory)
    run = Run()
    for path in sorted(d.glob("producer-*.jsonl")):
        name = path.stem[len("producer-") :]
        pr = run.producers.setdefault(name, Producer(name))
        for ev in read_lines(path):
            pr.last_t = max(pr.last_t, ev.get("t", 0.0))
            kind = ev["type"]
            if kind == "invoke":
                pr.invoked.append((ev["lo"], ev["hi"], ev["t"]))
            elif kind == "ok":
                for seq, p, o, t in ev["acks"]:
                    pr.ok[seq] = (p, o, t)
            elif kind == "info":
                for seq, err in ev["seqs"]:
                    if seq not in pr.ok:
                        pr.info[seq] = err
            elif kind == "end":
                pr.ended = ev["t"]
        pr.invoked.sort()
        for seq in list(pr.info):
            if seq in pr.ok:
                del pr.info[seq]
    for path in sorted(d.glob("member-*.jsonl")):
        run.members[path.stem[len("member-") :]] = list(read_lines(path))
    if (d / "observer.jsonl").exists():
        run.observer = sorted(read_lines(d / "observer.jsonl"), key=lambda e: e["t"])
    if (d / "nemesis.jsonl").exists():
        run.nemesis = list(read_lines(d / "nemesis.jsonl"))
    if (d / "final-log.jsonl").exists():
        for p, o, v in read_lines(d / "final-log.jsonl"):
            run.log.setdefault(int(p), {})[int(o)] = v
    if (d / "reader-final.jsonl").exists():
        run.reader = [(int(p), int(o), v) for p, o, v in read_lines(d / "reader-final.jsonl")]
    if (d / "final.json").exists():
        run.final = json.loads((d / "final.json").read_text())
        for p in run.final.get("end_offsets", {}):
            run.log.setdefault(int(p), {})
    return run


@dataclass
class Report:
    counts: dict[str, int] = field(default_factory=lambda: {k: 0 for k in VIOLATIONS})
    examples: dict[str, list] = field(default_factory=lambda: defaultdict(list))
    figures: dict = field(default_factory=dict)

    def flag(self, kind: str, example, n: int = 1) -> None:
        self.counts[kind] += n
        if len(self.examples[kind]) < 10:
            self.examples[kind].append(example)

    @property
    def ok(self) -> bool:
        return not any(self.counts.values())


# ----------------------------------------------------------------------------------------
# producers against the final log
# ----------------------------------------------------------------------------------------
def check_producers(run: Run, rep: Report) -> None:
    where: dict[str, list[tuple[int, int]]] = defaultdict(list)  # value -> [(partition, offset)]
    for p, log in run.log.items():
        for o, v in log.items():
            where[v].append((p, o))
    for pr in run.producers.values():
        for seq, (p, o, _t) in pr.ok.items():
            want = f"{pr.name}:{seq}"
            if o >= 0:
                got = run.log.get(p, {}).get(o)
                if got != want:
                    rep.flag("lost", {"value": want, "partition": p, "offset": o, "found": got})
            elif not any(wp == p for wp, _ in where.get(want, [])):
                rep.flag("lost", {"value": want, "partition": p, "offset": o, "found": None})
    for v, places in where.items():
        if len(places) > 1:
            rep.flag("duplicated", {"value": v, "at": sorted(places)}, len(places) - 1)
        parsed = parse_value(v)
        pr = run.producers.get(parsed[0]) if parsed else None
        if pr is None or not pr.was_invoked(parsed[1]):
            rep.flag("phantom", {"value": v, "at": sorted(places)})
    for p, log in run.log.items():
        last: dict[str, tuple[int, int]] = {}
        for o in sorted(log):
            parsed = parse_value(log[o])
            if parsed is None:
                continue
            name, seq = parsed
            prev = last.get(name)
            if prev is not None and seq < prev[0]:  # an equal seq is a duplicate, counted as such
                rep.flag("reordered", {"partition": p, "producer": name, "seq": seq, "offset": o, "after_seq": prev[0], "after_offset": prev[1]})
            if prev is None or seq > prev[0]:
                last[name] = (seq, o)
    rep.figures["acked"] = sum(len(pr.ok) for pr in run.producers.values())
    rep.figures["indeterminate"] = sum(len(pr.info) for pr in run.producers.values())
    rep.figures["log_records"] = sum(len(log) for log in run.log.values())


# ----------------------------------------------------------------------------------------
# consumers
# ----------------------------------------------------------------------------------------
def check_consumers(run: Run, rep: Report) -> dict[int, dict[int, float]]:
    """Returns {partition: {offset: first time any member was given it}}."""
    first_seen: dict[int, dict[int, float]] = defaultdict(dict)
    polled = 0
    for name, events in run.members.items():
        session_last: dict[int, int] = {}  # partition -> last offset polled in this assignment
        session_gen: dict[int, object] = {}
        for ev in events:
            kind = ev["type"]
            if kind in ("assign", "revoke"):
                for p in ev.get("partitions", []):
                    session_last.pop(int(p), None)
                    session_gen.pop(int(p), None)
                continue
            if kind != "poll":
                continue
            for ps, recs in ev["recs"].items():
                p = int(ps)
                if session_gen.get(p, ev.get("gen")) != ev.get("gen"):
                    session_last.pop(p, None)  # a new generation without a revoke seen
                session_gen[p] = ev.get("gen")
                for o, v in recs:
                    polled += 1
                    final = run.log.get(p, {}).get(o)
                    if final != v:
                        rep.flag("stale_reads", {"member": name, "partition": p, "offset": o, "read": v, "final": final, "t": ev["t"]})
                    prev = session_last.get(p)
                    if prev is not None and o <= prev:
                        rep.flag("nonmonotonic", {"member": name, "partition": p, "offset": o, "after": prev, "gen": ev.get("gen"), "t": ev["t"]})
                    elif prev is not None and o > prev + 1:
                        rep.flag("skipped", {"member": name, "partition": p, "from": prev, "to": o, "gen": ev.get("gen"), "t": ev["t"]})
                    if prev is None or o > prev:
                        session_last[p] = o
                    fs = first_seen[p]
                    if o not in fs or ev["t"] < fs[o]:
                        fs[o] = ev["t"]
    rep.figures["polled"] = polled
    if run.reader is not None:
        read: set[tuple[int, int]] = set()
        for p, o, v in run.reader:
            read.add((p, o))
            if run.log.get(p, {}).get(o) != v:
                rep.flag("stale_reads", {"member": "final reader", "partition": p, "offset": o, "read": v, "final": run.log.get(p, {}).get(o)})
        missing = [(p, o) for p, log in run.log.items() for o in log if (p, o) not in read]
        if missing:
            rep.flag("unconsumed", {"reader": "final reader", "missing": missing[:20]}, len(missing))
    if run.final.get("drained"):
        for p, log in run.log.items():
            missing = [o for o in log if o not in first_seen.get(p, {})]
            if missing:
                rep.flag("unconsumed", {"partition": p, "offsets": sorted(missing)[:20]}, len(missing))
    return first_seen


# ----------------------------------------------------------------------------------------
# the group
# ----------------------------------------------------------------------------------------
def check_group(run: Run, rep: Report) -> None:
    partitions = sorted(int(p) for p in run.final.get("end_offsets", {})) or sorted(run.log)
    # members' own assignments, per generation
    owners: dict[tuple[int, int], set[str]] = defaultdict(set)
    acked: list[tuple[float, int, int, str]] = []  # (t, partition, offset, member)
    for name, events in run.members.items():
        for ev in events:
            if ev["type"] == "assign" and ev.get("gen") is not None:
                for p in ev["partitions"]:
                    owners[(ev["gen"], int(p))].add(ev.get("member") or name)
            elif ev["type"] == "commit" and ev.get("phase") == "ok":
                for p, o in ev["offsets"].items():
                    acked.append((ev["t"], int(p), int(o), name))
    for (gen, p), ms in sorted(owners.items()):
        if len(ms) > 1:
            rep.flag("double_owners", {"source": "members", "generation": gen, "partition": p, "members": sorted(ms)})
    # observer snapshots
    snaps = [e for e in run.observer if e["type"] == "group"]
    seen: dict[int, tuple[int, float]] = {}
    stable = 0
    for s in snaps:
        for p, off in (s.get("committed") or {}).items():
            p = int(p)
            if off is None:
                continue
            if p in seen and off < seen[p][0]:
                rep.flag("commits_backwards", {"partition": p, "from": seen[p][0], "to": off, "t": s["t"], "generation": s.get("gen")})
            if p not in seen or off >= seen[p][0]:
                seen[p] = (off, s["t"])
        if s.get("state") == "Stable" and s.get("members"):
            stable += 1
            owned: dict[int, list[str]] = defaultdict(list)
            for mid, ps in s["members"].items():
                for p in ps:
                    owned[int(p)].append(mid)
            bad = {p: owned.get(p, []) for p in partitions if len(owned.get(p, [])) != 1}
            if bad:
                rep.flag("double_owners", {"source": "observer", "generation": s.get("gen"), "t": s["t"], "owners": bad})
    rep.figures["group_snapshots"] = len(snaps)
    rep.figures["stable_snapshots"] = stable
    # acknowledged commits stay: every snapshot taken after the ack, and the final state
    snap_times = [s["t"] for s in snaps]
    final_committed = {int(p): o for p, o in (run.final.get("committed") or {}).items()}
    for t, p, off, member in acked:
        i = bisect.bisect_right(snap_times, t)
        for s in snaps[i:]:
            c = (s.get("committed") or {}).get(str(p), (s.get("committed") or {}).get(p))
            if c is not None and c < off:
                rep.flag("acked_commits_lost", {"partition": p, "offset": off, "member": member, "acked_at": t, "seen": c, "seen_at": s["t"]})
                break
        else:
            if run.final and final_committed.get(p, -1) < off:
                rep.flag("acked_commits_lost", {"partition": p, "offset": off, "member": member, "acked_at": t, "final": final_committed.get(p)})
    rep.figures["acked_commits"] = len(acked)


# ----------------------------------------------------------------------------------------
# replicas
# ----------------------------------------------------------------------------------------
def check_replicas(run: Run, rep: Report) -> None:
    leaders: dict[tuple[int, int], set[int]] = defaultdict(set)
    epoch_seen: dict[tuple, int] = {}
    hw_seen: dict[tuple, int] = {}
    for e in run.observer:
        if e["type"] != "replicas":
            continue
        p = e["partition"] if e.get("topic") in (None, run.final.get("topic")) else f"{e['topic']}-{e['partition']}"
        for broker, incarnation, role, epoch, hw, _leo in e["replicas"]:
            tenure = (p, broker, incarnation)
            if epoch < epoch_seen.get(tenure, -1):
                rep.flag("epoch_regressions", {"partition": p, "broker": broker, "from": epoch_seen[tenure], "to": epoch, "t": e["t"]})
            epoch_seen[tenure] = max(epoch_seen.get(tenure, -1), epoch)
            if role != "leader":
                continue
            leaders[(p, epoch)].add(broker)
            key = tenure + (epoch,)
            if hw < hw_seen.get(key, -1):
                rep.flag("hw_regressions", {"partition": p, "broker": broker, "epoch": epoch, "from": hw_seen[key], "to": hw, "t": e["t"]})
            hw_seen[key] = max(hw_seen.get(key, -1), hw)
    for (p, epoch), brokers in sorted(leaders.items(), key=str):
        if len(brokers) > 1:
            rep.flag("leader_conflicts", {"partition": p, "epoch": epoch, "brokers": sorted(brokers)})
    rep.figures["leader_epochs_seen"] = len(leaders)
    for p in run.final.get("divergent", []):
        rep.flag("divergent", {"partition": p})
    for item in run.final.get("epochs_decrease", []):
        rep.flag("divergent", {"epochs_decrease": item})


# ----------------------------------------------------------------------------------------
# liveness: waits with a live leader
# ----------------------------------------------------------------------------------------
class Leaderless:
    """Time a partition had no live leader, from the observer's samples."""

    def __init__(self, samples: list[tuple[float, bool]]) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []
        for (t0, ok0), (t1, ok1) in zip(samples, samples[1:]):
            if not (ok0 and ok1) or t1 - t0 > GAP_S:
                if self.ends and self.ends[-1] >= t0:
                    self.ends[-1] = t1
                else:
                    self.starts.append(t0)
                    self.ends.append(t1)
        self.first = samples[0][0] if samples else None
        self.last = samples[-1][0] if samples else None
        self.cum = [0.0]
        for s, e in zip(self.starts, self.ends):
            self.cum.append(self.cum[-1] + e - s)

    def measure(self, a: float, b: float) -> float:
        """Leaderless seconds within [a, b]; time outside the sampled span counts as leaderless."""
        if b <= a:
            return 0.0
        if self.first is None:
            return b - a
        out = max(0.0, min(b, self.first) - a) + max(0.0, b - max(a, self.last))
        a, b = max(a, self.first), min(b, self.last)
        if b > a:
            out += self._upto(b) - self._upto(a)
        return out

    def _upto(self, t: float) -> float:
        i = bisect.bisect_right(self.starts, t)
        total = self.cum[i - 1] if i else 0.0
        if i and t < self.ends[i - 1]:
            total += t - self.starts[i - 1]
        elif i:
            total += self.ends[i - 1] - self.starts[i - 1]
        return total

    def union(self, other: "Leaderless") -> "Leaderless":
        """Time either lacked what it tracks; sampled only where both were."""
        out = Leaderless([])
        if self.first is None or other.first is None:
            return out
        merged: list[list[float]] = []
        for s, e in sorted(zip(self.starts + other.starts, self.ends + other.ends)):
            if merged and s <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], e)
            else:
                merged.append([s, e])
        out.starts = [s for s, _ in merged]
        out.ends = [e for _, e in merged]
        out.first, out.last = max(self.first, other.first), min(self.last, other.last)
        for s, e in merged:
            out.cum.append(out.cum[-1] + e - s)
        return out


def leaderless_by_partition(run: Run, topic: str | None = None, min_live: int = 0, *, isr: bool = True) -> dict[int, Leaderless]:
    """{partition: Leaderless} of the data topic, or of ``topic``; with ``min_live`` (the
    min.insync.replicas), a partition with fewer replicas answering the observer, or (with
    ``isr``) fewer in its ISR, counts as leaderless too: no acks=all write can be
    acknowledged then, and the HW cannot advance (KIP-966), so no consumer can read what
    was acknowledged last."""
    want = (None, run.final.get("topic")) if topic is None else (topic,)
    samples: dict[int, list[tuple[float, bool]]] = defaultdict(list)
    for e in run.observer:
        if e["type"] == "replicas" and e.get("topic") in want:
            ok = bool(e.get("live_leader")) and len(e.get("replicas", [])) >= min_live and (not isr or len(e.get("isr", ())) >= min_live)
            samples[e["partition"]].append((e["t"], ok))
    return {p: Leaderless(s) for p, s in samples.items()}


def group_unserved(run: Run, *, isr: bool = True) -> Leaderless | None:
    """Time the group could not be served: its coordinator not answering or not loaded,
    or that coordinator's ``__consumer_offsets`` partition without a live leader or with
    fewer live replicas than its min.insync.replicas (no commit can be acknowledged). None when
    the history has no coordinator samples (an older run): nothing is known then."""
    samples = [(e["t"], bool(e.get("live"))) for e in run.observer if e["type"] == "coordinator"]
    if not samples:
        return None
    out = Leaderless(samples)
    index = next((e.get("index") for e in run.observer if e["type"] == "coordinator"), None)
    min_live = int(run.final.get("offsets_min_insync_replicas", run.final.get("min_insync_replicas", 0)))
    offsets = leaderless_by_partition(run, OFFSETS, min_live=min_live, isr=isr).get(index)
    return out.union(offsets) if offsets is not None else out


def check_waits(run: Run, rep: Report, first_seen: dict[int, dict[int, float]], stall_threshold: float) -> None:
    leaderless = leaderless_by_partition(run)
    # an acks=all write also needs min.insync.replicas live replicas
    min_live = int(run.final.get("min_insync_replicas", 0))
    unwritable = leaderless_by_partition(run, min_live=min_live)
    few_live = leaderless_by_partition(run, min_live=min_live, isr=False)  # the ISR not considered
    none = Leaderless([])
    unserved = group_unserved(run)
    # a consumer waits out its partition's leader (and a frozen HW) and its group's coordinator
    consumer_lz = {p: (lz.union(unserved) if unserved is not None else lz) for p, lz in unwritable.items()}
    unserved_few = group_unserved(run, isr=False)
    consumer_few = {p: (lz.union(unserved_few) if unserved_few is not None else lz) for p, lz in few_live.items()}
    worst_p = (0.0, None)
    raw_p = raw_c = live_p = live_r_p = live_r_c = 0.0
    acked_at: dict[tuple[int, int], float] = {}
    for pr in run.producers.values():
        # records sent together to one partition share their wait: the latest ack counts
        latest: dict[tuple[int, float], float] = {}
        for seq, (p, o, t_ack) in pr.ok.items():
            t_inv = pr.invoke_time(seq)
            if o >= 0:
                acked_at[(p, o)] = t_ack
            if t_inv is None:
                continue
            key = (p, t_inv)
            latest[key] = max(latest.get(key, 0.0), t_ack)
        for (p, t_inv), t_ack in latest.items():
            raw_p = max(raw_p, t_ack - t_inv)
            live_p = max(live_p, (t_ack - t_inv) - leaderless.get(p, none).measure(t_inv, t_ack))
            live_r_p = max(live_r_p, (t_ack - t_inv) - few_live.get(p, none).measure(t_inv, t_ack))
            w = (t_ack - t_inv) - unwritable.get(p, none).measure(t_inv, t_ack)
            if w > worst_p[0]:
                worst_p = (w, {"producer": pr.name, "partition": p, "sent": t_inv, "acked": t_ack, "raw": t_ack - t_inv,
                               "leaderless": leaderless.get(p, none).measure(t_inv, t_ack)})
        end = pr.ended or pr.last_t
        for seq in pr.info:
            t_inv = pr.invoke_time(seq)
            if t_inv is None:
                continue
            # unknown partition: count what the producer waited, less no leader anywhere
            w = (end - t_inv) - min((lz.measure(t_inv, end) for lz in unwritable.values()), default=0.0)
            if w > worst_p[0]:
                worst_p = (w, {"producer": pr.name, "seq": seq, "sent": t_inv, "gave_up": end, "indeterminate": True})
    worst_c = (0.0, None)
    for p, seen in first_seen.items():
        lz = consumer_lz.get(p, none)
        for o, t_seen in seen.items():
            t_av = acked_at.get((p, o))
            if t_av is None or t_seen <= t_av:
                continue
            raw_c = max(raw_c, t_seen - t_av)
            live_r_c = max(live_r_c, (t_seen - t_av) - consumer_few.get(p, none).measure(t_av, t_seen))
            w = (t_seen - t_av) - lz.measure(t_av, t_seen)
            if w > worst_c[0]:
                worst_c = (w, {"partition": p, "offset": o, "acked": t_av, "consumed": t_seen, "raw": t_seen - t_av,
                               "leaderless": leaderless.get(p, none).measure(t_av, t_seen),
                               "group_unserved": None if unserved is None else unserved.measure(t_av, t_seen)})
    rep.figures["producer_max_wait_s"] = round(worst_p[0], 2)
    rep.figures["producer_max_wait"] = worst_p[1]
    rep.figures["producer_max_wait_live_leader_s"] = round(live_p, 2)
    rep.figures["producer_max_wait_raw_s"] = round(raw_p, 2)
    rep.figures["producer_max_wait_live_replicas_s"] = round(live_r_p, 2)
    rep.figures["consumer_max_wait_live_replicas_s"] = round(live_r_c, 2)
    rep.figures["consumer_max_wait_s"] = round(worst_c[0], 2)
    rep.figures["consumer_max_wait"] = worst_c[1]
    rep.figures["consumer_max_wait_raw_s"] = round(raw_c, 2)
    rep.figures["leaderless_s"] = {p: round(lz.cum[-1], 1) for p, lz in sorted(leaderless.items())}
    rep.figures["group_unserved_s"] = None if unserved is None else round(unserved.cum[-1], 1)
    rep.figures["coordinator_loads"] = coordinator_loads(run)
    for who, (w, ex) in (("producer", worst_p), ("consumer", worst_c)):
        if w > stall_threshold:
            rep.flag("stalls", {"client": who, "wait_s": round(w, 2), **(ex or {})})


def coordinator_loads(run: Run) -> dict | None:
    """How long the group's coordinator took to load, over the incarnations the observer saw
    loaded (time a loading coordinator leaves out of consumer waits, kept in view here): the
    median and longest load, the time all loads spent per phase (what each waited for), and
    the coordinator's unserved time split into not answering (a process restarting) and
    answering while loading."""
    loads: dict[str, dict] = {}
    for e in run.observer:
        if e["type"] == "coordinator" and e.get("live") and (e.get("load") or {}).get("load_ms") is not None:
            loads[e.get("incarnation") or ""] = e["load"]
    if not loads:
        return None
    ms = sorted(int(load["load_ms"]) for load in loads.values())
    phases: dict[str, int] = defaultdict(int)
    for load in loads.values():
        for phase, spent in (load.get("phases_ms") or {}).items():
            phases[phase] += int(spent)
    out = {"incarnations": len(ms), "median_ms": ms[len(ms) // 2], "max_ms": ms[-1], "phases_s": {k: round(v / 1000, 1) for k, v in sorted(phases.items())}}
    out.update(coordinator_down(run))
    return out


def coordinator_down(run: Run) -> dict:
    """The group coordinator's unserved spells (between two live samples), each split at
    its first answer: seconds not answering, then seconds answering but not loaded."""
    samples = [e for e in run.observer if e["type"] == "coordinator"]
    silent, loading, spells = 0.0, 0.0, 0
    start = answered = None
    for e in samples:
        if not e.get("live"):
            if start is None:
                start, answered = e["t"], None
            if answered is None and e.get("pid") is not None:
                answered = e["t"]
        elif start is not None:
            first = answered if answered is not None else e["t"]
            silent += first - start
            loading += e["t"] - first
            spells += 1
            start = None
    return {"down_spells": spells, "down_silent_s": round(silent, 1), "down_loading_s": round(loading, 1)}


def check_liveness(run: Run, rep: Report) -> None:
    if not run.final:
        # without final.json (the run was cut short) there is no topic, end or heal to check
        # against, and the waits would be measured against nothing: the run counts as unhealed
        rep.flag("not_healed", "the history has no final.json: the run did not finish")
        return
    for client, code in (run.final.get("client_crashes") or {}).items():
        rep.flag("client_crashes", {"client": client, "exit": code})
    if not run.final.get("healed", False):
        rep.flag("not_healed", run.final.get("heal_error"))
    if not run.final.get("drained", False):
        rep.flag("not_drained", run.final.get("drain_error"))


def zombie_leaders(run: Run) -> dict[str, int]:
    """Of the leaders paused past the session timeout, how many the observer saw replaced
    by a newer leader epoch while they were stopped (they resume as zombies to be fenced)."""
    by_partition: dict[tuple, list[tuple[float, int]]] = defaultdict(list)
    for e in run.observer:
        if e["type"] == "replicas" and e.get("leader", -1) >= 0:
            by_partition[(e.get("topic"), e["partition"])].append((e["t"], e["epoch"]))
    paused = replaced = 0
    for f in run.nemesis:
        if f.get("type") != "fault" or f.get("kind") != "pause-leader" or not f.get("ok") or "epoch" not in f:
            continue
        paused += 1
        end = f["t"] + f.get("seconds", 0.0)
        if any(f["t"] <= t <= end and epoch > f["epoch"] for t, epoch in by_partition.get((f.get("topic"), f.get("partition")), [])):
            replaced += 1
    return {"leaders_paused": paused, "replaced_while_paused": replaced}


def fault_counts(run: Run) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for e in run.nemesis:
        if e.get("type") == "fault" and e.get("ok"):
            counts[e["kind"]] += 1
    return dict(sorted(counts.items()))


def check(run: Run, stall_threshold: float = 60.0) -> Report:
    rep = Report()
    check_producers(run, rep)
    first_seen = check_consumers(run, rep)
    check_group(run, rep)
    check_replicas(run, rep)
    check_waits(run, rep, first_seen, stall_threshold)
    check_liveness(run, rep)
    faults = fault_counts(run)
    rep.figures["faults"] = faults
    rep.figures["kills"] = sum(n for k, n in faults.items() if k.startswith("kill-"))
    rep.figures["pauses"] = sum(n for k, n in faults.items() if k.startswith("pause-"))
    rep.figures["node_losses"] = faults.get("node-loss", 0)
    rep.figures["zombies"] = zombie_leaders(run)
    return rep


def summary_line(rep: Report) -> str:
    f = rep.figures
    parts = [f"acked={f.get('acked', 0)}", f"indeterminate={f.get('indeterminate', 0)}", f"polled={f.get('polled', 0)}"]
    parts += [f"{k}={v}" for k, v in rep.counts.items()]
    parts += [
        f"kills={f.get('kills', 0)}",
        f"pauses={f.get('pauses', 0)}",
        f"node_losses={f.get('node_losses', 0)}",
        f"producer_max_wait={f.get('producer_max_wait_s', 0)}s",
        f"consumer_max_wait={f.get('consumer_max_wait_s', 0)}s",
        f"raw_waits={f.get('producer_max_wait_raw_s', 0)}s/{f.get('consumer_max_wait_raw_s', 0)}s",
    ]
    return "chaos-check " + " ".join(parts) + (" OK" if rep.ok else " FAILED")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.chaos.checker", description=__doc__.split("\n\n")[0])
    ap.add_argument("history_dir")
    ap.add_argument("--stall-threshold", type=float, default=60.0, help="seconds a client may wait for a partition with a live leader")
    args = ap.parse_args(argv)
    run = load(args.history_dir)
    rep = check(run, args.stall_threshold)
    check_txn(load_txn(args.history_dir), run.log, rep)  # the transactional workload's checks
    for kind, examples in rep.examples.items():
        for ex in examples[:5]:
            print(f"violation {kind}: {json.dumps(ex, default=str)}")
    out = {"ok": rep.ok, "counts": rep.counts, "figures": rep.figures, "examples": rep.examples}
    Path(args.history_dir, "check.json").write_text(json.dumps(out, indent=1, default=str))
    print(summary_line(rep), flush=True)
    return 0 if rep.ok else 1


if __name__ == "__main__":
    sys.exit(main())
