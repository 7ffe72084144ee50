"""``kcoord dashboard``: the Grafana dashboard for kcoord's Ray metrics."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ._common import CliError, Env

pass_env = click.make_pass_decorator(Env)


@click.command("dashboard")
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Write the dashboard JSON here [default: the per-user data directory].")
@click.option("--install", is_flag=True, help="Write it into Ray's Grafana dashboards folder of --session-dir, where Ray's Grafana provisioning loads it.")
@click.option("--session-dir", default="/tmp/ray/session_latest", show_default=True, help="The Ray session whose Grafana folder --install writes to.")
@click.option("--stdout", "to_stdout", is_flag=True, help="Print the JSON instead of writing a file.")
@pass_env
def dashboard(env: Env, out: str | None, install: bool, session_dir: str, to_stdout: bool) -> None:
    """Write kcoord's Grafana dashboard (throughput, requests, HW, ISR and offline
    partitions, failovers and their duration, follower and consumer-group lag) and say
    where it is.

    It reads Ray's Prometheus metrics (kcoord's are ``ray_kcoord_*``) through the
    ``datasource`` variable, like the dashboards Ray ships. Import the file in Grafana
    (Dashboards > New > Import), or use --install to put it beside Ray's own.

    \b
    Examples:
      kcoord dashboard
      kcoord dashboard --install
      kcoord dashboard --stdout > kcoord.json
    """
    from .. import dashboard as dash

    if to_stdout:
        click.echo(json.dumps(dash.dashboard(), indent=2), file=env.stdout)
        return
    if install:
        folder = dash.ray_grafana_dir(session_dir)
        if not folder.is_dir():
            raise CliError(
                f"{folder} does not exist: Ray writes it when its dashboard starts with metrics "
                "(ray start --head --include-dashboard=true); or import the file from `kcoord dashboard` by hand"
            )
        path = dash.write(folder / "kcoord_grafana_dashboard.json")
        env.out.print(f"installed {path}; Grafana started with Ray's provisioning (metrics/grafana) shows it as 'kcoord'")
        return
    if out is None:
        import platformdirs

        out = str(platformdirs.user_data_path("kcoord") / "grafana" / "kcoord_grafana_dashboard.json")
    path = dash.write(Path(out))
    env.out.print(f"wrote {path}: import it in Grafana (Dashboards > New > Import) with your Ray Prometheus data source")


COMMANDS = [dashboard]
