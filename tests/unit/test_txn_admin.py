"""ListTransactions and DescribeTransactions: Kafka's filters and per-id errors, from the
acknowledged state only."""

from __future__ import annotations

from txn_harness import T0, TIMEOUT, Shell, began

from kcoord.protocol.errors import ErrorCode as E
from kcoord.protocol.txn import (
    DescribedTransaction,
    DescribeTransactionsRequest,
    ListedTransaction,
    ListTransactionsRequest,
    TxnInitProducerIdRequest,
)
from kcoord.txn import coordinator_for


def _fill() -> tuple[Shell, dict[str, tuple[int, int]]]:
    s = Shell(auto_markers=False)
    ids = {}
    r = s.init("empty")
    ids["empty"] = (r.producer_id, r.producer_epoch)
    ids["ongoing"] = began(s, "ongoing", topics={"out": [2, 0], "side": [1]})
    s.now += 100
    ids["late"] = began(s, "late")
    pid, epoch = ids["deciding"] = began(s, "deciding")
    s.end("deciding", pid, epoch)
    return s, ids


def test_list_filters_by_state_producer_id_and_duration():
    s, ids = _fill()
    everything = s.ask(ListTransactionsRequest())
    assert everything.error_code == E.NONE and everything.unknown_state_filters == []
    assert everything.transactions == [
        ListedTransaction("deciding", ids["deciding"][0], "PrepareCommit"),
        ListedTransaction("empty", ids["empty"][0], "Empty"),
        ListedTransaction("late", ids["late"][0], "Ongoing"),
        ListedTransaction("ongoing", ids["ongoing"][0], "Ongoing"),
    ]
    ongoing = s.ask(ListTransactionsRequest(states_filter=["Ongoing", "Bogus"]))
    assert [t.transactional_id for t in ongoing.transactions] == ["late", "ongoing"]
    assert ongoing.unknown_state_filters == ["Bogus"]
    assert s.ask(ListTransactionsRequest(states_filter=["Bogus"])).transactions == []
    by_pid = s.ask(ListTransactionsRequest(producer_ids_filter=[ids["late"][0], 999_999]))
    assert [t.transactional_id for t in by_pid.transactions] == ["late"]
    s.now += 50
    # running longer than 100 ms: only the one that began 150 ms ago; "empty" is not running
    long = s.ask(ListTransactionsRequest(duration_filter_ms=100))
    assert [t.transactional_id for t in long.transactions] == ["ongoing"]


def test_describe_answers_each_id_in_order_with_its_state_or_error():
    s = Shell(partition=0, num_partitions=2, auto_markers=False)
    mine = [f"id-{i}" for i in range(40) if coordinator_for(f"id-{i}", 2) == 0][:2]
    theirs = next(f"id-{i}" for i in range(40) if coordinator_for(f"id-{i}", 2) == 1)
    pid, epoch = began(s, mine[0], topics={"out": [2, 0], "side": [1]})
    r = s.ask(DescribeTransactionsRequest([mine[0], mine[1], theirs, ""]))
    assert r.transactions == [
        DescribedTransaction(mine[0], 0, "Ongoing", TIMEOUT, T0, pid, epoch, {"out": [0, 2], "side": [1]}),
        DescribedTransaction(mine[1], error_code=E.TRANSACTIONAL_ID_NOT_FOUND),
        DescribedTransaction(theirs, error_code=E.NOT_COORDINATOR),
        DescribedTransaction("", error_code=E.INVALID_REQUEST),
    ]


def test_admin_reads_only_acknowledged_state():
    s = Shell()
    began(s, "t")
    s.auto_persist = False
    s.request(TxnInitProducerIdRequest("new", TIMEOUT))  # not acknowledged: does not exist yet
    s.request(TxnInitProducerIdRequest("t", TIMEOUT))  # fencing abort in flight: still Ongoing
    listed = s.ask(ListTransactionsRequest())
    assert [(t.transactional_id, t.state) for t in listed.transactions] == [("t", "Ongoing")]
    described = s.ask(DescribeTransactionsRequest(["new", "t"]))
    assert described.transactions[0].error_code == E.TRANSACTIONAL_ID_NOT_FOUND
    assert described.transactions[1].state == "Ongoing"


def test_metrics_count_open_transactions_until_their_markers_are_written():
    s, ids = _fill()
    snap = s.core.metrics_snapshot()
    # Ongoing x2 and PrepareCommit are open; Empty is not
    assert (snap["open_transactions"], snap["transactional_ids"], snap["transactions_committed"]) == (3, 4, 0)
    s.ack_markers()
    s.complete()
    snap = s.core.metrics_snapshot()
    assert (snap["open_transactions"], snap["transactions_committed"]) == (2, 1)
