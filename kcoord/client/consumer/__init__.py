"""The consumer: :class:`Consumer` (:mod:`.consumer`) owns a
:class:`~.subscription_state.SubscriptionState` (assigned partitions, positions, seeks) and a
:class:`~.fetcher.Fetcher` (the fetch pipeline, with the leader fetches it shares with Spark
and Ray Data reads) and a :class:`~.collector.RecordCollector` (what ``poll()`` returns, from
the fetched batches :mod:`.segments` decodes)."""

from .consumer import Consumer

__all__ = ["Consumer"]
