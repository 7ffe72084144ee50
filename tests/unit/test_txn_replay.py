"""Replay equivalence and safety over random histories (hypothesis).

Random sequences of client requests (several transactional ids; fresh, retried, stale and
zombie identities), append outcomes (acknowledged, or failed: a failed append never lands),
marker outcomes, clock jumps (timeouts, expiry), topic deletions and coordinator restarts.
After every step:

* the coordinator's memory equals what a replay of its log rebuilds, and a new incarnation
  loading the log has the same memory;
* a marker is only ever sent for its id's latest decision in the log (PREPARE_* with that
  producer id, epoch, result and partition);
* an EndTxn answered NONE is in the log as that result;
* a producer id's epoch never goes back;
* every request is answered at most once (the harness checks), and at the end, with every
  outcome delivered, every request has been answered and every decided transaction completed.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from txn_harness import TIMEOUT, Shell, began

from kcoord.protocol.errors import ErrorCode as E
from kcoord.protocol.txn import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    EndTxnResponse,
    TxnInitProducerIdRequest,
    TxnInitProducerIdResponse,
)
from kcoord.txn import replay
from kcoord.txn.records import decode_record
from kcoord.txn.state import TransactionState

S = TransactionState
IDS = ["a", "b", "c"]
PARTITIONS = [("out", 0), ("out", 1), ("side", 0)]
APPEND_ERRORS = [E.NONE, E.NONE, E.NONE, E.NOT_ENOUGH_REPLICAS, E.REQUEST_TIMED_OUT, E.NOT_LEADER_OR_FOLLOWER]
MARKER_ERRORS = [E.NONE, E.NONE, E.NONE, E.NOT_LEADER_OR_FOLLOWER, E.REQUEST_TIMED_OUT, E.UNKNOWN_TOPIC_OR_PARTITION]

tid = st.sampled_from(IDS)
skew = st.sampled_from([0, 0, 0, 0, -1, 1])  # mostly the identity the client holds
# what happens to the appends and markers a request set off: delivered at once, failed, or
# left for later steps
outcome = st.sampled_from(["ok", "ok", "ok", "ok", "fail", "hold", "flaky"])
# a client taking the natural next step for its id (init, add, end...), given a choice
progress = st.tuples(
    st.just("progress"), tid, st.sampled_from(["commit", "add", "abort", "offsets", "commit"]), st.sampled_from(PARTITIONS), st.booleans(), outcome
)
ops = st.one_of(
    progress,
    progress,
    progress,
    progress,
    st.tuples(st.just("init"), tid, st.booleans(), st.booleans(), st.booleans(), outcome),  # recover, two-phase, keep
    st.tuples(st.just("add"), tid, st.lists(st.sampled_from(PARTITIONS), min_size=1, max_size=3), skew, outcome),
    st.tuples(st.just("offsets"), tid, st.sampled_from(["g1", "g2"]), skew, outcome),
    st.tuples(st.just("end"), tid, st.booleans(), st.booleans(), skew, outcome),  # commit, bump
    st.tuples(st.just("verify"), tid, st.sampled_from(PARTITIONS)),
    st.tuples(st.just("appends"), st.integers(1, 3), st.sampled_from(APPEND_ERRORS)),
    st.tuples(st.just("markers"), st.integers(1, 4), st.sampled_from(MARKER_ERRORS)),
    st.tuples(st.just("time"), st.sampled_from([1, 150, 2_000, TIMEOUT + 1, 3_600_001])),
    st.tuples(st.just("delete_side")),
    st.tuples(st.just("restart")),
)


class World:
    """The shell plus what the clients hold and what the checks remember."""

    def __init__(self) -> None:
        self.s = Shell(auto_persist=False, auto_markers=False)
        self.held: dict[str, tuple[int, int]] = {}  # what each id's latest client holds
        self.in_txn: set[str] = set()  # ids whose client believes a transaction is open
        self.epochs: dict[int, int] = {}  # producer id -> highest epoch seen in memory
        self.checked_replies: set[int] = set()
        self.checked_sent = 0
        self.requests: dict[int, object] = {}

    # -- steps -----------------------------------------------------------------------------

    def identity(self, t: str, skew: int) -> tuple[int, int]:
        pid, epoch = self.held.get(t, (12345, 0))
        return pid, max(0, epoch + skew)

    def send(self, req, outcome: str = "hold") -> None:
        token = self.s.request(req)
        self.requests[token] = req
        self.check()
        s = self.s
        if outcome == "fail":
            s.complete(error=E.NOT_ENOUGH_REPLICAS)
        elif outcome == "flaky":  # appended, but the markers fail for now
            s.complete()
            self.check()
            self.step(("markers", len(s.markers), E.UNKNOWN_TOPIC_OR_PARTITION if len(s.log) % 2 else E.NOT_LEADER_OR_FOLLOWER))
        elif outcome == "ok":
            for _ in range(10):
                if not (s.appends or s.markers):
                    break
                s.complete()
                self.check()
                self.step(("markers", len(s.markers), E.NONE))

    def step(self, op: tuple) -> None:
        s, kind = self.s, op[0]
        if kind == "progress":
            _, t, action, (topic, p), flag, out = op
            if t not in self.held:
                self.send(TxnInitProducerIdRequest(t, TIMEOUT, enable_two_phase=flag), out)
            elif action in ("commit", "abort") and t in self.in_txn:
                self.send(EndTxnRequest(t, *self.held[t], action == "commit", bump_epoch=flag), out)
            elif action == "offsets":
                self.send(AddOffsetsToTxnRequest(t, *self.held[t], "g1"), out)
            else:
                self.send(AddPartitionsToTxnRequest(t, *self.held[t], {topic: [p]}), out)
        elif kind == "init":
            _, t, recover, two_phase, keep, out = op
            pid, epoch = self.held.get(t, (-1, -1)) if recover else (-1, -1)
            self.send(TxnInitProducerIdRequest(t, TIMEOUT, pid, epoch, enable_two_phase=two_phase, keep_prepared=keep and two_phase), out)
        elif kind == "add":
            _, t, tps, sk, out = op
            topics: dict[str, list[int]] = {}
            for topic, p in tps:
                topics.setdefault(topic, []).append(p)
            self.send(AddPartitionsToTxnRequest(t, *self.identity(t, sk), topics), out)
        elif kind == "offsets":
            _, t, group, sk, out = op
            self.send(AddOffsetsToTxnRequest(t, *self.identity(t, sk), group), out)
        elif kind == "end":
            _, t, commit, bump, sk, out = op
            self.send(EndTxnRequest(t, *self.identity(t, sk), commit, bump_epoch=bump), out)
        elif kind == "verify":
            _, t, (topic, p) = op
            self.send(AddPartitionsToTxnRequest(t, *self.identity(t, 0), {topic: [p]}, verify_only=True))
        elif kind == "appends":
            _, n, error = op
            s.complete(error=error, n=n)
        elif kind == "markers":
            _, n, error = op
            take, s.markers = s.markers[:n], s.markers[n:]
            for m in take:
                if error == E.NONE:
                    s.written.append(m.request)
                s.run(s.core.on_marker_written(m.marker_id, error, s.now))
        elif kind == "time":
            s.advance(op[1])
        elif kind == "delete_side":
            s.topics.pop("side", None)
            s.run(s.core.on_metadata(s.topics, s.now))
        elif kind == "restart":
            s.reload()  # held appends never land (a crash); held markers are forgotten
        self.check()

    # -- checks ----------------------------------------------------------------------------

    def check(self) -> None:
        s = self.s
        snapshot = s.core.snapshot()
        assert replay(s.log) == snapshot
        for v in snapshot.values():
            assert self.epochs.get(v.producer_id, -1) <= v.producer_epoch, "an epoch went back"
            self.epochs[v.producer_id] = v.producer_epoch
        latest: dict[str, object] = {}  # each id's latest decision in the log
        for d in (decode_record(k, val) for k, val in s.log):
            if d and d[1] is not None and d[1].state.is_prepare:
                latest[d[0].transactional_id] = d[1]
        for req in s.sent[self.checked_sent :]:
            topic = getattr(req, "topic", "__consumer_offsets")
            v = latest.get(req.transactional_id)
            assert v is not None, f"marker {req} sent without a decision in the log"
            assert (v.producer_id, v.producer_epoch, v.state == S.PREPARE_COMMIT) == (req.producer_id, req.producer_epoch, req.commit), (
                f"marker {req} is not the latest decision {v}"
            )
            assert (topic, req.partition) in v.partitions, f"marker {req} to a partition not in {v}"
        self.checked_sent = len(s.sent)
        for token, response in s.replies.items():
            if token in self.checked_replies:
                continue
            self.checked_replies.add(token)
            req = self.requests.get(token)
            t = getattr(req, "transactional_id", None)
            if response.error_code in (E.PRODUCER_FENCED, E.INVALID_PRODUCER_ID_MAPPING, E.INVALID_TXN_STATE):
                self.held.pop(t, None)  # a client gives up its identity and initialises again
                self.in_txn.discard(t)
            if isinstance(response, TxnInitProducerIdResponse) and response.error_code == E.NONE:
                self.held[t] = (response.producer_id, response.producer_epoch)
                self.in_txn.discard(t)
            elif isinstance(req, (AddPartitionsToTxnRequest, AddOffsetsToTxnRequest)) and response.error_code == E.NONE and not getattr(req, "verify_only", False):
                self.in_txn.add(t)
            elif isinstance(response, EndTxnResponse) and response.error_code == E.NONE:
                self.in_txn.discard(t)
                v = snapshot.get(req.transactional_id)
                wanted = (S.PREPARE_COMMIT, S.COMPLETE_COMMIT) if req.commit else (S.PREPARE_ABORT, S.COMPLETE_ABORT)
                assert v is not None and v.state in wanted, f"{req} answered NONE but the log says {v}"
                self.held[req.transactional_id] = (response.producer_id, response.producer_epoch)

    def drain(self) -> None:
        """Deliver every outcome, successfully, until nothing is left to do."""
        s = self.s
        s.topics.setdefault("side", 1)
        for _ in range(50):
            if not (s.appends or s.markers):
                s.advance(2_000)  # marker retries and completion retries come due
            if not (s.appends or s.markers):
                break
            s.complete()
            while s.markers:
                self.step(("markers", len(s.markers), E.NONE))
            self.check()
        assert not s.appends and not s.markers
        answered = set(s.replies)
        assert set(self.requests) <= answered, "a request was never answered"
        stuck = {t: v.state for t, v in s.core.snapshot().items() if v.state.is_prepare}
        assert not stuck, f"decided transactions never completed: {stuck}"
        assert s.core.pending_persists() == []


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ops, min_size=10, max_size=80))
def test_memory_is_always_the_replay_of_the_log_and_decisions_are_safe(history):
    w = World()
    for op in history:
        w.step(op)
    w.drain()
    fresh = w.s.restart()
    assert fresh.core.snapshot() == w.s.core.snapshot()


# -- an append whose outcome was unknown, and that landed anyway -----------------------------


def test_an_unknown_outcome_that_landed_is_superseded_by_the_ids_next_record():
    """A timed-out append may still land (Kafka has the same window): the client heard a
    retriable error, memory kept the old state, and the log briefly holds a decision memory
    does not. The driver guarantees it cannot land after a later append (a new producer
    epoch), and every record holds the id's whole state, so the id's next record -- the
    client's retry, or the timeout's abort -- makes memory and log one again. Until then no
    marker was sent for it by this incarnation."""
    s = Shell()
    pid, epoch = began(s, topics={"out": [0]})
    s.auto_persist = False
    token = s.request(EndTxnRequest("t", pid, epoch, True, bump_epoch=True))
    (append,) = s.appends
    s.appends.clear()
    s.log.extend(append.records)  # it landed ...
    s.run(s.core.on_persisted(append.persist_id, E.REQUEST_TIMED_OUT, s.now))  # ... but nobody knows
    assert s.reply(token).error_code == E.COORDINATOR_NOT_AVAILABLE
    assert s.core.snapshot()["t"].state == S.ONGOING and replay(s.log)["t"].state == S.PREPARE_COMMIT
    assert not s.sent
    # the timeout aborts it: the abort is the id's last record
    s.auto_persist = True
    s.advance(TIMEOUT + 1)
    assert s.core.snapshot()["t"].state == S.COMPLETE_ABORT
    s.assert_replay_equal()
    assert [m.commit for m in s.sent] == [False]
