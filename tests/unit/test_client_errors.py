"""One exception class per Kafka error code, named as in kafka-python, each a KafkaError."""

from __future__ import annotations

import pickle

import pytest

import kcoord
from kcoord.protocol.errors import ERROR_CLASSES, ErrorCode, KafkaError, for_code, raise_for_error


def test_every_code_but_none_has_its_own_exported_class():
    for code in ErrorCode:
        if code == ErrorCode.NONE:
            continue
        cls = ERROR_CLASSES[int(code)]
        assert issubclass(cls, KafkaError) and cls is not KafkaError
        assert getattr(kcoord, cls.__name__) is cls
        assert for_code(code) is cls


def test_names_match_kafka_python():
    kerrors = pytest.importorskip("kafka.errors")
    for code, cls in ERROR_CLASSES.items():
        assert kerrors.for_code(code).__name__ == cls.__name__


@pytest.mark.parametrize(
    "name, code, retriable",
    [
        ("UnknownTopicOrPartitionError", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, True),
        ("NotLeaderForPartitionError", ErrorCode.NOT_LEADER_OR_FOLLOWER, True),
        ("RequestTimedOutError", ErrorCode.REQUEST_TIMED_OUT, True),
        ("OffsetOutOfRangeError", ErrorCode.OFFSET_OUT_OF_RANGE, False),
        ("TopicAlreadyExistsError", ErrorCode.TOPIC_ALREADY_EXISTS, False),
    ],
)
def test_kafka_error_of_a_code_is_the_specific_class(name, code, retriable):
    cls = getattr(kcoord, name)
    err = KafkaError(code, "boom")
    assert type(err) is cls and isinstance(err, KafkaError)
    assert err.code == code and err.retriable is retriable and err.message == "boom"
    assert str(err) == f"{code.name} ({int(code)}): boom"
    with pytest.raises(cls):
        raise_for_error(int(code), "boom")
    # built with just a message, as with kafka-python
    alone = cls("only a message")
    assert alone.code == code and alone.message == "only a message"
    # and it survives pickling (Ray moves exceptions between processes)
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is cls and again.code == code and again.message == "boom"


def test_unknown_code_stays_a_plain_kafka_error():
    err = KafkaError(9999, "x")
    assert type(err) is KafkaError and err.code == 9999 and not err.retriable
    with pytest.raises(TypeError):
        KafkaError("no code")


def test_client_errors_are_kafka_errors_with_codes():
    e = kcoord.CommitFailedError(ErrorCode.REBALANCE_IN_PROGRESS, "rebalanced")
    assert isinstance(e, KafkaError) and e.code == ErrorCode.REBALANCE_IN_PROGRESS and not e.retriable
    assert type(pickle.loads(pickle.dumps(e))) is kcoord.CommitFailedError
    n = kcoord.NoOffsetForPartitionError("no position for t-0")
    assert n.code == ErrorCode.OFFSET_OUT_OF_RANGE and isinstance(n, KafkaError)
    assert pickle.loads(pickle.dumps(n)).message == "no position for t-0"


def test_internal_errors_are_the_public_classes():
    from kcoord.log.errors import LogStorageError, OffsetOutOfRange
    from kcoord.records import CorruptRecordError

    assert isinstance(OffsetOutOfRange(5, 0, 3), kcoord.OffsetOutOfRangeError)
    storage = LogStorageError("disk gone", errno=5)
    assert isinstance(storage, kcoord.KafkaStorageError) and storage.errno == 5 and storage.retriable
    # as in Kafka (KafkaStorageException is an InvalidMetadataException): the leader's log
    # went offline and the controller moves leadership, so clients ask who leads now
    assert storage.needs_metadata_refresh
    corrupt = CorruptRecordError("bad crc")
    assert isinstance(corrupt, kcoord.CorruptRecordError) and corrupt.code == ErrorCode.CORRUPT_MESSAGE
    assert pickle.loads(pickle.dumps(corrupt)).message == "bad crc"
