"""Moved: the direct-call channel is :mod:`kcoord.calls.channel` (the wire) and
:mod:`kcoord.calls.direct` (endpoints, suspects). This module keeps the old import path."""

from __future__ import annotations

from kcoord.calls.channel import (  # noqa: F401
    HEADER,
    MAX_FRAME,
    METHODS,
    ChannelClient,
    ChannelServer,
    ChannelUnavailable,
    Endpoint,
    RemoteError,
    enabled,
)
from kcoord.calls.direct import (  # noqa: F401
    LOOKUP_PROBE_S,
    LOOKUP_RETRY_S,
    SUSPECT_PROBE_S,
    SUSPECT_PROBES,
    DirectCalls,
    current_node_id,
)
