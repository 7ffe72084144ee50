"""The chaos run's observer: a thread that samples every replica's and the group
coordinator's view of itself, and the group, into ``observer.jsonl`` for the checker."""

from __future__ import annotations

import threading
import time

from tests.chaos.history import History
from tests.chaos.settings import GROUP, NAMESPACE, OFFSETS, TOPIC


class Observer(threading.Thread):
    """Samples every replica of the data topic and __consumer_offsets (as each describes
    itself) twice a second and the group once a second; the checker uses the samples for
    invariants 3, 4 and 6 and to know when a partition had a live leader."""

    def __init__(self, cluster, admin, history: History, coordinators: int = 2) -> None:
        super().__init__(daemon=True)
        self.cluster = cluster
        self.admin = admin
        self.history = history
        self.stop_event = threading.Event()
        self.samples = 0
        from kcoord.group.placement import coordinator_for

        self.coordinator = coordinator_for(GROUP, coordinators)  # the group's coordinator
        self._coordinator_handle = None

    def _ask_coordinator(self):
        """describe() of the group's coordinator (None if its actor cannot be found)."""
        import ray

        from kcoord.protocol import names

        try:
            if self._coordinator_handle is None:
                self._coordinator_handle = ray.get_actor(names.group_coordinator(self.cluster.name, self.coordinator), namespace=NAMESPACE)
            return self._coordinator_handle.describe.remote()
        except Exception:  # noqa: BLE001 - restarting, or its node is gone
            self._coordinator_handle = None
            return None

    def run(self) -> None:
        import ray

        group_thread = threading.Thread(target=self._watch_group, daemon=True)
        group_thread.start()
        while not self.stop_event.wait(0.3):
            # both topics at once; a replica that does not answer within a second is not
            # serving (paused, dead, restarting) and is left out of the sample
            t = time.time()
            sent = []
            for topic in (TOPIC, OFFSETS):
                try:
                    md = self.cluster.topic(topic, refresh=True)
                except Exception:  # noqa: BLE001 - controller down or paused: the cached view
                    md = self.cluster.cached_topic(topic)
                    if md is None:
                        continue
                refs = {}
                for pm in md.partitions:
                    for b in pm.replicas:
                        try:
                            refs[(pm.partition, b)] = self.cluster.replica(topic, pm.partition, b, fresh=True).describe.remote()
                        except Exception:  # noqa: BLE001
                            pass
                sent.append((topic, md, refs))
            coordinator_ref = self._ask_coordinator()
            all_refs = [r for _, _, refs in sent for r in refs.values()] + ([coordinator_ref] if coordinator_ref is not None else [])
            ready, _ = ray.wait(all_refs, num_returns=len(all_refs), timeout=1.0)
            ready = set(ready)
            self._coordinator_sample(t, coordinator_ref if coordinator_ref in ready else None)
            for topic, md, refs in sent:
                for pm in md.partitions:
                    reps, live = [], False
                    for b in pm.replicas:
                        ref = refs.get((pm.partition, b))
                        if ref is None or ref not in ready:
                            continue
                        try:
                            info = ray.get(ref, timeout=0)
                        except Exception:  # noqa: BLE001
                            continue
                        reps.append([b, info["incarnation"], info["role"], info["leader_epoch"], info["high_watermark"], info["log_end_offset"]])
                        live = live or (info["role"] == "leader" and b == pm.leader and info["leader_epoch"] == pm.leader_epoch)
                    self.history.write("replicas", t=t, topic=topic, partition=pm.partition, leader=pm.leader, epoch=pm.leader_epoch,
                                       isr=list(pm.isr), replicas=reps, live_leader=live)
            self.samples += 1

    def _coordinator_sample(self, t: float, ref) -> None:
        """The group's coordinator: live if it answered within the second and has loaded
        its partition (it serves the group only then); with its group's state."""
        import ray

        info = None
        if ref is not None:
            try:
                info = ray.get(ref, timeout=0)
            except Exception:  # noqa: BLE001
                info = None
        if info is None:
            self.history.write("coordinator", t=t, index=self.coordinator, live=False)
            return
        g = info.get("groups", {}).get(GROUP) or {}
        self.history.write("coordinator", t=t, index=self.coordinator, live=bool(info.get("loaded")), incarnation=info.get("incarnation"),
                           pid=info.get("pid"), load=info.get("load"), loading=info.get("loading") or None, state=g.get("state"), gen=g.get("generation"),
                           members=len(g.get("members", [])))

    def _watch_group(self) -> None:
        """The group once a second, in its own thread: describe_group asks every leader for
        its log end and may wait out a dead one, which must not hold up the replica samples."""
        while not self.stop_event.wait(1.0):
            t = time.time()
            try:
                g = self.admin.describe_group(GROUP)
            except Exception:  # noqa: BLE001
                continue
            self.history.write(
                "group", t=t, state=g["state"], gen=g["generation"],
                members={m["member_id"]: m["assignment"].get(TOPIC, []) for m in g["members"]},
                committed={str(r["partition"]): r["committed_offset"] for r in g["offsets"] if r["topic"] == TOPIC},
            )
