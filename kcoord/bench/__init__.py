"""The benchmark suite's plumbing: what ``kcoord bench`` needs around ``benchmarks/``.

One concept per module: :mod:`.machine` (what the figures were measured on), :mod:`.runner`
(run one benchmark script), :mod:`.results` (the combined ``results.json``),
:mod:`.figures` (the numbers the report shows, pulled out of results.json),
:mod:`.targets` (met or missed, and by how much), :mod:`.plots` (PNG figures, matplotlib
imported lazily), :mod:`.markdown` (the tables of PERFORMANCE.md), :mod:`.stats`
(percentiles for the benchmark scripts) and :mod:`.suite` (all of it, in order).

Nothing here imports Ray: the benchmark scripts do, in their own processes.
"""
