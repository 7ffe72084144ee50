"""Liveness, failover and elections: heartbeats and leaders' vouches, restarts and wiped
disks, failed replicas, leader elections and the preferred-leader rebalance.
"""

from __future__ import annotations

from ...protocol.controller import HeartbeatRequest, HeartbeatResponse, LeaderAndIsrRequest, LeaderAndIsrResponse
from ...protocol.errors import ErrorCode
from ..config import ReplicationConfig
from ..controller_actions import CREATED, REPLACED, ControllerAction, ReplicaId, SendHeartbeat
from ..election import elect_leader, imbalanced_brokers, preferred_leader_move
from ..failure_detector import OK, RECOVERED, RESTARTED
from ..metadata import NO_LEADER, PartitionState
from .context import ControllerContext
from .isr_changes import IsrChanges


class Liveness:
    """What the replicas' answers tell, and the elections they lead to."""

    def __init__(self, ctx: ControllerContext, isr: IsrChanges) -> None:
        self.ctx = ctx
        self.isr = isr

    def on_heartbeat_sent(self, replica: ReplicaId, now_ms: int) -> list[ControllerAction]:
        """The driver sent the SendHeartbeat for ``replica`` (the detector times it)."""
        self.ctx.detector.on_sent(replica, now_ms)
        return []

    def on_heartbeat(self, replica: ReplicaId, status: HeartbeatResponse | None, now_ms: int, *, dead: bool = False) -> list[ControllerAction]:
        """Outcome of a heartbeat: ``status`` on success; ``dead`` when Ray reports the
        actor dead or restarting; neither when the call merely timed out."""
        if replica not in self.ctx.detector:
            return []
        if status is not None and status.error_code == ErrorCode.KAFKA_STORAGE_ERROR:
            # Its log went offline (an I/O error, KIP-112): it serves nothing until it is
            # restarted, so it is failed like a dead replica; leadership moves away.
            self.ctx.offline_logs[replica] = status.error_message or "log offline"
            # A failed fsync may have dropped its unflushed pages: the page cache no longer
            # vouches for the tail, so whatever process comes next counts as a new storage.
            self.ctx.trust.storage_lost(replica)
            dead = True
            status = None
        elif status is not None:
            self.ctx.offline_logs.pop(replica, None)
        if dead:
            if self.ctx.detector.on_dead(replica, now_ms):
                return self.on_failed(replica, now_ms)
            return []
        if status is None:
            self.ctx.detector.on_no_answer(replica, now_ms)
            return []
        event = self.ctx.detector.on_ok(replica, now_ms, status.incarnation or None)
        actions = self._on_status(replica, status, now_ms, event)
        if status.followers_heard and self.ctx.config.leader_vouches:
            actions += self._on_vouches(replica, status, now_ms)
        return actions

    def _on_vouches(self, leader: ReplicaId, status: HeartbeatResponse, now_ms: int) -> list[ControllerAction]:
        """The current leader's word on the followers fetching from it: each it heard
        from lately counts as that follower answering a heartbeat with the status its
        fetch carried (same checks: storage, directory, stale epochs) -- if it names the
        process that last answered us itself; another process, or one it has not heard
        from lately, is beaten by us at once (failure_detector.py)."""
        p = self.ctx.partitions.get((leader.topic, leader.partition))
        if (
            p is None
            or p.leader != leader.broker
            or status.role != "leader"
            or status.leader_epoch != p.leader_epoch
            or not self.ctx.detector.is_alive(leader)
        ):
            return []
        actions: list[ControllerAction] = []
        for b, (ago, leo, incarnation, storage, partition_epoch, directory_id) in sorted(status.followers_heard.items()):
            rid = ReplicaId(p.topic, p.partition, b)
            if b == p.leader or b not in p.replicas or rid not in self.ctx.detector:
                continue
            if ago > self.ctx.config.vouch_max_age_ms:
                # Not fetching: beat it now, and a replica alive only by a restarted
                # controller's start-up grace must answer within a session (chaos seed
                # 983771: a killed follower held the HW ~25 s by the grace).
                self.ctx.detector.end_grace(rid, now_ms)
                self.ctx.detector.expedite(rid)
                continue
            event = self.ctx.detector.vouch(rid, now_ms - ago, now_ms, incarnation or None)
            if event is None:
                continue
            self.ctx.offline_logs.pop(rid, None)
            heard = HeartbeatResponse(
                topic=p.topic,
                partition=p.partition,
                broker=b,
                role="follower",
                leader=p.leader,
                leader_epoch=status.leader_epoch,
                partition_epoch=partition_epoch,
                log_end_offset=leo,
                incarnation=incarnation,
                storage=storage,
                directory_id=directory_id,
            )
            actions += self._on_status(rid, heard, now_ms, event)
        return actions

    def _on_status(self, replica: ReplicaId, status: HeartbeatResponse, now_ms: int, event: str | None) -> list[ControllerAction]:
        """What a live replica's status tells (answered to a heartbeat, or vouched for by
        its leader): a restart, a changed storage, state to resend."""
        previous = self.ctx.last_status.get(replica)
        self.ctx.last_status[replica] = status
        known = previous.incarnation if previous is not None else self.ctx.trust.incarnation.get(replica)
        p = self.ctx.partitions.get((replica.topic, replica.partition))
        actions: list[ControllerAction] = []
        # Another process than the one last seen (by us or a predecessor) restarted.
        new_process = bool(known and status.incarnation and known != status.incarnation)
        if new_process and event == OK and p is not None and p.leader == replica.broker:
            event = RESTARTED  # a restarted leader lost its leadership: fail it over
        # A designated leader first seen not leading its epoch restarted unseen: its storage
        # before is unknown, which counts as changed. Followers are the leader's
        # to judge (KIP-903 incarnations).
        unseen_restart = bool(
            not known
            and status.incarnation
            and p is not None
            and p.leader == replica.broker
            and (status.leader_epoch < p.leader_epoch or status.role != "leader")
        )
        if event == RESTARTED or (new_process and event in (OK, RECOVERED)) or unseen_restart:
            # A new process may have lost its unflushed tail unless it kept its page cache.
            if p is not None and self.isr.lossy(p) and self.ctx.trust.storage_changed(replica, status.storage):
                self.ctx.trust.suspect.add(replica)
        directory_changed = self._saw_directory(replica, status.directory_id)
        self.ctx.trust.seen(replica, status)
        if p is not None:
            actions += self.ctx.persist_trust(p)  # stored before anything acts on it
        if event == RESTARTED:
            # died and came back between two beats: fail it, then take it back
            self.ctx.detector.on_dead(replica, now_ms)
            actions += self.on_failed(replica, now_ms)
            self.ctx.detector.on_ok(replica, now_ms, status.incarnation or None)
            event = RECOVERED
        if p is not None and p.leader == replica.broker and not self.ctx.trust.holds_data(replica):
            # A designated leader on a replaced directory holds nothing of its epoch: fail it
            # over, never re-send the epoch, even to a process already known.
            actions += self.elect(p, now_ms, failed_leader=True)
        elif directory_changed and p is not None and (dropped := self.isr.drop_from_isr(p, replica.broker)):
            # An ISR follower on a replaced directory leaves the ISR now (KIP-858); the
            # leader's expansion re-admits and re-trusts it once caught up.
            actions += dropped
        elif event == RECOVERED:
            actions += self._on_recovered(replica, now_ms)
        else:
            actions += self._verify(replica, status, now_ms)
        if p is not None:
            actions += self.ctx.persist_trust(p)
        return actions

    def on_replica_dead(self, replica: ReplicaId, now_ms: int) -> list[ControllerAction]:
        """Ray reported the actor dead outside a heartbeat (e.g. a failed call)."""
        return self.on_heartbeat(replica, None, now_ms, dead=True)

    def restart_stuck(self, replica: ReplicaId, now_ms: int) -> bool:
        """Whether a replica that Ray reports RESTARTING has been failed long enough to be
        replaced rather than waited for."""
        since = self.ctx.detector.failed_since(replica)
        return since >= 0 and now_ms - since >= self.ctx.config.restart_stuck_ms

    def on_replica_ensured(self, replica: ReplicaId, result: str, now_ms: int) -> list[ControllerAction]:
        """The outcome of CreateReplica: EXISTS, CREATED, REPLACED (it was stuck restarting
        and was killed; the next ensure creates it) or FAILED. Counted; the replica's
        heartbeats decide the rest."""
        if result == REPLACED:
            self.ctx.metrics.replicas_replaced_stuck += 1
        elif result == CREATED and replica in self.ctx.detector and not self.ctx.detector.is_alive(replica):
            self.ctx.metrics.replicas_recreated += 1
        return []

    def on_leader_and_isr_result(
        self, replica: ReplicaId, request: LeaderAndIsrRequest, response: LeaderAndIsrResponse | None, now_ms: int
    ) -> list[ControllerAction]:
        key = (replica.topic, replica.partition)
        p = self.ctx.partitions.get(key)
        if p is None or response is None:
            return []
        is_current_leader = replica.broker == request.leader == p.leader and request.leader_epoch == p.leader_epoch
        if response.error_code == ErrorCode.STALE_BROKER_EPOCH:
            # Another process than the one addressed answered: beat it now, and the
            # restart rules of on_heartbeat decide from its answer.
            self.ctx.detector.expedite(replica)
            return []
        if response.error_code == ErrorCode.FENCED_LEADER_EPOCH and is_current_leader:
            # A restarted leader refuses its epoch: elect again, at a new epoch; having
            # maybe lost its unflushed tail, it leads only if no unrestarted replica can.
            if self.isr.lossy(p) and self.ctx.trust.storage_changed(replica, response.storage):
                self.ctx.trust.suspect.add(replica)
            self._saw_directory(replica, response.directory_id)
            actions = self.ctx.persist_trust(p)
            actions += self.elect(p, now_ms, failed_leader=False)
            return actions + self.ctx.persist_trust(p)
        if response.error_code != ErrorCode.NONE:
            return []
        # The directory an answer names is recorded when none is (a new leader may say
        # nothing else before a controller fails); a change waits for a
        # heartbeat or a vouch, which no late answer of an older process can undo.
        actions: list[ControllerAction] = []
        if response.directory_id and not self.ctx.trust.directory.get(replica):
            self._saw_directory(replica, response.directory_id)
            actions += self.ctx.persist_trust(p)
        started = self.ctx.failover_started.get(key)
        if started is not None and replica.broker == request.leader == p.leader and request.leader_epoch == p.leader_epoch:
            del self.ctx.failover_started[key]
            self.ctx.metrics.failover_ms.append(now_ms - started)
        return actions

    def _verify(self, replica: ReplicaId, status: HeartbeatResponse, now_ms: int) -> list[ControllerAction]:
        """Re-send the replica its role if its view is behind ours (missed message, restart)."""
        p = self.ctx.partitions.get((replica.topic, replica.partition))
        if p is None:
            return []
        if p.leader == NO_LEADER and (replica.broker in p.isr or replica.broker in p.elr):
            # An ISR (or ELR) member of an offline partition answers: elect, since a
            # restarted controller never saw it fail and no recovery event comes.
            return self.elect(p, now_ms, failed_leader=False)
        behind = status.leader_epoch < p.leader_epoch or (
            status.leader_epoch == p.leader_epoch and status.partition_epoch < p.partition_epoch
        )
        expected_role = "leader" if p.leader == replica.broker else ("follower" if p.leader != NO_LEADER else "none")
        if behind or (status.leader_epoch == p.leader_epoch and status.role != expected_role):
            return self.ctx.send_state(p, [replica.broker])
        return []

    def _saw_directory(self, replica: ReplicaId, directory_id: str) -> bool:
        """``replica`` reports its log directory; one other than recorded means its disk was
        wiped or replaced: it holds nothing of what it held, and must not lead on the
        strength of its ISR or ELR membership (trust.py). True when it changed."""
        if self.ctx.trust.directory_seen(replica, directory_id):
            self.ctx.metrics.directories_replaced += 1
            return True
        return False

    def on_failed(self, replica: ReplicaId, now_ms: int) -> list[ControllerAction]:
        self.ctx.metrics.replicas_failed += 1
        self.ctx.next_ensure[replica] = now_ms  # try to bring it back at once
        p = self.ctx.partitions.get((replica.topic, replica.partition))
        if p is None:
            return []
        if p.leader == replica.broker:
            return self.elect(p, now_ms, failed_leader=True)
        return self.isr.drop_from_isr(p, replica.broker)

    def _on_recovered(self, replica: ReplicaId, now_ms: int) -> list[ControllerAction]:
        self.ctx.metrics.replicas_recovered += 1
        self.ctx.next_ensure.pop(replica, None)
        p = self.ctx.partitions.get((replica.topic, replica.partition))
        if p is None:
            return []
        if p.leader == NO_LEADER:
            return self.elect(p, now_ms, failed_leader=False)
        # Tell it who leads; it truncates, catches up, and the leader adds it to the ISR.
        return self.ctx.send_state(p, [replica.broker])

    def left_behind(self, broker: int, now_ms: int) -> list[ControllerAction]:
        """``broker`` moved to another node: every process of it on the old one is gone (a
        bound replica dies with its node; a ghost of one is no replica any more), so each
        of its replicas is failed now -- no vouch for that process counts, it joins no ISR
        until its process on the new node answers (sim seeds 1594, 127) -- and recreated."""
        actions: list[ControllerAction] = []
        for p in self.ctx.sorted_partitions():
            rid = ReplicaId(p.topic, p.partition, broker)
            if broker in p.replicas and self.ctx.detector.on_dead(rid, now_ms):
                actions += self.on_failed(rid, now_ms)
        return actions

    def elect(self, p: PartitionState, now_ms: int, *, failed_leader: bool) -> list[ControllerAction]:
        key = (p.topic, p.partition)
        topic = self.ctx.topics[p.topic]
        rcfg = ReplicationConfig.from_topic_config(self.ctx.effective_config(topic))
        leos = {
            rid.broker: st.log_end_offset
            for rid, st in self.ctx.last_status.items()
            if rid.topic == p.topic and rid.partition == p.partition
        }
        was_online = p.leader != NO_LEADER
        trusted = self.ctx.trust.trusted(p, self.ctx.last_status) if self.isr.lossy(p) else None
        result = elect_leader(p, self.ctx.alive(p), rcfg.unclean_leader_election, leos, trusted, self.ctx.holds_data(p), self.ctx.heard(p))
        if result.offline and not was_online:
            return []  # still nobody to elect; nothing changes
        p.leader = result.leader
        self.ctx.detector.invalidate()  # leaders and followers may be beaten at different intervals
        if result.unclean:
            p.isr, p.elr = list(result.isr), []
        else:
            self.isr.set_isr(p, result.isr)
        if not result.offline:
            self.ctx.trust.in_sync(ReplicaId(p.topic, p.partition, result.leader))  # its log is the truth now
        p.leader_epoch += 1
        p.partition_epoch += 1
        if result.unclean:
            p.last_unclean_epoch = p.leader_epoch
            self.ctx.metrics.unclean_elections += 1
        if result.offline:
            if failed_leader:
                self.ctx.metrics.failovers_failed += 1
            self.ctx.failover_started.pop(key, None)
        else:
            self.ctx.metrics.failovers_total += 1
            self.ctx.failover_started.setdefault(key, now_ms)
        actions: list[ControllerAction] = [self.ctx.persist(p)]
        alive = self.ctx.alive(p)
        return actions + self.ctx.send_state(p, [b for b in p.replicas if alive(b)])

    def check(self, now_ms: int) -> list[ControllerAction]:
        """The timed part of liveness: replicas whose session expired are failed, and those
        due a heartbeat are sent one."""
        actions: list[ControllerAction] = []
        for rid in self.ctx.detector.check(now_ms):
            actions += self.on_failed(rid, now_ms)
            p = self.ctx.partitions.get((rid.topic, rid.partition))
            if p is not None:
                actions += self.ctx.persist_trust(p)
        for rid in self.ctx.detector.due(now_ms):
            actions.append(SendHeartbeat(rid, HeartbeatRequest(controller_epoch=self.ctx.controller_epoch)))
        return actions

    def rebalance_due(self, now_ms: int) -> list[ControllerAction]:
        """The periodic preferred-leader check (auto.leader.rebalance.enable)."""
        if not (self.ctx.config.auto_leader_rebalance and now_ms >= self.ctx.next_rebalance_ms):
            return []
        self.ctx.next_rebalance_ms = now_ms + self.ctx.config.leader_rebalance_interval_ms
        return self.rebalance_leaders(now_ms, imbalanced_only=True)

    def preferred_moves(self, imbalanced_only: bool = False) -> list[tuple[PartitionState, int]]:
        """The partitions whose leadership a rebalance would move now, with the preferred
        replica each would move to (for the periodic check, only on brokers over the
        imbalance threshold, and only once every ISR member answered this controller
        itself, not alive only by its start-up grace; the operator's does not wait)."""
        brokers = imbalanced_brokers(self.ctx.partitions.values(), self.ctx.config.leader_imbalance_per_broker_percentage) if imbalanced_only else None
        moves = []
        for p in self.ctx.sorted_partitions():
            if brokers is not None and p.preferred_leader not in brokers:
                continue
            alive, holds_data = self.ctx.alive(p), self.ctx.holds_data(p)
            heard = self.ctx.heard(p) if imbalanced_only else None
            target = preferred_leader_move(p, lambda b: alive(b) and holds_data(b), heard)
            if target is not None:
                moves.append((p, target))
        return moves

    def rebalance_leaders(self, now_ms: int, imbalanced_only: bool = False) -> list[ControllerAction]:
        """Move leadership back to preferred replicas that are healthy and in sync
        (:meth:`preferred_moves`)."""
        actions: list[ControllerAction] = []
        for p, target in self.preferred_moves(imbalanced_only):
            self.ctx.metrics.preferred_leader_elections += 1
            p.leader = target
            self.ctx.detector.invalidate()
            p.leader_epoch += 1
            p.partition_epoch += 1
            actions.append(self.ctx.persist(p))
            alive = self.ctx.alive(p)
            actions += self.ctx.send_state(p, [b for b in p.replicas if alive(b)])
        return actions
