"""Calling the GroupCoordinatorActors from a client: find the group's coordinator, call it,
ride out its restarts and loading. Used by the group member, Admin, and Spark/Ray Data
offset commits.

Placement is deterministic (``coordinator_for(group_id, N)``, Kafka's hash), so finding a
coordinator needs no round trip once ``N`` is known; ``N`` comes from the controller's
DescribeCluster and never changes for a cluster (it is the partition count of
``__consumer_offsets``).

Calls go through kcoord's one call stack (:mod:`kcoord.calls`) and its retry policy: a
dead or restarting actor, no answer in time, COORDINATOR_LOAD_IN_PROGRESS,
COORDINATOR_NOT_AVAILABLE and NOT_COORDINATOR are retried after one backoff (a coordinator
has no epoch to wait for) until the deadline. Other error codes are returned to the caller,
who knows what they mean for its request.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, TypeVar

from ...calls import BlockingCalls, CallFailed, actor_calls, blocking
from ...calls.retry import Step, step_after
from ...group.placement import coordinator_for
from ...protocol import names
from ...protocol.codec import Message
from ...protocol.controller import DescribeClusterRequest, DescribeClusterResponse
from ...protocol.errors import DecodeError, ErrorCode, KafkaError, raise_for_error
from ...protocol.group import DescribeGroupsRequest, DescribeGroupsResponse, OffsetFetchRequest, OffsetFetchResponse
from ..cluster import ClusterClient

R = TypeVar("R", bound=Message)

# Answers that mean "this coordinator cannot serve right now, try again".
COORDINATOR_RETRIABLE = frozenset(
    {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR}
)


def _top_level_code(response: Message) -> int:
    return int(getattr(response, "error_code", 0) or 0)


class GroupCoordinators:
    """The cluster's group coordinators as seen from one client (thread-safe)."""

    def __init__(self, cluster: ClusterClient, retry_backoff_ms: int = 50) -> None:
        self.cluster = cluster
        self.retry_backoff_ms = retry_backoff_ms
        self._count: int | None = None

    def count(self) -> int:
        """How many coordinators the cluster has (cached: it never changes)."""
        if self._count is None:
            response = self.cluster.call_controller("describe_cluster", DescribeClusterRequest(), DescribeClusterResponse)
            if response.error_code:
                raise KafkaError(response.error_code, response.error_message or "describe_cluster failed")
            if response.group_coordinators < 1:
                raise KafkaError(
                    ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    f"cluster {self.cluster.name!r} was deployed without group coordinators (group_coordinators=0)",
                )
            self._count = response.group_coordinators
        return self._count

    def index_for(self, group_id: str) -> int:
        return coordinator_for(group_id, self.count())

    def name(self, index: int) -> str:
        return names.group_coordinator(self.cluster.name, index)

    def forget(self, index: int) -> None:
        self.cluster.forget(self.name(index))

    async def acall(
        self,
        index: int,
        method: str,
        request: Message,
        response_type: type[R],
        timeout_s: float,
        *,
        attempt_timeout_s: float | None = None,
    ) -> R:
        """Send ``request`` to coordinator ``index`` and return its answer, retrying the
        coordinator-unavailable cases (see module doc) until ``timeout_s`` passes. After the
        deadline the last retriable answer is returned, or REQUEST_TIMED_OUT raised if there
        was none. ``attempt_timeout_s`` bounds one call (long-polls pass their own)."""
        deadline = time.monotonic() + timeout_s
        calls = actor_calls(self.cluster.namespace)
        name = self.name(index)
        data = request.encode()
        last: R | None = None
        last_error = "no attempt"
        while True:
            remaining = max(0.05, deadline - time.monotonic())
            try:
                # Not cancelled when the actor is gone: a call queued for the restarted
                # actor runs in order before our retry, and both carry the same request.
                raw = await calls.call(name, method, data, timeout=min(remaining, attempt_timeout_s) if attempt_timeout_s else remaining)
                response = response_type.decode(raw)
                if _top_level_code(response) not in COORDINATOR_RETRIABLE:
                    return response
                last = response
                last_error = f"{ErrorCode(_top_level_code(response)).name}: {getattr(response, 'error_message', '')}"
            except CallFailed as exc:
                if step_after(exc.kind) is Step.GIVE_UP:
                    raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"{method} to group coordinator {index} failed: {exc.detail}") from None
                last_error = f"coordinator {index} unavailable ({exc})"
            except DecodeError as exc:
                last_error = f"bad answer: {exc}"
            if time.monotonic() >= deadline:
                if last is not None:
                    return last
                raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"{method} to group coordinator {index}: {last_error}")
            await asyncio.sleep(min(self.retry_backoff_ms / 1000, max(0.0, deadline - time.monotonic())))

    call = blocking(acall)

    @property
    def calls(self) -> BlockingCalls:
        """The cluster client's calls thread, where :meth:`call` runs :meth:`acall`."""
        return self.cluster.calls

    def call_group(self, group_id: str, method: str, request: Message, response_type: type[R], timeout_s: float, **kw: Any) -> R:
        return self.call(self.index_for(group_id), method, request, response_type, timeout_s, **kw)

    # -- what Admin and batch readers ask of a group ----------------------------------------------
    def describe_group(self, group_id: str, timeout_s: float) -> Any:
        """The group's DescribeGroups entry (its ``error_code`` is GROUP_ID_NOT_FOUND for an
        unknown group)."""
        if not isinstance(group_id, str) or not group_id:
            raise KafkaError(ErrorCode.INVALID_GROUP_ID, f"group id must be a non-empty string, got {group_id!r}")
        response = self.call_group(group_id, "describe_groups", DescribeGroupsRequest([group_id]), DescribeGroupsResponse, timeout_s)
        described = response.groups[0] if response.groups else None
        if described is None:
            raise_for_error(response.error_code or ErrorCode.UNKNOWN_SERVER_ERROR, response.error_message or "no answer for the group")
        return described

    def committed_offsets(self, group_id: str, topics: dict[str, list[int]] | None, timeout_s: float) -> dict[str, dict[int, Any]]:
        """The group's committed offsets ``{topic: {partition: OffsetFetchPartition}}`` of
        ``topics`` (None: every topic it committed); a negative offset means none."""
        if not isinstance(group_id, str) or not group_id:
            raise KafkaError(ErrorCode.INVALID_GROUP_ID, f"group id must be a non-empty string, got {group_id!r}")
        response = self.call_group(group_id, "offset_fetch", OffsetFetchRequest(group_id, topics), OffsetFetchResponse, timeout_s)
        raise_for_error(response.error_code, response.error_message or f"fetching the committed offsets of group {group_id!r} failed")
        for t, parts in response.offsets.items():
            for p, o in parts.items():
                raise_for_error(o.error_code, f"fetching the committed offset of group {group_id!r} for {t}-{p} failed")
        return response.offsets
