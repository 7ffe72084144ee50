"""An operator's actions through the admin client: creating the scenario's topics (and the
internal ones), and -- issue 32 -- altering topic configs (numbered, one at a time per
topic: invariant **config**), growing topics, DeleteRecords at a partition's leader
(invariant **deleted**), and a stranger's write into ``__consumer_offsets``, which must be
refused (invariant **internal**). Each is retried until it is acknowledged."""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import TYPE_CHECKING, Any

from kcoord import records
from kcoord.group.records import OFFSETS_TOPIC
from kcoord.protocol.codec import Message
from kcoord.protocol.controller import (
    AlterConfigOp,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.replication import (
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    ProduceRequest,
    ProduceResponse,
)

from .clients import CONTROLLER, RETRIABLE_METADATA, Client, LeaderDiscovery

if TYPE_CHECKING:
    from .simulation import Simulation

E = ErrorCode


# Answers that leave an operator's change to do again: the controller could not say (its
# store write failed), could not be reached, or was not up.
RETRY_ADMIN = (E.REQUEST_TIMED_OUT, E.NOT_CONTROLLER, E.UNKNOWN_SERVER_ERROR)


class Admin(Client):
    """Creates the scenario's topics (and ``__consumer_offsets``) through the controller,
    retrying until each exists, as ``Admin.create_topic`` and deployment do."""

    def __init__(self, sim: "Simulation") -> None:
        super().__init__(sim, "client/admin")
        self.pending: list[CreateTopicsRequest] = []
        self.created: set[str] = set()
        self._init_operator()

    def create(self, request: CreateTopicsRequest) -> None:
        self.pending.append(request)
        self._send(request)

    def _send(self, request: CreateTopicsRequest) -> None:
        self.call(CONTROLLER, request, CreateTopicsResponse, partial(self._done, request))

    def _done(self, request: CreateTopicsRequest, response: Message | None, kind: str) -> None:
        if isinstance(response, CreateTopicsResponse) and response.error_code in (E.NONE, E.TOPIC_ALREADY_EXISTS):
            self.created.add(request.name)
            return
        self.later(100, self._send, request)

    @property
    def done(self) -> bool:
        return all(r.name in self.created for r in self.pending) and not self.busy()

    # -- an operator's changes (issue 32), each retried until it is acknowledged ------------
    def busy(self) -> str | None:
        """What the operator still waits for (None: nothing)."""
        for topic, queue in sorted(self._alters.items()):
            if queue:
                return f"alter_configs of {topic}"
        if self._growing:
            return f"create_partitions of {sorted(self._growing)}"
        for tp, d in sorted(self._deletes.items()):
            if d is not None:
                return f"delete_records of {tp[0]}-{tp[1]}"
        return None

    def _init_operator(self) -> None:
        self._alters: dict[str, list[tuple[int, IncrementalAlterConfigsRequest]]] = {}
        self._growing: set[str] = set()
        self._deletes: dict[tuple[str, int], "_Deletion | None"] = {}

    def alter_configs(self, topic: str, changes: dict[str, str | None]) -> None:
        """IncrementalAlterConfigs on ``topic``: SET each key to its value, or DELETE it
        (back to the default) for None. A topic's alters go one at a time, in order, each
        retried until acknowledged, so each has one config it leads to (a version)."""
        index = self.sim.history.configs.propose(topic, changes, self.sim.kernel.now)
        ops = [AlterConfigOp(k, 0 if v is not None else 1, v) for k, v in sorted(changes.items())]
        queue = self._alters.setdefault(topic, [])
        queue.append((index, IncrementalAlterConfigsRequest(topic, ops)))
        if len(queue) == 1:
            self._send_alter(topic)

    def _send_alter(self, topic: str) -> None:
        index, request = self._alters[topic][0]
        self.call(CONTROLLER, request, IncrementalAlterConfigsResponse, partial(self._altered, topic, index))

    def _altered(self, topic: str, index: int, response: Message | None, kind: str) -> None:
        code = response.error_code if isinstance(response, IncrementalAlterConfigsResponse) else None
        if code is None or code in RETRY_ADMIN:
            self.later(100, self._send_alter, topic)
            return
        queue = self._alters[topic]
        queue.pop(0)
        if code != E.NONE:
            self.sim.history.fail("harness", self.sim.kernel.now, f"alter_configs of {topic} (version {index}) refused: {E(code).name} {response.error_message}")
        if queue:
            self._send_alter(topic)

    def create_partitions(self, topic: str, count: int, assignment: list[list[int]]) -> None:
        self._growing.add(topic)
        self._send_grow(CreatePartitionsRequest(topic, count, assignment))

    def _send_grow(self, request: CreatePartitionsRequest) -> None:
        self.call(CONTROLLER, request, CreatePartitionsResponse, partial(self._grown, request))

    def _grown(self, request: CreatePartitionsRequest, response: Message | None, kind: str) -> None:
        code = response.error_code if isinstance(response, CreatePartitionsResponse) else None
        if code is None or code in RETRY_ADMIN:
            self.later(100, self._send_grow, request)
            return
        # INVALID_PARTITIONS: an attempt whose answer was lost had grown it already
        if code not in (E.NONE, E.INVALID_PARTITIONS):
            self.sim.history.fail("harness", self.sim.kernel.now, f"create_partitions of {request.topic} refused: {E(code).name} {response.error_message}")
        self._growing.discard(request.topic)
        self.sim.trace(f"admin: {request.topic} has {request.count} partitions ({E(code).name})")

    def delete_records(self, topic: str, partition: int, offset: int) -> bool:
        """DeleteRecords up to ``offset`` (-1: the HW) at the partition's leader, retried
        on retriable errors until acknowledged; one at a time per partition."""
        tp = (topic, partition)
        if self._deletes.get(tp) is not None:
            return False
        d = _Deletion(self.sim, self, topic, partition, offset)
        self._deletes[tp] = d
        d.refresh_metadata()
        return True

    def deletion_done(self, tp: tuple[str, int]) -> None:
        self._deletes[tp] = None

    def stray_write(self, partition: int) -> None:
        """A client's produce into ``__consumer_offsets`` (not a coordinator's): refused by
        its leader whatever its content, or the coordinators' state is at a stranger's
        mercy (issue 32, finding 9)."""
        _StrayWrite(self.sim, self, partition).refresh_metadata()


# A DeleteRecords that waits for the low watermark (issue 32, #5) waits as long as a produce
# here; the field comes with that change.
_DELETE_WAIT = {"timeout_ms": 1500} if "timeout_ms" in {f.name for f in dataclasses.fields(DeleteRecordsRequest)} else {}


class _Deletion(LeaderDiscovery):
    """One operator's DeleteRecords, sent by the admin client to the partition's leader
    (found through the controller's metadata, as ``Admin.delete_records`` does)."""

    def __init__(self, sim: "Simulation", admin: Admin, topic: str, partition: int, offset: int) -> None:
        self.sim = sim
        self.admin = admin
        self.offset = offset
        self.attempts = 0
        self._init_metadata(topic, partition)

    def call(self, target: str, request: Message, response_type: type[Message], on_done, timeout_ms: int | None = None) -> None:
        self.admin.call(target, request, response_type, on_done, timeout_ms)

    def later(self, delay_ms: int, fn, *args: Any) -> None:
        self.admin.later(delay_ms, fn, *args)

    def on_metadata(self) -> None:
        if self.leader >= 0 and not self._metadata_in_flight:
            self._send()

    def _send(self) -> None:
        cfg = self.sim.config
        self.attempts += 1
        req = DeleteRecordsRequest(self.topic, self.partition, self.offset, current_leader_epoch=self.leader_epoch, **_DELETE_WAIT)
        sent = self.sim.kernel.now
        self.call(self.leader_name(), req, DeleteRecordsResponse, partial(self._done, self.leader, sent), cfg.produce_timeout_ms + cfg.call_timeout_ms)

    def _done(self, broker: int, sent: int, response: Message | None, kind: str) -> None:
        sim = self.sim
        tp = (self.topic, self.partition)
        code = response.error_code if isinstance(response, DeleteRecordsResponse) else None
        if code == E.NONE:
            assert isinstance(response, DeleteRecordsResponse)
            sim.history.partition(tp).on_records_deleted(self.offset, response.low_watermark, broker, response.leader_epoch, sent, sim.kernel.now)
            self.admin.deletion_done(tp)
            sim.nemesis.after_records_deleted(tp)
            return
        if code in (E.OFFSET_OUT_OF_RANGE, E.POLICY_VIOLATION):
            # past the HW of a leader that is behind (a new leader's HW lags) -- an operator
            # gives up, as kafka-python's delete_records raises
            sim.trace(f"admin: DeleteRecords {self.topic}-{self.partition} up to {self.offset} refused by broker {broker}: {E(code).name}")
            self.admin.deletion_done(tp)
            return
        if code is None or code in RETRIABLE_METADATA:
            self.refresh_metadata()
            return
        self.later(sim.config.client_backoff_ms, self._send)


class _StrayWrite(LeaderDiscovery):
    """One produce into ``__consumer_offsets`` by a client, at acks=1 (one attempt)."""

    def __init__(self, sim: "Simulation", admin: Admin, partition: int) -> None:
        self.sim = sim
        self.admin = admin
        self._init_metadata(OFFSETS_TOPIC, partition)

    def call(self, target: str, request: Message, response_type: type[Message], on_done, timeout_ms: int | None = None) -> None:
        self.admin.call(target, request, response_type, on_done, timeout_ms)

    def later(self, delay_ms: int, fn, *args: Any) -> None:
        if self.sim.phase == "faults":
            self.admin.later(delay_ms, fn, *args)

    def on_metadata(self) -> None:
        if self.leader < 0 or self._metadata_in_flight:
            return
        data = records.build_batch_columns([b"garbage"], [b"not a group key"], timestamp_ms=self.sim.kernel.now)
        req = ProduceRequest(self.topic, self.partition, data, acks=1, timeout_ms=self.sim.config.produce_timeout_ms, current_leader_epoch=self.leader_epoch)
        self.call(self.leader_name(), req, ProduceResponse, partial(self._done, self.leader))

    def _done(self, broker: int, response: Message | None, kind: str) -> None:
        if isinstance(response, ProduceResponse) and response.error_code == E.NONE:
            self.sim.history.fail(
                "internal",
                self.sim.kernel.now,
                f"{self.topic}-{self.partition}: broker {broker} accepted a client's write into an internal topic at offset {response.base_offset}",
            )
