"""The pure parts of transactional Spark / Ray Data writes and read_committed batch reads
(kcoord.txn_write, kcoord.spark.offsets, kcoord.spark.tasks), without Ray: the decision
record, the tasks' transactional ids, the isolation level options, and the Arrow reader
dropping aborted transactions with the consumer's algorithm."""

from __future__ import annotations

import pytest

from kcoord import records as R
from kcoord.protocol.errors import ErrorCode, KafkaError
from kcoord.protocol.replication import READ_COMMITTED, READ_UNCOMMITTED
from kcoord.record.control import build_control_batch
from kcoord.spark.offsets import isolation_level_id
from kcoord.spark.tasks import records_to_arrow
from kcoord.txn_write import COMMIT, Decision, PreparedTask, check_prefix, task_transactional_id

T = 1_700_000_000_000


def test_a_decision_reads_back_as_written():
    d = Decision("etl-7", "out", COMMIT, (PreparedTask(0, "etl-7/0/0.1", 4000, 3, {0: 10, 2: 5}), PreparedTask(1, "etl-7/1/0.0", 4001, 0, {})))
    back = Decision.decode("etl-7", d.encode())
    assert back == d and back.tasks[0].records == 15


def test_a_malformed_decision_is_corrupt_message_naming_the_write():
    with pytest.raises(KafkaError) as err:
        Decision.decode("etl-7", b"\x92\x01")
    assert err.value.code == ErrorCode.CORRUPT_MESSAGE and "etl-7" in str(err.value)


def test_task_ids_and_bad_prefixes():
    assert task_transactional_id("etl", 3, "1.2") == "etl/3/1.2"
    for bad in ("", "  ", "a/b", None, 7):
        with pytest.raises(ValueError, match="transactional_id"):
            check_prefix(bad)


def test_isolation_level_by_keyword_or_spark_option_and_bad_ones():
    assert isolation_level_id(None) == READ_UNCOMMITTED
    assert isolation_level_id("read_committed") == READ_COMMITTED
    assert isolation_level_id(None, {"kafka.isolation.level": "read_committed"}) == READ_COMMITTED
    with pytest.raises(ValueError, match="isolation_level must be one of"):
        isolation_level_id("serializable")
    with pytest.raises(ValueError, match="isolation_level must be one of"):
        isolation_level_id(None, {"kafka.isolation.level": "READ_COMMITTED"})
    with pytest.raises(ValueError, match="disagree"):
        isolation_level_id("read_committed", {"kafka.isolation.level": "read_uncommitted"})
    with pytest.raises(ValueError, match="unknown option"):
        isolation_level_id(None, {"kafka.bootstrap.servers": "x"})


def _txn_batch(values, pid, base_offset):
    return R.stamp(R.build_batch([(None, v) for v in values], producer_id=pid, producer_epoch=0, base_sequence=0, timestamp_ms=T, transactional=True), base_offset, 0)


def test_the_arrow_reader_drops_an_aborted_transaction_and_keeps_a_committed_one():
    # pid 1 aborted [0, 2) with its marker at 4; pid 2 committed [2, 4) with its marker at 5.
    data = (
        _txn_batch([b"a0", b"a1"], 1, 0)
        + _txn_batch([b"c0", b"c1"], 2, 2)
        + build_control_batch(commit=False, producer_id=1, producer_epoch=0, coordinator_epoch=0, timestamp_ms=T, magic=1, base_offset=4)
        + build_control_batch(commit=True, producer_id=2, producer_epoch=0, coordinator_epoch=0, timestamp_ms=T, magic=1, base_offset=5)
        + _txn_batch([b"a2"], 1, 6)  # pid 1's next transaction: not aborted
    )
    committed = records_to_arrow("t", 0, data, 0, 7, aborted=[(1, 0)])
    assert committed.column("value").to_pylist() == [b"c0", b"c1", b"a2"]
    assert committed.column("offset").to_pylist() == [2, 3, 6]
    assert records_to_arrow("t", 0, data, 0, 7).column("value").to_pylist() == [b"a0", b"a1", b"c0", b"c1", b"a2"]
    # A range starting inside the aborted transaction drops the rest of it too.
    assert records_to_arrow("t", 0, data, 1, 7, aborted=[(1, 0)]).column("offset").to_pylist() == [2, 3, 6]


def test_kcoord_consume_takes_an_isolation_level_and_refuses_others():
    from click.testing import CliRunner

    from kcoord.cli import cli

    assert "--isolation-level" in CliRunner().invoke(cli, ["consume", "--help"]).output
    result = CliRunner().invoke(cli, ["consume", "t", "--isolation-level", "serializable"])
    assert result.exit_code == 2 and "read_committed" in result.output
