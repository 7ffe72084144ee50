"""The ISR and high-watermark rules a leader applies: followers' progress, proposals.

Rules (Kafka's, with time-based lag as in modern Kafka):

* A follower's LEO is the ``fetch_offset`` of its latest Fetch at the current epoch.
* A follower is *caught up* at time t if it fetched at t from offset >= the leader's LEO
  then, or from offset >= the leader's LEO at its previous fetch (it got everything that
  existed when it last asked). It falls out of the ISR when it has not been caught up for
  ``replica.lag.time.max.ms``.
* It joins the ISR again once its LEO reaches the HW and the start of the current epoch,
  and its log start offset (reported in its fetch) the leader's: an ISR member may be
  elected, and must not serve records an acknowledged DeleteRecords removed.
* The partition's low watermark, which DeleteRecords waits for, is the smallest log start
  over the replicas that could lead without fetching from this leader first (see
  :meth:`IsrState.low_watermark`).
* ISR changes are only *proposed* here (AlterPartition); they take effect when the
  controller confirms. Until then the HW is computed over the *maximal* ISR (current plus
  proposed additions; a proposed removal still counts), so it is never computed over a set
  smaller than the one the controller would elect from (KIP-497). A proposal whose answer
  is lost may have been applied, so its additions keep counting until the truth arrives.
* HW = min LEO over that ISR, and it never moves backwards.
* After the confirmed ISR changes, a member's LEO counts for the HW again only once it has
  fetched since the change. A shrink (or an expansion that lets the HW pass
  min.insync.replicas) would otherwise advance the HW with what a member reported before
  the change -- possibly by a process that lost its unflushed log since and restarted
  empty, which the leader cannot know before that process fetches (sim seed 1637: the HW
  rose to 22 over ISR [1, 0] while only the leader held those records). Kafka's KIP-903
  closes the same hole for ISR expansion with broker epochs.
* An ISR member's LEO counts only from its *admitted* process: the one the accepted
  expansion named, else the first heard in this leadership. Another process's fetches (an
  old one still running beside its successor) hold the HW until the controller changes the
  ISR (Kafka fences fetches with a stale broker epoch). Nor do they keep the member in the
  ISR: a member heard from another process than its admitted one is proposed out, and only
  an expansion the controller accepts names another process.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..protocol.controller import AlterPartitionRequest

UNKNOWN = -1


@dataclass
class FollowerProgress:
    broker: int
    log_end_offset: int = UNKNOWN
    last_fetch_ms: int = UNKNOWN
    leader_leo_at_last_fetch: int = UNKNOWN
    last_caught_up_ms: int = UNKNOWN
    incarnation: str = ""  # the follower process these figures come from
    # What its latest fetch said of it, for the leader to vouch with (Leader.heard).
    storage: str = ""
    partition_epoch: int = UNKNOWN
    directory_id: str = ""
    # Each process's log start and latest fetch: another process of the broker (an old one
    # still running beside its successor) may report a log start the one that counts lacks.
    log_starts: dict[str, tuple[int, int]] = field(default_factory=dict)
    # The confirmed ISR changed since this follower last fetched: its LEO counts neither
    # for the HW nor for rejoining the ISR until it fetches again (see the module's rules).
    reconfirm: bool = False
    # The process whose figures count for the HW while this follower is an ISR member: the
    # one the controller admitted (named in the accepted AlterPartition), else the first
    # heard in this leadership. An older process still running (a twin) must not count.
    admitted: str = ""
    admitted_caught_up_ms: int = UNKNOWN  # the admitted process's last caught-up time

    @property
    def log_start_offset(self) -> int:
        """The log start the latest process heard reported."""
        return self.log_starts.get(self.incarnation, (UNKNOWN, 0))[0]

    @property
    def caught_up_ms(self) -> int:
        """The last caught-up time the ISR lag rule judges: the admitted process's."""
        return self.admitted_caught_up_ms if self.admitted else self.last_caught_up_ms

    def lowest_log_start(self, now_ms: int, lag_max_ms: int, member: bool) -> int:
        """The smallest log start over the processes that may be this follower: the latest
        heard, any fetching lately and, for an ISR ``member``, the admitted one whatever the
        others report (outside the ISR none is known to be the one the controller would
        elect). UNKNOWN if one of them has not reported it."""
        starts = [
            start
            for inc, (start, heard_ms) in self.log_starts.items()
            if inc == self.incarnation or (member and inc == self.admitted) or now_ms - heard_ms <= lag_max_ms
        ]
        if not starts:
            return UNKNOWN
        return UNKNOWN if min(starts) < 0 else min(starts)

    def next_process_expiry(self, now_ms: int, lag_max_ms: int) -> int | None:
        """When the next process counted only for fetching lately stops counting."""
        ends = [
            heard_ms + lag_max_ms + 1
            for inc, (_, heard_ms) in self.log_starts.items()
            if inc != self.incarnation and now_ms - heard_ms <= lag_max_ms
        ]
        return min(ends) if ends else None

    def on_fetch(
        self,
        fetch_offset: int,
        leader_leo: int,
        now_ms: int,
        incarnation: str = "",
        storage: str = "",
        partition_epoch: int = UNKNOWN,
        directory_id: str = "",
        log_start_offset: int = UNKNOWN,
        lag_max_ms: int | None = None,
    ) -> None:
        self.reconfirm = False
        self.log_starts[incarnation] = (log_start_offset, now_ms)
        if len(self.log_starts) > 1 and lag_max_ms is not None:  # another process was heard
            for inc, (_, heard_ms) in list(self.log_starts.items()):
                if inc not in (incarnation, self.admitted) and now_ms - heard_ms > lag_max_ms:
                    del self.log_starts[inc]
        self.storage = storage
        self.directory_id = directory_id
        self.partition_epoch = partition_epoch
        if incarnation and self.incarnation and incarnation != self.incarnation:
            # Another process than the one heard before: what we knew of it says nothing.
            self.last_fetch_ms = self.leader_leo_at_last_fetch = self.last_caught_up_ms = UNKNOWN
        # The first process heard keeps the grace period an ISR member got at election
        # (Kafka's new leader counts every ISR follower caught up "now").
        if incarnation:
            self.incarnation = incarnation
        if fetch_offset >= leader_leo:
            self.last_caught_up_ms = now_ms
        elif self.last_fetch_ms >= 0 and fetch_offset >= self.leader_leo_at_last_fetch:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.log_end_offset = fetch_offset
        self.last_fetch_ms = now_ms
        self.leader_leo_at_last_fetch = leader_leo
        if self.admitted and incarnation == self.admitted:
            self.admitted_caught_up_ms = max(self.admitted_caught_up_ms, self.last_caught_up_ms)
        elif self.admitted:
            # Another process of an ISR member: the admitted one restarted (its progress is
            # gone, KIP-903) or an old one runs beside it; either way the member is out of
            # step until the controller names a process again.
            self.admitted_caught_up_ms = UNKNOWN


