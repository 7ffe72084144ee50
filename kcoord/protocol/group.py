"""Consumer-group messages: FindCoordinator, JoinGroup, SyncGroup, GroupHeartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, DescribeGroups, ListGroups, DeleteGroups, plus the consumer
protocol's member payloads (:class:`Subscription`, :class:`Assignment`).

Requests name a single group (except the admin calls that take lists), because a group lives
on exactly one GroupCoordinatorActor. API keys are Kafka's; ``GroupHeartbeatRequest`` is
Kafka's Heartbeat (key 12), renamed because ``HeartbeatRequest`` is the controller's liveness
probe.

Every response field has a default and responses start with ``error_code`` and
``error_message``, so :func:`error_response` can build a failure answer for any request.
Where a request carries several items (partitions, members, groups), per-item error codes
sit next to the items; a request-level failure sets the top-level code *and* every item's.

Nested structures are dataclass ``Message`` subclasses with private API keys (1000 + 10 x
the parent's key + n). They are deliberately not ``@register``-ed: they never travel alone,
and keeping them out of the global registry means they cannot collide with another module's
nested types.

The consumer protocol payloads (``protocol_type="consumer"``) are msgpack messages too, and
travel as opaque bytes: :class:`Subscription` in ``JoinGroupProtocol.metadata`` and
:class:`Assignment` in ``SyncGroupAssignment.assignment``. The coordinator never decodes
them; only members (the leader runs the assignor) do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, ClassVar

from .codec import Message, register

# OffsetFetch: "no committed offset" (Kafka's INVALID_OFFSET).
NO_OFFSET = -1
# FindCoordinator key types (Kafka's numbering); only groups are served.
KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
# OffsetCommit: generation/member of a "simple" commit made outside group management.
NO_GENERATION = -1
NO_MEMBER_ID = ""
# OffsetCommit retention_time_ms: use the broker's offsets.retention.minutes.
DEFAULT_RETENTION = -1


# -- FindCoordinator (10) ------------------------------------------------------------------


@register
class FindCoordinatorRequest(Message):
    API_KEY: ClassVar[int] = 10
    VERSION: ClassVar[int] = 1
    key: str
    key_type: int = KEY_TYPE_GROUP


@register
class FindCoordinatorResponse(Message):
    """``coordinator`` is the index of the GroupCoordinatorActor (= the ``__consumer_offsets``
    partition) that owns the key."""

    API_KEY: ClassVar[int] = 10
    VERSION: ClassVar[int] = 1
    IS_RESPONSE: ClassVar[bool] = True
    error_code: int = 0
    error_message: str | None = None
    coordinator: int = -1


# -- JoinGroup (11) ------------------------------------------------------------------------


@dataclass
class JoinGroupProtocol(Message):
    """One assignment strategy a member supports, in preference order, with its metadata
    (for ``consumer`` groups an encoded :class:`Subscription`)."""

    API_KEY: ClassVar[int] = 1110
    name: str
    metadata: bytes = b""


@dataclass
class JoinGroupMember(Message):
    API_KEY: ClassVar[int] = 1111
    member_id: str
    group_instance_id: str | None = None
    metadata: bytes = b""


@register
class JoinGroupRequest(Message):
    """Join (or rejoin) a group. A new dynamic member sends ``member_id=""``, gets
    MEMBER_ID_REQUIRED with an assigned id, and rejoins with it (KIP-394). A static member
    (``group_instance_id`` set) is admitted at once."""

    API_KEY: ClassVar[int] = 11
    VERSION: ClassVar[int] = 1
    group_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    member_id: str = ""
    group_instance_id: str | None = None
    protocol_type: str = "consumer"
    protocols: list[JoinGroupProtocol] = field(default_factory=list)
    client_id: str = ""
    client_host: str = ""


@register
class JoinGroupResponse(Message):
    """``members`` is filled only for the leader, which computes the assignment."""

    API_KEY: ClassVar[int] = 11
    VERSION: ClassVar[int] = 1
    IS_RESPONSE: ClassVar[bool] = True
    error_code: int = 0
    error_message: str | None = None
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: list[JoinGroupMember] = field(default_factory=list)


# -- GroupHeartbeat (12) -------------------------------------------------------------------


@register
class GroupHeartbeatRequest(Message):
    API_KEY: ClassVar[int] = 12
    VERSION: ClassVar[int] = 1
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None


@register
class GroupHeartbeatResponse(Message):
    """REBALANCE_IN_PROGRESS means: rejoin the group."""

    API_KEY: ClassVar[int] = 12
    VERSION: ClassVar[int] = 1
    IS_RESPONSE: ClassVar[bool] = True
    error_code: int = 0
    error_message: str | None = None


# -- LeaveGroup (13) -----------------------------------------------------------------------


@dataclass
class LeaveGroupMember(Message):
    """A member to remove. A static member may be named by ``group_instance_id`` alone
    (``member_id=""``), which is how an operator removes a stopped static member."""

    API_KEY: ClassVar[int] = 1130
    member_id: str = ""
    group_instance_id: str | None = None


@dataclass
class LeaveGroupMemberResponse(Message):
    API_KEY: ClassVar[int] = 1131
    member_id: str = ""
    group_instance_id: str | None = None
    error_code: int = 0


@register
class LeaveGroupRequest(Message):
    API_KEY: ClassVar[int] = 13
    VERSION: ClassVar[int] = 1
    group_id: str
    members: list[LeaveGroupMember] = field(default_factory=list)


@register
class LeaveGroupResponse(Message):
    API_KEY: ClassVar[int] = 13
    VERSION: ClassVar[int] = 1
    IS_RESPONSE: ClassVar[bool] = True
    error_code: int = 0
    error_message: str | None = None
    members: list[LeaveGroupMemberResponse] = field(default_factory=list)


# -- SyncGroup (14) ------------------------------------------------------------------------


@dataclass
class SyncGroupAssignment(Message):
    API_KEY: ClassVar[int] = 1140
    member_id: str
    assignment: bytes = b""


@register
class SyncGroupRequest(Message):
    """Every member sends one after JoinGroup; only the leader's carries ``assignments``.
    ``protocol_type``/``protocol_name``, when given, must match the group's."""

    API_KEY: ClassVar[int] = 14
    VERSION: ClassVar[int] = 1
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignments: list[SyncGroupAssignment] = field(default_factory=list)


