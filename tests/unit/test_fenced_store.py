"""The controller's metadata log (kcoord.replication.fenced_store): a process that claims the
store seals the one before it, whose writes then fail, and nothing a writer was told it
wrote is ever missing from a later load -- under interleavings of several writers at every
step of the raw store, with compaction, retirement and writes that land late."""

from __future__ import annotations

import os
import random
import threading

import pytest

from kcoord.replication import fenced_store
from kcoord.replication.fenced_store import CHUNK, TERMS, FencedStore, StoreFenced, read_state, term_key
from kcoord.replication.metadata import is_controller_key
from kcoord.replication.metastore import FileStore, MemoryStore, StoreFailure


def test_a_later_load_sees_every_write_and_fences_the_earlier_writer():
    raw = MemoryStore()
    a = FencedStore(raw, "a")
    assert a.load() == {}
    a.put("topic/x", b"1")
    a.put("topic/y", b"2")
    a.delete("topic/x")
    b = FencedStore(raw, "b")
    assert b.load() == {"topic/y": b"2"}
    with pytest.raises(StoreFenced, match="sealed"):
        a.put("topic/z", b"3")
    with pytest.raises(StoreFenced, match="load"):
        a.put("topic/z", b"3")  # closed until it loads again
    b.put("topic/w", b"4")
    assert a.load() == {"topic/y": b"2", "topic/w": b"4"}
    assert read_state(raw) == {"topic/y": b"2", "topic/w": b"4"}
    with pytest.raises(StoreFenced):
        b.delete("topic/y")


def test_compaction_and_retirement_keep_the_store_small():
    raw = MemoryStore()
    s = FencedStore(raw, "a", compact_every=4)
    s.load()
    for i in range(150):
        s.put(f"partition/t/{i % 5}", str(i).encode())
    # a snapshot and the entries of the chunk it falls in
    assert len(raw.keys(f"meta/{s.term:012d}/")) <= 1 + CHUNK
    expected = {f"partition/t/{i}": str(145 + i).encode() for i in range(5)}
    assert s.keys() == sorted(expected) and s.get("partition/t/0") == b"145"
    for n in range(10):
        t = FencedStore(raw, f"r{n}", compact_every=[4, 64, 1][n % 3])  # intervals may differ
        assert t.load() == expected
    # ten terms later: the live term, one claim, and a seal per retired term
    assert raw.keys(TERMS) == [term_key(t.term)]
    assert len(raw.keys("meta/")) <= 1 + 2 + 10 + 1


def test_the_first_term_starts_from_the_plain_keys_of_an_older_store():
    raw = MemoryStore()
    raw.put("partition/t/0", b"p")
    raw.put("cluster", b"c")
    raw.put("deploy-info", b"{}")  # the deploy's record shares the namespace: not the controller's
    s = FencedStore(raw, "a", legacy=is_controller_key)
    assert s.load() == {"partition/t/0": b"p", "cluster": b"c"}
    s.put("cluster", b"c2")
    assert FencedStore(raw, "b", legacy=is_controller_key).load() == {"partition/t/0": b"p", "cluster": b"c2"}


def test_a_term_whose_writer_died_before_its_snapshot_is_sealed_empty_and_skipped():
    raw = MemoryStore()
    a = FencedStore(raw, "a")
    a.load()
    a.put("k", b"1")
    died = a.term + 1
    assert raw.put_if_absent(term_key(died), b"died")  # claimed, never began
    b = FencedStore(raw, "b")
    assert b.load() == {"k": b"1"} and b.term == died + 1
    with pytest.raises(StoreFenced):
        a.put("k", b"2")
    # the dead claimant comes back and writes its first entry: too late
    assert not raw.put_if_absent(f"meta/{died:012d}/log/{0:012d}/{0:012d}", b"x")
    assert read_state(raw) == {"k": b"1"}


def test_a_stale_claimant_of_a_retired_term_number_is_fenced():
    raw = MemoryStore()
    for name in "abc":
        FencedStore(raw, name).load()
    assert raw.keys(TERMS) == [term_key(3)]
    stale = FencedStore(raw, "stale")
    raw_keys, stale_listings = raw.keys, [[]]  # its first listing of the terms is from long ago

    def keys(prefix=""):
        return stale_listings.pop() if prefix == TERMS and stale_listings else raw_keys(prefix)

    raw.keys = keys
    try:
        with pytest.raises(StoreFenced, match="later one"):
            stale.load()
    finally:
        raw.keys = raw_keys
    assert not stale.open


