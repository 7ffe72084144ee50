"""kcoord's tests. A package so that ``python -m tests.sim.run`` works from the repo root and
the simulation modules have a single import name under pytest and on the command line."""
