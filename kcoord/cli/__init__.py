"""The ``kcoord`` command: deploy and operate a kcoord cluster on a Ray cluster.

One module per command group: :mod:`.cluster_cmds` (up, down, status), :mod:`.topics`,
:mod:`.clients` (produce, consume), :mod:`.group_cmds`, :mod:`.txn_cmds` (transactions),
:mod:`.security_cmds` (users, acls,
listeners), :mod:`.dashboard_cmds`, :mod:`.demo` and :mod:`.bench_cmds`. The console script
is ``kcoord = "kcoord.cli:main"``.
"""

from __future__ import annotations

import os
import sys

import click

from .. import __version__
from ..protocol import names
from ._common import DEFAULT_NAME, Env, run_safely

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.group(context_settings=CONTEXT_SETTINGS, no_args_is_help=True)
@click.option("--name", default=DEFAULT_NAME, show_default=True, envvar="KCOORD_CLUSTER", help="kcoord cluster name (env KCOORD_CLUSTER).")
@click.option(
    "--namespace", default=names.DEFAULT_NAMESPACE, show_default=True, envvar="KCOORD_NAMESPACE", help="Ray namespace of the cluster's actors."
)
@click.option(
    "--address",
    default="auto",
    show_default=True,
    envvar="RAY_ADDRESS",
    help="Ray cluster address (HOST:PORT, or 'auto' for the one running on this machine; env RAY_ADDRESS).",
)
@click.option("--debug", is_flag=True, envvar="KCOORD_DEBUG", help="Show tracebacks instead of one-line errors.")
@click.version_option(__version__, prog_name="kcoord")
@click.pass_context
def cli(ctx: click.Context, name: str, namespace: str, address: str, debug: bool) -> None:
    """kcoord: a Kafka-style replicated commit log with consumer groups, on Ray.

    \b
    Typical session:
      ray start --head                    # or an existing Ray cluster
      kcoord up                           # deploy brokers and coordinators (detached actors)
      kcoord topics create events -p 6 -r 3
      seq 10 | kcoord produce events
      kcoord consume events --from-beginning --max-messages 10
      kcoord status
      kcoord down --delete-data

    Python scripts use the same cluster with kcoord.connect("kcoord").
    """
    ctx.obj = Env(name=name, namespace=namespace, address=address, debug=debug)


def _register() -> None:
    from . import bench_cmds, clients, cluster_cmds, dashboard_cmds, demo, group_cmds, security_cmds, topics, txn_cmds

    for module in (cluster_cmds, topics, clients, group_cmds, txn_cmds, security_cmds, dashboard_cmds, demo, bench_cmds):
        for command in module.COMMANDS:
            cli.add_command(command)


_register()


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point; returns (and exits with) the process exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args or os.environ.get("KCOORD_DEBUG", "") not in ("", "0")
    code = run_safely(lambda: cli.main(args=args, prog_name="kcoord", standalone_mode=False), debug)
    if argv is None:
        sys.stdout.flush()
        sys.exit(code)
    return code


__all__ = ["cli", "main"]
