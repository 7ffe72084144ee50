"""ClusterClient: find a kcoord cluster's actors by name, cache metadata, route and retry.

Works the same from a driver script, a Ray task or a Spark executor: it needs only a Ray
connection and the cluster's name. It pickles as (name, namespace), so passing it into a
Ray task or a Spark closure reconnects on the other side.

Calls go through kcoord's one call stack (:mod:`kcoord.calls`): a replica on this node
over its direct-call channel, anything else through Ray; a late call asks Ray's GCS
whether its actor is gone, and a call that finds its actor dead or restarting, or that
times out, drops the cached handle so the next attempt looks the actor up again (a replica
the controller *recreated* is a new actor under the old name). Synchronous methods run
their calls on the process's calls thread (:class:`kcoord.calls.BlockingCalls`); the
``a``-prefixed ones on the caller's event loop (the producer's sender).

Routing follows Kafka clients and the retry policy of :mod:`kcoord.calls.retry`: metadata
(leader and leader epoch per partition) is cached; NOT_LEADER_OR_FOLLOWER,
FENCED_LEADER_EPOCH, LEADER_NOT_AVAILABLE and dead actors make the client refresh it until
it names a newer leader and retry, up to a deadline.

ListOffsets lookups (a consumer's positions, Admin.list_offsets, the offset plans of Spark
and Ray Data reads) all go through :meth:`ClusterClient.list_offsets`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from typing import Any, Callable, TypeVar

import ray

from ..calls import TIMEOUT, BlockingCalls, CallFailed, HandleCache, actor_calls, blocking
from ..calls.probing import Probing
from ..calls.retry import PROBING, Step, step_after, take_step
from ..protocol import names
from ..protocol.codec import Message
from ..protocol.controller import MetadataRequest, MetadataResponse, PartitionMetadata, TopicMetadata
from ..protocol.errors import METADATA_REFRESH, RETRIABLE, ErrorCode, KafkaError, raise_for_error
from ..protocol.replication import ListOffsetsRequest, ListOffsetsResponse
from .errors import ClusterNotFoundError
from .types import TopicPartition

R = TypeVar("R", bound=Message)

DEFAULT_CLUSTER = "kcoord"
MIN_REFRESH_INTERVAL_S = 0.02
# One attempt of a call a healthy leader answers at once (ListOffsets...) is given up after
# this long (or request_timeout_ms if shorter): the leader may be alive per Ray but hung,
# and the controller elects another within a few seconds.
LEADER_ATTEMPT_S = 5.0


def ensure_ray(address: str | None = "auto") -> None:
    """Connect this process to Ray if it is not connected yet (driver, Spark executor).

    The driver keeps Ray's own (anonymous) namespace: kcoord names its namespace in every
    actor lookup and creation, so a user's own named actors stay where they expect them."""
    if not ray.is_initialized():
        ray.init(address=address or "auto", logging_level="WARNING", configure_logging=False)


