"""The file-system operations the log performs, behind one small interface.

The log's durability rules (what is fsynced when, which renames are atomic, what recovery
may find after a crash) are only trustworthy if they are tested against a disk that
actually loses unsynced data and fails writes. So every file operation of ``kcoord.log``
goes through a :class:`FileSystem`: in production :class:`OsFileSystem`, whose methods are
the ``os`` functions themselves (the append path pays no extra call for the indirection);
in the deterministic simulation a simulated disk (``tests/sim/disk.py``) that models
power loss and injects ENOSPC / EIO.

The interface is the ``os`` one, kept as narrow as the log needs: integer file descriptors,
``os.O_*`` open flags, ``OSError`` (with an errno) for every failure, and objects with
``st_size`` / ``st_mtime`` from :meth:`stat` / :meth:`fstat`. Paths are anything
``os.fspath`` accepts.

Durability contract the log relies on (POSIX, not just what ext4 happens to do): ``fsync``
of a file makes its contents durable; a create, rename or unlink is durable only after
``fsync_dir`` of the directory holding the name.
"""

from __future__ import annotations

import fcntl
import os
from typing import Protocol, Sequence

_PathLike = str | os.PathLike
_BufferLike = bytes | bytearray | memoryview


class StatLike(Protocol):
    st_size: int
    st_mtime: float


class FileSystem(Protocol):
    """What :class:`~kcoord.log.Log` needs from a file system (see the module docstring)."""

    @property
    def supports_file_hints(self) -> bool:
        """Whether another process on this machine can ``pread`` the log's files by path
        (kcoord's sendfile, :meth:`Log.locate`); False for anything but the real disk."""
        ...

    # -- descriptors ----------------------------------------------------------------------
    def open(self, path: _PathLike, flags: int, mode: int = 0o644) -> int: ...
    def close(self, fd: int) -> None: ...
    def write(self, fd: int, data: _BufferLike) -> int: ...
    def writev(self, fd: int, buffers: Sequence[_BufferLike]) -> int: ...
    def pwrite(self, fd: int, data: _BufferLike, offset: int) -> int: ...
    def pread(self, fd: int, length: int, offset: int) -> bytes: ...
    def ftruncate(self, fd: int, length: int) -> None: ...
    def fsync(self, fd: int) -> None: ...
    def fstat(self, fd: int) -> StatLike: ...

    # -- names ----------------------------------------------------------------------------
    def stat(self, path: _PathLike) -> StatLike: ...
    def exists(self, path: _PathLike) -> bool: ...
    def truncate(self, path: _PathLike, length: int) -> None: ...
    def replace(self, src: _PathLike, dst: _PathLike) -> None: ...
    def unlink(self, path: _PathLike) -> None: ...
    def listdir(self, path: _PathLike) -> list[str]: ...
    def makedirs(self, path: _PathLike) -> None:
        """Create ``path`` and any missing parents (no error if it exists)."""
        ...

    def fsync_dir(self, path: _PathLike) -> None:
        """Make creations, renames and deletions of names in directory ``path`` durable."""
        ...

    def read_file(self, path: _PathLike) -> bytes:
        """A whole (small) file; FileNotFoundError if there is none."""
        ...

    # -- the directory lock ----------------------------------------------------------------
    def lock(self, path: _PathLike) -> int | None:
        """Create ``path`` if needed and take an exclusive lock on it without waiting: a
        handle for :meth:`unlock`, or None while another holder has it. A holder that dies
        loses the lock."""
        ...

    def unlock(self, handle: int) -> None: ...


class OsFileSystem:
    """The real file system: the ``os`` functions themselves, so that a bound method such as
    ``fs.writev`` costs exactly what ``os.writev`` does."""

    supports_file_hints = True

    open = staticmethod(os.open)
    close = staticmethod(os.close)
    write = staticmethod(os.write)
    writev = staticmethod(os.writev)
    pwrite = staticmethod(os.pwrite)
    pread = staticmethod(os.pread)
    ftruncate = staticmethod(os.ftruncate)
    fsync = staticmethod(os.fsync)
    fstat = staticmethod(os.fstat)
    stat = staticmethod(os.stat)
    exists = staticmethod(os.path.exists)
    truncate = staticmethod(os.truncate)
    replace = staticmethod(os.replace)
    unlink = staticmethod(os.unlink)
    listdir = staticmethod(os.listdir)

    @staticmethod
    def makedirs(path: _PathLike) -> None:
        os.makedirs(path, exist_ok=True)

    def fsync_dir(self, path: _PathLike) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            self.fsync(fd)
        finally:
            os.close(fd)

    @staticmethod
    def read_file(path: _PathLike) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    @staticmethod
    def lock(path: _PathLike) -> int | None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        return fd

    @staticmethod
    def unlock(handle: int) -> None:
        os.close(handle)  # closing the descriptor drops the flock

    def __repr__(self) -> str:
        return "OsFileSystem()"


OS_FILE_SYSTEM = OsFileSystem()
"""The one instance every Log uses unless it is given another file system."""
