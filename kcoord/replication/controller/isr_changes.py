"""ISR changes: leaders' AlterPartition requests, followers dropped by the controller, and
the ELR (KIP-966) that follows the ISR of a lossy topic.
"""

from __future__ import annotations

from ...protocol.controller import AlterPartitionRequest, AlterPartitionResponse
from ...protocol.errors import ErrorCode
from ..config import ReplicationConfig
from ..controller_actions import ControllerAction, ReplicaId
from ..election import shrink_isr_without
from ..metadata import PartitionState, TopicState
from ..topic_plan import LOG_KEYS
from .context import ControllerContext


class IsrChanges:
    """Who is in sync: the ISR and ELR of each partition, changed only here."""

    def __init__(self, ctx: ControllerContext) -> None:
        self.ctx = ctx

    def alter_partition(self, req: AlterPartitionRequest, now_ms: int) -> tuple[AlterPartitionResponse, list[ControllerAction]]:
        p = self.ctx.partitions.get((req.topic, req.partition))
        if p is None:
            return AlterPartitionResponse(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{req.topic}-{req.partition} does not exist"), []

        def answer(code: int, msg: str | None = None) -> AlterPartitionResponse:
            return AlterPartitionResponse(code, msg, p.leader, p.leader_epoch, p.partition_epoch, list(p.isr))

        if req.leader != p.leader or req.leader_epoch != p.leader_epoch:
            return answer(ErrorCode.FENCED_LEADER_EPOCH, f"leader {req.leader} at epoch {req.leader_epoch} is not the current leader ({p.leader} at {p.leader_epoch})"), []
        new_isr = list(dict.fromkeys(req.new_isr))
        if req.partition_epoch != p.partition_epoch:
            if req.partition_epoch < p.partition_epoch and sorted(new_isr) == sorted(p.isr):
                # A retry (or duplicate) of a change already applied: say so (Kafka's
                # equalsAllowStalePartitionEpoch), or the leader would take it as refused.
                return answer(ErrorCode.NONE), []
            return answer(ErrorCode.INVALID_UPDATE_VERSION, f"partition epoch {req.partition_epoch} is stale (current {p.partition_epoch})"), []
        if 0 <= req.config_version < self.ctx.topics[p.topic].config_version:
            # Judged under an older config (a min ISR since raised: its ISR and ELR would
            # not match the leader's HW): refused; the leader retries once told the new one.
            return answer(ErrorCode.INVALID_UPDATE_VERSION, f"judged under config version {req.config_version}, "
                          f"current {self.ctx.topics[p.topic].config_version}"), self.ctx.send_state(p, [p.leader])
        if p.leader not in new_isr or any(b not in p.replicas for b in new_isr):
            return answer(ErrorCode.INVALID_REQUEST, f"ISR {req.new_isr} must contain the leader and only replicas of {p.replicas}"), []
        added = [b for b in new_isr if b not in p.isr]
        ineligible = [b for b in added if not self._may_join(ReplicaId(p.topic, p.partition, b), req)]
        if ineligible:
            # Refused with a new partition epoch, so a repeated copy of this request that
            # arrives once the replica is live is stale, not applied behind the leader's back.
            p.partition_epoch += 1
            return answer(ErrorCode.INELIGIBLE_REPLICA, f"replicas {ineligible} are not live (or restarted since the leader judged them) and cannot join the ISR"), [
                self.ctx.persist(p)
            ]
        removed = [b for b in p.isr if b not in new_isr]
        if added:
            self.ctx.metrics.isr_expands += 1
        if removed:
            self.ctx.metrics.isr_shrinks += 1
        self.set_isr(p, sorted(new_isr, key=p.replicas.index))
        for b in added:
            self.ctx.trust.in_sync(ReplicaId(p.topic, p.partition, b))  # caught up with the leader
        p.partition_epoch += 1
        return answer(ErrorCode.NONE), [self.ctx.persist(p)]

    def _may_join(self, replica: ReplicaId, req: AlterPartitionRequest) -> bool:
        """Whether ``replica`` may join the ISR on the leader's word (KIP-903): it is alive,
        it has answered this controller -- a controller that just started knows only the
        process a predecessor recorded, which may have died since (with its disk, if its
        broker moved to another node; sim seed 43725) -- and the leader judged it from
        that same process."""
        return self.ctx.detector.is_alive(replica) and self.ctx.detector.has_answered(replica) and not self.ctx.trust.stale_process(replica, req.incarnations.get(replica.broker))

    def drop_from_isr(self, p: PartitionState, broker: int) -> list[ControllerAction]:
        """Take follower ``broker`` out of ``p``'s ISR and tell the live replicas; nothing
        when the ISR cannot shrink (see :func:`shrink_isr_without`)."""
        new_isr = shrink_isr_without(p, broker)
        if new_isr is None:
            return []
        self.ctx.metrics.isr_shrinks += 1
        self.set_isr(p, new_isr)
        p.partition_epoch += 1
        actions: list[ControllerAction] = [self.ctx.persist(p)]
        alive = self.ctx.alive(p)
        return actions + self.ctx.send_state(p, [b for b in p.replicas if alive(b)])

    def lossy(self, p: PartitionState) -> bool:
        """Whether a crash can lose acknowledged data of ``p``'s replicas: their appends are
        not each fsynced (flush.messages != 1), so durability comes from replication alone."""
        return self.elr_basis(self.ctx.topics[p.topic])[1]

    def elr_basis(self, topic: TopicState) -> tuple[int, bool]:
        """What an ELR of ``topic`` was formed under: its min.insync.replicas, and whether
        it is lossy (only lossy topics keep an ELR)."""
        from ...log import LogConfig

        cfg = self.ctx.effective_config(topic)
        lossy = LogConfig.from_topic_config({k: v for k, v in cfg.items() if k in LOG_KEYS}).flush_messages != 1
        return ReplicationConfig.from_topic_config(cfg).min_insync_replicas, lossy

    def clear_elr(self, p: PartitionState) -> list[ControllerAction]:
        """Empty ``p``'s ELR (a partition change: new partition epoch), persisted."""
        if not p.elr:
            return []
        before, p.elr = p.elr, []
        self.ctx.trust.witness_elr(p, before, self.ctx.last_status)
        p.partition_epoch += 1
        return [self.ctx.persist(p)]

    def set_isr(self, p: PartitionState, isr: list[int]) -> None:
        """Change the ISR; for lossy topics keep the ELR: who leaves while the ISR is below
        min.insync.replicas joins it (and keeps every acknowledged record, since none can be
        acknowledged until the ISR is back at min.insync.replicas, which empties it)."""
        old = p.isr
        p.isr = list(isr)
        if not self.lossy(p):
            p.elr = []
            return
        min_isr = ReplicationConfig.from_topic_config(self.ctx.effective_config(self.ctx.topics[p.topic])).min_insync_replicas
        before = list(p.elr)
        if len(p.isr) >= min_isr:
            p.elr = []
        else:
            p.elr = [b for b in p.replicas if b not in p.isr and (b in p.elr or b in old)]
        self.ctx.trust.witness_elr(p, before, self.ctx.last_status)
