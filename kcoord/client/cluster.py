"""ClusterClient: find a kcoord cluster's actors by name, cache metadata, route and retry.

Works the same from a driver script, a Ray task or a Spark executor: it needs only a Ray
connection and the cluster's name. It pickles as (name, namespace), so passing it into a
Ray task or a Spark closure reconnects on the other side.

Routing follows Kafka clients: metadata (leader and leader epoch per partition) is cached;
NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, LEADER_NOT_AVAILABLE and dead actors make the
client refresh it and retry with backoff, up to a deadline.

Actor handles are cached by name too. A call that finds its actor dead or restarting (Ray's
GCS is asked while it waits, see :mod:`kcoord.calls`), or that times out, drops the cached
handle, so the next attempt looks the actor up again: a replica the controller *recreated*
is a new actor under the old name, and a handle cached before that never reaches it.

ListOffsets lookups (a consumer's positions, Admin.list_offsets, the offset plans of Spark
and Ray Data reads) all go through :meth:`ClusterClient.list_offsets`.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Callable, TypeVar

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from ..calls import ActorGoneError, HandleCache, call_probing, get_probing
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
        self._handles = HandleCache(namespace)
        self._last_refresh = 0.0
        self._controller = self._lookup_controller()

    def __reduce__(self):
        return (connect, (self.name, None, self.namespace))

    def __repr__(self) -> str:
        return f"ClusterClient(name={self.name!r}, namespace={self.namespace!r})"

    # -- actors -----------------------------------------------------------------------------
    def _lookup_controller(self) -> Any:
        try:
            return ray.get_actor(names.controller(self.name), namespace=self.namespace)
        except ValueError:
            raise ClusterNotFoundError(
                f"no kcoord cluster named {self.name!r} in Ray namespace {self.namespace!r}. "
                f"Deploy one with `kcoord up --name {self.name}` (after `ray start --head`), "
                f"or use kcoord.local_cluster() for an embedded one."
            ) from None

    @property
    def controller(self) -> Any:
        return self._controller

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

    # -- controller calls -------------------------------------------------------------------
    def call_controller(self, method: str, request: Message, response_type: type[R], timeout_ms: int | None = None) -> R:
        """Call the FailoverCoordinator, riding out its restarts until the deadline."""
        deadline = time.monotonic() + (timeout_ms or self.request_timeout_ms) / 1000
        last: Exception | None = None
        while True:
            try:
                remaining = max(0.05, deadline - time.monotonic())
                controller = self._controller
                raw = get_probing(getattr(controller, method).remote(request.encode()), controller, remaining)
                return response_type.decode(raw)
            except (RayActorError, ActorGoneError) as exc:
                last = exc
            except GetTimeoutError as exc:
                last = exc
            if time.monotonic() >= deadline:
                raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"controller of {self.name!r} did not answer {method}: {last}")
            time.sleep(self.retry_backoff_ms / 1000)
            try:
                self._controller = self._lookup_controller()
            except ClusterNotFoundError:
                pass

    async def acall_controller(self, method: str, request: Message, response_type: type[R], timeout_ms: int | None = None) -> R:
        deadline = time.monotonic() + (timeout_ms or self.request_timeout_ms) / 1000
        last: Exception | None = None
        while True:
            try:
                remaining = max(0.05, deadline - time.monotonic())
                controller = self._controller
                raw = await call_probing(getattr(controller, method).remote(request.encode()), controller, remaining, probe_every=0.25)
                return response_type.decode(raw)
            except (RayActorError, ActorGoneError, asyncio.TimeoutError) as exc:
                last = exc
            if time.monotonic() >= deadline:
                raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"controller of {self.name!r} did not answer {method}: {last!r}")
            await asyncio.sleep(self.retry_backoff_ms / 1000)
            try:
                self._controller = self._lookup_controller()
            except ClusterNotFoundError:
                pass

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

    def refresh_metadata(self, topics: list[str] | None = None, timeout_ms: int | None = None) -> MetadataResponse:
        response = self.call_controller("metadata", MetadataRequest(topics=topics), MetadataResponse, timeout_ms=timeout_ms)
        self._apply_metadata(response, topics)
        return response

    async def arefresh_metadata(self, topics: list[str] | None = None) -> MetadataResponse:
        response = await self.acall_controller("metadata", MetadataRequest(topics=topics), MetadataResponse)
        self._apply_metadata(response, topics)
        return response

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
        with self._lock:
            md = self._topics.get(name)
        if md is None or refresh:
            response = self.refresh_metadata([name])
            md = next((t for t in response.topics if t.name == name), None)
            if md is None or md.error_code:
                raise KafkaError(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    md.error_message if md is not None and md.error_message else f"topic {name!r} does not exist",
                )
        return md

    async def atopic(self, name: str, refresh: bool = False) -> TopicMetadata:
        with self._lock:
            md = self._topics.get(name)
        if md is None or refresh:
            response = await self.arefresh_metadata([name])
            md = next((t for t in response.topics if t.name == name), None)
            if md is None or md.error_code:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        return md

    def partitions_for(self, topic: str) -> list[int]:
        return [p.partition for p in self.topic(topic).partitions]

    def partition_metadata(self, topic: str, partition: int, refresh: bool = False) -> PartitionMetadata:
        md = self.topic(topic, refresh=refresh)
        if not 0 <= partition < len(md.partitions):
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic!r} has no partition {partition} (it has {len(md.partitions)})")
        return md.partitions[partition]

    # -- leader calls with retry ----------------------------------------------------------------
    def call_leader(
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
        ``attempt_timeout_s``, refresh metadata (and look the actor up again) and retry
        until the deadline (``timeout_ms``, default ``request_timeout_ms``). Returns the
        last response (which may carry a non-retriable error). For requests that are safe
        to repeat only (reads, DeleteRecords); produce has its own retry rules."""
        deadline = time.monotonic() + (timeout_ms or self.request_timeout_ms) / 1000
        refresh = False
        last_error = "no attempt"
        while True:
            name = ""
            try:
                p = self.partition_metadata(topic, partition, refresh=refresh)
                if p.leader < 0:
                    raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"{topic}-{partition} has no leader (offline)")
                name = self.replica_name(topic, partition, p.leader)
                handle = self.handle(name)
                attempt = min(self.attempt_timeout_s, max(0.05, deadline - time.monotonic()))
                raw = get_probing(getattr(handle, method).remote(make_request(p.leader_epoch).encode()), handle, attempt)
                response = response_type.decode(raw)
                code = getattr(response, "error_code", 0)
                if code in METADATA_REFRESH or code in RETRIABLE:
                    last_error = f"{ErrorCode(code).name}: {getattr(response, 'error_message', '')}"
                else:
                    return response
            except KafkaError as exc:
                if not exc.needs_metadata_refresh:
                    raise
                last_error = str(exc)
            except (RayActorError, ActorGoneError) as exc:
                self.forget(name)
                last_error = f"leader actor unavailable ({type(exc).__name__}: {exc})"
            except GetTimeoutError:
                self.forget(name)  # alive per Ray but silent: look it up again next time
                last_error = "timed out"
            if time.monotonic() >= deadline:
                raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"{method} on {topic}-{partition} did not succeed in time: {last_error}")
            time.sleep(self.retry_backoff_ms / 1000)
            refresh = True

    def list_offsets(self, partitions: list[TopicPartition], timestamp: int, timeout_ms: int | None = None) -> dict[TopicPartition, int]:
        """ListOffsets of ``partitions`` (EARLIEST_TIMESTAMP: log start, LATEST_TIMESTAMP: the
        HW, or a timestamp in ms: the first offset whose record timestamp is >= it, -1 if
        none) from their leaders: sent to every leader at once, and partitions whose first
        answer is not clean go through :meth:`call_leader`'s retrying path, all within
        ``timeout_ms`` (default ``request_timeout_ms``). Raises the first partition's
        KafkaError."""
        return {tp: offset for tp, (offset, _) in self.list_offsets_and_timestamps(partitions, timestamp, timeout_ms).items()}

    def list_offsets_and_timestamps(
        self, partitions: list[TopicPartition], timestamp: int, timeout_ms: int | None = None
    ) -> dict[TopicPartition, tuple[int, int]]:
        """:meth:`list_offsets` with the timestamp the leader reports for each offset (the
        found record's for a timestamp lookup, -1 otherwise): ``{tp: (offset, timestamp)}``."""
        refs: dict[TopicPartition, tuple[Any, Any, str]] = {}
        for tp in partitions:
            try:
                md = self.partition_metadata(tp.topic, tp.partition)
                if md.leader < 0:
                    continue
                req = ListOffsetsRequest(tp.topic, tp.partition, timestamp=timestamp, current_leader_epoch=md.leader_epoch)
                name = self.replica_name(tp.topic, tp.partition, md.leader)
                handle = self.handle(name)
                refs[tp] = (handle.list_offsets.remote(req.encode()), handle, name)
            except KafkaError:
                continue
        out: dict[TopicPartition, tuple[int, int]] = {}
        deadline = time.monotonic() + (timeout_ms or self.request_timeout_ms) / 1000
        for tp in partitions:
            sent = refs.get(tp)
            if sent is not None:
                ref, handle, name = sent
                try:
                    wait = min(self.attempt_timeout_s, max(0.0, deadline - time.monotonic()))
                    resp = ListOffsetsResponse.decode(get_probing(ref, handle, wait))
                    if resp.error_code == 0:
                        out[tp] = (resp.offset, resp.timestamp)
                        continue
                except (RayActorError, ActorGoneError, GetTimeoutError):
                    self.forget(name)  # dead, restarting or silent: look it up again
                except KafkaError:
                    pass
            resp = self.call_leader(
                tp.topic,
                tp.partition,
                "list_offsets",
                lambda epoch, tp=tp: ListOffsetsRequest(tp.topic, tp.partition, timestamp=timestamp, current_leader_epoch=epoch),
                ListOffsetsResponse,
                timeout_ms=max(int(self.attempt_timeout_s * 1000), int((deadline - time.monotonic()) * 1000)),
            )
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
        from ..kafka.deploy import bootstrap_servers

        return bootstrap_servers(self.name)


def connect(name: str = DEFAULT_CLUSTER, address: str | None = "auto", namespace: str = names.DEFAULT_NAMESPACE) -> ClusterClient:
    """Connect to a deployed kcoord cluster by name (``ray.init(address)`` if needed)."""
    return ClusterClient(name, namespace=namespace, address=address)
