"""Kafka wire protocol for kcoord: unchanged Kafka clients and tools produce and consume.

One asyncio TCP listener per Ray node (:mod:`.actor`) speaks Kafka's binary protocol
(:mod:`.server`, request layouts from kafka-python's schema-generated ``kafka.protocol``),
maps each request to kcoord's msgpack messages (:mod:`.handlers`) and calls the replica,
controller and group-coordinator actors through :mod:`.routing`, the only module here that
knows about them. :mod:`.batches` converts between Kafka's v2 record batches and kcoord's.

This package's ``__init__`` imports nothing: :mod:`kcoord.records` imports ``.batches``.
"""
