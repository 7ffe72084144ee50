"""``kcoord topics create|list|describe|delete``."""

from __future__ import annotations

import json

import click
from rich.table import Table

from ._common import Env, parse_properties
from .cluster_cmds import partition_row
from ..replication.topic_plan import default_replication_factor

pass_env = click.make_pass_decorator(Env)


@click.group("topics", no_args_is_help=True)
def topics() -> None:
    """Create, list, describe and delete topics.

    \b
    Examples:
      kcoord topics create events --partitions 6 --replication-factor 3
      kcoord topics list
      kcoord topics describe events
      kcoord topics delete events
    """


@topics.command("create")
@click.argument("topic")
@click.option("-p", "--partitions", type=int, default=1, show_default=True, help="Number of partitions.")
@click.option("-r", "--replication-factor", type=int, default=None, help="Replicas per partition [default: min(3, brokers)].")
@click.option("-c", "--config", "config", multiple=True, metavar="KEY=VALUE", help="Topic config, e.g. min.insync.replicas=2 (repeatable).")
@pass_env
def create(env: Env, topic: str, partitions: int, replication_factor: int | None, config: tuple[str, ...]) -> None:
    """Create a topic and wait until every partition has a leader.

    \b
    Examples:
      kcoord topics create events -p 6 -r 3 -c min.insync.replicas=2
      kcoord topics create logs -c retention.ms=3600000
    """
    props = parse_properties(config)
    admin = env.admin()
    if replication_factor is None:
        replication_factor = default_replication_factor(len(admin.cluster.brokers))
    with env.err.status(f"creating topic {topic!r}..."):
        desc = admin.create_topic(topic, partitions=partitions, replication_factor=replication_factor, config=props)
    env.out.print(f"created topic {topic!r}: {len(desc['partitions'])} partitions, replication factor {replication_factor}")


@topics.command("list")
@click.option("--internal", is_flag=True, help="Include internal topics (__consumer_offsets).")
@pass_env
def list_(env: Env, internal: bool) -> None:
    """List topic names, one per line.

    \b
    Examples:
      kcoord topics list
      kcoord topics list --internal
    """
    for name in env.admin().list_topics(internal=internal):
        click.echo(name, file=env.stdout)


@topics.command("describe")
@click.argument("topic")
@click.option("--json", "as_json", is_flag=True, help="Print the description as JSON.")
@pass_env
def describe(env: Env, topic: str, as_json: bool) -> None:
    """Show a topic's config and each partition's leader, epoch, replicas, ISR, HW and LEO.

    \b
    Examples:
      kcoord topics describe events
      kcoord topics describe events --json
    """
    desc = env.admin().describe_topic(topic)
    if as_json:
        click.echo(json.dumps(desc, indent=2, sort_keys=True), file=env.stdout)
        return
    config = ", ".join(f"{k}={v}" for k, v in sorted(desc["config"].items())) or "(defaults)"
    table = Table(title=f"topic {topic!r}  config: {config}", title_justify="left")
    for col in ("topic", "partition", "leader", "epoch", "replicas", "ISR", "HW", "LEO", "state"):
        table.add_column(col, justify="right" if col in ("partition", "leader", "epoch", "HW", "LEO") else "left")
    for p in desc["partitions"]:
        table.add_row(*partition_row(topic, p))
    env.out.print(table)


@topics.command("delete")
@click.argument("topic")
@pass_env
def delete(env: Env, topic: str) -> None:
    """Delete a topic, its replica actors and their logs.

    \b
    Example:
      kcoord topics delete events
    """
    env.admin().delete_topic(topic)
    env.out.print(f"deleted topic {topic!r}")


COMMANDS = [topics]
