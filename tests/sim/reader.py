"""The simulated reader: long-polls one partition from its leader and reports every batch
and high watermark it was served (invariant 4)."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from kcoord import records
from kcoord.protocol.codec import Message
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.replication import FetchRequest, FetchResponse

from .clients import RETRIABLE_METADATA, Client, LeaderDiscovery
from .kernel import OK

if TYPE_CHECKING:
    from .simulation import Simulation

E = ErrorCode


class Reader(Client, LeaderDiscovery):
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
