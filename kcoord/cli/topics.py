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
@click.option("--if-not-exists", is_flag=True, help="Succeed without changing anything if the topic exists.")
@pass_env
def create(env: Env, topic: str, partitions: int, replication_factor: int | None, config: tuple[str, ...], if_not_exists: bool) -> None:
    """Create a topic and wait until every partition has a leader.

    With --if-not-exists an existing topic is left as it is (its partitions and config
    are not compared with the options), as kafka-topics.sh does.

    \b
    Examples:
      kcoord topics create events -p 6 -r 3 -c min.insync.replicas=2
      kcoord topics create logs -c retention.ms=3600000
      kcoord topics create events --if-not-exists
    """
    from ..protocol.errors import ErrorCode, KafkaError

    props = parse_properties(config)
    admin = env.admin()
    if replication_factor is None:
        replication_factor = default_replication_factor(len(admin.cluster.brokers))
    try:
        with env.err.status(f"creating topic {topic!r}..."):
            desc = admin.create_topic(topic, partitions=partitions, replication_factor=replication_factor, config=props)
    except KafkaError as exc:
        if if_not_exists and exc.code == ErrorCode.TOPIC_ALREADY_EXISTS:
            env.out.print(f"topic {topic!r} already exists; nothing to do")
            return
        raise
    env.out.print(f"created topic {topic!r}: {len(desc['partitions'])} partitions, replication factor {replication_factor}")


@topics.command("list")
@click.option("--internal", is_flag=True, help="Include internal topics (__consumer_offsets).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of names.")
@pass_env
def list_(env: Env, internal: bool, as_json: bool) -> None:
    """List topic names, one per line.

    \b
    Examples:
      kcoord topics list
      kcoord topics list --internal --json
    """
    names = env.admin().list_topics(internal=internal)
    if as_json:
        click.echo(json.dumps(names), file=env.stdout)
        return
    for name in names:
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
@click.option("--if-exists", is_flag=True, help="Succeed if there is no such topic.")
@pass_env
def delete(env: Env, topic: str, if_exists: bool) -> None:
    """Delete a topic, its replica actors and their logs.

    \b
    Examples:
      kcoord topics delete events
      kcoord topics delete events --if-exists
    """
    from ..protocol.errors import ErrorCode, KafkaError

    try:
        env.admin().delete_topic(topic)
    except KafkaError as exc:
        if if_exists and exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            env.out.print(f"topic {topic!r} does not exist; nothing to do")
            return
        raise
    env.out.print(f"deleted topic {topic!r}")


COMMANDS = [topics]
