"""``kcoord up``, ``kcoord down`` and ``kcoord status``."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from ._common import CliError, Env, echo_json, make_table, parse_properties
from .security_cmds import kafka_security_options, security_from_options

pass_env = click.make_pass_decorator(Env)


@click.command("up")
@click.option("--brokers", type=click.IntRange(min=1), default=3, show_default=True, help="Number of brokers (each replica of a partition lives on a different one).")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None, help="Log directory on every node [default: the per-user data directory, ~/.local/share/kcoord/data/NAME on Linux, or $KCOORD_DATA_DIR/NAME].")
@click.option("--group-coordinators", type=click.IntRange(min=0), default=3, show_default=True, help="Group coordinator actors (0: no consumer groups).")
@click.option("--transaction-coordinators", type=click.IntRange(min=0), default=None, help="Transaction coordinator actors [default: as many as group coordinators; 0: no transactions].")
@click.option("--topic-config", "topic_config", multiple=True, metavar="KEY=VALUE", help="Default topic config, e.g. min.insync.replicas=2 (repeatable).")
@click.option("--broker-config", "broker_config", multiple=True, metavar="KEY=VALUE", help="Cluster-wide broker config, e.g. log.retention.check.interval.ms=60000 (repeatable; log.retention.check.interval.ms, log.cleaner.enable, log.cleaner.backoff.ms, transaction.partition.verification.enable).")
@click.option("--min-nodes", type=click.IntRange(min=1), default=1, show_default=True, help="Wait until the Ray cluster has this many nodes before binding brokers to nodes.")
@click.option("--if-not-exists", is_flag=True, help="Succeed without changes if the cluster is already running (for launcher scripts).")
@click.option("--timeout", type=click.FloatRange(min=1), default=180, show_default=True, help="Seconds to wait for nodes and for the actors to start.")
@click.option("--kafka-port", type=click.IntRange(min=0, max=65535), default=9092, show_default=True, help="Kafka listener port on every node (broker ids take this port and the next ones; 0: free ports).")
@click.option("--no-kafka", is_flag=True, help="Do not start the Kafka listener (Kafka clients then cannot connect).")
@click.option("--kafka-host", default=None, metavar="HOST", help="Address advertised to Kafka clients [default: each node's address].")
@kafka_security_options
@pass_env
def up(
    env: Env,
    brokers: int,
    data_dir: str | None,
    group_coordinators: int,
    transaction_coordinators: int | None,
    topic_config: tuple[str, ...],
    broker_config: tuple[str, ...],
    min_nodes: int,
    if_not_exists: bool,
    timeout: float,
    kafka_port: int,
    no_kafka: bool,
    kafka_host: str | None,
    **security_options: Any,
) -> None:
    """Deploy a kcoord cluster onto the running Ray cluster.

    Creates the controller, the group and the transaction coordinators as named, detached actors: the
    cluster keeps running after this command exits. On a multi-node Ray cluster each broker
    is bound to its own node. Refused if a cluster of this name is already running.

    \b
    Examples:
      kcoord up
      kcoord --name prod up --brokers 5 --data-dir /data/kcoord
      kcoord --address 10.0.0.1:6379 up --topic-config min.insync.replicas=2
      kcoord up --min-nodes 4 --if-not-exists      # in a cluster launcher's start commands
      kcoord up --kafka-port 0                     # Kafka listener on free ports
      kcoord up --no-kafka                         # no Kafka listener
      kcoord up --broker-config log.retention.check.interval.ms=60000
      kcoord up --kafka-security-protocol SASL_SSL --kafka-certfile /etc/kcoord/server.pem \
          --kafka-user admin=file:/etc/kcoord/admin.password --kafka-super-user admin

    Without --kafka-security-protocol the Kafka listeners are PLAINTEXT with no ACLs: on
    a routable address anyone who reaches them may read, write and delete topics.
    Passwords come from files or environment variables, never the command line.
    """
    from kcoord.cluster.deploy import ClusterExistsError, deploy
    from kcoord.cluster.broker_nodes import wait_for_nodes

    from kcoord.replication.config import validate_broker_config

    kafka_security, kafka_options = security_from_options(security_options)
    defaults = parse_properties(topic_config, "--topic-config")
    try:
        broker_cfg = validate_broker_config(parse_properties(broker_config, "--broker-config"))
    except ValueError as exc:
        raise CliError(f"--broker-config: {exc}") from None
    env.connect_ray()
    if min_nodes > 1:
        with env.err.status(f"waiting for {min_nodes} Ray nodes..."):
            wait_for_nodes(min_nodes, timeout)
    try:
        with env.err.status(f"deploying kcoord cluster {env.name!r} ({brokers} brokers, {group_coordinators} group coordinators)..."):
            client = deploy(
                env.name,
                brokers=brokers,
                data_dir=data_dir,
                group_coordinators=group_coordinators,
                transaction_coordinators=transaction_coordinators,
                address=None,
                namespace=env.namespace,
                default_topic_config=defaults or None,
                broker_config=broker_cfg or None,
                timeout_s=timeout,
                kafka_port=None if no_kafka else kafka_port,
                kafka_host=kafka_host,
                kafka_security=kafka_security,
                kafka_options=kafka_options or None,
            )
    except ClusterExistsError:
        if not if_not_exists:
            raise
        env.out.print(f"kcoord cluster {env.name!r} is already running; nothing to do")
        return
    import ray

    try:
        placement = ray.get(client.controller.placement.remote(), timeout=30)
    except Exception:
        placement = {}
    bound = placement.get("brokers", {})
    where = f"bound to {len({v['node'] for v in bound.values()})} Ray nodes" if bound else "logical (single Ray node)"
    from kcoord.cluster.deploy import deploy_info

    info = deploy_info(env.name)
    env.out.print(f"[bold green]kcoord cluster {env.name!r} is up[/]: {brokers} brokers {where}, {group_coordinators} group coordinators, {info.get('transaction_coordinators', 0)} transaction coordinators")
    env.out.print(f"  namespace {env.namespace!r}, data in {info.get('data_dir', data_dir)}")
    env.out.print(f"  use it from Python: kcoord.connect({env.name!r})  ·  remove it: kcoord --name {env.name} down")
    if not no_kafka:
        protocol = (kafka_security or {}).get("protocol", "PLAINTEXT")
        env.out.print(f"  Kafka clients: bootstrap servers {client.bootstrap_servers} ({protocol})")
        _print_warnings(env, env.name)


def _print_warnings(env: Env, name: str, lines: list[str] | None = None) -> None:
    if lines is None:
        from kcoord.cluster.listeners import exposure_warnings
        from kcoord.kafka.addresses import listener_records

        lines = exposure_warnings(listener_records(name))
    for line in lines:
        env.err.print(f"[yellow]warning:[/] {line}")


@click.command("down")
@click.option("--delete-data", is_flag=True, help="Also delete the logs (on every node) and the stored metadata.")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None, help="Data directory to delete, if not the one recorded at deploy time.")
@pass_env
def down(env: Env, delete_data: bool, data_dir: str | None) -> None:
    """Stop every actor of the cluster (controller, replicas, group coordinators).

    Without --delete-data the logs and metadata stay, and `kcoord up` with the same name
    brings the topics back.

    \b
    Examples:
      kcoord down
      kcoord --name prod down --delete-data
    """
    from kcoord.cluster.deploy import deploy_info, teardown

    env.connect_ray()
    known = bool(deploy_info(env.name))
    killed = teardown(env.name, delete_data=delete_data, address=None, namespace=env.namespace, data_dir=data_dir)
    if killed == 0 and not (delete_data and known):
        raise CliError(f"no kcoord cluster named {env.name!r} is running in Ray namespace {env.namespace!r}")
    what = " and deleted its data and metadata" if delete_data else " (data and metadata kept)"
    env.out.print(f"stopped kcoord cluster {env.name!r}: {killed} actors{what}")


def _status_tables(snap: dict[str, Any], internal: bool) -> list[Any]:
    cluster = snap["cluster"]
    metrics = cluster.get("metrics", {})
    placement = snap.get("placement") or {}
    bound = placement.get("brokers", {})
    nodes = snap.get("nodes", [])

    overview = Table(title=f"kcoord cluster {cluster['cluster']!r}", show_header=False, title_justify="left")
    overview.add_column(style="bold")
    overview.add_column()
    alive_nodes = sum(1 for n in nodes if n["alive"])
    under = int(metrics.get("under_replicated_partitions", 0))
    offline = int(metrics.get("offline_partitions", 0))
    offline_logs = int(metrics.get("offline_log_replicas", 0))
    wiped = int(metrics.get("replaced_directory_replicas", 0))
    overview.add_row("controller epoch", str(cluster["controller_epoch"]))
    overview.add_row("brokers", f"{len(cluster['brokers'])}" + (" (bound to nodes)" if bound else " (logical, one Ray node)"))
    overview.add_row("Ray nodes alive", str(alive_nodes))
    overview.add_row("partitions", str(int(metrics.get("partitions", 0))))
    overview.add_row("under-replicated", f"[{'yellow' if under else 'green'}]{under}[/]")
    overview.add_row("offline", f"[{'red' if offline else 'green'}]{offline}[/]")
    overview.add_row("offline logs", f"[{'red' if offline_logs else 'green'}]{offline_logs}[/]" + (" (I/O errors; restart those replicas)" if offline_logs else ""))
    overview.add_row(
        "wiped disks",
        f"[{'yellow' if wiped else 'green'}]{wiped}[/]" + (" (replicas back with an empty log directory; they lead once in sync again)" if wiped else ""),
    )
    overview.add_row("failovers", f"{int(metrics.get('failovers_total', 0))} (last {metrics.get('failover_ms_last', -1):.0f} ms)" if metrics.get("failovers_total") else "0")

    coord = make_table("coordinators", ("actor", "alive", "loaded", "groups"))
    c = snap["coordinators"]["controller"]
    coord.add_row(c["name"], "[green]yes[/]", f"epoch {c['epoch']}", "-")
    for g in snap["coordinators"]["groups"]:
        coord.add_row(
            g["name"],
            "[green]yes[/]" if g["alive"] else "[red]no[/]",
            "[green]yes[/]" if g["loaded"] else "[yellow]no[/]",
            str(g["groups"]) if g["alive"] else "-",
        )
    for t in snap["coordinators"].get("transactions", []):
        coord.add_row(
            t["name"],
            "[green]yes[/]" if t["alive"] else "[red]no[/]",
            "[green]yes[/]" if t["loaded"] else "[yellow]no[/]",
            f"{t['transactional_ids']} transactional ids" if t["alive"] else "-",
        )

    tables: list[Any] = [overview, coord]
    if bound:
        brokers = make_table("brokers", ("broker", "node", "node alive"))
        waiting = set(placement.get("waiting", []))
        for b, v in sorted(bound.items(), key=lambda kv: int(kv[0])):
            state = "[green]yes[/]" if v["alive"] else ("[red]no (waiting for a node)[/]" if int(b) in waiting else "[red]no[/]")
            brokers.add_row(str(b), v["node"][:12], state)
        tables.append(brokers)

    parts = partitions_table("partitions")
    for topic, desc in sorted(snap["topics"].items()):
        if desc.get("internal") and not internal:
            continue
        for p in desc["partitions"]:
            parts.add_row(*partition_row(topic, p))
    tables.append(parts)
    return tables


def partitions_table(title: str) -> Table:
    """A table for :func:`partition_row`'s rows."""
    return make_table(title, ("topic", "partition", "leader", "epoch", "replicas", "ISR", "HW", "LEO", "state"), right=("partition", "leader", "epoch", "HW", "LEO"))