class LateStore(MemoryStore):
    """Writes that time out: the caller gets StoreFailure and the write lands later (or
    never), when the test says."""

    def __init__(self) -> None:
        super().__init__()
        self.time_out_next = 0
        self.late: list[tuple[str, bytes]] = []

    def put_if_absent(self, key, value):
        if self.time_out_next:
            self.time_out_next -= 1
            self.late.append((key, value))
            raise StoreFailure(f"timed out writing {key}")
        return super().put_if_absent(key, value)

    def land(self) -> list[bool]:
        late, self.late = self.late, []
        return [MemoryStore.put_if_absent(self, k, v) for k, v in late]


def test_a_write_that_lands_after_the_next_writer_loaded_is_refused_by_the_seal():
    raw = LateStore()
    a = FencedStore(raw, "a")
    a.load()
    a.put("k", b"1")
    raw.time_out_next = 1
    with pytest.raises(StoreFailure, match="timed out"):
        a.put("k", b"2")  # the RPC is still on its way when a's process dies
    b = FencedStore(raw, "b")
    assert b.load() == {"k": b"1"}
    assert raw.land() == [False]  # its position holds b's seal
    assert read_state(raw) == {"k": b"1"}
    assert FencedStore(raw, "c").load() == {"k": b"1"}


def test_a_write_that_lands_before_the_next_load_is_in_it():
    raw = LateStore()
    a = FencedStore(raw, "a")
    a.load()
    raw.time_out_next = 1
    with pytest.raises(StoreFailure):
        a.put("k", b"1")
    assert raw.land() == [True]
    assert FencedStore(raw, "b").load() == {"k": b"1"}


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="compact_every"):
        FencedStore(MemoryStore(), "a", compact_every=0)
    with pytest.raises(StoreFenced, match="load"):
        FencedStore(MemoryStore(), "a").put("k", b"v")


def test_file_store_put_if_absent_and_delete_prefix(tmp_path):
    raw = FileStore(tmp_path)
    assert raw.put_if_absent("meta/a", b"1") and not raw.put_if_absent("meta/a", b"2")
    assert raw.get("meta/a") == b"1"
    raw.put("meta/b", b"3")
    raw.put("other", b"4")
    raw.delete_prefix("meta/")
    assert raw.keys() == ["other"] and not list(tmp_path.glob(".tmp-*"))
    s = FencedStore(raw, "a", compact_every=2)
    s.load()
    for i in range(5):
        s.put(f"k{i}", b"v")
    assert FencedStore(FileStore(tmp_path), "b").load() == {f"k{i}": b"v" for i in range(5)}


# -- several writers, interleaved at every step of the raw store ------------------------------
# Each writer runs on its own thread, but one at a time: before every raw step it waits for
# the scheduler, which picks among the writers waiting there with the seed's generator. So
# any interleaving of steps can come up, and a seed replays the same one.


class Scheduler:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.cv = threading.Condition()
        self.ready: set[str] = set()
        self.done: set[str] = set()
        self.turn = ""

    def step(self) -> None:
        me = threading.current_thread().name
        with self.cv:
            self.ready.add(me)
            self.cv.notify_all()
            self.cv.wait_for(lambda: self.turn == me and me not in self.ready)

    def finish(self) -> None:
        with self.cv:
            self.done.add(threading.current_thread().name)
            self.cv.notify_all()

    def run(self, names: list[str], between: "callable") -> None:
        with self.cv:
            while len(self.done) < len(names):
                self.cv.wait_for(lambda: all(n in self.ready or n in self.done for n in names))
                waiting = sorted(self.ready)
                if not waiting:
                    continue
                between()
                pick = self.rng.choice(waiting)
                self.ready.discard(pick)
                self.turn = pick
                self.cv.notify_all()
                self.cv.wait_for(lambda: pick in self.ready or pick in self.done)


class Interleaved(MemoryStore):
    """Every step waits for its turn; a log write may time out, landing now, later (between
    two steps) or never."""

    def __init__(self, rng: random.Random, scheduler: Scheduler) -> None:
        super().__init__()
        self.rng = rng
        self.scheduler = scheduler
        self.calm = False  # after the run: no turns, no timeouts
        self.late: list[tuple[str, bytes]] = []
        self.landed_late = 0

    def _step(self) -> None:
        if not self.calm:
            self.scheduler.step()

    def land_some(self) -> None:
        if self.late and self.rng.random() < 0.1:
            key, value = self.late.pop(self.rng.randrange(len(self.late)))
            self.landed_late += MemoryStore.put_if_absent(self, key, value)

    def get(self, key):
        self._step()
        return super().get(key)

    def keys(self, prefix=""):
        self._step()
        return super().keys(prefix)

    def delete(self, key):
        self._step()
        super().delete(key)

    def delete_prefix(self, prefix):
        self._step()
        super().delete_prefix(prefix)

    def put_if_absent(self, key, value):
        self._step()
        if "/log/" in key and not self.calm and self.rng.random() < 0.05:
            fate = self.rng.random()
            if fate < 0.3:
                super().put_if_absent(key, value)
            elif fate < 0.7:
                self.late.append((key, value))
            raise StoreFailure(f"timed out writing {key}")
        return super().put_if_absent(key, value)


