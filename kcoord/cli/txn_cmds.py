"""``kcoord transactions list|describe|describe-producers|find-hanging|abort`` (what Kafka's
kafka-transactions.sh does, KIP-664)."""

from __future__ import annotations

import time
from typing import Any

import click

from ..client.types import TopicPartition
from ._common import CliError, Env, echo_json, make_table

pass_env = click.make_pass_decorator(Env)


def _ms(ts: int) -> str:
    if ts < 0:
        return "-"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts / 1000))


def _tps(tps: Any) -> list[str]:
    return [f"{tp.topic}-{tp.partition}" for tp in sorted(tps)]


@click.group("transactions", no_args_is_help=True)
def transactions() -> None:
    """Inspect transactions, and find and abort hanging ones (KIP-664).

    A hanging transaction is open at a partition (read_committed readers stop at its first
    offset) but its transaction coordinator does not hold it: nothing will ever end it but
    an operator's abort.

    \b
    Examples:
      kcoord transactions list --state Ongoing
      kcoord transactions describe etl-1
      kcoord transactions describe-producers --topic out
      kcoord transactions find-hanging --topic out
      kcoord transactions abort --topic out --partition 0 --start-offset 1200
    """


@transactions.command("list")
@click.option("--state", "states", multiple=True, metavar="STATE", help="Only transactions in this state: Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort (repeatable).")
@click.option("--producer-id", "producer_ids", multiple=True, type=int, help="Only this producer id (repeatable).")
@click.option("--duration-ms", type=click.IntRange(min=0), default=None, help="Only transactions running longer than this.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@pass_env
def list_(env: Env, states: tuple[str, ...], producer_ids: tuple[int, ...], duration_ms: int | None, as_json: bool) -> None:
    """List the transactional ids of every transaction coordinator with their state.

    \b
    Examples:
      kcoord transactions list
      kcoord transactions list --state Ongoing --duration-ms 60000 --json
    """
    try:
        found = env.admin().list_transactions(list(states) or None, list(producer_ids) or None, duration_ms)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--state") from None
    if as_json:
        echo_json(env, [t._asdict() for t in found], sort_keys=True)
        return
    table = make_table(f"{len(found)} transactional ids", ("transactional id", "producer id", "state", "coordinator"), right=("producer id", "coordinator"))
    for t in found:
        table.add_row(t.transactional_id, str(t.producer_id), t.state, str(t.coordinator))
    env.out.print(table)


@transactions.command("describe")
@click.argument("transactional_ids", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print the descriptions as JSON.")
@pass_env
def describe(env: Env, transactional_ids: tuple[str, ...], as_json: bool) -> None:
    """Show transactional ids as their coordinators hold them: state, producer id and
    epoch, timeout, when the transaction began and its partitions.

    \b
    Examples:
      kcoord transactions describe etl-1 etl-2
    """
    found = env.admin().describe_transactions(list(transactional_ids))
    if as_json:
        out = {tid: {**d._asdict(), "topic_partitions": _tps(d.topic_partitions)} for tid, d in found.items()}
        echo_json(env, out, indent=2, sort_keys=True)
        return
    table = make_table(
        f"{len(found)} transactional ids",
        ("transactional id", "coordinator", "state", "producer id", "epoch", "timeout ms", "started", "partitions"),
        right=("coordinator", "producer id", "epoch", "timeout ms"),
    )
    for tid, d in found.items():
        table.add_row(
            tid, str(d.coordinator_id), d.state, str(d.producer_id), str(d.producer_epoch), str(d.transaction_timeout_ms),
            _ms(d.transaction_start_time_ms), ", ".join(_tps(d.topic_partitions)) or "-",
        )
    env.out.print(table)


def _partitions(env: Env, topic: str, partitions: tuple[int, ...]) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for p in (partitions or env.client().partitions_for(topic))]


@transactions.command("describe-producers")
@click.option("--topic", required=True, help="Topic whose partition leaders to ask.")
@click.option("--partition", "partitions", multiple=True, type=click.IntRange(min=0), help="Only this partition (repeatable; default all).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_env
def describe_producers(env: Env, topic: str, partitions: tuple[int, ...], as_json: bool) -> None:
    """Show the producers each partition leader knows: epoch, last sequence, last timestamp,
    coordinator epoch and the first offset of its open transaction.

    \b
    Examples:
      kcoord transactions describe-producers --topic out --partition 0
    """
    found = env.admin().describe_producers(_partitions(env, topic, partitions))
    if as_json:
        echo_json(env, [{"topic": tp.topic, "partition": tp.partition, **p._asdict()} for tp, s in sorted(found.items()) for p in s.active_producers], indent=2, sort_keys=True)
        return
    cols = ("partition", "producer id", "epoch", "last sequence", "last timestamp", "coordinator epoch", "transaction start offset")
    table = make_table(f"producers of {topic}", cols, right=[c for c in cols if c != "last timestamp"])
    for tp, s in sorted(found.items()):
        for p in s.active_producers:
            table.add_row(
                str(tp.partition), str(p.producer_id), str(p.producer_epoch), str(p.last_sequence), _ms(p.last_timestamp),
                str(p.coordinator_epoch), "-" if p.current_transaction_start_offset < 0 else str(p.current_transaction_start_offset),
            )
    env.out.print(table)


@transactions.command("find-hanging")
@click.option("--topic", "topics", multiple=True, help="Only this topic's partitions (repeatable; default every topic).")
@click.option(
    "--max-transaction-timeout-ms",
    type=click.IntRange(min=0),
    default=None,
    help="Only transactions whose last write is older than this (default transaction.max.timeout.ms, 900000; 0: any age).",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@pass_env
def find_hanging(env: Env, topics: tuple[str, ...], max_transaction_timeout_ms: int | None, as_json: bool) -> None:
    """List transactions open at a partition that their coordinator does not hold as
    ongoing there; each row has what `abort` needs.

    \b
    Examples:
      kcoord transactions find-hanging
      kcoord transactions find-hanging --topic out --max-transaction-timeout-ms 0 --json
    """
    found = env.admin().find_hanging_transactions(list(topics) or None, None, max_transaction_timeout_ms)
    if as_json:
        rows = [{k: v for k, v in h._asdict().items() if k != "topic_partition"} | {"topic": h.topic_partition.topic, "partition": h.topic_partition.partition} for h in found]
        echo_json(env, rows, indent=2, sort_keys=True)
        return
    cols = ("topic", "partition", "producer id", "epoch", "coordinator epoch", "start offset", "last timestamp", "duration s", "transactional id", "why")
    table = make_table(f"{len(found)} hanging transactions", cols, right=("partition", "producer id", "epoch", "coordinator epoch", "start offset", "duration s"))
    for h in found:
        table.add_row(
            h.topic_partition.topic, str(h.topic_partition.partition), str(h.producer_id), str(h.producer_epoch), str(h.coordinator_epoch),
            str(h.start_offset), _ms(h.last_timestamp), "-" if h.duration_ms < 0 else f"{h.duration_ms / 1000:.0f}", h.transactional_id or "-", h.reason,
        )
    env.out.print(table)


@transactions.command("abort")
@click.option("--topic", required=True, help="The partition's topic.")
@click.option("--partition", required=True, type=click.IntRange(min=0), help="The partition.")
@click.option("--start-offset", type=click.IntRange(min=0), default=None, help="The open transaction that starts at this offset (finds its producer).")
@click.option("--producer-id", type=click.IntRange(min=0), default=None, help="The producer whose transaction to abort (instead of --start-offset).")
@click.option("--producer-epoch", type=click.IntRange(min=0), default=None, help="Its epoch (with --producer-id).")
@click.option("--coordinator-epoch", type=click.IntRange(min=0), default=None, help="Coordinator epoch for the marker (default: the leader's for the producer).")
@click.option("--json", "as_json", is_flag=True, help="Print what was written as JSON.")
@pass_env
def abort(
    env: Env, topic: str, partition: int, start_offset: int | None, producer_id: int | None, producer_epoch: int | None, coordinator_epoch: int | None, as_json: bool
) -> None:
    """Abort a hanging transaction: write an ABORT marker for its producer straight to the
    partition (the leader checks the epochs). The LSO then moves past it and read_committed
    readers go on.

    \b
    Examples:
      kcoord transactions abort --topic out --partition 0 --start-offset 1200
      kcoord transactions abort --topic out --partition 0 --producer-id 5001 --producer-epoch 3
    """
    admin = env.admin()
    tp = TopicPartition(topic, partition)
    if (start_offset is None) == (producer_id is None):
        raise click.UsageError("give --start-offset, or --producer-id with --producer-epoch")
    if start_offset is not None:
        if producer_epoch is not None:
            raise click.UsageError("--producer-epoch goes with --producer-id, not --start-offset")
        found = [p for p in admin.describe_producers([tp])[tp].active_producers if p.current_transaction_start_offset == start_offset]
        if not found:
            raise CliError(f"no transaction starting at offset {start_offset} is open at {topic}-{partition} (see `kcoord transactions describe-producers --topic {topic}`)")
        p = found[0]
        producer_id, producer_epoch = p.producer_id, p.producer_epoch
        if coordinator_epoch is None:
            coordinator_epoch = max(0, p.coordinator_epoch)
    elif producer_epoch is None:
        raise click.UsageError("--producer-id needs --producer-epoch")
    offset = admin.abort_transaction(tp, producer_id, producer_epoch, coordinator_epoch)
    if as_json:
        echo_json(env, {"topic": topic, "partition": partition, "producer_id": producer_id, "producer_epoch": producer_epoch, "marker_offset": offset}, sort_keys=True)
        return
    env.out.print(f"aborted producer {producer_id}'s transaction (epoch {producer_epoch}) at {topic}-{partition}: ABORT marker at offset {offset}")


COMMANDS = [transactions]