@dataclass
class IsrState:
    broker: int
    epoch: int
    epoch_start_offset: int
    replicas: list[int]
    isr: list[int]  # as confirmed by the controller
    partition_epoch: int
    followers: dict[int, FollowerProgress] = field(default_factory=dict)
    # The ISR we asked the controller for; None when no change is in flight.
    pending_isr: list[int] | None = None
    # Members of proposals whose answer never came (the controller may have applied them):
    # they count for the HW until a LeaderAndIsr or an AlterPartition answer says the truth.
    unconfirmed: list[int] = field(default_factory=list)
    # The AlterPartition we wait for (None: none in flight). Its answer is matched by
    # identity: an answer to an older proposal must never be taken for a newer one.
    alter_request: AlterPartitionRequest | None = None
    # The newest controller epoch heard (LeaderAndIsr, heartbeats) and the one known when
    # the request in flight left: a newer controller has none of its predecessor's calls.
    controller_epoch: int = -1
    alter_controller_epoch: int = -1
    retry_alter_at_ms: int = 0
    isr_shrinks: int = 0
    isr_expands: int = 0

    @classmethod
    def start(
        cls,
        broker: int,
        epoch: int,
        epoch_start_offset: int,
        replicas: list[int],
        isr: list[int],
        partition_epoch: int,
        now_ms: int,
    ) -> "IsrState":
        state = cls(broker, epoch, epoch_start_offset, list(replicas), list(isr), partition_epoch)
        for b in replicas:
            if b != broker:
                # ISR members get a grace period from now; their LEO is unknown until they
                # fetch at this epoch, which holds the HW until they do.
                p = FollowerProgress(b)
                p.last_caught_up_ms = now_ms if b in isr else UNKNOWN
                state.followers[b] = p
        return state

    # -- ISR ------------------------------------------------------------------------------
    @property
    def alter_in_flight(self) -> bool:
        return self.alter_request is not None

    def maximal_isr(self) -> list[int]:
        if self.pending_isr is None and not self.unconfirmed:
            return self.isr
        return sorted(set(self.isr) | set(self.pending_isr or ()) | set(self.unconfirmed), key=self._order)

    def _order(self, broker: int) -> int:
        try:
            return self.replicas.index(broker)
        except ValueError:
            return len(self.replicas) + broker

    def adopt_isr(self, isr: list[int]) -> bool:
        """Take ``isr`` as the confirmed ISR. Every follower's LEO must be reconfirmed by a
        fetch: one that left may have crashed, and a log end it may no longer have must not
        bring it back. Its caught-up time stays (Kafka never resets lastCaughtUpTime on an
        ISR change): proposed back in, it is not proposed out again at once."""
        changed = set(isr) != set(self.isr)
        if changed:
            for b in set(isr) | set(self.isr):
                p = self.followers.get(b)
                if p is not None:
                    p.reconfirm = True
                    if b not in isr:
                        p.admitted = ""  # back in only by an expansion naming its process
                        p.admitted_caught_up_ms = UNKNOWN
        self.isr = list(isr)
        return changed

    def admit(self, request: AlterPartitionRequest) -> None:
        """``request`` is proposed or accepted: its new members count for the HW only from
        the processes it names (KIP-903)."""
        for b, incarnation in request.incarnations.items():
            p = self.followers.get(b)
            if p is not None and b in request.new_isr and b not in self.isr:
                p.admitted = incarnation
                p.admitted_caught_up_ms = p.last_caught_up_ms if p.incarnation == incarnation else UNKNOWN

    def heard(self, broker: int) -> None:
        """A fetch of ``broker`` was taken: an ISR member with no admitted process yet is
        pinned to the one heard first. Never another one after: a process that fetches
        while the admitted one is silent may be an old one cut off from the controller,
        holding more than the process the controller would elect (sim seed 21425). The
        member is proposed out instead (:meth:`FollowerProgress.on_fetch`), and back in by
        an expansion naming the process that fetches, which the controller judges."""
        p = self.followers.get(broker)
        if p is None or broker not in self.isr or not p.incarnation or p.admitted:
            return
        p.admitted = p.incarnation
        p.admitted_caught_up_ms = p.last_caught_up_ms

    def update_from_controller(self, isr: list[int], replicas: list[int], partition_epoch: int, now_ms: int) -> bool:
        """A LeaderAndIsr at our epoch with a newer partition epoch (e.g. the controller
        removed a dead follower): adopt it and drop any proposal built on the old view.
        Returns whether the ISR changed."""
        changed = self.adopt_isr(isr)
        self.partition_epoch = partition_epoch
        # A proposal still in flight was built on the older partition epoch, so the
        # controller can no longer apply it (it checks the partition epoch): this ISR is
        # the whole truth, and the proposal's answer, when it comes, is ignored.
        self.unconfirmed = []
        self.pending_isr = None
        self.alter_request = None
        for b in replicas:
            if b != self.broker and b not in self.followers:
                self.followers[b] = FollowerProgress(b)
        for b in isr:
            p = self.followers.get(b)
            if p is not None and p.last_caught_up_ms < 0:
                p.last_caught_up_ms = now_ms  # grace period, as at become-leader
            if p is not None and p.admitted and p.admitted_caught_up_ms < 0:
                p.admitted_caught_up_ms = now_ms
        for b in list(self.followers):
            if b not in replicas:
                del self.followers[b]
        self.replicas = list(replicas)
        return changed

    def high_watermark_candidate(self, leader_leo: int) -> int:
        """min LEO over the maximal ISR; UNKNOWN if an ISR member has not reported (since
        the last ISR change)."""
        hw = leader_leo
        for b in self.maximal_isr():
            if b == self.broker:
                continue
            p = self.followers.get(b)
            if p is None or p.log_end_offset < 0 or p.reconfirm or (p.admitted and p.incarnation != p.admitted):
                return UNKNOWN
            hw = min(hw, p.log_end_offset)
        return hw

    def proposed_isr(
        self, leader_leo: int, high_watermark: int, now_ms: int, lag_max_ms: int, log_start_offset: int = 0
    ) -> list[int] | None:
        """The ISR we should ask for now, or None if no change is needed."""
        current = self.isr
        wanted = [self.broker]
        for b in self.replicas:
            if b == self.broker:
                continue
            p = self.followers.get(b)
            if p is None:
                continue
            if b in current:
                lagging = p.caught_up_ms < 0 or now_ms - p.caught_up_ms > lag_max_ms
                if not lagging:
                    wanted.append(b)
            elif (
                p.log_end_offset >= 0
                and not p.reconfirm
                and p.log_end_offset >= high_watermark
                and p.log_end_offset >= self.epoch_start_offset
                and p.log_start_offset >= log_start_offset
            ):
                wanted.append(b)
        wanted.sort(key=self._order)
        if set(wanted) == set(current):
            return None
        return wanted

    # -- the low watermark (DeleteRecords) -------------------------------------------------
    def _live(self, p: FollowerProgress, now_ms: int, lag_max_ms: int) -> bool:
        return p.last_fetch_ms >= 0 and now_ms - p.last_fetch_ms <= lag_max_ms

    def low_watermark(self, log_start_offset: int, now_ms: int, lag_max_ms: int, min_isr: int) -> int:
        """The smallest log start offset (``log_start_offset``: the leader's) over the
        replicas that could lead without fetching from this leader first, UNKNOWN if one
        of them has not reported it: the maximal ISR; while the confirmed ISR is below
        min.insync.replicas every replica, since the controller may hold any of them as
        an eligible leader replica (KIP-966, ELR members are not told to the leader); and,
        as Kafka's low watermark, every follower fetching lately (within
        replica.lag.time.max.ms). A follower outside these joins the ISR only after it
        reports the leader's log start (proposed_isr)."""
        every = len(self.isr) < min_isr
        isr = set(self.maximal_isr())
        low = log_start_offset
        for b in self.replicas:
            if b == self.broker:
                continue
            p = self.followers.get(b)
            if p is None:
                if every or b in isr:
                    return UNKNOWN
                continue
            if every or b in isr or self._live(p, now_ms, lag_max_ms):
                start = p.lowest_log_start(now_ms, lag_max_ms, b in isr)
                if start < 0:
                    return UNKNOWN
                low = min(low, start)
        return low

    def next_liveness_change(self, now_ms: int, lag_max_ms: int) -> int | None:
        """When the next follower (or process of one) fetching lately stops counting as live."""
        ends = [p.last_fetch_ms + lag_max_ms + 1 for p in self.followers.values() if self._live(p, now_ms, lag_max_ms)]
        ends += [e for p in self.followers.values() if (e := p.next_process_expiry(now_ms, lag_max_ms)) is not None]
        return min(ends) if ends else None

    def next_lag_deadline(self, lag_max_ms: int) -> int | None:
        deadline = None
        for b in self.isr:
            if b == self.broker:
                continue
            p = self.followers.get(b)
            if p is None or p.caught_up_ms < 0:
                continue
            at = p.caught_up_ms + lag_max_ms + 1
            deadline = at if deadline is None else min(deadline, at)
        return deadline
