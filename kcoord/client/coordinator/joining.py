"""One JoinGroup + SyncGroup round of a group member (Kafka's classic protocol): join
(with the MEMBER_ID_REQUIRED round trip of KIP-394), run the assignor when elected leader,
and fetch this member's share with SyncGroup. Runs on the poll thread; the member decides
when (:meth:`~kcoord.client.coordinator.member.GroupMember.rebalance`)."""

from __future__ import annotations

import logging
from typing import Callable

from ...group.assignors import Assignor, get_assignor
from ...protocol.errors import DecodeError, ErrorCode
from ...protocol.group import (
    CONSUMER_PROTOCOL_TYPE,
    Assignment,
    JoinGroupMember,
    JoinGroupProtocol,
    JoinGroupRequest,
    JoinGroupResponse,
    Subscription,
    SyncGroupAssignment,
    SyncGroupRequest,
    SyncGroupResponse,
)
from ..cluster import ClusterClient
from .coordinators import GroupCoordinators
from .state import REBALANCING, STABLE, MemberState

logger = logging.getLogger("kcoord.consumer.group")

E = ErrorCode


class JoinRound:
    """Joins and syncs for one member (``state``) through its group's coordinator."""

    def __init__(
        self,
        state: MemberState,
        cluster: ClusterClient,
        coordinators: GroupCoordinators,
        assignors: list[Assignor],
        *,
        group_instance_id: str | None,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        request_timeout_ms: int,
        client_id: str,
        client_host: str,
    ) -> None:
        self.state = state
        self.cluster = cluster
        self.coordinators = coordinators
        self.assignors = assignors
        self.group_instance_id = group_instance_id
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.request_timeout_ms = request_timeout_ms
        self.client_id = client_id
        self.client_host = client_host

    def run(self, subscription: Callable[[], Subscription]) -> Assignment | None:
        """One JoinGroup + SyncGroup round with ``subscription()`` as this member's
        metadata; the assignment, or None: retry (after a backoff)."""
        st = self.state
        with st.lock:
            st.state = REBALANCING
            st.rejoin_needed = False
        join = self._join(subscription)
        if join is None:
            return None
        with st.lock:
            st.member_id = join.member_id
            st.generation = join.generation_id
            st.protocol = join.protocol_name
            st.leader = join.leader
        assignments: list[SyncGroupAssignment] = []
        if join.leader == join.member_id and join.members:
            assignments = self._compute_assignment(join.protocol_name or "", join.members)
        sync = self.coordinators.call_group(
            st.group_id,
            "sync_group",
            SyncGroupRequest(
                st.group_id,
                join.generation_id,
                join.member_id,
                self.group_instance_id,
                CONSUMER_PROTOCOL_TYPE,
                join.protocol_name,
                assignments,
            ),
            SyncGroupResponse,
            timeout_s=self.request_timeout_ms / 1000,
            attempt_timeout_s=self.rebalance_timeout_ms / 1000 + 5,
        )
        code = sync.error_code
        if code == E.NONE:
            try:
                assignment = Assignment.decode(sync.assignment) if sync.assignment else Assignment()
            except DecodeError as exc:
                logger.error("%s undecodable assignment from the leader: %s", st.tag(), exc)
                assignment = Assignment()
            with st.lock:
                st.state = STABLE
            return assignment
        st.on_group_error("SyncGroup", code, sync.error_message)
        return None

    def _join(self, subscription: Callable[[], Subscription]) -> JoinGroupResponse | None:
        """JoinGroup until a generation forms; handles MEMBER_ID_REQUIRED. None: retry."""
        st = self.state
        for _ in range(3):
            st.check_open()
            with st.lock:
                metadata = subscription().encode()
                request = JoinGroupRequest(
                    st.group_id,
                    self.session_timeout_ms,
                    self.rebalance_timeout_ms,
                    st.member_id,
                    self.group_instance_id,
                    CONSUMER_PROTOCOL_TYPE,
                    [JoinGroupProtocol(a.name, metadata) for a in self.assignors],
                    self.client_id,
                    self.client_host,
                )
            response = self.coordinators.call_group(
                st.group_id,
                "join_group",
                request,
                JoinGroupResponse,
                timeout_s=self.request_timeout_ms / 1000,
                attempt_timeout_s=self.rebalance_timeout_ms / 1000 + 5,
            )
            code = response.error_code
            if code == E.NONE:
                return response
            if code == E.MEMBER_ID_REQUIRED:
                with st.lock:
                    st.member_id = response.member_id
                continue  # rejoin at once with the id (KIP-394)
            st.on_group_error("JoinGroup", code, response.error_message)
            return None
        return None

    def _compute_assignment(self, protocol: str, members: list[JoinGroupMember]) -> list[SyncGroupAssignment]:
        """As the leader: run the group's assignor over every member's subscription and the
        current partition counts of the subscribed topics (unknown topics get nothing)."""
        tag = self.state.tag()
        assignor = next((a for a in self.assignors if a.name == protocol), None) or get_assignor(protocol)
        subscriptions: dict[str, Subscription] = {}
        for m in members:
            try:
                subscriptions[m.member_id] = Subscription.decode(m.metadata)
            except DecodeError as exc:
                logger.warning("%s member %s sent an undecodable subscription (%s); it gets nothing", tag, m.member_id, exc)
                subscriptions[m.member_id] = Subscription()
        topics = sorted({t for s in subscriptions.values() for t in s.topics})
        counts: dict[str, int] = {}
        if topics:
            md = self.cluster.refresh_metadata(topics)
            counts = {t.name: len(t.partitions) for t in md.topics if t.error_code == 0}
        result = assignor.assign(counts, subscriptions)
        logger.info(
            "%s leader: %s assignment of %d partitions of %s over %d members",
            tag, protocol, sum(counts.values()), topics, len(members),
        )
        return [SyncGroupAssignment(member_id, a.encode()) for member_id, a in sorted(result.items())]
