"""Simulated clients: admin, idempotent and acks=1 producers, readers, group members.

They speak kcoord's protocol over the fake network like the real clients do, and report
what they were told to the history: every acknowledged write (invariant 1), every batch
and high watermark a reader was served (invariant 4), every committed and fetched group
offset and every assignment a member received (invariant 6).

* :class:`Producer` (idempotent, acks=all): gets a producer id from the controller, numbers
  its batches, keeps up to ``max_in_flight`` in flight in order, and retries a failed or
  unanswered batch with the same bytes until it succeeds, refreshing the leader from the
  controller's metadata when told it asked the wrong replica. With ``acks=1`` it is a plain
  producer (no idempotence, no durability promise): it adds load and leader changes.
* :class:`Reader` long-polls one partition from its leader.
* :class:`Member` is a consumer-group member: JoinGroup (with MEMBER_ID_REQUIRED), SyncGroup
  (the leader assigns with the real RangeAssignor), heartbeats, offset fetches on
  assignment and periodic commits of a growing position, leaving and rejoining.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from kcoord import records
from kcoord.group.assignors import RangeAssignor
from kcoord.group.records import OFFSETS_TOPIC
from kcoord.group.placement import coordinator_for
from kcoord.protocol import names
from kcoord.protocol.codec import Message
from kcoord.protocol.controller import (
    AlterConfigOp,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    MetadataRequest,
    MetadataResponse,
)
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.group import (
    Assignment,
    GroupHeartbeatRequest,
    GroupHeartbeatResponse,
    JoinGroupProtocol,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupMember,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    Subscription,
    SyncGroupAssignment,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kcoord.protocol.replication import (
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    FetchRequest,
    FetchResponse,
    ProduceRequest,
    ProduceResponse,
)

from .kernel import OK
from .log_reading import record_value
from .partition_history import AckedBatch
from .processes import CLUSTER

if TYPE_CHECKING:
    from .scenario import TopicSpec
    from .simulation import Simulation

E = ErrorCode
CONTROLLER = names.controller(CLUSTER)

RETRIABLE_METADATA = (
    E.NOT_LEADER_OR_FOLLOWER,
    E.FENCED_LEADER_EPOCH,
    E.UNKNOWN_LEADER_EPOCH,
    E.LEADER_NOT_AVAILABLE,
    E.KAFKA_STORAGE_ERROR,
)


class Client:
    """A client process: never crashes (the fault scheduler crashes members by making
    them go silent), never pauses."""

    def __init__(self, sim: "Simulation", name: str) -> None:
        self.sim = sim
        self.name = name
        self.up = True
        self.incarnation = 1
        self.paused = False
        self.deferred: list = []

    def call(self, target: str, request: Message, response_type: type[Message], on_done, timeout_ms: int | None = None) -> None:
        method = METHOD[type(request)]
        self.sim.net.call(self, target, method, request, response_type, on_done, timeout_ms or self.sim.config.call_timeout_ms)

    def later(self, delay_ms: int, fn, *args: Any) -> None:
        self.sim.kernel.after(delay_ms, fn, *args)


METHOD: dict[type[Message], str] = {
    MetadataRequest: "metadata",
    CreateTopicsRequest: "create_topic",
    InitProducerIdRequest: "init_producer_id",
    ProduceRequest: "produce",
    FetchRequest: "fetch",
    JoinGroupRequest: "join_group",
    SyncGroupRequest: "sync_group",
    GroupHeartbeatRequest: "heartbeat",
    LeaveGroupRequest: "leave_group",
    OffsetCommitRequest: "offset_commit",
    OffsetFetchRequest: "offset_fetch",
    IncrementalAlterConfigsRequest: "alter_configs",
    CreatePartitionsRequest: "create_partitions",
    DeleteRecordsRequest: "delete_records",
}

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
        if code == E.NONE:
            self.sim.history.configs.acked(topic, index, self.sim.kernel.now)
        else:
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



class _Metadata:
    """Leader discovery through the controller's Metadata API (what ClusterClient does)."""

    def _init_metadata(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.leader = -1
        self.leader_epoch = -1
        self._metadata_in_flight = False
        self._metadata_wanted = False

    def refresh_metadata(self) -> None:
        if self._metadata_in_flight:
            self._metadata_wanted = True
            return
        self._metadata_in_flight = True
        self._metadata_wanted = False
        self.call(CONTROLLER, MetadataRequest([self.topic]), MetadataResponse, self._metadata_done)  # type: ignore[attr-defined]

    def _metadata_done(self, response: Message | None, kind: str) -> None:
        self._metadata_in_flight = False
        if isinstance(response, MetadataResponse) and response.topics and response.topics[0].partitions:
            parts = response.topics[0].partitions
            if self.partition < len(parts):
                p = parts[self.partition]
                if p.leader_epoch >= self.leader_epoch:
                    self.leader, self.leader_epoch = p.leader, p.leader_epoch
        if self._metadata_wanted or self.leader < 0:
            self.later(self.sim.config.client_backoff_ms, self.refresh_metadata)  # type: ignore[attr-defined]
        self.on_metadata()

    def on_metadata(self) -> None:
        raise NotImplementedError

    def leader_name(self) -> str:
        return names.replica(CLUSTER, self.topic, self.partition, self.leader)


# A DeleteRecords that waits for the low watermark (issue 32, #5) waits as long as a produce
# here; the field comes with that change.
_DELETE_WAIT = {"timeout_ms": 1500} if "timeout_ms" in {f.name for f in dataclasses.fields(DeleteRecordsRequest)} else {}


class _Deletion(_Metadata):
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


class _StrayWrite(_Metadata):
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


@dataclass(eq=False)
class PendingBatch:
    seq: int
    count: int
    data: bytes
    in_flight: bool = False
    acked: bool = False
    acked_offset: int = -1
    attempts: int = 0


class Producer(Client, _Metadata):
    transactional_id: str | None = None  # a transactional producer's (transactions.py)

    def __init__(
        self, sim: "Simulation", index: int, spec: "TopicSpec", partition: int, *, acks: int, max_in_flight: int, max_batch: int, keys: int = 0
    ) -> None:
        super().__init__(sim, f"client/producer{index}")
        self.spec = spec
        self.keys = keys  # > 0: keyed records (compacted topics), keys k0..k<keys-1>
        self.acks = acks
        self.idempotent = acks == -1
        self.max_in_flight = max_in_flight if self.idempotent else 1
        self.max_batch = max_batch
        self.producer_id = -1
        self.batches: list[PendingBatch] = []
        self.next_seq = 0
        self.fatal: str | None = None
        self.sends = 0
        self._retry_at = 0
        self._first_unacked = 0  # batches before it are all acknowledged
        self._in_flight = 0
        self._init_metadata(spec.name, partition)

    def start(self) -> None:
        if self.idempotent:
            self._ask_producer_id()
        else:
            self.producer_id = 10**9 + int(self.name.rsplit("producer", 1)[1])  # only names values
            self.refresh_metadata()

    def _ask_producer_id(self) -> None:
        self.call(CONTROLLER, InitProducerIdRequest(1), InitProducerIdResponse, self._producer_id_done)

    def _producer_id_done(self, response: Message | None, kind: str) -> None:
        if isinstance(response, InitProducerIdResponse) and response.error_code == 0:
            self.producer_id = response.producer_id
            self.sim.history.sim_producer_ids.add(self.producer_id)
            self.sim.trace(f"{self.name} got producer id {self.producer_id}")
            self.refresh_metadata()
        else:
            self.later(self.sim.config.client_backoff_ms, self._ask_producer_id)

    def _advance(self) -> None:
        while self._first_unacked < len(self.batches) and self.batches[self._first_unacked].acked:
            self._first_unacked += 1

    @property
    def idle(self) -> bool:
        self._advance()
        return self.fatal is not None or self._first_unacked == len(self.batches)

    def unacked(self) -> int:
        self._advance()
        return sum(1 for b in self.batches[self._first_unacked :] if not b.acked)

    def send_new(self) -> None:
        """The application calls send(): one new batch of 1..max_batch records."""
        if self.producer_id < 0 or self.fatal is not None:
            return
        rng = self.sim.kernel.rng
        n = rng.randint(1, self.max_batch)
        seq = self.next_seq
        self.next_seq += n
        keys = None
        if self.keys:
            keys = [b"k%d" % rng.randrange(self.keys) for _ in range(n)]
            self.sim.history.partition(self.tp).on_keys(self.producer_id, seq, keys)
        data = records.build_batch_columns(
            [record_value(self.producer_id, seq + i) for i in range(n)],
            keys,
            timestamp_ms=self.sim.kernel.now,
            producer_id=self.producer_id if self.idempotent else -1,
            producer_epoch=0 if self.idempotent else -1,
            base_sequence=seq if self.idempotent else -1,
        )
        self.batches.append(PendingBatch(seq, n, data))
        self.pump()

    def on_metadata(self) -> None:
        self.pump()

    def pump(self) -> None:
        if self.fatal is not None or self.producer_id < 0 or self.sim.kernel.now < self._retry_at or self.leader < 0:
            return
        self._advance()
        in_flight = sum(1 for b in self.batches[self._first_unacked :] if b.in_flight)
        # As a Kafka client: at most max_in_flight batches sent and not yet acked, timed-out
        # attempts included, so a retry is always among the leader's last five batches.
        for b in self.batches[self._first_unacked : self._first_unacked + self.max_in_flight]:
            if in_flight >= self.max_in_flight:
                break
            if b.acked or b.in_flight:
                continue
            self._send(b)
            in_flight += 1

    def _send(self, b: PendingBatch) -> None:
        cfg = self.sim.config
        b.in_flight = True
        b.attempts += 1
        self.sends += 1
        req = ProduceRequest(
            self.topic, self.partition, b.data, acks=self.acks, timeout_ms=cfg.produce_timeout_ms, current_leader_epoch=self.leader_epoch, transactional_id=self.transactional_id
        )
        predecessors_acked = all(x.acked for x in self.batches[self._first_unacked :] if x.seq < b.seq)
        self.call(self.leader_name(), req, ProduceResponse, partial(self._done, b, self.leader, predecessors_acked), cfg.produce_timeout_ms + cfg.call_timeout_ms)

    def _done(self, b: PendingBatch, broker: int, predecessors_acked: bool, response: Message | None, kind: str) -> None:
        b.in_flight = False
        now = self.sim.kernel.now
        if isinstance(response, ProduceResponse) and response.error_code == E.NONE:
            if not b.acked:
                b.acked = True
                b.acked_offset = response.base_offset
                if self.idempotent:
                    self.sim.history.partition(self.tp).on_acked(AckedBatch(self.producer_id, b.seq, b.count, response.base_offset, now, response.leader_epoch))
            elif self.idempotent and response.base_offset >= 0 and b.acked_offset >= 0 and response.base_offset != b.acked_offset:
                self.sim.history.fail("1", now, f"{self.name} batch seq {b.seq} acked at offset {b.acked_offset} and again at {response.base_offset}")
            self.pump()
            return
        if b.acked:
            return  # a late failure of an attempt whose retry already succeeded
        code = response.error_code if isinstance(response, ProduceResponse) else None
        if self.idempotent and code == E.OUT_OF_ORDER_SEQUENCE_NUMBER and predecessors_acked and self._deleted_below(broker):
            # Retention or DeleteRecords removed every batch we wrote: the leader rightly
            # forgot us (Kafka answers UNKNOWN_PRODUCER_ID; a producer then starts over
            # with a new epoch, KIP-360). This one stops here instead.
            self.fatal = f"{self.name}: every batch it wrote is below broker {broker}'s log start; it stops (Kafka: UNKNOWN_PRODUCER_ID)"
            self.sim.trace(self.fatal)
            return
        if self.idempotent and code == E.OUT_OF_ORDER_SEQUENCE_NUMBER and predecessors_acked:
            # Every earlier batch had been acknowledged when this one was sent, so the
            # leader must know our last sequence: it lost an acknowledged batch.
            self.fatal = f"{self.name}: leader {broker} answered OUT_OF_ORDER_SEQUENCE_NUMBER for seq {b.seq}, sent after every earlier batch was acked: {response.error_message}"
            self.sim.history.partition(self.tp).producer_anomalies.append((self.producer_id, self.fatal))
            self.sim.trace(self.fatal)
            return
        if not self.idempotent and kind == OK and code is not None and code not in RETRIABLE_METADATA and code not in (
            E.NOT_ENOUGH_REPLICAS,
            E.REQUEST_TIMED_OUT,
            E.OFFSET_NOT_AVAILABLE,
        ):
            b.acked = True  # a plain producer gives up on a non-retriable error
            return
        if kind != OK or code in RETRIABLE_METADATA:
            self.refresh_metadata()
        self._retry_at = now + self.sim.config.client_backoff_ms
        self.later(self.sim.config.client_backoff_ms, self.pump)

    def _deleted_below(self, broker: int) -> bool:
        """Whether every record we had acknowledged is below ``broker``'s log start."""
        last = max((x.acked_offset + x.count - 1 for x in self.batches if x.acked and x.acked_offset >= 0), default=-1)
        start = self.sim.history.partition(self.tp).log_starts.get(broker, 0)
        return 0 <= last < start

    @property
    def tp(self) -> tuple[str, int]:
        return (self.topic, self.partition)


class Reader(Client, _Metadata):
    """Long-polls one partition; reports what it was served, and under which HW."""

    def __init__(self, sim: "Simulation", index: int, topic: str, partition: int) -> None:
        super().__init__(sim, f"client/reader{index}")
        self.position = 0
        self.fetches = 0
        self._fetching = False
        self.max_hw_seen = 0
        self._init_metadata(topic, partition)

    def start(self) -> None:
        self.refresh_metadata()

    def on_metadata(self) -> None:
        self.poll()

    def poll(self) -> None:
        if self._fetching or self.leader < 0:
            return
        cfg = self.sim.config
        self._fetching = True
        self.fetches += 1
        req = FetchRequest(self.topic, self.partition, self.position, max_bytes=1 << 16, max_wait_ms=cfg.consumer_wait_ms, current_leader_epoch=self.leader_epoch)
        self.call(self.leader_name(), req, FetchResponse, partial(self._done, self.leader), cfg.consumer_wait_ms + cfg.call_timeout_ms)

    def _done(self, broker: int, response: Message | None, kind: str) -> None:
        self._fetching = False
        sim = self.sim
        history = sim.history.partition((self.topic, self.partition))
        if isinstance(response, FetchResponse) and response.error_code == E.NONE:
            history.on_reader_hw(self.name, broker, response.high_watermark, sim.kernel.now)
            if response.records:
                history.on_consumer_fetch(broker, response.high_watermark, response.records, sim.kernel.now)
                last = None
                for _, h in records.iter_headers(response.records):
                    last = h
                if last is not None:
                    self.position = max(self.position, last.next_offset)
            self.poll()
            return
        if isinstance(response, FetchResponse) and response.error_code == E.OFFSET_OUT_OF_RANGE:
            sim.trace(f"{self.name}: position {self.position} out of range at broker {broker} (LEO {response.log_end_offset})")
            if self.position < response.log_start_offset:
                self.position = response.log_start_offset  # deleted (retention, DeleteRecords): auto.offset.reset=earliest
            else:
                self.position = max(0, min(self.position, response.high_watermark))
        elif kind != OK or (isinstance(response, FetchResponse) and response.error_code in RETRIABLE_METADATA):
            self.refresh_metadata()
        self.later(sim.config.client_backoff_ms, self.poll)


class Member(Client):
    """A consumer-group member that "consumes" by committing a growing position for each
    partition it owns (the data itself is the readers' business)."""

    SESSION_TIMEOUT_MS = 2_000
    REBALANCE_TIMEOUT_MS = 3_000
    HEARTBEAT_MS = 300
    COMMIT_GAP_MS = (50, 300)

    def __init__(self, sim: "Simulation", index: int, group_id: str, topics: list[str]) -> None:
        super().__init__(sim, f"client/member{index}")
        self.group_id = group_id
        self.topics = sorted(topics)
        self.member_id = ""
        self.generation = -1
        self.state = "unjoined"  # unjoined -> joining -> syncing -> stable; "left", "dead"
        self.owned: list[tuple[str, int]] = []
        self.positions: dict[tuple[str, int], int] = {}
        self.alive = True  # False: crashed (silent), or left for good
        self._epoch = 0  # bumps on every (re)join attempt: stale callbacks are ignored
        self._commit_in_flight = False
        self.joins = 0
        self.commits = 0

    @property
    def coordinator(self) -> str:
        return names.group_coordinator(CLUSTER, coordinator_for(self.group_id, self.sim.scenario.coordinators))

    def start(self) -> None:
        self.alive = True
        self._join()

    # -- join / sync ------------------------------------------------------------------------
    def _join(self) -> None:
        if not self.alive:
            return
        self._epoch += 1
        self.joins += 1
        self.state = "joining"
        self.owned = []
        sub = Subscription(self.topics).encode()
        req = JoinGroupRequest(
            group_id=self.group_id,
            session_timeout_ms=self.SESSION_TIMEOUT_MS,
            rebalance_timeout_ms=self.REBALANCE_TIMEOUT_MS,
            member_id=self.member_id,
            protocols=[JoinGroupProtocol("range", sub)],
            client_id=self.name,
        )
        self.call(self.coordinator, req, JoinGroupResponse, partial(self._joined, self._epoch), self.REBALANCE_TIMEOUT_MS + 2_000)

    def _retry_join(self, delay: int | None = None) -> None:
        self.state = "unjoined"
        self.owned = []
        self._epoch += 1
        self.later(delay if delay is not None else self.sim.config.client_backoff_ms * 2, self._join)

    def _joined(self, epoch: int, response: Message | None, kind: str) -> None:
        if epoch != self._epoch or not self.alive:
            return
        if not isinstance(response, JoinGroupResponse):
            self._retry_join()
            return
        code = response.error_code
        if code == E.MEMBER_ID_REQUIRED:
            self.member_id = response.member_id
            self._join()
            return
        if code == E.UNKNOWN_MEMBER_ID:
            self.member_id = ""
        if code != E.NONE:
            self._retry_join()
            return
        self.member_id = response.member_id
        self.generation = response.generation_id
        self.state = "syncing"
        assignments: list[SyncGroupAssignment] = []
        if response.leader == self.member_id:
            subs = {m.member_id: Subscription.decode(m.metadata) for m in response.members}
            counts = {t.name: t.partitions for t in self.sim.scenario.topics}
            result = RangeAssignor().assign(counts, subs)
            assignments = [SyncGroupAssignment(mid, a.encode()) for mid, a in sorted(result.items())]
        req = SyncGroupRequest(self.group_id, self.generation, self.member_id, protocol_type="consumer", protocol_name="range", assignments=assignments)
        self.call(self.coordinator, req, SyncGroupResponse, partial(self._synced, self._epoch, self.generation), self.REBALANCE_TIMEOUT_MS + 2_000)

    def _synced(self, epoch: int, generation: int, response: Message | None, kind: str) -> None:
        if epoch != self._epoch or not self.alive:
            return
        if not isinstance(response, SyncGroupResponse) or response.error_code != E.NONE:
            if isinstance(response, SyncGroupResponse) and response.error_code == E.UNKNOWN_MEMBER_ID:
                self.member_id = ""
            self._retry_join()
            return
        owned = Assignment.decode(response.assignment).topic_partitions() if response.assignment else []
        self.owned = owned
        self.state = "stable"
        self.sim.history.groups.on_assignment(self.group_id, generation, self.member_id, owned, self.sim.kernel.now)
        # Start from the committed offsets of what we now own.
        if owned:
            self._fetch_offsets(epoch, owned, on_assign=True)
        self.later(self.HEARTBEAT_MS, self._heartbeat, epoch)
        self.later(self.sim.kernel.rng.randint(*self.COMMIT_GAP_MS), self._commit, epoch)

    # -- steady state -----------------------------------------------------------------------
    def _heartbeat(self, epoch: int) -> None:
        if epoch != self._epoch or not self.alive or self.state != "stable":
            return
        req = GroupHeartbeatRequest(self.group_id, self.generation, self.member_id)
        self.call(self.coordinator, req, GroupHeartbeatResponse, partial(self._beat, epoch), self.SESSION_TIMEOUT_MS)

    def _beat(self, epoch: int, response: Message | None, kind: str) -> None:
        if epoch != self._epoch or not self.alive:
            return
        code = response.error_code if isinstance(response, GroupHeartbeatResponse) else None
        if code in (E.REBALANCE_IN_PROGRESS, E.ILLEGAL_GENERATION, E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID):
            if code == E.UNKNOWN_MEMBER_ID:
                self.member_id = ""
            self._retry_join(0)
            return
        self.later(self.HEARTBEAT_MS, self._heartbeat, epoch)

    def _fetch_offsets(self, epoch: int, partitions: list[tuple[str, int]], on_assign: bool = False) -> None:
        topics: dict[str, list[int]] = {}
        for t, p in partitions:
            topics.setdefault(t, []).append(p)
        groups = self.sim.history.groups
        floors = {tp: groups.floor(self.group_id, tp) for tp in partitions}
        sent = self.sim.kernel.now
        req = OffsetFetchRequest(self.group_id, topics)
        self.call(self.coordinator, req, OffsetFetchResponse, partial(self._fetched, epoch, floors, sent, on_assign))

    def _fetched(self, epoch: int, floors: dict, sent: int, on_assign: bool, response: Message | None, kind: str) -> None:
        if not isinstance(response, OffsetFetchResponse) or response.error_code != E.NONE:
            if on_assign and epoch == self._epoch and self.alive:
                self.later(self.sim.config.client_backoff_ms, self._fetch_offsets, epoch, list(floors), True)
            return
        now = self.sim.kernel.now
        for (t, p), floor in floors.items():
            part = response.offsets.get(t, {}).get(p)
            if part is None or part.error_code != E.NONE:
                continue
            self.sim.history.groups.on_fetched(self.group_id, (t, p), part.offset, floor, sent, now)
            if on_assign and epoch == self._epoch and (t, p) in self.owned:
                self.positions[(t, p)] = max(part.offset, 0)

    def _commit(self, epoch: int) -> None:
        if epoch != self._epoch or not self.alive or self.state != "stable" or self.sim.phase != "faults":
            return  # (while the cluster heals, members only heartbeat: the log goes quiet)
        if self._commit_in_flight or not self.owned or any(tp not in self.positions for tp in self.owned):
            self.later(self.sim.kernel.rng.randint(*self.COMMIT_GAP_MS), self._commit, epoch)
            return
        rng = self.sim.kernel.rng
        offsets: dict[tuple[str, int], int] = {}
        for tp in self.owned:
            self.positions[tp] += rng.randint(1, 5)
            offsets[tp] = self.positions[tp]
        topics: dict[str, dict[int, OffsetCommitPartition]] = {}
        for (t, p), off in offsets.items():
            topics.setdefault(t, {})[p] = OffsetCommitPartition(off)
        req = OffsetCommitRequest(self.group_id, self.generation, self.member_id, topics=topics)
        self._commit_in_flight = True
        self.commits += 1
        groups = self.sim.history.groups
        sent = {tp: groups.on_commit_sent(self.group_id, tp, off, self.generation) for tp, off in offsets.items()}
        self.call(self.coordinator, req, OffsetCommitResponse, partial(self._committed, epoch, sent))
        # now and then, read back what is committed (invariant 6)
        if rng.random() < 0.3:
            self._fetch_offsets(epoch, list(offsets))

    def _committed(self, epoch: int, sent: dict, response: Message | None, kind: str) -> None:
        self._commit_in_flight = False
        now = self.sim.kernel.now
        if isinstance(response, OffsetCommitResponse):
            for (t, p), index in sent.items():
                code = response.topics.get(t, {}).get(p, response.error_code)
                if code == E.NONE:
                    self.sim.history.groups.on_commit_acked(self.group_id, (t, p), index, now)
            codes = {c for parts in response.topics.values() for c in parts.values()} | {response.error_code}
            if codes & {E.REBALANCE_IN_PROGRESS, E.ILLEGAL_GENERATION, E.UNKNOWN_MEMBER_ID}:
                if epoch == self._epoch and self.alive:
                    if E.UNKNOWN_MEMBER_ID in codes:
                        self.member_id = ""
                    self._retry_join(0)
                return
        if epoch == self._epoch and self.alive:
            self.later(self.sim.kernel.rng.randint(*self.COMMIT_GAP_MS), self._commit, epoch)

    # -- faults -----------------------------------------------------------------------------
    def leave(self, rejoin_after_ms: int | None) -> None:
        """LeaveGroup, then (maybe) join again later as a new member."""
        if not self.alive or not self.member_id:
            return
        req = LeaveGroupRequest(self.group_id, [LeaveGroupMember(self.member_id)])
        self.call(self.coordinator, req, LeaveGroupResponse, lambda response, kind: None)
        self._stop("left")
        if rejoin_after_ms is not None:
            self.later(rejoin_after_ms, self.start)

    def crash(self, restart_after_ms: int | None) -> None:
        """Go silent (the process died): the coordinator notices by session timeout."""
        if not self.alive:
            return
        self._stop("dead")
        if restart_after_ms is not None:
            self.later(restart_after_ms, self.start)

    def _stop(self, state: str) -> None:
        self.alive = False
        self.state = state
        self.member_id = ""
        self.generation = -1
        self.owned = []
        self.positions = {}
        self._epoch += 1
        self._commit_in_flight = False
