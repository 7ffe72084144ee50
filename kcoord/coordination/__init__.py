"""What kcoord's coordinators share: owning one partition of an internal topic.

A group coordinator owns partition ``i`` of ``__consumer_offsets``, a transaction coordinator
partition ``i`` of ``__transaction_state``; both keep no files, load their state by replaying
that partition, fence older incarnations with a producer epoch the controller hands out, and
persist every change with acks=all before anyone hears of it. That machinery is one piece:

* :mod:`.partition_owner` -- :class:`PartitionOwnerDriver`, the driver base both
  coordinators' drivers derive from (load, fence, the one-in-flight append pipeline, the
  timer, the serve loop);
* :mod:`.loading` -- reading fetched batches for a load, dropping malformed records;
* :mod:`.settling` -- applying append outcomes in emission order, :mod:`.routing` -- how a
  core takes a request, :mod:`.records` -- the record formats' shared pieces (the cores' side).
"""

from .loading import take_in, well_formed
from .partition_owner import CoordinatorTimeouts, PartitionOwnerDriver

__all__ = ["CoordinatorTimeouts", "PartitionOwnerDriver", "take_in", "well_formed"]
