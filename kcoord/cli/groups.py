"""``kcoord groups list|describe|reset-offsets|delete``."""

from __future__ import annotations

import json

import click
from rich.table import Table

from ._common import Env, parse_offsets

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
@pass_env
def list_(env: Env, states: tuple[str, ...]) -> None:
    """List consumer groups with their state and coordinator.

    \b
    Examples:
      kcoord groups list
      kcoord groups list --state Stable
    """
    found = env.admin().list_groups(list(states) or None)
    table = Table(title=f"{len(found)} consumer groups", title_justify="left")
    for col in ("group", "state", "protocol type", "coordinator"):
        table.add_column(col)
    for g in found:
        table.add_row(g["group_id"], g["state"], g["protocol_type"] or "-", str(g["coordinator"]))
    env.out.print(table)


@groups.command("describe")
@click.argument("group")
@click.option("--json", "as_json", is_flag=True, help="Print the description as JSON.")
@pass_env
def describe(env: Env, group: str, as_json: bool) -> None:
    """Show a group's state, members and, per partition, committed offset, log end and lag.

    \b
    Examples:
      kcoord groups describe billing
      kcoord groups describe billing --json
    """
    desc = env.admin().describe_group(group)
    if as_json:
        click.echo(json.dumps(desc, indent=2, sort_keys=True, default=str), file=env.stdout)
        return
    env.out.print(
        f"group [bold]{desc['group_id']}[/]: state {desc['state']}, generation {desc['generation']}, "
        f"{len(desc['members'])} members, coordinator {desc['coordinator']}, total lag {desc['lag']}"
    )
    if desc["members"]:
        members = Table(title="members", title_justify="left")
        for col in ("member", "instance", "client", "host", "assignment"):
            members.add_column(col)
        for m in desc["members"]:
            assignment = "; ".join(f"{t}: {','.join(map(str, ps))}" for t, ps in sorted(m["assignment"].items())) or "-"
            members.add_row(m["member_id"], m["group_instance_id"] or "-", m["client_id"] or "-", m["client_host"] or "-", assignment)
        env.out.print(members)
    offsets = Table(title="offsets", title_justify="left")
    for col in ("topic", "partition", "committed", "log end", "lag", "member"):
        offsets.add_column(col, justify="right" if col in ("partition", "committed", "log end", "lag") else "left")
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


@groups.command("reset-offsets")
@click.argument("group")
@click.option("--topic", required=True, help="Topic whose committed offsets to reset.")
@click.option("--to", "to", required=True, metavar="earliest|latest|P=O[,P=O...]", help="New offsets: log start, high watermark, or per partition.")
@pass_env
def reset_offsets(env: Env, group: str, topic: str, to: str) -> None:
    """Set an inactive group's committed offsets for a topic.

    Refused while the group has members: stop its consumers first.

    \b
    Examples:
      kcoord groups reset-offsets billing --topic events --to earliest
      kcoord groups reset-offsets billing --topic events --to latest
      kcoord groups reset-offsets billing --topic events --to 0=120,1=98
    """
    target = parse_offsets(to)
    result = env.admin().reset_offsets(group, topic, to=target)
    env.out.print(f"group {group!r}, topic {topic!r}: " + ", ".join(f"partition {p} -> {o}" for p, o in sorted(result.items())))


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
