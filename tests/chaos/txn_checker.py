"""Jepsen's Kafka transaction checks on the chaos suite's transactional workload
(:mod:`tests.chaos.txn_clients`; issue 34).

Reads ``txn-*.jsonl`` (the consume-transform-produce workers), ``txnread-*.jsonl`` (the
read_committed readers) and ``final-txn.json`` (written by :mod:`tests.chaos.run` once the
cluster healed: the output topic read to its end read_committed and read_uncommitted, and the
workers' group's final committed offsets), against the input topic's final log
(``final-log.jsonl``). A transaction's outcome is what its worker heard: ``ok``, ``aborted``
or unknown (``info``, or no answer: killed); the final read_committed view of the output
topic, C, decides the unknown ones. Counts:

  txn_aborted_reads     G1a: a read_committed reader was given a record that is not in C at
                        that offset, or C holds a record of a transaction whose abort was
                        acknowledged
  txn_precommitted_reads  a reader was given a transaction's record before its worker asked
                        to commit it
  txn_torn              a transaction with some but not all of its records in C
  txn_lost              an input record below the group's final committed offset with no
                        output in C, or a transaction acknowledged committed with none in C
  txn_duplicated        an input record with more than one output in C
  txn_phantom           an output in C whose input is not in the input log at that offset
  txn_offsets_without_commit  a transaction read from (or the group's final committed
                        offset is) an offset that is neither the partition's start nor the
                        end of a committed transaction's input there: offsets moved without
                        their transaction committing
  txn_nonmonotonic      a reader's polls of a partition went back or repeated
  txn_not_drained       the workers did not consume and commit the whole input
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from .history import read_lines
from .txn_clients import parse_output

TXN_VIOLATIONS = (
    "txn_aborted_reads",
    "txn_precommitted_reads",
    "txn_torn",
    "txn_lost",
    "txn_duplicated",
    "txn_phantom",
    "txn_offsets_without_commit",
    "txn_nonmonotonic",
    "txn_not_drained",
)


@dataclass
class Txn:
    name: str
    inputs: dict[int, tuple[int, int]]  # input partition -> [lo, hi)
    n: int
    begin_t: float
    commit_t: float | None = None  # when its worker called commit_transaction()
    outcome: str | None = None  # ok | aborted | info | None (no answer)


@dataclass
class TxnRun:
    txns: dict[str, Txn] = field(default_factory=dict)
    # reader incarnations (one list per assign): [(t, partition, offset, value)]
    reads: list[list[tuple[float, int, int, str]]] = field(default_factory=list)
    committed_view: list[tuple[int, int, str]] | None = None  # final read_committed read of the output
    uncommitted_view: list[tuple[int, int, str]] | None = None
    final_offsets: dict[int, int] = field(default_factory=dict)  # the workers' group, input topic
    input_ends: dict[int, int] = field(default_factory=dict)
    drain_s: float | None = None  # how long the workers took to commit the input after the faults

    @property
    def present(self) -> bool:
        return bool(self.txns) or self.committed_view is not None


def load_txn(directory: str | os.PathLike) -> TxnRun:
    d = Path(directory)
    run = TxnRun()
    for path in sorted(d.glob("txn-*.jsonl")):
        for ev in read_lines(path):
            if ev.get("type") != "txn":
                continue
            phase = ev["phase"]
            if phase == "begin":
                run.txns[ev["txn"]] = Txn(ev["txn"], {int(p): (lo, hi) for p, (lo, hi) in ev["inputs"].items()}, ev["n"], ev["t"])
                continue
            t = run.txns.get(ev["txn"])
            if t is None:
                continue
            if phase == "commit":
                t.commit_t = ev["t"]
            elif phase in ("ok", "aborted", "info"):
                t.outcome = phase
    for path in sorted(d.glob("txnread-*.jsonl")):
        cur: list | None = None
        for ev in read_lines(path):
            if ev.get("type") == "assign" or cur is None:
                cur = []
                run.reads.append(cur)
            if ev.get("type") == "poll":
                for p, recs in ev["recs"].items():
                    cur.extend((ev["t"], int(p), int(o), v) for o, v in recs)
    f = d / "final-txn.json"
    if f.exists():
        final = json.loads(f.read_text())
        run.committed_view = [tuple(r) for r in final.get("read_committed") or []] if final.get("read_committed") is not None else None
        run.uncommitted_view = [tuple(r) for r in final.get("read_uncommitted") or []] if final.get("read_uncommitted") is not None else None
        run.final_offsets = {int(p): o for p, o in (final.get("committed") or {}).items() if o is not None}
        run.input_ends = {int(p): o for p, o in (final.get("input_ends") or {}).items()}
        run.drain_s = final.get("drain_s")
    return run


def check_txn(run: TxnRun, input_log: dict[int, dict[int, str]], rep) -> None:
    """Add the TXN_VIOLATIONS counts (and figures under ``rep.figures["txn"]``) to ``rep``
    (a :class:`tests.chaos.checker.Report`)."""
    for k in TXN_VIOLATIONS:
        rep.counts.setdefault(k, 0)
    if not run.present:
        return
    view: dict[tuple[int, int], str] = {(p, o): v for p, o, v in run.committed_view or []}
    by_txn: dict[str, list[tuple[int, int]]] = defaultdict(list)  # txn -> its (partition, offset)s in C
    by_input: dict[tuple[int, int], list] = defaultdict(list)
    for (p, o), v in sorted(view.items()):
        parsed = parse_output(v)
        if parsed is None:
            rep.flag("txn_phantom", {"partition": p, "offset": o, "value": v})
            continue
        txn, ip, io, iv = parsed
        by_txn[txn].append((p, o))
        by_input[(ip, io)].append([txn, p, o])
        if input_log.get(ip, {}).get(io) != iv:
            rep.flag("txn_phantom", {"output": [p, o, v], "input_log": input_log.get(ip, {}).get(io)})
    # committed: visible in the final view (which decides unknown outcomes); without one, what
    # the workers heard acknowledged
    committed = set(by_txn) if run.committed_view is not None else {n for n, t in run.txns.items() if t.outcome == "ok"}

    # G1a and precommitted reads: what readers were given against C and the writers' history
    for name in by_txn:
        t = run.txns.get(name)
        if t is not None and t.outcome == "aborted":
            rep.flag("txn_aborted_reads", {"txn": name, "in_final_view": by_txn[name][:5], "outcome": "aborted"})
    reads = 0
    for inc in run.reads:
        last: dict[int, int] = {}
        for t_read, p, o, v in inc:
            reads += 1
            if o <= last.get(p, -1):
                rep.flag("txn_nonmonotonic", {"partition": p, "offset": o, "after": last[p]})
            last[p] = o
            if run.committed_view is not None and view.get((p, o)) != v:
                rep.flag("txn_aborted_reads", {"read": [p, o, v], "final_view": view.get((p, o)), "t": t_read})
            parsed = parse_output(v)
            if parsed is None:
                continue
            t = run.txns.get(parsed[0])
            if t is not None and (t.commit_t is None or t_read < t.commit_t):
                rep.flag("txn_precommitted_reads", {"read": [p, o, v], "t": t_read, "commit_t": t.commit_t})

    # torn transactions, acknowledged commits lost
    for name, where in by_txn.items():
        t = run.txns.get(name)
        if t is not None and len(where) != t.n:
            rep.flag("txn_torn", {"txn": name, "visible": len(where), "written": t.n})
    for name, t in run.txns.items():
        if t.outcome == "ok" and name not in committed and run.committed_view is not None:
            rep.flag("txn_lost", {"txn": name, "outcome": "ok", "visible": 0})

    if run.committed_view is None:
        # the output could not be read after the run (a partition left offline): a liveness
        # failure, not a lost write per input
        rep.flag("txn_not_drained", {"final_read": "the output topic could not be read read_committed"})
    # every input below the final committed offset exactly once among committed outputs
    for p, end in run.final_offsets.items() if run.committed_view is not None else ():
        for o in range(end):
            n = len(by_input.get((p, o), ()))
            if n == 0 and o in input_log.get(p, {}):
                rep.flag("txn_lost", {"input": [p, o, input_log[p][o]]})
            elif n > 1:
                rep.flag("txn_duplicated", {"input": [p, o], "outputs": by_input[(p, o)][:4]})
    for (p, o), outs in by_input.items():
        if o >= run.final_offsets.get(p, 0) and run.final_offsets:
            # output of an input the group never committed past: its transaction committed
            # output without moving the offsets
            rep.flag("txn_offsets_without_commit", {"input": [p, o], "outputs": outs[:2], "final_offset": run.final_offsets.get(p)})

    # offsets move only with commits: each transaction starts where a committed one ended
    ends: dict[int, set[int]] = defaultdict(lambda: {0})
    for name in committed:
        t = run.txns.get(name)
        if t is not None:
            for p, (_, hi) in t.inputs.items():
                ends[p].add(hi)
    for name, t in sorted(run.txns.items(), key=lambda kv: kv[1].begin_t):
        for p, (lo, _) in t.inputs.items():
            if lo not in ends[p]:
                rep.flag("txn_offsets_without_commit", {"txn": name, "partition": p, "lo": lo, "outcome": t.outcome})
    for p, o in run.final_offsets.items():
        if o not in ends[p]:
            rep.flag("txn_offsets_without_commit", {"final_committed": [p, o]})

    if run.input_ends and any(run.final_offsets.get(p) != e for p, e in run.input_ends.items()):
        rep.flag("txn_not_drained", {"committed": run.final_offsets, "input_ends": run.input_ends})

    outcomes = defaultdict(int)
    for t in run.txns.values():
        outcomes[t.outcome or "none"] += 1
    rep.figures["txn"] = {
        "transactions": len(run.txns),
        "outcomes": dict(outcomes),
        "committed_visible": len(committed),
        "outputs_committed": len(view),
        "outputs_uncommitted_view": len(run.uncommitted_view or []),
        "reader_records": reads,
        "inputs_covered": sum(run.final_offsets.values()),
        "drain_s": run.drain_s,
    }