class World:
    def __init__(self, seed: int, writers: int = 3, ops: int = 60) -> None:
        self.rng = random.Random(seed)
        self.scheduler = Scheduler(self.rng)
        self.raw = Interleaved(self.rng, self.scheduler)
        self.every = self.rng.choice([1, 2, 3, 5])
        self.writers = [FencedStore(self.raw, f"w{i}", compact_every=self.every) for i in range(writers)]
        self.ops = ops
        self.next_key = 0
        self.acked: list[tuple[int, str, bool]] = []  # (term, key, put?) of every acked write
        self.unsure: list[tuple[int, str, bool]] = []  # writes that raised: landed or not
        self.loads: list[tuple[int, dict[str, bytes]]] = []

    def run(self) -> None:
        threads = [threading.Thread(target=self._writer, args=(w,), name=w.writer, daemon=True) for w in self.writers]
        for t in threads:
            t.start()
        self.scheduler.run([t.name for t in threads], self.raw.land_some)
        for t in threads:
            t.join(timeout=10)
            assert not t.is_alive()

    def _writer(self, w: FencedStore) -> None:
        try:
            self.scheduler.step()
            for _ in range(self.ops):
                self._operate(w)
        finally:
            self.scheduler.finish()

    def _operate(self, w: FencedStore) -> None:
        if not w.open or self.rng.random() < 0.05:
            try:
                state = w.load()
            except StoreFailure:
                return
            self.loads.append((w.term, state))
            return
        term = w.term
        existing = w.keys()
        if existing and self.rng.random() < 0.3:
            key, put = self.rng.choice(existing), False
        else:
            self.next_key += 1
            key, put = f"k{self.next_key}", True
        try:
            w.put(key, key.encode()) if put else w.delete(key)
        except StoreFenced:
            return  # nothing landed: the position was taken
        except StoreFailure:
            self.unsure.append((term, key, put))
            return
        self.acked.append((term, key, put))

    def check(self, state: dict[str, bytes], below: float) -> None:
        """``state`` holds every write acked below term ``below`` and nothing not written
        below it."""
        acked = [(k, put) for t, k, put in self.acked if t < below]
        unsure = {k for t, k, _ in self.unsure if t < below}
        deleted_maybe = {k for k, put in acked if not put} | {k for t, k, put in self.unsure if t < below and not put}
        for key, put in acked:
            if put and key not in deleted_maybe:
                assert key in state, f"acked write of {key} (below term {below}) is missing"
            if not put:
                assert key not in state, f"acked delete of {key} (below term {below}) is undone"
        written = {k for k, put in acked if put} | unsure
        for key, value in state.items():
            assert key in written, f"{key} is in the state but no writer below term {below} wrote it"
            assert value == key.encode()


def _seeds() -> range:
    """25 seeds in make test (~0.2 s each); KCOORD_FENCED_SEEDS=N or A-B runs others."""
    spec = os.environ.get("KCOORD_FENCED_SEEDS", "25")
    first, _, last = spec.partition("-")
    return range(int(first), int(last) + 1) if last else range(int(first))


@pytest.mark.parametrize("seed", _seeds())
def test_interleaved_writers_lose_no_acknowledged_write_and_resurrect_none(seed, monkeypatch):
    world = World(seed)
    monkeypatch.setattr(fenced_store, "CHUNK", world.rng.choice([1, 2, 4]))  # chunks deleted often
    world.run()
    world.raw.calm = True
    for key, value in world.raw.late:
        world.raw.landed_late += MemoryStore.put_if_absent(world.raw, key, value)
    for term, state in world.loads:
        world.check(state, term)
    world.check(read_state(world.raw), float("inf"))
    final = FencedStore(world.raw, "last", compact_every=world.every)
    world.check(final.load(), float("inf"))
    assert len(world.loads) > 3 and len(world.acked) > 10
    # every earlier term retired: its claim gone, a seal left at most, and what landed after
    # it was deleted (a late write of a dead process: garbage nobody reads)
    assert world.raw.keys(TERMS) == [term_key(final.term)]
    left = sum(len(world.raw.keys(f"meta/{term:012d}/")) for term in range(1, final.term))
    assert left <= final.term - 1 + world.raw.landed_late