@register
class SyncGroupResponse(Message):
    API_KEY: ClassVar[int] = 14
    VERSION: ClassVar[int] = 1
    IS_RESPONSE: ClassVar[bool] = True
    error_code: int = 0
    error_message: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


# -- OffsetCommit (8) ----------------------------------------------------------------------


@dataclass
class OffsetCommitPartition(Message):
    API_KEY: ClassVar[int] = 1080
    offset: int
    metadata: str | None = ""
    leader_epoch: int = -1


@register
class OffsetCommitRequest(Message):
    """Commit offsets. ``generation_id=-1`` with ``member_id=""`` is a simple commit (no
    group management), accepted only while the group has no members."""

    API_KEY: ClassVar[int] = 8
    VERSION: ClassVar[int] = 1
    group_id: str
    generation_id: int = NO_GENERATION
    member_id: str = NO_MEMBER_ID
    group_instance_id: str | None = None
    retention_time_ms: int = DEFAULT_RETENTION
    topics: dict[str, dict[int, OffsetCommitPartition]] = field(default_factory=dict)


@register
class OffsetCommitResponse(Message):
    """``topics``: topic -> partition -> error code."""

    API_KEY: ClassVar[int] = 8
    VERSION: ClassVar[int] = 1
    IS_RESPONSE: ClassVar[bool] = True
    error_code: int = 0
    error_message: str | None = None
    topics: dict[str, dict[int, int]] = field(default_factory=dict)


# -- OffsetFetch (9) -----------------------------------------------------------------------


@dataclass
class OffsetFetchPartition(Message):
    API_KEY: ClassVar[int] = 1090
    offset: int = NO_OFFSET
    metadata: str | None = ""
    leader_epoch: int = -1
    error_code: int = 0


@register
class OffsetFetchRequest(Message):
    """``topics=None`` fetches every committed offset of the group. ``require_stable``
    (KIP-447, OffsetFetch v7): a partition with a transactional offset pending its marker
    answers UNSTABLE_OFFSET_COMMIT (retriable) instead of the last committed offset."""

    API_KEY: ClassVar[int] = 9
    VERSION: ClassVar[int] = 1
    group_id: str
    topics: dict[str, list[int]] | None = None
    require_stable: bool = False


@register
class OffsetFetchResponse(Message):
    """Partitions without a committed offset come back with ``offset=-1``."""

    API_KEY: ClassVar[int] = 9
    VERSION: ClassVar[int] = 1
    IS_RESPONSE: ClassVar[bool] = True
    error_code: int = 0
    error_message: str | None = None
    offsets: dict[str, dict[int, OffsetFetchPartition]] = field(default_factory=dict)


# -- DescribeGroups (15) -------------------------------------------------------------------


@dataclass
class DescribedMember(Message):
    """``metadata``/``assignment`` are filled only while the group is Stable (before that
    they are not settled)."""

    API_KEY: ClassVar[int] = 1150
    member_id: str
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    metadata: bytes = b""
    assignment: bytes = b""


@dataclass
class DescribedGroup(Message):
    API_KEY: ClassVar[int] = 1151
    group_id: str
    error_code: int = 0
    state: str = "Dead"
    protocol_type: str = ""
    protocol: str = ""
    generation_id: int = -1
    leader: str = ""
    members: list[DescribedMember] = field(default_factory=list)


@register
class DescribeGroupsRequest(Message):
    API_KEY: ClassVar[int] = 15
    VERSION: ClassVar[int] = 1
    group_ids: list[str]


@register
class DescribeGroupsResponse(Message):
    API_KEY: ClassVar[int] = 15
    VERSION: ClassVar[int] = 1
    IS_RESPONSE: ClassVar[bool] = True
    error_code: int = 0
    error_message: str | None = None
    groups: list[DescribedGroup] = field(default_factory=list)


# -- ListGroups (16) -----------------------------------------------------------------------


