"""Every kcoord command has --help with a description and examples, and argument errors
are one line on stderr (no Ray needed: these fail before connecting)."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from kcoord.cli import cli, main


def all_commands(group: click.Group = cli, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = []
    for name, cmd in sorted(group.commands.items()):
        out.append(prefix + (name,))
        if isinstance(cmd, click.Group):
            out += all_commands(cmd, prefix + (name,))
    return out


COMMANDS = all_commands()


def test_the_commands_of_the_issue_exist():
    assert set(COMMANDS) >= {
        ("up",), ("down",), ("status",), ("produce",), ("consume",), ("demo",), ("bench",), ("dashboard",),
        ("topics",), ("topics", "create"), ("topics", "list"), ("topics", "describe"), ("topics", "delete"),
        ("topics", "describe-config"), ("topics", "alter-config"), ("topics", "add-partitions"), ("topics", "delete-records"),
        ("groups",), ("groups", "list"), ("groups", "describe"), ("groups", "reset-offsets"),
        ("users", "create"), ("users", "list"), ("users", "delete"), ("acls", "add"), ("acls", "list"), ("acls", "remove"),
        ("listeners", "restart"),
    }


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_every_command_has_help_with_examples(path):
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage: " in result.output
    assert "Example" in result.output, f"kcoord {' '.join(path)} --help shows no example"


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["topics", "create"], "Missing argument 'TOPIC'"),
        (["topics", "create", "t", "-c", "novalue"], "expected KEY=VALUE"),
        (["up", "--brokers", "0"], "--brokers"),
        (["produce", "t", "--acks", "2"], "--acks"),
        (["no-such-command"], "No such command"),
        (["groups", "reset-offsets", "g", "--topic", "t"], "exactly one of --to, --to-datetime and --shift-by"),
        (["groups", "reset-offsets", "g", "--to", "earliest"], "--topic (repeatable) or --all-topics"),
        (["groups", "reset-offsets", "g", "--topic", "a", "--topic", "b", "--to", "0=5"], "needs exactly one --topic"),
        (["groups", "reset-offsets", "g", "--topic", "t", "--to-datetime", "yesterday"], "ISO 8601"),
        (["groups", "reset-offsets", "g", "--topic", "t", "--to", "sometime"], "expected earliest, latest or PARTITION=OFFSET"),
        (["consume", "t", "--group", "g", "--partition", "0"], "cannot be combined"),
        (["produce", "t", "--key-separator", ""], "must not be empty"),
        (["topics", "alter-config", "t"], "at least one --set KEY=VALUE or --delete KEY"),
        (["up", "--kafka-user", "admin=s3cret"], "never the command line"),
        (["up", "--kafka-super-user", "admin"], "need --kafka-security-protocol"),
        (["up", "--kafka-security-protocol", "SASL_SSL"], "certfile"),
        (["up", "--kafka-security-protocol", "SASL_PLAINTEXT", "--kafka-user", "admin=env:KCOORD_TEST_NO_SUCH_VARIABLE"], "not set or empty"),
        (["users", "create", "alice", "--password-file", "a", "--password-env", "B"], "not both"),
        (["acls", "add", "--topic", "t", "--operation", "READ"], "name a principal"),
        (["acls", "add", "--allow-principal", "User:a", "--operation", "READ"], "name a resource"),
        (["acls", "add", "--allow-principal", "User:a", "--operation", "READS", "--topic", "t"], "--operation"),
        (["topics", "alter-config", "t", "--set", "retention.ms"], "expected KEY=VALUE"),
        (["topics", "alter-config", "t", "--set", "retention.ms=1", "--delete", "retention.ms"], "named by both --set and --delete"),
        (["topics", "add-partitions", "t"], "--count"),
        (["topics", "delete-records", "t", "--offset", "5"], "--partition"),
    ],
)
def test_usage_errors_are_one_line(capsys, args, fragment):
    code = main(args)
    err = capsys.readouterr().err
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], err


def test_version(capsys):
    assert main(["--version"]) == 0
    assert "kcoord" in capsys.readouterr().out
