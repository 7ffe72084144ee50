"""Reading a coordinator's ``__consumer_offsets`` partition for its load: the shared
:mod:`kcoord.coordination.loading` with the group records' decoder (``benchmarks/group_load.py``
and the tests replay a partition exactly as the driver does)."""

from __future__ import annotations

from typing import Callable, Iterable

from ..coordination.loading import take_in
from ..coordination.loading import well_formed as _well_formed
from ..protocol.errors import DecodeError
from .records import Record, decode_record


def well_formed(records: Iterable[Record], on_malformed: Callable[[DecodeError], None]) -> list[Record]:
    """The records of ``__consumer_offsets`` that decode; each one that does not is reported
    and left out."""
    return _well_formed(records, decode_record, on_malformed)


__all__ = ["take_in", "well_formed"]