@dataclass
class ListedGroup(Message):
    API_KEY: ClassVar[int] = 1160
    group_id: str
    protocol_type: str = ""
    state: str = ""


@register
class ListGroupsRequest(Message):
    """``states_filter``: state names (case-insensitive); None or empty lists all."""

    API_KEY: ClassVar[int] = 16
    VERSION: ClassVar[int] = 1
    states_filter: list[str] | None = None


@register
class ListGroupsResponse(Message):
    API_KEY: ClassVar[int] = 16
    VERSION: ClassVar[int] = 1
    IS_RESPONSE: ClassVar[bool] = True
    error_code: int = 0
    error_message: str | None = None
    groups: list[ListedGroup] = field(default_factory=list)


# -- DeleteGroups (42) ---------------------------------------------------------------------


@register
class DeleteGroupsRequest(Message):
    API_KEY: ClassVar[int] = 42
    VERSION: ClassVar[int] = 1
    group_ids: list[str]


@register
class DeleteGroupsResponse(Message):
    """``results``: group id -> error code (NONE, NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, ...)."""

    API_KEY: ClassVar[int] = 42
    VERSION: ClassVar[int] = 1
    IS_RESPONSE: ClassVar[bool] = True
    error_code: int = 0
    error_message: str | None = None
    results: dict[str, int] = field(default_factory=dict)


# -- consumer protocol payloads ------------------------------------------------------------

CONSUMER_PROTOCOL_TYPE = "consumer"


@dataclass
class Subscription(Message):
    """What a consumer puts in ``JoinGroupProtocol.metadata`` (Kafka's ConsumerProtocol
    subscription): the topics it wants, assignor-specific ``user_data``, and the
    partitions it owned in ``generation_id`` so sticky assignors can keep them in place."""

    API_KEY: ClassVar[int] = 1170
    topics: list[str] = field(default_factory=list)
    user_data: bytes | None = None
    owned_partitions: dict[str, list[int]] = field(default_factory=dict)
    generation_id: int = -1


@dataclass
class Assignment(Message):
    """What the leader hands each member through SyncGroup: topic -> partitions."""

    API_KEY: ClassVar[int] = 1171
    partitions: dict[str, list[int]] = field(default_factory=dict)
    user_data: bytes | None = None

    def topic_partitions(self) -> list[tuple[str, int]]:
        """Sorted ``(topic, partition)`` pairs, the form set arithmetic wants."""
        return sorted((t, p) for t, ps in self.partitions.items() for p in ps)


# -- error answers -------------------------------------------------------------------------

GROUP_REQUESTS: tuple[type[Message], ...] = (
    FindCoordinatorRequest,
    JoinGroupRequest,
    GroupHeartbeatRequest,
    LeaveGroupRequest,
    SyncGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    DescribeGroupsRequest,
    ListGroupsRequest,
    DeleteGroupsRequest,
)

RESPONSE_FOR: dict[type[Message], type[Message]] = {
    FindCoordinatorRequest: FindCoordinatorResponse,
    JoinGroupRequest: JoinGroupResponse,
    GroupHeartbeatRequest: GroupHeartbeatResponse,
    LeaveGroupRequest: LeaveGroupResponse,
    SyncGroupRequest: SyncGroupResponse,
    OffsetCommitRequest: OffsetCommitResponse,
    OffsetFetchRequest: OffsetFetchResponse,
    DescribeGroupsRequest: DescribeGroupsResponse,
    ListGroupsRequest: ListGroupsResponse,
    DeleteGroupsRequest: DeleteGroupsResponse,
}


def _item_errors(request: Message, code: int) -> dict[str, object]:
    """Per-item fields of a failure answer, so a client that only reads items sees it too."""
    if isinstance(request, OffsetCommitRequest):
        return {"topics": {t: {p: code for p in parts} for t, parts in request.topics.items()}}
    if isinstance(request, OffsetFetchRequest) and request.topics:
        return {
            "offsets": {
                t: {p: OffsetFetchPartition(error_code=code) for p in parts}
                for t, parts in request.topics.items()
            }
        }
    if isinstance(request, LeaveGroupRequest):
        return {
            "members": [
                LeaveGroupMemberResponse(m.member_id, m.group_instance_id, code) for m in request.members
            ]
        }
    if isinstance(request, DescribeGroupsRequest):
        return {"groups": [DescribedGroup(g, error_code=code) for g in request.group_ids]}
    if isinstance(request, DeleteGroupsRequest):
        return {"results": {g: code for g in request.group_ids}}
    return {}


def error_response(request: Message, code: int, message: str | None = None) -> Message:
    """The failure answer to ``request``: what a shell replies when it cannot hand the
    request to the state machine (loading, not the coordinator, shutting down)."""
    try:
        response_cls: Callable[..., Message] = RESPONSE_FOR[type(request)]
    except KeyError:
        raise TypeError(f"not a group request: {type(request).__name__}") from None
    return response_cls(error_code=int(code), error_message=message, **_item_errors(request, int(code)))


def is_group_request(message: Message) -> bool:
    return type(message) in RESPONSE_FOR

