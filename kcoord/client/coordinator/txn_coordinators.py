"""Calling the transaction coordinators from a client (docs/transactions.md, section 2): the
same call path as the group coordinators' (:class:`~.coordinators.GroupCoordinators`: kcoord's
one call stack, a dead, restarting or loading coordinator retried until the deadline), with
Kafka's placement of transactional ids, ``kcoord.txn.coordinator_for(transactional_id, N)``,
and the actors ``names.transaction_coordinator(cluster, i)`` serving
:data:`~kcoord.protocol.services.TRANSACTION_COORDINATOR`.

``N`` is the number of ``__transaction_state`` partitions (coordinator i owns partition i),
or the controller's DescribeCluster ``transaction_coordinators`` when it reports it.
"""

from __future__ import annotations

from typing import TypeVar

from ...calls import blocking
from ...protocol import names
from ...protocol.codec import Message
from ...protocol.controller import DescribeClusterRequest, DescribeClusterResponse
from ...protocol.errors import ErrorCode, KafkaError
from ...protocol.services import TRANSACTION_COORDINATOR
from ...txn.placement import TRANSACTION_STATE_TOPIC, coordinator_for
from .coordinators import GroupCoordinators

R = TypeVar("R", bound=Message)


class TransactionCoordinators(GroupCoordinators):
    """The cluster's transaction coordinators as seen from one client (thread-safe)."""

    async def acount(self) -> int:
        """How many transaction coordinators the cluster runs: the partitions of
        ``__transaction_state`` (coordinator i owns partition i), unless the controller's
        DescribeCluster reports ``transaction_coordinators`` itself. Cached: it never changes."""
        if self._count is None:
            response = await self.cluster.acall_controller("describe_cluster", DescribeClusterRequest(), DescribeClusterResponse)
            if response.error_code:
                raise KafkaError(response.error_code, response.error_message or "describe_cluster failed")
            n = int(getattr(response, "transaction_coordinators", 0) or 0)
            if n < 1:
                try:
                    n = len((await self.cluster.atopic(TRANSACTION_STATE_TOPIC)).partitions)
                except KafkaError as exc:
                    if exc.code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                        raise
                    n = 0
            if n < 1:
                raise KafkaError(
                    ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    f"cluster {self.cluster.name!r} runs no transaction coordinators (no {TRANSACTION_STATE_TOPIC} topic): "
                    "deploy it with transaction coordinators",
                )
            self._count = n
        return self._count

    # asked from the calls loop too (acall_txn): the sync form must not be used there
    count = blocking(acount)

    def index_for(self, transactional_id: str) -> int:
        return coordinator_for(transactional_id, self.count())

    def name(self, index: int) -> str:
        return names.transaction_coordinator(self.cluster.name, index)

    async def acall_txn(self, transactional_id: str, request: Message, timeout_s: float) -> Message:
        """Send ``request`` (a TRANSACTION_COORDINATOR request) to ``transactional_id``'s
        coordinator: its answer, a retriable one when ``timeout_s`` passed with only those,
        or REQUEST_TIMED_OUT raised when nothing answered."""
        response_type = TRANSACTION_COORDINATOR.check(request)
        method = next(m for m, t in TRANSACTION_COORDINATOR.methods.items() if t is type(request))
        index = coordinator_for(transactional_id, await self.acount())
        return await self.acall(index, method, request, response_type, timeout_s)