def partition_row(topic: str, p: dict[str, Any]) -> list[str]:
    """One partition as table cells, with its state (ok / under-replicated / offline) and
    the replicas the controller holds failed (dead, or their log offline after an I/O error)."""
    if p["leader"] < 0:
        state = "[red]offline[/]"
    elif len(p["isr"]) < len(p["replicas"]):
        state = "[yellow]under-replicated[/]"
    else:
        state = "[green]ok[/]"
    if p.get("offline_replicas"):
        state += f" [red](offline replicas {','.join(map(str, p['offline_replicas']))})[/]"
    return [
        topic,
        str(p["partition"]),
        str(p["leader"]) if p["leader"] >= 0 else "-",
        str(p["leader_epoch"]),
        ",".join(map(str, p["replicas"])),
        ",".join(map(str, p["isr"])),
        str(p["high_watermark"]) if p["high_watermark"] >= 0 else "?",
        str(p["log_end_offset"]) if p["log_end_offset"] >= 0 else "?",
        state,
    ]


@click.command("status")
@click.option("--internal", is_flag=True, help="Also list internal topics (__consumer_offsets).")
@click.option("--json", "as_json", is_flag=True, help="Print the raw status as JSON.")
@pass_env
def status(env: Env, internal: bool, as_json: bool) -> None:
    """Show brokers, coordinators and every partition's leader, ISR, HW and LEO.

    Partitions are flagged under-replicated (ISR smaller than the replica set) or offline
    (no leader), with their offline replicas (dead, or their log taken offline by an I/O
    error); the header counts both, and the replicas whose log is offline. A Kafka
    listener on a routable address that does not authenticate its clients is warned of.

    \b
    Examples:
      kcoord status
      kcoord status --internal
      kcoord --name prod status --json | jq .cluster.metrics
    """
    from kcoord.cluster.deploy import status as cluster_status

    env.connect_ray()
    snap = cluster_status(env.name, address=None, namespace=env.namespace)
    if as_json:
        echo_json(env, snap, indent=2, sort_keys=True, default=str)
        return
    for table in _status_tables(snap, internal):
        env.out.print(table)
    protocols = sorted({rec.get("protocol", "PLAINTEXT") for rec in (snap.get("listeners") or {}).values()})
    env.out.print(f"Kafka bootstrap servers: {snap.get('bootstrap_servers') or '(no Kafka listener)'}" + (f" ({', '.join(protocols)})" if protocols else ""))
    env.out.print(f"data directory: {(snap.get('deploy') or {}).get('data_dir') or '(unknown: not deployed by kcoord up)'}")
    _print_warnings(env, env.name, snap.get("warnings") or [])


COMMANDS = [up, down, status]
