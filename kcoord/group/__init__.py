"""Consumer groups: the pure (sans-I/O, Ray-free) core.

* :mod:`.coordinator` -- :class:`GroupCoordinatorState`, Kafka's classic group protocol as a
  state machine over all groups of one ``__consumer_offsets`` partition.
* :mod:`.actions` -- what it asks the shell to do: :class:`Reply`, :class:`AppendRecords`.
* :mod:`.records` -- the ``__consumer_offsets`` record format (offset commits, group
  metadata) and its decoder.
* :mod:`.assignors` -- range, roundrobin and sticky assignors, run by the leader member.
* :mod:`.placement` -- ``coordinator_for(group_id, n)``: which coordinator owns a group.
* :mod:`.config` -- :class:`GroupConfig`; :mod:`.metadata` -- the in-memory group model.

A shell (the GroupCoordinatorActor) drives the state machine like this::

    coord = GroupCoordinatorState(config, partition=i, num_partitions=n)
    coord.load(read_partition(i), now_ms())          # replay before serving
    run(coord.tick(now_ms()))

    async def on_request(request):                   # JoinGroup, SyncGroup, OffsetCommit...
        token, future = new_pending_reply()
        run(coord.handle(request, token, now_ms()))
        return await future                          # may resolve many calls later

    def run(actions):
        for a in actions:
            if isinstance(a, Reply):
                resolve(a.token, a.response)
            elif isinstance(a, AppendRecords):       # in order, acks=all
                append_in_order(a.records, done=lambda err, pid=a.persist_id:
                                run(coord.on_persisted(pid, err, now_ms())))
        rearm_timer(coord.next_deadline(now_ms()), lambda: run(coord.tick(now_ms())))

    # losing the partition (or stopping): run(coord.close(now_ms(), ErrorCode.NOT_COORDINATOR))
"""

from .actions import Action, AppendRecords, Reply
from .assignors import ASSIGNORS, Assignor, RangeAssignor, RoundRobinAssignor, StickyAssignor, get_assignor
from .config import GroupConfig
from .coordinator import GroupCoordinatorState, commit_error_for_append, group_error_for_append
from .metadata import CommittedOffset, GroupMetadata, GroupState, MemberMetadata
from .placement import coordinator_for
from .records import OFFSETS_TOPIC, decode_record

__all__ = [
    "ASSIGNORS",
    "Action",
    "Assignor",
    "CommittedOffset",
    "GroupConfig",
    "GroupCoordinatorState",
    "GroupMetadata",
    "GroupState",
    "MemberMetadata",
    "OFFSETS_TOPIC",
    "AppendRecords",
    "RangeAssignor",
    "Reply",
    "RoundRobinAssignor",
    "StickyAssignor",
    "commit_error_for_append",
    "coordinator_for",
    "decode_record",
    "get_assignor",
    "group_error_for_append",
]
