"""A log directory's producer-state snapshots (``<offset>.producer-snapshot``).

Producer state (idempotence: each producer's last sequences) is derived from batch
headers. So that opening or truncating a log does not read every header, the state is
snapshotted at each segment roll and on close, and restored from the newest snapshot not
past the log end plus the headers after it. A few snapshots are kept, so that a
truncation below the newest one still finds an older one to start from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator, Sequence

from ..record import BatchHeader
from .checkpoint import (
    PRODUCER_SNAPSHOT_SUFFIX,
    CheckpointError,
    producer_snapshot_path,
    read_producer_snapshot,
    write_producer_snapshot,
)
from .fs import FileSystem
from .producer_state import CompletedTxn, ProducerStateManager, ReadControl
from .segment import parse_base_offset

KEEP_PRODUCER_SNAPSHOTS = 3


class ProducerSnapshots:
    def __init__(self, fs: FileSystem, directory: Path) -> None:
        self._fs = fs
        self.directory = directory

    def offsets(self) -> list[int]:
        """The offsets of the snapshots in the directory, in order."""
        offsets = []
        for name in self._fs.listdir(self.directory):
            off = parse_base_offset(name, PRODUCER_SNAPSHOT_SUFFIX)
            if off is not None:
                offsets.append(off)
        return sorted(offsets)

    def restore(
        self,
        state: ProducerStateManager,
        log_start: int,
        log_end: int,
        headers_from: Callable[[int], Iterator[BatchHeader]],
        notes: list[str],
        read_control: ReadControl | None = None,
        on_completed: Callable[[CompletedTxn], None] | None = None,
        at_most: int | None = None,
    ) -> None:
        """Load ``state`` from the newest usable snapshot in [log start, LEO], then replay the
        headers after it (``headers_from(offset)``); without one, rebuild from the start.
        ``read_control`` reads a replayed control batch's marker, ``on_completed`` hears the
        transactions replayed markers end; ``at_most``: use no snapshot past this offset
        (the recovery point, so that the replay covers every segment recovery rebuilds the
        aborted-transaction index of); later ones are kept. One at the log start always
        serves: its replay covers every batch there is, and it holds producers whose batches
        are all deleted (KIP-360), which a rebuild from the log would forget.

        Snapshots outside that range (their batches were truncated or lost) are deleted
        durably before anything new is appended: one that came back after a crash would
        describe the old batches at offsets the new ones reuse. Unreadable ones are deleted
        too, with a line in ``notes``.
        """
        fs = self._fs
        removed = False
        try:
            for off in reversed(self.offsets()):
                path = producer_snapshot_path(self.directory, off)
                if off > log_end or off < log_start:
                    fs.unlink(path)  # describes batches that are gone
                    removed = True
                    continue
                if at_most is not None and off > max(at_most, log_start):
                    continue
                try:
                    state.load(read_producer_snapshot(fs, path))
                except (CheckpointError, KeyError, TypeError, ValueError) as exc:
                    notes.append(f"producer snapshot {off} ignored: {exc}")
                    fs.unlink(path)
                    removed = True
                    continue
                state.replay(headers_from(off), read_control, on_completed)
                return
            state.rebuild(headers_from(log_start), read_control, on_completed)
        finally:
            if removed:
                fs.fsync_dir(self.directory)

    def write(
        self,
        offset: int,
        state: ProducerStateManager,
        pending: Sequence[BatchHeader] = (),
        *,
        sync_dir: bool = True,
        read_control: ReadControl | None = None,
    ) -> None:
        """Snapshot ``state`` as of ``offset``; ``pending``: batches already written below
        ``offset`` but not yet applied to ``state`` (a roll in the middle of an append)."""
        if pending:
            state_then = ProducerStateManager()
            state_then.load(state.snapshot())
            state_then.replay(pending, read_control)
            state = state_then
        write_producer_snapshot(self._fs, producer_snapshot_path(self.directory, offset), state.snapshot(), sync_dir=sync_dir)

    def prune(self, log_start: int) -> None:
        """Keep the newest KEEP_PRODUCER_SNAPSHOTS at or above the log start offset."""
        offsets = self.offsets()
        keep = [o for o in offsets if o >= log_start][-KEEP_PRODUCER_SNAPSHOTS:]
        for off in offsets:
            if off not in keep:
                try:
                    self._fs.unlink(producer_snapshot_path(self.directory, off))
                except FileNotFoundError:
                    pass

    def delete_all(self) -> None:
        """Unlink every snapshot (the caller fsyncs the directory)."""
        for off in self.offsets():
            self._fs.unlink(producer_snapshot_path(self.directory, off))
