"""kcoord's clients, laid out by concept (as aiokafka's):

* :mod:`.cluster` -- :class:`~.cluster.ClusterClient`: finds a cluster's actors by name,
  caches metadata, routes calls to partition leaders and the controller with retries,
  ListOffsets lookups;
* :mod:`.producer` -- :class:`~.producer.Producer` and its accumulator, sender, identity,
  partitioner;
* :mod:`.consumer` -- :class:`~.consumer.Consumer`, its subscription state, fetcher and
  record decoding;
* :mod:`.coordinator` -- the consumer-group member (join/sync/heartbeat), offset commits,
  calls to the group coordinators;
* :mod:`.admin` -- :class:`~.admin.Admin`: topics, offsets, groups;
* :mod:`.types` and :mod:`.errors` -- the values and exceptions of the API.

Calls to actors (timeouts, GCS liveness probes, cached handles) go through
:mod:`kcoord.calls`, shared with the Spark/Ray Data tasks, the Kafka listener and the actors.
"""