class ClusterClient:
    def __init__(
        self,
        name: str = DEFAULT_CLUSTER,
        namespace: str = names.DEFAULT_NAMESPACE,
        address: str | None = "auto",
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 50,
    ) -> None:
        ensure_ray(address)
        self.name = name
        self.namespace = namespace
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.attempt_timeout_s = min(request_timeout_ms / 1000, LEADER_ATTEMPT_S)
        self._lock = threading.RLock()
        self._topics: dict[str, TopicMetadata] = {}
        self._brokers: list[int] = []
        self._handles = HandleCache.shared(namespace)
        self.calls = BlockingCalls.shared()
        self._last_refresh = 0.0
        self._lookup_controller()  # ClusterNotFoundError now rather than at the first call

    def __reduce__(self):
        return (connect, (self.name, None, self.namespace))

    def __repr__(self) -> str:
        return f"ClusterClient(name={self.name!r}, namespace={self.namespace!r})"

    # -- actors -----------------------------------------------------------------------------
    def _lookup_controller(self) -> Any:
        try:
            return self._handles.lookup(names.controller(self.name))
        except ValueError:
            raise ClusterNotFoundError(
                f"no kcoord cluster named {self.name!r} in Ray namespace {self.namespace!r}. "
                f"Deploy one with `kcoord up --name {self.name}` (after `ray start --head`), "
                f"or use kcoord.local_cluster() for an embedded one."
            ) from None

    @property
    def controller(self) -> Any:
        """The controller's actor handle (for Ray calls made by hand; kcoord's own go through
        :meth:`call_controller`), looked up again after a call found it gone."""
        return self._lookup_controller()

    def handle(self, actor_name: str) -> Any:
        try:
            return self._handles.lookup(actor_name)
        except ValueError:
            raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, f"actor {actor_name!r} is not running") from None

    def forget(self, actor_name: str) -> None:
        self._handles.forget(actor_name)

    def replica_name(self, topic: str, partition: int, broker: int) -> str:
        return names.replica(self.name, topic, partition, broker)

    def replica(self, topic: str, partition: int, broker: int, fresh: bool = False) -> Any:
        """The replica actor's handle. Handles are cached; a replica that the controller
        *recreated* (not merely Ray-restarted) is a new actor, and a handle cached before that
        keeps raising ActorDiedError: ``fresh=True`` looks the name up again."""
        name = self.replica_name(topic, partition, broker)
        if fresh:
            self.forget(name)
        return self.handle(name)

    # -- calls ------------------------------------------------------------------------------
    def submit(self, actor_name: str, method: str, *args: Any, timeout: float | None = None, probing: Probing | None = PROBING) -> concurrent.futures.Future:
        """Send ``actor_name.method(*args)`` now (:class:`kcoord.calls.ActorCalls`); the
        future of its answer fails with :class:`kcoord.calls.CallFailed`."""
        return self.calls.submit(self.namespace, actor_name, method, *args, timeout=timeout, probing=probing)

    def call(self, actor_name: str, method: str, *args: Any, timeout: float | None = None, probing: Probing | None = PROBING) -> Any:
        """:meth:`submit` and wait for the answer."""
        return self.calls.call(self.namespace, actor_name, method, *args, timeout=timeout, probing=probing)

    # -- controller calls -------------------------------------------------------------------
    async def acall_controller(self, method: str, request: Message, response_type: type[R], timeout_ms: int | None = None) -> R:
        """Call the FailoverCoordinator, riding out its restarts until the deadline."""
        deadline = time.monotonic() + (timeout_ms or self.request_timeout_ms) / 1000
        calls = actor_calls(self.namespace)
        name = names.controller(self.name)
        payload = request.encode()
        while True:
            try:
                raw = await calls.call(name, method, payload, timeout=max(0.05, deadline - time.monotonic()))
                return response_type.decode(raw)
            except CallFailed as exc:
                if step_after(exc.kind) is Step.GIVE_UP:
                    raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"controller of {self.name!r} failed {method}: {exc.detail}") from None
                last = exc
            if time.monotonic() >= deadline:
                raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"controller of {self.name!r} did not answer {method}: {last}")
            # no epoch to wait for: one backoff, then the name is looked up again
            await asyncio.sleep(min(self.retry_backoff_ms / 1000, max(0.0, deadline - time.monotonic())))

    call_controller = blocking(acall_controller)

    # -- metadata ---------------------------------------------------------------------------
    def _apply_metadata(self, response: MetadataResponse, topics: list[str] | None) -> None:
        with self._lock:
            self._brokers = list(response.brokers)
            if topics is None:
                self._topics = {t.name: t for t in response.topics if t.error_code == 0}
            else:
                for t in response.topics:
                    if t.error_code == 0:
                        self._topics[t.name] = t
                    else:
                        self._topics.pop(t.name, None)
            self._last_refresh = time.monotonic()

    async def arefresh_metadata(self, topics: list[str] | None = None, timeout_ms: int | None = None) -> MetadataResponse:
        """Fetch the metadata of ``topics`` (None: every topic) and cache it."""
        response = await self.acall_controller("metadata", MetadataRequest(topics=topics), MetadataResponse, timeout_ms=timeout_ms)
        self._apply_metadata(response, topics)
        return response

    refresh_metadata = blocking(arefresh_metadata)

    def invalidate(self, topic: str | None = None) -> None:
        with self._lock:
            if topic is None:
                self._topics.clear()
            else:
                self._topics.pop(topic, None)

    def cached_topic(self, name: str) -> TopicMetadata | None:
        """The cached metadata of ``name`` without any remote call (None if not cached);
        for event loops that must not block on a refresh."""
        with self._lock:
            return self._topics.get(name)

    def topic(self, name: str, refresh: bool = False) -> TopicMetadata:
        md = self.cached_topic(name)
        if md is not None and not refresh:
            return md
        return self.calls.run(self.atopic(name, refresh))

    async def atopic(self, name: str, refresh: bool = False) -> TopicMetadata:
        md = self.cached_topic(name)
        if md is None or refresh:
            response = await self.arefresh_metadata([name])
            md = next((t for t in response.topics if t.name == name), None)
            if md is None or md.error_code:
                raise KafkaError(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    md.error_message if md is not None and md.error_message else f"topic {name!r} does not exist",
                )
        return md

    def partitions_for(self, topic: str) -> list[int]:
        return [p.partition for p in self.topic(topic).partitions]

    def partition_metadata(self, topic: str, partition: int, refresh: bool = False) -> PartitionMetadata:
        return _partition(self.topic(topic, refresh=refresh), topic, partition)

    async def apartition_metadata(self, topic: str, partition: int, refresh: bool = False) -> PartitionMetadata:
        return _partition(await self.atopic(topic, refresh=refresh), topic, partition)

    # -- the retry policy's steps (kcoord.calls.retry) ------------------------------------------
    async def atake_step(self, step: Step, topic: str, partition: int, epoch: int, backoff_s: float, deadline: float) -> None:
        """Do the retry policy's ``step`` before the next attempt at ``topic``-``partition``,
        whose last attempt went to the leader of ``epoch`` (-1: none); never past
        ``deadline`` (``time.monotonic()``)."""

        async def refresh() -> None:
            try:
                await self.arefresh_metadata([topic])
            except KafkaError:
                pass  # the controller may be restarting: the next attempt finds out

        def leader_epoch() -> int:
            md = self.cached_topic(topic)
            if md is None or partition >= len(md.partitions) or md.partitions[partition].leader < 0:
                return -1
            return md.partitions[partition].leader_epoch

        await take_step(step, refresh=refresh, leader_epoch=leader_epoch, epoch=epoch, backoff_s=backoff_s, deadline=deadline)

    take_step = blocking(atake_step)

    # -- leader calls with retry ----------------------------------------------------------------
    async def acall_leader(
        self,
        topic: str,
        partition: int,
        method: str,
        make_request: Callable[[int], Message],
        response_type: type[R],
        timeout_ms: int | None = None,
    ) -> R:
        """Send ``make_request(leader_epoch)`` to the partition leader; on a retriable error
        (a stale-metadata one, or "try again" such as OFFSET_NOT_AVAILABLE from a new leader
        whose HW has not caught up yet), a dead or restarting leader, or no answer within
        ``attempt_timeout_s``, follow the retry policy (:mod:`kcoord.calls.retry`: refresh
        the metadata until it names a newer leader, ...) and retry until the deadline
        (``timeout_ms``, default ``request_timeout_ms``; an attempt that reached it without
        an answer is followed by one more, up to ``attempt_timeout_s``, on a fresh lookup
        of the leader). Returns the last response (which
        may carry a non-retriable error). For requests that are safe to repeat only
        (reads, DeleteRecords); produce has its own retry rules."""
        deadline = time.monotonic() + (timeout_ms or self.request_timeout_ms) / 1000
        calls = actor_calls(self.namespace)
        last_error = "no attempt"
        step: Step | None = None
        epoch = -1
        silent = extended = False
        while True:
            if step is not None:
                now = time.monotonic()
                if now >= deadline:
                    if not silent or extended:
                        raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"{method} on {topic}-{partition} did not succeed in time: {last_error}")
                    # The attempt that used up the time left got no answer and its handle
                    # is forgotten: one attempt on a fresh lookup follows, or a timeout no
                    # longer than an attempt would never get past a silent leader's handle.
                    deadline, extended = now + self.attempt_timeout_s, True
                await self.atake_step(step, topic, partition, epoch, self.retry_backoff_ms / 1000, deadline)
            silent = False
            try:
                p = await self.apartition_metadata(topic, partition)
            except KafkaError as exc:
                if not exc.needs_metadata_refresh:
                    raise
                last_error, step, epoch = str(exc), Step.NO_LEADER, -1
                continue
            if p.leader < 0:
                last_error, step, epoch = f"{topic}-{partition} has no leader (offline)", Step.NO_LEADER, -1
                continue
            epoch = p.leader_epoch
            attempt = min(self.attempt_timeout_s, max(0.05, deadline - time.monotonic()))
            try:
                raw = await calls.call(self.replica_name(topic, partition, p.leader), method, make_request(epoch).encode(), timeout=attempt)
                response = response_type.decode(raw)
            except CallFailed as exc:
                last_error, step, silent = f"leader actor: {exc}", step_after(exc.kind), exc.kind == TIMEOUT
                if step is Step.GIVE_UP:
                    raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"{method} on {topic}-{partition} failed: {exc.detail}") from None
                continue
            code = getattr(response, "error_code", 0)
            if code in METADATA_REFRESH or code in RETRIABLE:
                last_error = f"{ErrorCode(code).name}: {getattr(response, 'error_message', '')}"
                step = step_after(stale_metadata=code in METADATA_REFRESH)
                continue
            return response

    call_leader = blocking(acall_leader)

    def list_offsets(
        self, partitions: list[TopicPartition], timestamp: int, timeout_ms: int | None = None, isolation_level: int = 0
    ) -> dict[TopicPartition, int]:
        """ListOffsets of ``partitions`` (EARLIEST_TIMESTAMP: log start, LATEST_TIMESTAMP: the
        HW, or a timestamp in ms: the first offset whose record timestamp is >= it, -1 if
        none) from their leaders: sent to every leader at once, and each partition retried
        as :meth:`call_leader` retries, all within ``timeout_ms`` (default
        ``request_timeout_ms``). Raises the first partition's KafkaError. ``isolation_level``
        1 (read_committed): LATEST_TIMESTAMP answers the last stable offset."""
        return {tp: offset for tp, (offset, _) in self.list_offsets_and_timestamps(partitions, timestamp, timeout_ms, isolation_level).items()}

    def list_offsets_and_timestamps(
        self, partitions: list[TopicPartition], timestamp: int, timeout_ms: int | None = None, isolation_level: int = 0
    ) -> dict[TopicPartition, tuple[int, int]]:
        """:meth:`list_offsets` with the timestamp the leader reports for each offset (the
        found record's for a timestamp lookup, -1 otherwise): ``{tp: (offset, timestamp)}``."""
        return self.calls.run(self._alist_offsets(list(partitions), timestamp, timeout_ms, isolation_level))

    async def _alist_offsets(
        self, partitions: list[TopicPartition], timestamp: int, timeout_ms: int | None, isolation_level: int = 0
    ) -> dict[TopicPartition, tuple[int, int]]:
        def one(tp: TopicPartition) -> Any:
            return self.acall_leader(
                tp.topic,
                tp.partition,
                "list_offsets",
                lambda epoch: ListOffsetsRequest(tp.topic, tp.partition, timestamp=timestamp, current_leader_epoch=epoch, isolation_level=isolation_level),
                ListOffsetsResponse,
                timeout_ms=timeout_ms,
            )

        answers = await asyncio.gather(*(one(tp) for tp in partitions), return_exceptions=True)
        out: dict[TopicPartition, tuple[int, int]] = {}
        for tp, resp in zip(partitions, answers):
            if isinstance(resp, BaseException):
                raise resp
            raise_for_error(resp.error_code, resp.error_message or f"ListOffsets on {tp.topic}-{tp.partition} failed")
            out[tp] = (resp.offset, resp.timestamp)
        return out

    @property
    def brokers(self) -> list[int]:
        if not self._brokers:
            self.refresh_metadata([])
        return list(self._brokers)

    @property
    def bootstrap_servers(self) -> str:
        """``host:port[,...]`` of the cluster's Kafka listeners, for any Kafka client
        ("" when the cluster runs none; see kcoord.kafka)."""
        from ..kafka.addresses import bootstrap_servers

        return bootstrap_servers(self.name)


def _partition(md: TopicMetadata, topic: str, partition: int) -> PartitionMetadata:
    if not 0 <= partition < len(md.partitions):
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic!r} has no partition {partition} (it has {len(md.partitions)})")
    return md.partitions[partition]


def connect(name: str = DEFAULT_CLUSTER, address: str | None = "auto", namespace: str = names.DEFAULT_NAMESPACE) -> ClusterClient:
    """Connect to a deployed kcoord cluster by name (``ray.init(address)`` if needed)."""
    return ClusterClient(name, namespace=namespace, address=address)
