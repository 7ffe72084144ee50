"""A simulated disk: the real :class:`~kcoord.log.Log` on memory that loses unsynced data.

The simulation runs the production log (segments, index, checkpoints, recovery) instead of
a model of it, on a :class:`SimDisk` that implements :class:`kcoord.log.fs.FileSystem`.
What makes it worth more than a RAM disk is that it keeps two states, as a real disk does:

* **current** -- what reads see (the page cache);
* **durable** -- what survives :meth:`SimDisk.power_loss`.

Durability follows POSIX as strictly as Linux ext4 (``data=ordered``) may behave, so code
that is only correct by ext4's kindness fails here:

* ``fsync(fd)`` makes that file's current bytes durable, nothing else;
* a name's creation, rename (replace) or removal becomes durable only with
  ``fsync_dir`` of its directory -- a renamed-over checkpoint reverts to the old file, a new
  file in a directory never synced disappears (with its fsynced bytes), an unsynced unlink
  brings the file back;
* on power loss each file with unsynced changes either reverts to its durable bytes or,
  with probability ``torn``, keeps its durable bytes plus a random *prefix* of what was
  written since (a torn write, cut anywhere, even inside a batch); likewise a random prefix
  (in order, as a journal commits them) of the unsynced directory operations may survive;
* a failed fsync leaves the data non-durable (``fsync_error_drops=True``: the kernel also
  drops the dirty pages, so reads see the durable bytes again, as Linux may after EIO);
* every descriptor and lock is gone after a power loss (or :meth:`SimDisk.kill`, a
  process death that keeps the page cache).

Faults are injected per operation: :meth:`SimDisk.fail` rules ("the next write to a path
matching ``*/high-watermark-checkpoint.tmp`` raises ENOSPC") and an optional
``fault_hook(op, path) -> errno | None`` consulted on every operation; ``capacity`` makes
the disk full (writes beyond it are short, then ENOSPC, as Linux does). Operation kinds:
``open read write truncate fsync fsync_dir replace unlink listdir stat mkdir lock``.

Deterministic: all randomness comes from the ``random.Random`` passed in, listings are
sorted, descriptors are numbered in order, time is ``clock()`` (default 0). Fast enough to
run the log through thousands of seeds: files are bytearrays, fsync copies only the bytes
changed since the last one.

Usage::

    disk = SimDisk(random.Random(seed))
    log = Log("/n1/t-0", config, now_ms=now, fs=disk)
    log.append_as_leader(batch, leader_epoch=1, now_ms=now)
    disk.fail("write", "/n1/t-0/*.log", errno.ENOSPC)     # the next segment write
    log.append_as_leader(batch, leader_epoch=1, now_ms=now)  # raises LogStorageError; offline
    disk.power_loss()                                      # the machine goes down
    log = Log("/n1/t-0", config, now_ms=now, fs=disk)      # recovery on what was durable
"""

from __future__ import annotations

import errno
import os
import posixpath
import random
from fnmatch import fnmatchcase
from typing import Callable, NamedTuple, Sequence

_BufferLike = bytes | bytearray | memoryview

OPS = ("open", "read", "write", "truncate", "fsync", "fsync_dir", "replace", "unlink", "listdir", "stat", "mkdir", "lock")


class SimStat(NamedTuple):
    st_size: int
    st_mtime: float


class _File:
    """A file's bytes as reads see them and as they would survive a power loss.

    ``durable[:dirty_from] == data[:dirty_from]`` always holds: ``dirty_from`` is the lowest
    byte changed since the last fsync (None when the file is clean), so an fsync copies only
    ``data[dirty_from:]`` and a torn write keeps ``data[:dirty_from + k]``.
    """

    __slots__ = ("data", "durable", "dirty_from", "mtime_ms")

    def __init__(self, mtime_ms: int) -> None:
        self.data = bytearray()
        self.durable = bytearray()
        self.dirty_from: int | None = None
        self.mtime_ms = mtime_ms


class _Dir:
    """Names as reads see them and as they would survive a power loss."""

    __slots__ = ("entries", "durable")

    def __init__(self) -> None:
        self.entries: dict[str, _File | _Dir] = {}
        self.durable: dict[str, _File | _Dir] = {}


class _Open:
    __slots__ = ("node", "path", "readable", "writable", "append", "pos")

    def __init__(self, node: _File, path: str, readable: bool, writable: bool, append: bool) -> None:
        self.node = node
        self.path = path
        self.readable = readable
        self.writable = writable
        self.append = append
        self.pos = 0


