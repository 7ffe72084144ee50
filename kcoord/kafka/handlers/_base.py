"""What every handler gets: the backend (kcoord's actors) and this listener's address."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ...protocol import names
from ...protocol.errors import ErrorCode

# The group coordinators' internal topic, reported as internal in Metadata.
OFFSETS_TOPIC = names.OFFSETS_TOPIC
_LISTENERS_TTL_S = 5.0


@dataclass
class BrokerView:
    """Every kcoord broker as a Kafka broker: id -> (host, port) of a listener."""

    brokers: list[tuple[int, str, int]]
    controller_id: int
    home: int  # a broker id served at this listener's own address

    def address(self, broker: int) -> tuple[str, int]:
        for b, h, p in self.brokers:
            if b == broker:
                return h, p
        return self.brokers[0][1], self.brokers[0][2]


@dataclass
class ListenerContext:
    backend: Any  # routing.Backend, or a fake with the same methods in unit tests
    host: str  # advertised host of this listener
    ports: dict[int, int] = field(default_factory=dict)  # broker -> port of this listener
    node_id: str = ""  # Ray node this listener runs on
    cluster_id: str = ""
    auto_create_topics: bool = True  # Kafka's auto.create.topics.enable
    default_partitions: int = 1  # Kafka's num.partitions
    default_replication_factor: int = 3  # capped at the number of brokers
    listeners: Callable[[], dict[str, dict]] | None = None  # node id -> {"host", "ports"}
    # kcoord.kafka.listener_security.ListenerSecurity; None: a plaintext listener that authorizes
    # everything, as a Kafka broker without an authorizer
    security: Any = None
    _listeners_cache: tuple[float, dict[str, dict]] = field(default=(0.0, {}))

    def allowed(self, conn: Any, operation: Any, resource_type: Any, name: str) -> bool:
        """Whether ``conn``'s principal may do ``operation`` on the resource (ACLs)."""
        return self.security is None or self.security.authorize(conn, operation, resource_type, name)

    def allowed_any(self, conn: Any, operation: Any, resource_type: Any) -> bool:
        """Whether it may do ``operation`` on some resource of the type (KIP-679)."""
        return self.security is None or self.security.authorize_any(conn, operation, resource_type)

    def listener_map(self) -> dict[str, dict]:
        now = time.monotonic()
        if self.listeners is None:
            return {}
        if now - self._listeners_cache[0] > _LISTENERS_TTL_S:
            try:
                self._listeners_cache = (now, dict(self.listeners()))
            except Exception:
                self._listeners_cache = (now, self._listeners_cache[1])
        return self._listeners_cache[1]

    async def broker_view(self) -> BrokerView:
        """Broker b is at the listener of the node it is bound to, on that listener's port
        for b; an unbound broker (one Ray node: brokers are logical) at this listener."""
        info = await self.backend.describe_cluster()
        broker_ids = sorted(info.brokers) or sorted(self.ports) or [0]
        nodes = await self.backend.broker_nodes()
        listeners = self.listener_map()
        brokers = []
        home = None
        for b in broker_ids:
            rec = listeners.get(nodes.get(b, ""))
            if rec is not None and b in rec["ports"]:
                host, port = rec["host"], rec["ports"][b]
            else:
                host, port = self.host, self.ports.get(b, -1)
            if host == self.host and port == self.ports.get(b) and home is None:
                home = b
            brokers.append((b, host, port))
        brokers = [x for x in brokers if x[2] > 0] or [(b, self.host, p) for b, p in sorted(self.ports.items())]
        if home is None:
            home = brokers[0][0]
        return BrokerView(brokers, controller_id=home, home=home)


def coordinator_broker(view: BrokerView, index: int) -> int:
    """The Kafka broker id that stands for coordinator ``index`` (group or transaction)."""
    ids = [b for b, _, _ in view.brokers]
    return ids[index % len(ids)]


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)
