"""The states of a consumer's group membership, as the client sees them.

The client's view is coarser than the coordinator's group states: it only needs to know
whether it holds a generation (``STABLE``), is in the middle of getting one
(``REBALANCING``) or has none (``UNJOINED``).
"""

UNJOINED = "unjoined"
REBALANCING = "rebalancing"
STABLE = "stable"
