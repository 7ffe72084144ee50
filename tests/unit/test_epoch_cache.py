"""LeaderEpochCache rules (KIP-101/KIP-279 semantics) and its persistence."""

from __future__ import annotations

import pytest

from kcoord.log import LeaderEpochCache
from kcoord.log.checkpoint import CheckpointError, read_epochs, write_epochs
from kcoord.log.fs import OS_FILE_SYSTEM as FS


def cache(*entries: tuple[int, int]) -> LeaderEpochCache:
    return LeaderEpochCache(entries)


def test_empty_cache():
    c = cache()
    assert c.latest_epoch == -1 and c.entries == [] and len(c) == 0
    assert c.end_offset_for(0, 10) == (-1, -1)
    assert c.start_offset_of(0) is None
    assert c.epoch_for_offset(5) == -1


def test_assign_appends_newer_epochs_only():
    c = cache()
    assert c.assign(1, 0)
    assert not c.assign(1, 5)  # same epoch: its start is already fixed
    assert not c.assign(0, 7)  # older epoch: ignored
    assert c.assign(3, 10)
    assert c.entries == [(1, 0), (3, 10)]
    assert c.latest_epoch == 3


def test_assign_new_epoch_below_existing_starts_replaces_them():
    c = cache((1, 0), (2, 10), (3, 20))
    assert c.assign(5, 10)  # entries starting at or after 10 can hold no records any more
    assert c.entries == [(1, 0), (5, 10)]
    c = cache((1, 0), (2, 10))
    c.assign(4, 15)
    assert c.entries == [(1, 0), (2, 10), (4, 15)]
    c.assign(6, 0)
    assert c.entries == [(6, 0)]


def test_assign_rejects_negative_values():
    with pytest.raises(ValueError):
        cache().assign(-1, 0)
    with pytest.raises(ValueError):
        cache().assign(0, -3)


def test_start_offset_of_and_epoch_for_offset():
    c = cache((1, 0), (3, 10), (4, 25))
    assert c.start_offset_of(3) == 10
    assert c.start_offset_of(2) is None
    assert [c.epoch_for_offset(o) for o in (0, 9, 10, 24, 25, 1000)] == [1, 1, 3, 3, 4, 4]


def test_end_offset_for_latest_or_newer_epoch_is_the_log_end():
    c = cache((1, 0), (3, 10))
    assert c.end_offset_for(3, 42) == (3, 42)
    assert c.end_offset_for(7, 42) == (3, 42)  # the answer is about the latest epoch we know


def test_end_offset_for_older_epoch_is_the_next_epochs_start():
    c = cache((1, 0), (3, 10), (6, 25))
    assert c.end_offset_for(1, 42) == (1, 10)
    assert c.end_offset_for(2, 42) == (1, 10)  # not cached: the largest epoch <= 2 is 1
    assert c.end_offset_for(3, 42) == (3, 25)
    assert c.end_offset_for(5, 42) == (3, 25)


def test_end_offset_for_epoch_before_the_first_entry_ends_where_the_first_starts():
    """KIP-279: an epoch older than every cached one ends, in this log, where the oldest
    cached epoch starts (a follower that wrote in it truncates there)."""
    c = cache((2, 5), (3, 10))
    assert c.end_offset_for(1, 42) == (1, 5)
    assert c.end_offset_for(0, 42) == (0, 5)


def test_truncate_from_end():
    c = cache((1, 0), (3, 10), (6, 25))
    assert not c.truncate_from_end(30)
    assert c.truncate_from_end(25)  # epoch 6 started at 25: gone
    assert c.entries == [(1, 0), (3, 10)]
    c.truncate_from_end(11)
    assert c.entries == [(1, 0), (3, 10)]
    c.truncate_from_end(0)
    assert c.entries == []


def test_truncate_from_start():
    c = cache((1, 0), (3, 10), (6, 25))
    assert not c.truncate_from_start(0)
    assert c.truncate_from_start(5)  # epoch 1 still has records at 5..9: clipped
    assert c.entries == [(1, 5), (3, 10), (6, 25)]
    c.truncate_from_start(10)  # epoch 1 ended before 10: gone
    assert c.entries == [(3, 10), (6, 25)]
    c.truncate_from_start(30)  # the latest epoch is open-ended: clipped, never dropped
    assert c.entries == [(6, 30)]


def test_clear_and_replace():
    c = cache((1, 0), (2, 5))
    c.clear()
    assert c.entries == [] and c.latest_epoch == -1
    c.replace([(4, 3), (7, 9)])
    assert c.entries == [(4, 3), (7, 9)]


def test_every_change_is_persisted_and_nothing_else(tmp_path):
    path = tmp_path / "leader-epoch-checkpoint"
    saved = []
    c = LeaderEpochCache(on_change=lambda entries: (saved.append(entries), write_epochs(FS, path, entries)))
    c.assign(1, 0)
    c.assign(1, 4)
    c.assign(2, 10)
    c.truncate_from_end(100)
    c.truncate_from_start(3)
    c.truncate_from_end(10)
    c.clear()
    c.clear()
    assert saved == [[(1, 0)], [(1, 0), (2, 10)], [(1, 3), (2, 10)], [(1, 3)], []]
    assert read_epochs(FS, path) == []
    write_epochs(FS, path, [(1, 3), (5, 8)])
    assert LeaderEpochCache(read_epochs(FS, path)).entries == [(1, 3), (5, 8)]
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize(
    "text", ["", "1\n0\n", "0\n2\n1 0\n", "0\n1\nx y\n", "0\n2\n3 5\n2 9\n", "0\n1\n1 2 3\n"]
)
def test_bad_checkpoint_files_raise(tmp_path, text):
    path = tmp_path / "cp"
    path.write_text(text)
    with pytest.raises(CheckpointError):
        read_epochs(FS, path)


def test_missing_checkpoint_is_none(tmp_path):
    assert read_epochs(FS, tmp_path / "nope") is None
