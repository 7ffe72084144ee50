"""``kcoord groups list|describe|reset-offsets|delete``."""

from __future__ import annotations

import click

from ..client.types import TopicPartition
from ._common import CliError, Env, echo_json, make_table, parse_offsets

pass_env = click.make_pass_decorator(Env)


@click.group("groups", no_args_is_help=True)
def groups() -> None:
    """Inspect consumer groups, reset their offsets, delete them.

    \b
    Examples:
      kcoord groups list
      kcoord groups describe billing
      kcoord groups reset-offsets billing --topic events --to earliest
    """


@groups.command("list")
@click.option("--state", "states", multiple=True, help="Only groups in this state, e.g. Stable, Empty (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of groups.")
@pass_env
def list_(env: Env, states: tuple[str, ...], as_json: bool) -> None:
    """List consumer groups with their state and coordinator.

    \b
    Examples:
      kcoord groups list
      kcoord groups list --state Stable --json
    """
    found = env.admin().list_groups(list(states) or None)
    if as_json:
        echo_json(env, found, sort_keys=True, default=str)
        return
    table = make_table(f"{len(found)} consumer groups", ("group", "state", "protocol type", "coordinator"))
    for g in found:
        table.add_row(g["group_id"], g["state"], g["protocol_type"] or "-", str(g["coordinator"]))
    env.out.print(table)


@groups.command("describe")
@click.argument("group")
@click.option("--json", "as_json", is_flag=True, help="Print the description as JSON.")
@pass_env
def describe(env: Env, group: str, as_json: bool) -> None:
    """Show a group's state, members and, per partition, committed offset, log end and lag.

    A group a streaming query (kcoord.spark.stream, kcoord.ray_data.stream) consumes for is
    shown as such: the query's name, its last committed batch (from the offsets' metadata,
    "kcoord-stream NAME BATCH"), its lag, and whether it runs (its static member, instance
    id NAME, is in the group).

    \b
    Examples:
      kcoord groups describe billing
      kcoord groups describe billing --json
    """
    desc = env.admin().describe_group(group)
    desc["streaming"] = streaming_queries(desc)
    if as_json:
        echo_json(env, desc, indent=2, sort_keys=True, default=str)
        return
    env.out.print(
        f"group [bold]{desc['group_id']}[/]: state {desc['state']}, generation {desc['generation']}, "
        f"{len(desc['members'])} members, coordinator {desc['coordinator']}, total lag {desc['lag']}"
    )
    for q in desc["streaming"]:
        where = f"running as member {q['member_id']}" if q["running"] else "not running"
        env.out.print(f"streaming query [bold]{q['query']}[/]: last committed batch {q['last_batch']}, lag {q['lag']}, {where}")
    queries = {q["query"] for q in desc["streaming"]}
    if desc["members"]:
        members = make_table("members", ("member", "instance", "kind", "client", "host", "assignment"))
        for m in desc["members"]:
            assignment = "; ".join(f"{t}: {','.join(map(str, ps))}" for t, ps in sorted(m["assignment"].items())) or "-"
            kind = "streaming query" if m["group_instance_id"] in queries else ("static" if m["group_instance_id"] else "dynamic")
            members.add_row(m["member_id"], m["group_instance_id"] or "-", kind, m["client_id"] or "-", m["client_host"] or "-", assignment)
        env.out.print(members)
    offsets = make_table("offsets", ("topic", "partition", "committed", "log end", "lag", "member"), right=("partition", "committed", "log end", "lag"))
    for o in desc["offsets"]:
        offsets.add_row(
            o["topic"],
            str(o["partition"]),
            "-" if o["committed_offset"] is None else str(o["committed_offset"]),
            "-" if o["log_end_offset"] is None else str(o["log_end_offset"]),
            "-" if o["lag"] is None else str(o["lag"]),
            o["member_id"] or "-",
        )
    env.out.print(offsets)


def streaming_queries(desc: dict) -> list[dict]:
    """The streaming queries whose offsets a described group holds (their metadata reads
    ``kcoord-stream NAME BATCH``): per query its ``last_batch``, ``lag`` (its partitions'
    log ends minus its committed offsets), whether it is ``running`` (its static member,
    instance id NAME, is in the group) and that ``member_id``."""
    from ..streaming.protocol import query_of_metadata

    found: dict[str, dict] = {}
    for o in desc["offsets"]:
        named = query_of_metadata(o.get("metadata"))
        if named is None:
            continue
        q = found.setdefault(named[0], {"query": named[0], "last_batch": -1, "lag": 0})
        q["last_batch"] = max(q["last_batch"], named[1])
        q["lag"] += o["lag"] or 0
    for name, q in found.items():
        member = next((m["member_id"] for m in desc["members"] if m["group_instance_id"] == name), None)
        q["running"], q["member_id"] = member is not None, member
    return [found[n] for n in sorted(found)]


