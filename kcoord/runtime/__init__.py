"""What a driver needs from the world, as small interfaces.

Every stateful part of kcoord is a sans-I/O core (inputs and ``now_ms`` in, actions out)
wrapped by one *driver* that owns everything the core must not do itself: request tokens
and their waiters, the order actions run in, timers, retries. A driver touches the world
only through the interfaces here -- a :class:`~.clock.Clock` and a
:class:`~.transport.Transport` -- plus the metadata store and log directory it is given.

Two worlds implement them: the Ray actor shells (``actors/``: asyncio, Ray actor calls,
Ray's GCS, real files) and the deterministic simulation (``tests/sim``: one seeded event
heap, a fake network, an in-memory store and disk). The drivers are the same code in both,
which is what lets the simulation's verdicts speak for production.
"""

from .clock import Alarm, Clock, Timer
from .transport import Outcome, ReplyFn, Transport

__all__ = ["Alarm", "Clock", "Outcome", "ReplyFn", "Timer", "Transport"]
