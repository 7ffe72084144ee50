"""How a call to an actor ends when it does not end with an answer."""

from __future__ import annotations

DEAD = "dead"  # the actor is dead, restarting or unknown (Ray's verdict, the GCS's, or its channel broke mid-write)
TIMEOUT = "timeout"  # no answer in time (or Ray lost it): the outcome is unknown
ERROR = "error"  # the method raised in the actor, or the call could not be made


# What a Kafka client would call each: the broker went away mid-request, the request timed
# out, the broker failed it. Clients count failed requests under these names (metrics()).
KAFKA_NAMES = {DEAD: "NETWORK_EXCEPTION", TIMEOUT: "REQUEST_TIMED_OUT", ERROR: "UNKNOWN_SERVER_ERROR"}


class CallFailed(Exception):
    """A call ended without an answer: ``kind`` is :data:`DEAD`, :data:`TIMEOUT` or
    :data:`ERROR`, ``detail`` says how."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail

    @property
    def kafka_name(self) -> str:
        return KAFKA_NAMES[self.kind]