# One pending directory operation: the (directory, name, node or None) assignments it
# makes, applied together (a rename is one operation touching two names).
_DirOp = tuple[tuple[_Dir, str, "_File | _Dir | None"], ...]


class Fault:
    """A rule of :meth:`SimDisk.fail`: operation ``op`` ("*" = any) on a path matching the
    glob ``pattern`` raises ``OSError(err)``, ``times`` times (None = until removed) after
    letting ``skip`` matching operations through. ``fired`` counts the errors raised."""

    __slots__ = ("op", "pattern", "err", "times", "skip", "fired")

    def __init__(self, op: str, pattern: str, err: int, times: int | None, skip: int) -> None:
        if op != "*" and op not in OPS:
            raise ValueError(f"unknown operation {op!r}; one of {OPS} or '*'")
        self.op = op
        self.pattern = pattern
        self.err = err
        self.times = times
        self.skip = skip
        self.fired = 0

    def __repr__(self) -> str:
        return f"Fault({self.op!r}, {self.pattern!r}, {errno.errorcode.get(self.err, self.err)}, times={self.times}, fired={self.fired})"


def _oserror(err: int, path: str | None = None) -> OSError:
    return OSError(err, os.strerror(err), path) if path is not None else OSError(err, os.strerror(err))


def _norm(path) -> str:
    p = os.fspath(path)
    if isinstance(p, bytes):
        p = p.decode()
    return posixpath.normpath(p if p.startswith("/") else "/" + p)


