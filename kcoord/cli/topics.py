"""``kcoord topics create|list|describe|delete|describe-config|alter-config|add-partitions|delete-records``."""

from __future__ import annotations

import click

from ._common import Env, echo_json, make_table, parse_properties
from .cluster_cmds import partition_row, partitions_table
from ..replication.topic_plan import default_replication_factor

pass_env = click.make_pass_decorator(Env)


@click.group("topics", no_args_is_help=True)
def topics() -> None:
    """Create, list, describe, change and delete topics.

    \b
    Examples:
      kcoord topics create events --partitions 6 --replication-factor 3
      kcoord topics list
      kcoord topics describe events
      kcoord topics describe-config events
      kcoord topics alter-config events --set retention.ms=3600000 --delete segment.bytes
      kcoord topics add-partitions events --count 12
      kcoord topics delete-records events --partition 0 --offset 1000
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
        echo_json(env, names)
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
        echo_json(env, desc, indent=2, sort_keys=True)
        return
    config = ", ".join(f"{k}={v}" for k, v in sorted(desc["config"].items())) or "(defaults)"
    table = partitions_table(f"topic {topic!r}  config: {config}")
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


@topics.command("describe-config")
@click.argument("topic")
@click.option("--overrides", is_flag=True, help="Only the keys set on the topic itself.")
@click.option("--json", "as_json", is_flag=True, help="Print {key: {value, source, is_default, read_only}} as JSON.")
@pass_env
def describe_config(env: Env, topic: str, overrides: bool, as_json: bool) -> None:
    """Show every config key of a topic, its value and where the value comes from.

    SOURCE is Kafka's: DYNAMIC_TOPIC_CONFIG (set on the topic, by create -c or
    alter-config), STATIC_BROKER_CONFIG (the cluster's default topic config, given at
    deploy) or DEFAULT_CONFIG (kcoord's built-in default).

    \b
    Examples:
      kcoord topics describe-config events
      kcoord topics describe-config events --overrides --json
    """
    configs = env.admin().describe_topic_config(topic)
    if overrides:
        configs = {k: v for k, v in configs.items() if not v["is_default"]}
    if as_json:
        echo_json(env, configs, indent=2, sort_keys=True)
        return
    table = make_table(f"topic {topic!r} config", ("key", "value", "source"))
    for key, entry in sorted(configs.items()):
        source = entry["source"] + (" (read-only)" if entry["read_only"] else "")
        table.add_row(key, "" if entry["value"] is None else str(entry["value"]), source)
    env.out.print(table)


@topics.command("alter-config")
@click.argument("topic")
@click.option("--set", "set_", multiple=True, metavar="KEY=VALUE", help="Give a key a new value (repeatable).")
@click.option("--delete", "delete_", multiple=True, metavar="KEY", help="Put a key back to its default (repeatable).")
@click.option("--validate-only", is_flag=True, help="Check the change and show the result without applying it.")
@pass_env
def alter_config(env: Env, topic: str, set_: tuple[str, ...], delete_: tuple[str, ...], validate_only: bool) -> None:
    """Change some config keys of a topic; the others keep their values.

    The new config is checked like a creation config (unknown keys and bad values are
    refused, naming the key), stored by the controller and applied by the running replicas
    without a restart before the command returns. Retention of the internal
    __consumer_offsets topic cannot be changed, nor its cleanup.policy but to compact.

    \b
    Examples:
      kcoord topics alter-config events --set retention.ms=3600000
      kcoord topics alter-config events --set min.insync.replicas=2 --delete segment.bytes
      kcoord topics alter-config events --set max.message.bytes=1048576 --validate-only
      kcoord topics alter-config __consumer_offsets --set cleanup.policy=compact
    """
    props = parse_properties(set_, what="--set")
    if not props and not delete_:
        raise click.UsageError("give at least one --set KEY=VALUE or --delete KEY")
    both = sorted(set(props) & set(delete_))
    if both:
        raise click.UsageError(f"{', '.join(both)}: named by both --set and --delete")
    configs = env.admin().alter_topic_config(topic, set=props, delete=list(delete_), validate_only=validate_only)
    verb = "would set" if validate_only else "set"
    changed = [f"{k}={configs[k]['value']}" for k in props] + [f"{k} back to its default ({configs[k]['value']})" for k in delete_]
    env.out.print(f"topic {topic!r}: {verb} {', '.join(changed)}")


@topics.command("add-partitions")
@click.argument("topic")
@click.option("--count", type=int, required=True, help="The new total number of partitions (more than now).")
@click.option("--validate-only", is_flag=True, help="Check the change without applying it.")
@pass_env
def add_partitions(env: Env, topic: str, count: int, validate_only: bool) -> None:
    """Grow a topic to --count partitions and wait until the new ones have leaders.

    The count can only grow. New partitions are placed on the brokers as creation places
    them; producers and consumers see them after their next metadata refresh. Keys that
    hashed to one partition may hash to another from then on, as in Kafka.

    \b
    Examples:
      kcoord topics add-partitions events --count 12
      kcoord topics add-partitions events --count 12 --validate-only
    """
    from ..client.admin import NewPartitions

    with env.err.status(f"adding partitions to {topic!r}..."):
        result = env.admin().create_partitions({topic: NewPartitions(count)}, validate_only=validate_only)
    if validate_only:
        env.out.print(f"topic {topic!r} could grow to {result[topic]['num_partitions']} partitions")
        return
    env.out.print(f"topic {topic!r} now has {len(result[topic]['partitions'])} partitions")


@topics.command("delete-records")
@click.argument("topic")
@click.option("-p", "--partition", "partitions", type=int, multiple=True, required=True, help="Partition (repeatable).")
@click.option("--offset", type=int, required=True, help="Delete the records before this offset; -1 means the high watermark (all).")
@pass_env
def delete_records(env: Env, topic: str, partitions: tuple[int, ...], offset: int) -> None:
    """Delete the records of partitions before --offset (Kafka's DeleteRecords).

    The leader moves the partition's log start offset there; consumers positioned below
    it get OFFSET_OUT_OF_RANGE and reset by their auto_offset_reset. The offset may not be
    above the high watermark. Returns once every replica that could lead the partition has
    moved its log start too (the low watermark), so no failover brings the records back.

    \b
    Examples:
      kcoord topics delete-records events --partition 0 --offset 1000
      kcoord topics delete-records events -p 0 -p 1 --offset -1
    """
    from ..client.types import TopicPartition

    result = env.admin().delete_records({TopicPartition(topic, p): offset for p in partitions})
    for tp, info in sorted(result.items()):
        env.out.print(f"{tp.topic}-{tp.partition}: records before {info['low_watermark']} deleted (low watermark {info['low_watermark']})")


COMMANDS = [topics]