@groups.command("reset-offsets")
@click.argument("group")
@click.option("--topic", "topics_", multiple=True, metavar="TOPIC", help="Topic whose committed offsets to reset (repeatable).")
@click.option("--all-topics", is_flag=True, help="Every topic the group has committed offsets for.")
@click.option("--to", "to", default=None, metavar="earliest|latest|P=O[,P=O...]", help="Log start, high watermark, or per partition (one --topic).")
@click.option("--to-datetime", default=None, metavar="ISO8601", help="The first offset at or after this time, e.g. 2026-11-23T10:00:00Z (local time without a zone).")
@click.option("--shift-by", type=int, default=None, metavar="N", help="Move each committed offset by N (negative: back), within the log.")
@click.option("--execute", is_flag=True, help="Apply the plan; without it nothing changes (a dry run).")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@pass_env
def reset_offsets(
    env: Env, group: str, topics_: tuple[str, ...], all_topics: bool, to: str | None, to_datetime: str | None, shift_by: int | None, execute: bool, as_json: bool
) -> None:
    """Plan, and with --execute apply, new committed offsets for an inactive group.

    Without --execute it only prints the plan (current and new offset per partition), as
    kafka-consumer-groups.sh does. Refused while the group has members: stop its consumers
    first.

    \b
    Examples:
      kcoord groups reset-offsets billing --topic events --to earliest
      kcoord groups reset-offsets billing --topic events --to latest --execute
      kcoord groups reset-offsets billing --topic events --to 0=120,1=98 --execute
      kcoord groups reset-offsets billing --all-topics --to-datetime 2026-11-23T10:00:00Z --execute
      kcoord groups reset-offsets billing --topic events --topic clicks --shift-by -100 --execute
    """
    from ..protocol.errors import ErrorCode, KafkaError
    from ..protocol.replication import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
    from .formats import ResetSpec, parse_datetime_ms, plan_reset

    if sum(x is not None for x in (to, to_datetime, shift_by)) != 1:
        raise click.UsageError("give exactly one of --to, --to-datetime and --shift-by")
    if bool(topics_) == all_topics:
        raise click.UsageError("give --topic (repeatable) or --all-topics")
    if to is not None:
        target = parse_offsets(to)
        if isinstance(target, dict):
            if len(topics_) != 1:
                raise click.UsageError("--to PARTITION=OFFSET needs exactly one --topic")
            spec = ResetSpec("explicit", offsets=tuple(sorted(target.items())))
        else:
            spec = ResetSpec(target)
    elif to_datetime is not None:
        try:
            spec = ResetSpec("timestamp", parse_datetime_ms(to_datetime))
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--to-datetime") from None
    else:
        spec = ResetSpec("shift", int(shift_by or 0))

    admin = env.admin()
    committed: dict[str, dict[int, int | None]] = {}
    try:
        offsets = admin.describe_group(group)["offsets"]
    except KafkaError as exc:
        if exc.code != ErrorCode.GROUP_ID_NOT_FOUND:
            raise
        offsets = []  # a group that never committed: the reset gives it its first offsets
    for o in offsets:
        committed.setdefault(o["topic"], {})[o["partition"]] = o["committed_offset"]
    names = sorted(committed) if all_topics else list(dict.fromkeys(topics_))
    if not names:
        raise CliError(f"group {group!r} has no committed offsets: name the topics with --topic")
    plans: dict[str, dict[int, tuple[int | None, int | None]]] = {}
    for topic in names:
        tps = [TopicPartition(topic, p) for p in admin.cluster.partitions_for(topic)]  # UNKNOWN_TOPIC_OR_PARTITION
        earliest = {tp.partition: o for tp, o in admin.cluster.list_offsets(tps, EARLIEST_TIMESTAMP).items()}
        latest = {tp.partition: o for tp, o in admin.cluster.list_offsets(tps, LATEST_TIMESTAMP).items()}
        by_time = {tp.partition: o for tp, o in admin.cluster.list_offsets(tps, spec.value).items()} if spec.kind == "timestamp" else None
        try:
            plans[topic] = plan_reset(spec, earliest, latest, committed.get(topic, {}), by_time)
        except ValueError as exc:
            raise CliError(f"topic {topic!r}: {exc} (OFFSET_OUT_OF_RANGE)") from None
    rows = [
        {"topic": t, "partition": p, "current": now, "new": new}
        for t, plan in plans.items()
        for p, (now, new) in sorted(plan.items())
    ]
    if execute:
        moves = {TopicPartition(t, p): new for t, plan in plans.items() for p, (_, new) in plan.items() if new is not None}
        if moves:
            admin.alter_consumer_group_offsets(group, moves)  # every topic in one commit
    if as_json:
        echo_json(env, {"group": group, "executed": execute, "partitions": rows})
    else:
        table = make_table(f"group {group!r}: {'new committed offsets' if execute else 'plan (dry run)'}", ("topic", "partition", "current", "new"), right=("partition", "current", "new"))
        for r in rows:
            table.add_row(r["topic"], str(r["partition"]), "-" if r["current"] is None else str(r["current"]), "-" if r["new"] is None else str(r["new"]))
        env.out.print(table)
    if not execute:
        env.err.print("dry run: nothing changed; add --execute to apply")


@groups.command("delete")
@click.argument("group")
@pass_env
def delete(env: Env, group: str) -> None:
    """Delete an inactive group and its committed offsets.

    \b
    Example:
      kcoord groups delete billing
    """
    env.admin().delete_group(group)
    env.out.print(f"deleted group {group!r}")


COMMANDS = [groups]