class SimDisk:
    """An in-memory :class:`~kcoord.log.fs.FileSystem` with durability and faults (see the
    module docstring). Holds any number of directories, keyed by absolute path strings."""

    supports_file_hints = False  # no other process can read these files

    def __init__(
        self,
        rng: random.Random,
        *,
        torn: float = 0.5,
        capacity: int | None = None,
        fsync_error_drops: bool = False,
        clock: Callable[[], int] | None = None,
    ) -> None:
        """``torn``: probability that a power loss keeps a random prefix of a file's unsynced
        writes (and of the pending directory operations) instead of none of them.
        ``capacity``: bytes of file data the disk holds (None = unlimited)."""
        self.rng = rng
        self.torn = torn
        self.capacity = capacity
        self.fsync_error_drops = fsync_error_drops
        self.clock = clock if clock is not None else (lambda: 0)
        self.fault_hook: Callable[[str, str], int | None] | None = None
        self.used = 0  # bytes of file data (approximate under unlinked-but-open files)
        self.op_count = 0  # operations so far (every call that can fail counts)
        self.counts: dict[str, int] = {}  # the same, by kind
        self.power_losses = 0
        self._root = _Dir()
        self._journal: list[_DirOp] = []  # directory operations not yet made durable
        self._fds: dict[int, _Open] = {}
        self._next_fd = 3
        self._locks: dict[str, int] = {}  # path -> handle
        self._rules: list[Fault] = []

    # -- faults ---------------------------------------------------------------------------

    def fail(self, op: str, path: str = "*", err: int = errno.EIO, *, times: int | None = 1, skip: int = 0) -> Fault:
        """Make operation ``op`` ("*" = any kind) on paths matching the glob ``path`` raise
        ``OSError(err)`` ``times`` times (None = every time) after ``skip`` matches pass.
        A write to an open file is matched by the path it was opened under."""
        rule = Fault(op, path, err, times, skip)
        self._rules.append(rule)
        return rule

    @property
    def rules(self) -> list[Fault]:
        """The rules still in force."""
        return list(self._rules)

    def remove_fault(self, rule: Fault) -> None:
        """Take one rule of :meth:`fail` out (no-op if it already ran out)."""
        if rule in self._rules:
            self._rules.remove(rule)

    def clear_faults(self) -> None:
        self._rules.clear()
        self.fault_hook = None

    def _check(self, op: str, path: str) -> None:
        """Count the operation and raise the error a rule or the hook asks for."""
        self.op_count += 1
        self.counts[op] = self.counts.get(op, 0) + 1
        if self._rules:
            for rule in self._rules:
                if (rule.op == op or rule.op == "*") and fnmatchcase(path, rule.pattern):
                    if rule.skip > 0:
                        rule.skip -= 1
                        continue
                    rule.fired += 1
                    if rule.times is not None:
                        rule.times -= 1
                        if rule.times <= 0:
                            self._rules.remove(rule)
                    raise _oserror(rule.err, path)
        hook = self.fault_hook
        if hook is not None:
            err = hook(op, path)
            if err:
                raise _oserror(err, path)

    # -- crashes --------------------------------------------------------------------------

    def power_loss(self, *, torn: float | None = None) -> None:
        """The machine loses power: only durable state remains (plus, with probability
        ``torn`` -- default the disk's -- random prefixes of what was not yet synced).
        Every descriptor and lock is invalid afterwards."""
        p = self.torn if torn is None else torn
        rng = self.rng
        journal, self._journal = self._journal, []
        if journal and p > 0 and rng.random() < p:
            for op in journal[: rng.randint(0, len(journal))]:
                for d, name, node in op:
                    if node is None:
                        d.durable.pop(name, None)
                    else:
                        d.durable[name] = node
        used = 0
        stack = [self._root]
        while stack:
            d = stack.pop()
            d.entries = dict(d.durable)
            for name in sorted(d.entries):
                node = d.entries[name]
                if isinstance(node, _Dir):
                    stack.append(node)
                    continue
                df = node.dirty_from
                if df is not None:
                    if p > 0 and rng.random() < p:
                        node.data = node.data[: rng.randint(df, len(node.data))]
                    else:
                        node.data = node.durable
                    node.durable = bytearray(node.data)
                    node.dirty_from = None
                used += len(node.data)
        self.used = used
        self._fds.clear()
        self._locks.clear()
        self.power_losses += 1

    def kill(self, under: str = "/", since: int = 0) -> None:
        """A process dies: descriptors and locks on paths under ``under`` are dropped; the
        page cache (every write) stays, as after SIGKILL. ``since`` (a :meth:`mark`): only
        those opened since, when another process still holds some there (an opener that
        failed on the directory lock of a live predecessor)."""
        root = _norm(under)
        prefix = root.rstrip("/") + "/"

        def inside(p: str) -> bool:
            return p == root or p.startswith(prefix)

        for fd in [fd for fd, f in self._fds.items() if fd >= since and inside(f.path)]:
            del self._fds[fd]
        for p in [p for p, h in self._locks.items() if h >= since and inside(p)]:
            del self._locks[p]

    def mark(self) -> int:
        """Descriptors and lock handles opened from now on number at least this."""
        return self._next_fd

    def wipe(self, path) -> None:
        """The directory ``path`` and everything under it are gone for good, synced or not
        (the disk holding them was replaced, or an operator deleted them); a process using
        them must be dead already (its descriptors and locks there are dropped)."""
        p = _norm(path)
        self.kill(under=p)
        try:
            d, name = self._parent(p)
        except OSError:
            return
        d.entries.pop(name, None)
        d.durable.pop(name, None)
        # a pending directory operation must not bring the name back at a power loss
        self._journal = [op for op in self._journal if not any(pd is d and pname == name for pd, pname, _ in op)]
        self.used = sum(len(self._file(f).data) for f in self.files())

    # -- inspection (tests) ---------------------------------------------------------------

    def files(self, under: str = "/") -> list[str]:
        """Paths of all files under ``under`` as reads see them, sorted."""
        out: list[str] = []
        start = _norm(under)
        node = self._lookup(start)
        if not isinstance(node, _Dir):
            return [start]
        stack = [(start.rstrip("/"), node)]
        while stack:
            base, d = stack.pop()
            for name, child in d.entries.items():
                p = f"{base}/{name}"
                if isinstance(child, _Dir):
                    stack.append((p, child))
                else:
                    out.append(p)
        return sorted(out)

    def contents(self, path) -> bytes:
        """A file's current bytes (no fault, not counted)."""
        node = self._lookup(_norm(path))
        if not isinstance(node, _File):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        return bytes(node.data)

    def corrupt(self, path, position: int, length: int = 1) -> None:
        """Flip the bits of ``length`` bytes at ``position``, durably (bit rot, a bad sector)."""
        node = self._lookup(_norm(path))
        assert isinstance(node, _File)
        for buf in (node.data, node.durable):
            for i in range(position, min(position + length, len(buf))):
                buf[i] ^= 0xFF

    @property
    def open_descriptors(self) -> int:
        return len(self._fds)

    # -- names ----------------------------------------------------------------------------

    def _lookup(self, p: str) -> _File | _Dir:
        node: _File | _Dir = self._root
        for part in p.split("/"):
            if not part:
                continue
            if not isinstance(node, _Dir):
                raise _oserror(errno.ENOTDIR, p)
            child = node.entries.get(part)
            if child is None:
                raise _oserror(errno.ENOENT, p)
            node = child
        return node

    def _parent(self, p: str) -> tuple[_Dir, str]:
        head, name = posixpath.split(p)
        d = self._lookup(head)
        if not isinstance(d, _Dir):
            raise _oserror(errno.ENOTDIR, p)
        if not name:
            raise _oserror(errno.EINVAL, p)
        return d, name

    def _file(self, p: str) -> _File:
        node = self._lookup(p)
        if isinstance(node, _Dir):
            raise _oserror(errno.EISDIR, p)
        return node

    def _set(self, d: _Dir, name: str, node: _File | _Dir | None) -> None:
        if node is None:
            del d.entries[name]
        else:
            d.entries[name] = node
        self._journal.append(((d, name, node),))

    def stat(self, path) -> SimStat:
        p = _norm(path)
        self._check("stat", p)
        node = self._lookup(p)
        if isinstance(node, _Dir):
            return SimStat(0, 0.0)
        return SimStat(len(node.data), node.mtime_ms / 1000)

    def exists(self, path) -> bool:
        try:
            self._lookup(_norm(path))
        except OSError:
            return False
        return True

    def makedirs(self, path) -> None:
        p = _norm(path)
        self._check("mkdir", p)
        d = self._root
        for part in p.split("/"):
            if not part:
                continue
            child = d.entries.get(part)
            if child is None:
                child = _Dir()
                self._set(d, part, child)
            elif not isinstance(child, _Dir):
                raise _oserror(errno.ENOTDIR, p)
            d = child

    def listdir(self, path) -> list[str]:
        p = _norm(path)
        self._check("listdir", p)
        d = self._lookup(p)
        if not isinstance(d, _Dir):
            raise _oserror(errno.ENOTDIR, p)
        return sorted(d.entries)

    def replace(self, src, dst) -> None:
        s, t = _norm(src), _norm(dst)
        self._check("replace", s)
        sd, sname = self._parent(s)
        td, tname = self._parent(t)
        node = sd.entries.get(sname)
        if node is None:
            raise _oserror(errno.ENOENT, s)
        if s == t:
            return
        old = td.entries.get(tname)
        if isinstance(old, _Dir):
            raise _oserror(errno.EISDIR, t)
        if old is not None:
            self.used -= len(old.data)
        td.entries[tname] = node
        del sd.entries[sname]
        self._journal.append(((td, tname, node), (sd, sname, None)))

    def unlink(self, path) -> None:
        p = _norm(path)
        self._check("unlink", p)
        d, name = self._parent(p)
        node = d.entries.get(name)
        if node is None:
            raise _oserror(errno.ENOENT, p)
        if isinstance(node, _Dir):
            raise _oserror(errno.EISDIR, p)
        self.used -= len(node.data)
        self._set(d, name, None)

    def fsync_dir(self, path) -> None:
        p = _norm(path)
        self._check("fsync_dir", p)
        d = self._lookup(p)
        if not isinstance(d, _Dir):
            raise _oserror(errno.ENOTDIR, p)
        d.durable = dict(d.entries)
        if self._journal:
            kept = []
            for op in self._journal:
                rest = tuple(a for a in op if a[0] is not d)
                if rest:
                    kept.append(rest)
            self._journal = kept

    def truncate(self, path, length: int) -> None:
        p = _norm(path)
        self._check("truncate", p)
        self._resize(self._file(p), length)

    def read_file(self, path) -> bytes:
        p = _norm(path)
        self._check("read", p)
        return bytes(self._file(p).data)

    # -- descriptors ----------------------------------------------------------------------

    def open(self, path, flags: int, mode: int = 0o644) -> int:
        p = _norm(path)
        self._check("open", p)
        d, name = self._parent(p)
        node = d.entries.get(name)
        if node is None:
            if not flags & os.O_CREAT:
                raise _oserror(errno.ENOENT, p)
            node = _File(self.clock())
            self._set(d, name, node)
        elif isinstance(node, _Dir):
            raise _oserror(errno.EISDIR, p)
        elif flags & os.O_CREAT and flags & os.O_EXCL:
            raise _oserror(errno.EEXIST, p)
        access = flags & os.O_ACCMODE
        writable = access != os.O_RDONLY
        if flags & os.O_TRUNC and writable:
            self._resize(node, 0)
        fd = self._next_fd
        self._next_fd += 1
        self._fds[fd] = _Open(node, p, access != os.O_WRONLY, writable, bool(flags & os.O_APPEND))
        return fd

    def _open_file(self, fd: int) -> _Open:
        f = self._fds.get(fd)
        if f is None:
            raise _oserror(errno.EBADF)
        return f

    def close(self, fd: int) -> None:
        if self._fds.pop(fd, None) is None:
            raise _oserror(errno.EBADF)

    def fstat(self, fd: int) -> SimStat:
        f = self._open_file(fd)
        self._check("stat", f.path)
        return SimStat(len(f.node.data), f.node.mtime_ms / 1000)

    def pread(self, fd: int, length: int, offset: int) -> bytes:
        f = self._open_file(fd)
        self._check("read", f.path)
        if not f.readable:
            raise _oserror(errno.EBADF, f.path)
        return bytes(memoryview(f.node.data)[offset : offset + length])

    def write(self, fd: int, data: _BufferLike) -> int:
        f = self._open_file(fd)
        self._check("write", f.path)
        if not f.writable:
            raise _oserror(errno.EBADF, f.path)
        pos = len(f.node.data) if f.append else f.pos
        n = self._put(f.node, pos, data, f.path)
        f.pos = pos + n
        return n

    def writev(self, fd: int, buffers: Sequence[_BufferLike]) -> int:
        f = self._open_file(fd)
        self._check("write", f.path)
        if not f.writable:
            raise _oserror(errno.EBADF, f.path)
        node = f.node
        pos = len(node.data) if f.append else f.pos
        total = sum(len(b) for b in buffers)
        if pos == len(node.data) and (self.capacity is None or self.used + total <= self.capacity):
            data = node.data  # the common case: whole buffers appended at the end
            for b in buffers:
                data += b
            self.used += total
            if node.dirty_from is None or pos < node.dirty_from:
                node.dirty_from = pos
            node.mtime_ms = self.clock()
            n = total
        else:
            n = self._put(node, pos, b"".join(buffers), f.path)
        f.pos = pos + n
        return n

    def pwrite(self, fd: int, data: _BufferLike, offset: int) -> int:
        f = self._open_file(fd)
        self._check("write", f.path)
        if not f.writable:
            raise _oserror(errno.EBADF, f.path)
        # Linux: with O_APPEND, pwrite appends whatever the offset.
        return self._put(f.node, len(f.node.data) if f.append else offset, data, f.path)

    def ftruncate(self, fd: int, length: int) -> None:
        f = self._open_file(fd)
        self._check("truncate", f.path)
        if not f.writable:
            raise _oserror(errno.EINVAL, f.path)
        self._resize(f.node, length)

    def fsync(self, fd: int) -> None:
        f = self._open_file(fd)
        node = f.node
        try:
            self._check("fsync", f.path)
        except OSError:
            if self.fsync_error_drops and node.dirty_from is not None:
                self.used += len(node.durable) - len(node.data)
                node.data = bytearray(node.durable)
                node.dirty_from = None
            raise
        df = node.dirty_from
        if df is not None:
            node.durable[df:] = memoryview(node.data)[df:]
            node.dirty_from = None

    # -- bytes ----------------------------------------------------------------------------

    def _put(self, node: _File, pos: int, data: _BufferLike, path: str) -> int:
        """Write ``data`` at ``pos`` (zero-filling a gap); short when the disk fills up."""
        n = len(data)
        old = len(node.data)
        end = pos + n
        if self.capacity is not None and end > old:
            over = self.used + (end - old) - self.capacity
            if over > 0:
                n -= over
                if n <= 0:
                    raise _oserror(errno.ENOSPC, path)
                data = memoryview(data)[:n]
                end = pos + n
        buf = node.data
        if pos > old:
            buf.extend(bytes(pos - old))
        buf[pos:end] = data
        self.used += max(0, end - old)
        changed = min(pos, old)
        if node.dirty_from is None or changed < node.dirty_from:
            node.dirty_from = changed
        node.mtime_ms = self.clock()
        return n

    def _resize(self, node: _File, length: int) -> None:
        old = len(node.data)
        if length == old:
            return
        if length < old:
            del node.data[length:]
        else:
            node.data.extend(bytes(length - old))
        self.used += length - old
        changed = min(length, old)
        if node.dirty_from is None or changed < node.dirty_from:
            node.dirty_from = changed
        node.mtime_ms = self.clock()

    # -- the directory lock ---------------------------------------------------------------

    def lock(self, path) -> int | None:
        p = _norm(path)
        self._check("lock", p)
        if p in self._locks:
            return None
        self.close(self.open(p, os.O_RDWR | os.O_CREAT))
        handle = self._next_fd
        self._next_fd += 1
        self._locks[p] = handle
        return handle

    def unlock(self, handle: int) -> None:
        for p, h in self._locks.items():
            if h == handle:
                del self._locks[p]
                return

    def __repr__(self) -> str:
        return f"SimDisk(files={len(self.files())}, used={self.used}, open={len(self._fds)}, pending_dir_ops={len(self._journal)})"
