"""The controller's metadata as a log that a deposed writer cannot write to.

The GCS key/value store has no compare-and-swap, only put-if-absent. That is enough for a
log: every write is an entry put at the next free position, and a position can be taken
once. Each process that opens the store (:meth:`FencedStore.load`) claims a new **term**
(``meta/term/<t>``, put-if-absent), and writes only into its own term's log. Before it reads
anything it **seals** the previous term: it reads that term's snapshot and entries up to
the first free position and puts a seal there. The previous writer's next write lands on
exactly that position, so it fails, and it learns it was deposed (:class:`StoreFenced`).
A write that the previous writer had sent before and that lands later (a delayed RPC of a
dead process) finds the position taken as well. So every write a writer was told succeeded
is in the state every later ``load`` returns, and no write it was told failed, or that a
deposed writer attempted after the seal, ever is.

Layout, under ``meta/``::

    term/<t>                 the claim of term t (the writer's id)
    <t>/snap/<p>             term t's state with its entries before position p
    <t>/log/<chunk>/<p>      entry p (in chunk p // 64): a list of (key, value-or-None), or
                             the seal

A writer starts its term with a snapshot at position 0 and a first entry, then snapshots
every ``compact_every`` entries and deletes what the snapshot covers. Once its term has
begun, it deletes the previous terms' data, keeping each one's seal (a deposed writer's
next write would otherwise land there) -- a few bytes per term.

Why a seal is checked after it is put: the previous writer may have written the position,
snapshotted past it and deleted it in the meantime, in which case the seal sits below its
snapshot, fences nothing and is ignored; the sealer tries again at the new end.

A term whose writer died before it wrote its snapshot is sealed empty at position 0 and
the sealer walks back to the term before it (its writer had not deleted anything yet).
"""

from __future__ import annotations

import logging
from typing import Callable, Iterable, Protocol

import msgpack

from .metastore import StoreFailure

logger = logging.getLogger("kcoord.metastore")

PREFIX = "meta/"
TERMS = PREFIX + "term/"
_WIDTH = 12
# Entries per chunk: fixed, not the writer's compaction interval, since every reader must
# find every writer's entries (a prefix deletion removes a chunk below a snapshot).
CHUNK = 64
_SEAL = "seal"
_OPS = "ops"
_CLAIM_ATTEMPTS = 20
_SEAL_ATTEMPTS = 1000


class StoreFenced(StoreFailure):
    """A later process claimed the store: this writer's memory may be behind it and it
    must not write again until it loads the store anew."""


class AtomicStore(Protocol):
    """What the log needs of a key/value store: put-if-absent is the one atomic step."""

    def get(self, key: str) -> bytes | None: ...

    def put_if_absent(self, key: str, value: bytes) -> bool:
        """Store ``value`` unless ``key`` exists; True if this call stored it."""
        ...

    def delete(self, key: str) -> None: ...

    def delete_prefix(self, prefix: str) -> None: ...

    def keys(self, prefix: str = "") -> list[str]: ...


def term_key(term: int) -> str:
    return f"{TERMS}{term:0{_WIDTH}d}"


def _term_prefix(term: int) -> str:
    return f"{PREFIX}{term:0{_WIDTH}d}/"


def snap_key(term: int, position: int) -> str:
    return f"{_term_prefix(term)}snap/{position:0{_WIDTH}d}"


def _chunk_prefix(term: int, chunk: int) -> str:
    return f"{_term_prefix(term)}log/{chunk:0{_WIDTH}d}/"


def entry_key(term: int, position: int) -> str:
    return f"{_chunk_prefix(term, position // CHUNK)}{position:0{_WIDTH}d}"


def _tail_int(key: str) -> int:
    return int(key.rsplit("/", 1)[1])


def _snapshots(raw: "AtomicStore", term: int) -> list[int]:
    """The positions of ``term``'s snapshots."""
    return [_tail_int(k) for k in raw.keys(_term_prefix(term) + "snap/")]


def _legacy_state(raw: "AtomicStore", legacy: "Callable[[str], bool] | None") -> dict[str, bytes]:
    """The plain keys of a store written before the log: the first term's start."""
    state: dict[str, bytes] = {}
    if legacy is not None:
        for key in raw.keys():
            if legacy(key) and (value := raw.get(key)) is not None:
                state[key] = value
    return state


def encode_ops(ops: Iterable[tuple[str, bytes | None]]) -> bytes:
    return msgpack.packb({_OPS: [[k, v] for k, v in ops]}, use_bin_type=True)


_SEAL_VALUE = msgpack.packb({_SEAL: True}, use_bin_type=True)


