"""Continuous micro-batch queries from a consumer group, exactly once end to end.

:mod:`.protocol` is the engine-neutral commit protocol (sans I/O); :mod:`.driver` runs it
against a cluster for an engine (:mod:`kcoord.spark.stream`, :func:`kcoord.ray_data.stream`).
"""
