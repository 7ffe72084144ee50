"""kcoord's clients, laid out by concept (as aiokafka's):

* :mod:`.cluster` -- :class:`~.cluster.ClusterClient`: finds a cluster's actors by name,
  caches metadata, routes calls to partition leaders and the controller with retries,
  ListOffsets lookups;
* :mod:`.producer` -- :class:`~.producer.Producer` and its accumulator, sender, identity,
  partitioner;
* :mod:`.consumer` -- :class:`~.consumer.Consumer`, its subscription state, fetcher,
  record collector and decoding;
* :mod:`.coordinator` -- the consumer-group member (join/sync, heartbeats), offset commits,
  calls to the group coordinators;
* :mod:`.admin` -- :class:`~.admin.Admin`: topics, configs, offsets and records, groups
  (:mod:`.admin_groups`), users and ACLs (:mod:`.security_admin`);
* :mod:`.aio` -- :class:`~.aio.AIOProducer` and :class:`~.aio.AIOConsumer`: the asyncio flavour;
* :mod:`.types` and :mod:`.errors` -- the values and exceptions of the API.

Calls to actors (direct-call channels, timeouts, GCS liveness probes, cached handles, the
retry policy) go through :mod:`kcoord.calls`, the one call stack shared with the Spark/Ray
Data tasks, the Kafka listener and the actors.
"""