def decode_entry(value: bytes) -> list[tuple[str, bytes | None]] | None:
    """An entry's writes, or None for a seal."""
    record = msgpack.unpackb(value, raw=False)
    if record.get(_SEAL):
        return None
    return [(k, v) for k, v in record[_OPS]]


def entry_writes(key: str, value: bytes) -> list[tuple[str, bytes | None]]:
    """The metadata writes a raw write of ``key`` carries: an entry's, else none (a claim,
    a snapshot or a seal). Observers of the raw store (the simulation's checks) use it:
    every entry that lands is part of the log every later load reads."""
    if not key.startswith(PREFIX) or "/log/" not in key:
        return []
    return decode_entry(value) or []


def _apply(state: dict[str, bytes], ops: Iterable[tuple[str, bytes | None]]) -> None:
    for k, v in ops:
        if v is None:
            state.pop(k, None)
        else:
            state[k] = bytes(v)


def _encode_state(state: dict[str, bytes]) -> bytes:
    return msgpack.packb(state, use_bin_type=True)


def _decode_state(value: bytes) -> dict[str, bytes]:
    return dict(msgpack.unpackb(value, raw=False))


class FencedStore:
    """The controller's :class:`~kcoord.replication.metastore.MetadataStore` over an
    :class:`AtomicStore`. ``load()`` claims a term and returns the state; ``put`` and
    ``delete`` append to the term's log and raise :class:`StoreFenced` once a later term
    sealed it; ``get`` and ``keys`` answer from memory.

    ``legacy(key)`` picks the keys of a store written before the log (plain keys): the
    first term starts from them."""

    def __init__(
        self,
        raw: AtomicStore,
        writer: str,
        *,
        compact_every: int = 64,
        legacy: Callable[[str], bool] | None = None,
    ) -> None:
        if compact_every < 1:
            raise ValueError(f"compact_every must be at least 1, not {compact_every}")
        self.raw = raw
        self.writer = writer
        self.compact_every = compact_every
        self._legacy = legacy
        self.term = 0  # 0: not open
        self._position = 0
        self._state: dict[str, bytes] = {}
        self._deleted_chunks = 0  # chunks below this one are deleted

    # -- reading ------------------------------------------------------------------------------
    @property
    def open(self) -> bool:
        return self.term > 0

    def get(self, key: str) -> bytes | None:
        return self._state.get(key)

    def keys(self, prefix: str = "") -> list[str]:
        return sorted(k for k in self._state if k.startswith(prefix))

    def _terms(self) -> list[int]:
        return sorted(_tail_int(k) for k in self.raw.keys(TERMS))

    # -- opening ------------------------------------------------------------------------------
    def load(self) -> dict[str, bytes]:
        """Claim a new term, seal the ones before it and return the metadata they hold.
        Raises :class:`StoreFenced` if a later term is claimed meanwhile; any error of the
        raw store passes through (nothing was decided: load again)."""
        self.term = 0
        for _ in range(_CLAIM_ATTEMPTS):
            known = self._terms()
            term = (known[-1] if known else 0) + 1
            if self.raw.put_if_absent(term_key(term), self.writer.encode()):
                break
        else:
            raise StoreFailure(f"could not claim a metadata term in {_CLAIM_ATTEMPTS} attempts: others claim them as fast")
        if self._terms()[-1] > term:
            # A stale claimant: its term number had been retired and someone holds a later one.
            raise StoreFenced(f"term {term} of the metadata log is claimed, but so is a later one")
        state = self._recover(term - 1)
        if not self.raw.put_if_absent(snap_key(term, 0), _encode_state(state)):
            raise StoreFenced(f"term {term} of the metadata log already has a snapshot")
        if not self.raw.put_if_absent(entry_key(term, 0), encode_ops([])):
            raise StoreFenced(f"term {term} of the metadata log was sealed before it began")
        self.term, self._position, self._state, self._deleted_chunks = term, 1, state, 0
        self._retire()
        return dict(state)

    def _recover(self, term: int) -> dict[str, bytes]:
        """Seal ``term`` and, if it never began, the ones before it, back to one with a
        snapshot; return its final state."""
        while term >= 1:
            base, ops, _ = self._seal(term)
            if base is not None:
                _apply(base, ops)
                return base
            term -= 1
        return _legacy_state(self.raw, self._legacy)

    def _seal(self, term: int) -> tuple[dict[str, bytes] | None, list[tuple[str, bytes | None]], int]:
        """The snapshot (None if the term never began), the entries after it, and the
        position of the seal that now ends ``term`` (put by this call or found)."""
        for _ in range(_SEAL_ATTEMPTS):
            read = read_term(self.raw, term)
            if read is None:
                continue  # the writer compacted under us: read again
            base, ops, end, already = read
            if already:
                return base, ops, end
            if not self.raw.put_if_absent(entry_key(term, end), _SEAL_VALUE):
                continue  # the writer wrote there first
            if max(_snapshots(self.raw, term), default=-1) > end:
                continue  # the writer had written and compacted past it: the seal fences nothing
            return base, ops, end
        raise StoreFailure(f"could not seal term {term} of the metadata log: its writer keeps writing")

    def _retire(self) -> None:
        """Delete what earlier terms hold but each one's seal (its last entry: nothing lands
        after a seal, and what a reader of a retired term leaves lies below it), and their
        claims. Best effort: what is left is harmless and the next writer tries again."""
        try:
            logs: dict[int, list[str]] = {}
            for key in self.raw.keys(PREFIX):
                if key.startswith(TERMS):
                    if _tail_int(key) < self.term:
                        self.raw.delete(key)
                    continue
                term = int(key[len(PREFIX):].split("/", 1)[0])
                if term >= self.term:
                    continue
                if "/log/" in key:
                    logs.setdefault(term, []).append(key)
                else:
                    self.raw.delete(key)
            for keys in logs.values():
                seal = max(keys, key=_tail_int)
                for key in keys:
                    if key != seal:
                        self.raw.delete(key)
        except Exception as exc:
            logger.warning("could not delete earlier terms of the metadata log: %s", exc)

    # -- writing ------------------------------------------------------------------------------
    def put(self, key: str, value: bytes) -> None:
        self.append([(key, bytes(value))])

    def delete(self, key: str) -> None:
        self.append([(key, None)])

    def append(self, ops: list[tuple[str, bytes | None]]) -> None:
        """Write ``ops`` as one entry: all of them, or (on an error) maybe all, never some.
        After any error the store is closed until the next :meth:`load`: whether the entry
        landed is unknown, and the caller must not go on from memory."""
        if not self.open:
            raise StoreFenced("the metadata store is not open: load() it first")
        term, position = self.term, self._position
        self.term = 0
        landed = self.raw.put_if_absent(entry_key(term, position), encode_ops(ops))
        if not landed:
            raise StoreFenced(f"term {term} of the metadata log was sealed at position {position}: a later process holds it")
        self.term, self._position = term, position + 1
        _apply(self._state, ops)
        if self._position % self.compact_every == 0:
            self._compact()

    def _compact(self) -> None:
        term, position = self.term, self._position
        try:
            if not self.raw.put_if_absent(snap_key(term, position), _encode_state(self._state)):
                return
            for chunk in range(self._deleted_chunks, position // CHUNK):
                self.raw.delete_prefix(_chunk_prefix(term, chunk))
                self._deleted_chunks = chunk + 1
            for older in _snapshots(self.raw, term):
                if older < position:
                    self.raw.delete(snap_key(term, older))
        except Exception as exc:
            logger.warning("could not compact the metadata log at position %d: %s", position, exc)


def read_term(raw: AtomicStore, term: int) -> tuple[dict[str, bytes] | None, list[tuple[str, bytes | None]], int, bool] | None:
    """Term ``term``'s latest snapshot (None if none), its entries after it, the first
    position after them and whether a seal is there; None if a concurrent compaction got in
    the way (read again)."""
    snaps = _snapshots(raw, term)
    base: dict[str, bytes] | None = None
    position = 0
    if snaps:
        position = max(snaps)
        value = raw.get(snap_key(term, position))
        if value is None:
            return None
        base = _decode_state(value)
    ops: list[tuple[str, bytes | None]] = []
    while True:
        value = raw.get(entry_key(term, position))
        entry = None if value is None else decode_entry(value)
        if value is None or entry is None:
            # The end, or a seal. Either is real only if no later snapshot came meanwhile:
            # the writer may have written here, compacted past it and deleted it (so a
            # reader found it free, or put a seal there that fences nothing). A later term
            # retiring this one leaves no snapshot (and its reader's own term cannot begin).
            if base is not None and max(_snapshots(raw, term), default=-1) != max(snaps):
                return None
            return base, ops, position, value is not None
        if base is None:
            return None  # entries with no snapshot: the snapshot came after the listing
        ops.extend(entry)
        position += 1


def read_state(raw: AtomicStore, legacy: Callable[[str], bool] | None = None) -> dict[str, bytes]:
    """The metadata the log holds now, read without claiming or sealing anything (for
    observers; a writer may append meanwhile)."""
    for _ in range(_SEAL_ATTEMPTS):
        terms = sorted((_tail_int(k) for k in raw.keys(TERMS)), reverse=True)
        for term in terms:
            read = read_term(raw, term)
            if read is None:
                break
            base, ops, _, _ = read
            if base is not None:
                _apply(base, ops)
                return base
        else:
            return _legacy_state(raw, legacy)
    raise StoreFailure("could not read the metadata log: it keeps changing")
