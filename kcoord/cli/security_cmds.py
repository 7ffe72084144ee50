"""``kcoord users create|list|delete``, ``kcoord acls add|list|remove``, ``kcoord
listeners restart``, and the ``--kafka-*`` security options ``kcoord up`` shares.

Passwords are read from a file or an environment variable (or typed at a prompt), never
from the command line, where every user of the machine could read them in ``ps``.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import click

from ._common import CliError, Env, echo_json, make_table, parse_properties

pass_env = click.make_pass_decorator(Env)

PROTOCOLS = ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
MECHANISMS = ["SCRAM-SHA-256", "SCRAM-SHA-512"]
_NO_PASSWORD_ON_THE_COMMAND_LINE = "passwords are read from a file or the environment, never the command line"


# -- passwords ---------------------------------------------------------------------------------


def read_password(source: str, what: str) -> str:
    """``file:PATH`` (the file's first line) or ``env:VAR``."""
    kind, _, where = source.partition(":")
    if kind == "file" and where:
        try:
            with open(os.path.expanduser(where), encoding="utf-8") as f:
                password = f.readline().rstrip("\r\n")
        except OSError as exc:
            raise click.UsageError(f"{what}: cannot read the password file {where}: {exc.strerror}") from None
    elif kind == "env" and where:
        password = os.environ.get(where, "")
        if not password:
            raise click.UsageError(f"{what}: the environment variable {where} is not set or empty")
    else:
        raise click.UsageError(f"{what}: expected file:PATH or env:VAR ({_NO_PASSWORD_ON_THE_COMMAND_LINE}), got {source!r}")
    if not password:
        raise click.UsageError(f"{what}: the password is empty")
    return password


def parse_users(items: tuple[str, ...]) -> dict[str, str]:
    users: dict[str, str] = {}
    for item in items:
        name, sep, source = item.partition("=")
        if not sep or not name:
            raise click.UsageError(f"--kafka-user: expected NAME=file:PATH or NAME=env:VAR ({_NO_PASSWORD_ON_THE_COMMAND_LINE}), got {item.split('=')[0]!r}=...")
        users[name] = read_password(source, f"--kafka-user {name}")
    return users


# -- the --kafka-* options of `kcoord up` and `kcoord listeners restart` ------------------------


def kafka_security_options(fn: Callable) -> Callable:
    options = [
        click.option("--kafka-security-protocol", type=click.Choice(PROTOCOLS, case_sensitive=False), default=None, help="Security of the Kafka listeners [default: PLAINTEXT, no authentication or ACLs]. With it, ACLs are checked (docs/security.md)."),
        click.option("--kafka-sasl-mechanisms", default=None, metavar="LIST", help="SASL mechanisms, comma-separated [default: PLAIN,SCRAM-SHA-256,SCRAM-SHA-512]."),
        click.option("--kafka-user", "kafka_users", multiple=True, metavar="NAME=file:PATH|NAME=env:VAR", help="A user created (or whose password is replaced) as SCRAM-SHA-256/512 credentials; the password from a file or an environment variable (repeatable)."),
        click.option("--kafka-super-user", "kafka_super_users", multiple=True, metavar="NAME", help="A user allowed everything, whatever the ACLs (repeatable)."),
        click.option("--kafka-certfile", type=click.Path(dir_okay=False), default=None, help="The listeners' certificate chain (PEM; with the key unless --kafka-keyfile); the same path on every node."),
        click.option("--kafka-keyfile", type=click.Path(dir_okay=False), default=None, help="The certificate's private key (PEM, not encrypted)."),
        click.option("--kafka-cafile", type=click.Path(dir_okay=False), default=None, help="CA certificates that client certificates must chain to (mutual TLS)."),
        click.option("--kafka-client-auth", type=click.Choice(["none", "requested", "required"]), default=None, help="Client certificates (Kafka's ssl.client.auth) [default: none]."),
        click.option("--kafka-principal-mapping-rules", default=None, metavar="RULES", help="Kafka's ssl.principal.mapping.rules for client certificates [default: DEFAULT, the full DN]."),
        click.option("--kafka-allow-everyone-if-no-acl-found", is_flag=True, default=False, help="Kafka's allow.everyone.if.no.acl.found: a resource without any ACL is open (for turning ACLs on step by step)."),
        click.option("--kafka-option", "kafka_option_items", multiple=True, metavar="KEY=VALUE", help="A Kafka listener setting: connections.max.idle.ms, max.connections, max.connections.per.ip, sasl.server.max.receive.size, connections.max.reauth.ms (repeatable)."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def security_from_options(kw: dict[str, Any]) -> tuple[dict | None, dict]:
    """(kafka_security or None, kafka_options) from the --kafka-* options (popped from ``kw``)."""
    protocol = kw.pop("kafka_security_protocol")
    mechanisms = kw.pop("kafka_sasl_mechanisms")
    users = kw.pop("kafka_users")
    supers = kw.pop("kafka_super_users")
    files = {k: kw.pop(f"kafka_{k}") for k in ("certfile", "keyfile", "cafile")}
    client_auth = kw.pop("kafka_client_auth")
    rules = kw.pop("kafka_principal_mapping_rules")
    allow_all = kw.pop("kafka_allow_everyone_if_no_acl_found")
    options: dict[str, Any] = parse_properties(kw.pop("kafka_option_items"), "--kafka-option")
    passwords = parse_users(users)  # first: a password on the command line is refused as such
    given = [mechanisms, users, supers, *files.values(), client_auth, rules] + ([True] if allow_all else [])
    if protocol is None:
        if any(v for v in given):
            raise click.UsageError("the --kafka-* security options need --kafka-security-protocol (SSL, SASL_PLAINTEXT or SASL_SSL)")
        return None, options
    security: dict[str, Any] = {"protocol": protocol.upper()}
    if mechanisms:
        security["mechanisms"] = [m.strip() for m in mechanisms.split(",") if m.strip()]
    if passwords:
        security["users"] = passwords
    if supers:
        security["super_users"] = list(supers)
    for key, value in files.items():
        if value:
            security[key] = os.path.abspath(value)
    if client_auth:
        security["client_auth"] = client_auth
    if rules:
        security["principal_mapping_rules"] = rules
    if allow_all:
        security["allow_everyone_if_no_acl_found"] = True
    from ..security.config import SecurityConfig

    try:
        SecurityConfig.parse(security)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    return security, options


# -- kcoord listeners ------------------------------------------------------------------------


@click.group("listeners", no_args_is_help=True)
def listeners() -> None:
    """The cluster's Kafka listeners.

    \b
    Examples:
      kcoord listeners restart --kafka-security-protocol SASL_SSL \\
          --kafka-certfile /etc/kcoord/server.pem --kafka-super-user admin
      kcoord listeners restart                 # back to PLAINTEXT, no ACLs
    """


@listeners.command("restart")
@kafka_security_options
@click.option("--timeout", type=click.FloatRange(min=1), default=60, show_default=True, help="Seconds to wait for the listeners.")
@pass_env
def restart(env: Env, timeout: float, **kw: Any) -> None:
    """Restart every Kafka listener with these security options (how security is turned
    on, or changed, on a running cluster: docs/security.md). Open connections are cut;
    clients reconnect, with credentials now. Users given are created first.

    \b
    Examples:
      kcoord listeners restart --kafka-security-protocol SASL_SSL \
          --kafka-certfile /etc/kcoord/server.pem --kafka-super-user admin \
          --kafka-user admin=file:/etc/kcoord/admin.password
      kcoord listeners restart --kafka-security-protocol SSL --kafka-certfile server.pem \
          --kafka-cafile ca.pem --kafka-client-auth required
      kcoord listeners restart --kafka-security-protocol SASL_PLAINTEXT \
          --kafka-allow-everyone-if-no-acl-found --kafka-option connections.max.reauth.ms=3600000
    """
    from ..cluster.listeners import exposure_warnings, restart_listeners
    from ..kafka.addresses import listener_records

    security, options = security_from_options(kw)
    env.client()
    with env.err.status("restarting the Kafka listeners..."):
        bootstrap = restart_listeners(env.name, env.namespace, kafka_security=security, kafka_options=options, timeout_s=timeout)
    protocol = (security or {}).get("protocol", "PLAINTEXT")
    env.out.print(f"Kafka listeners of {env.name!r} restarted ({protocol}): bootstrap servers {bootstrap}")
    for line in exposure_warnings(listener_records(env.name)):
        env.err.print(f"[yellow]warning:[/] {line}")


# -- kcoord users ------------------------------------------------------------------------------


@click.group("users", no_args_is_help=True)
def users() -> None:
    """SCRAM users of the Kafka listeners (salted, hashed credentials in the controller).

    \b
    Examples:
      kcoord users create alice --password-file ~/.secrets/alice
      ALICE_PW=... kcoord users create alice --password-env ALICE_PW
      kcoord users list
      kcoord users delete alice
    """


@users.command("create")
@click.argument("user")
@click.option("--password-file", type=click.Path(dir_okay=False), default=None, help="Read the password from this file's first line.")
@click.option("--password-env", default=None, metavar="VAR", help="Read the password from this environment variable.")
@click.option("--mechanism", "mechanisms", multiple=True, type=click.Choice(MECHANISMS), help="SCRAM mechanism(s) [default: both].")
@click.option("--iterations", type=click.IntRange(4096, 16384), default=4096, show_default=True, help="PBKDF2 iterations.")
@pass_env
def users_create(env: Env, user: str, password_file: str | None, password_env: str | None, mechanisms: tuple[str, ...], iterations: int) -> None:
    """Create USER, or replace its password (rotation). Without --password-file or
    --password-env the password is asked for. Sessions authenticated with a replaced
    password are closed at their next request; clients reconnect with the new one.

    \b
    Examples:
      kcoord users create alice --password-file ~/.secrets/alice
      kcoord users create alice --password-env ALICE_PASSWORD
      kcoord users create legacy --mechanism SCRAM-SHA-256 --iterations 8192
    """
    from ..client.security_admin import user_upsertions

    if password_file and password_env:
        raise click.UsageError("give --password-file or --password-env, not both")
    if password_file:
        password = read_password(f"file:{password_file}", "--password-file")
    elif password_env:
        password = read_password(f"env:{password_env}", "--password-env")
    else:
        if not click.get_text_stream("stdin").isatty():
            raise click.UsageError(f"give --password-file or --password-env ({_NO_PASSWORD_ON_THE_COMMAND_LINE})")
        password = click.prompt(f"password for {user}", hide_input=True, confirmation_prompt=True)
    admin = env.admin()
    for upsertion in user_upsertions(user, password, mechanisms or MECHANISMS, iterations):
        errors = admin.alter_user_scram_credentials([upsertion])
        if errors.get(user):
            raise CliError(f"user {user!r}: {errors[user]}")
    env.out.print(f"user {user!r}: {', '.join(mechanisms or MECHANISMS)} credentials set")


@users.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_env
def users_list(env: Env, as_json: bool) -> None:
    """Users and their credentials' mechanisms and iterations (never a password).

    \b
    Examples:
      kcoord users list
      kcoord users list --json
    """
    described = env.admin().describe_user_scram_credentials()
    rows = {u: [(c["mechanism"].mechanism_name, c["iterations"]) for c in d["credential_infos"]] for u, d in sorted(described.items())}
    if as_json:
        echo_json(env, {u: [{"mechanism": m, "iterations": i} for m, i in cs] for u, cs in rows.items()}, indent=2)
        return
    table = make_table("users", ("user", "credentials"))
    for user, creds in rows.items():
        table.add_row(user, ", ".join(f"{m} ({i} iterations)" for m, i in creds))
    env.out.print(table)


@users.command("delete")
@click.argument("user")
@click.option("--mechanism", "mechanisms", multiple=True, type=click.Choice(MECHANISMS), help="Only this mechanism's credential [default: all of the user's].")
@pass_env
def users_delete(env: Env, user: str, mechanisms: tuple[str, ...]) -> None:
    """Delete USER's credentials. Its open sessions are closed at their next request
    (its ACLs stay: remove them with `kcoord acls remove --allow-principal User:USER ...`).

    \b
    Examples:
      kcoord users delete alice
      kcoord users delete alice --mechanism SCRAM-SHA-512
    """
    from ..client.security_admin import UserScramCredentialDeletion

    admin = env.admin()
    described = admin.describe_user_scram_credentials([user]).get(user, {})
    if described.get("error"):
        raise CliError(f"user {user!r}: {described['error']}")
    have = [c["mechanism"].mechanism_name for c in described.get("credential_infos", [])]
    for m in mechanisms or have:
        errors = admin.alter_user_scram_credentials([UserScramCredentialDeletion(user, m)])
        if errors.get(user):
            raise CliError(f"user {user!r} ({m}): {errors[user]}")
    env.out.print(f"user {user!r}: {', '.join(mechanisms or have)} credentials deleted")


# -- kcoord acls -----------------------------------------------------------------------------


def _resources(topic: tuple[str, ...], group: tuple[str, ...], cluster: bool, txn: tuple[str, ...]) -> list[tuple[Any, str]]:
    from ..security.acl import CLUSTER_NAME, ResourceType

    out = [(ResourceType.TOPIC, t) for t in topic] + [(ResourceType.GROUP, g) for g in group] + [(ResourceType.TRANSACTIONAL_ID, x) for x in txn]
    if cluster:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return out


def resource_options(fn: Callable) -> Callable:
    for option in reversed(
        [
            click.option("--topic", multiple=True, metavar="NAME", help="A topic (repeatable; '*' for all)."),
            click.option("--group", multiple=True, metavar="NAME", help="A consumer group (repeatable; '*' for all)."),
            click.option("--cluster", is_flag=True, help="The cluster (create topics, describe/alter configs, ACLs, users)."),
            click.option("--transactional-id", "transactional_id", multiple=True, metavar="ID", help="A transactional id (repeatable)."),
        ]
    ):
        fn = option(fn)
    return fn


def _print_acls(env: Env, acls: list, as_json: bool) -> None:
    if as_json:
        echo_json(
            env,
            [
                {
                    "resource_type": a.resource_pattern.resource_type.name,
                    "resource_name": a.resource_pattern.resource_name,
                    "pattern_type": a.resource_pattern.pattern_type.name,
                    "principal": a.principal,
                    "host": a.host,
                    "operation": a.operation.name,
                    "permission_type": a.permission_type.name,
                }
                for a in acls
            ],
            indent=2,
        )
        return
    table = make_table("ACLs", ("resource", "pattern", "principal", "host", "operation", "permission"))
    for a in acls:
        p = a.resource_pattern
        table.add_row(f"{p.resource_type.name}:{p.resource_name}", p.pattern_type.name, a.principal, a.host, a.operation.name, a.permission_type.name)
    env.out.print(table)


@click.group("acls", no_args_is_help=True)
def acls() -> None:
    """ACLs on topics, groups, transactional ids and the cluster (Kafka's model;
    options as kafka-acls.sh's).

    \b
    Examples:
      kcoord acls add --allow-principal User:alice --operation WRITE --topic orders
      kcoord acls add --allow-principal User:alice --operation READ --group billing
      kcoord acls add --allow-principal User:bob --operation READ \\
          --topic team-b- --resource-pattern-type prefixed
      kcoord acls add --deny-principal User:bob --operation ALL --topic secrets
      kcoord acls list --principal User:alice
      kcoord acls remove --allow-principal User:alice --operation WRITE --topic orders
    """


def _acl_common(fn: Callable) -> Callable:
    for option in reversed(
        [
            click.option("--allow-principal", multiple=True, metavar="User:NAME", help="Principal allowed (repeatable; User:* for everybody)."),
            click.option("--deny-principal", multiple=True, metavar="User:NAME", help="Principal denied (repeatable)."),
            click.option("--allow-host", multiple=True, metavar="IP", help="Host the allow applies from [default: *]."),
            click.option("--deny-host", multiple=True, metavar="IP", help="Host the deny applies from [default: *]."),
            click.option("--operation", "operations", multiple=True, metavar="OP", help="READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, ALL (repeatable)."),
        ]
    ):
        fn = option(fn)
    return resource_options(fn)


def _acls_from(allow_principal, deny_principal, allow_host, deny_host, operations, resources, pattern, any_allowed: bool) -> list:
    from ..security.acl import ACL, ACLFilter, ACLOperation, ACLPermissionType, ResourcePattern, ResourcePatternFilter, coerce

    if not resources:
        raise click.UsageError("name a resource: --topic, --group, --cluster or --transactional-id")
    if not allow_principal and not deny_principal:
        raise click.UsageError("name a principal: --allow-principal or --deny-principal")
    try:
        ops = [coerce(ACLOperation, o) for o in operations] or ([ACLOperation.ANY] if any_allowed else [])
    except ValueError as exc:
        raise click.UsageError(f"--operation: {exc}") from None
    if not ops:
        raise click.UsageError("name an operation: --operation")
    out = []
    for perm, principals, hosts in ((ACLPermissionType.ALLOW, allow_principal, allow_host), (ACLPermissionType.DENY, deny_principal, deny_host)):
        for principal in principals:
            for host in hosts or (("*",) if not any_allowed else (None,)):
                for op in ops:
                    for rtype, name in resources:
                        try:
                            if any_allowed:
                                out.append(ACLFilter(principal, host, op, perm, ResourcePatternFilter(rtype, name, pattern)))
                            else:
                                out.append(ACL(principal, host, op, perm, ResourcePattern(rtype, name, pattern)))
                        except ValueError as exc:
                            raise click.UsageError(str(exc)) from None
    return out


@acls.command("add")
@_acl_common
@click.option("--resource-pattern-type", type=click.Choice(["literal", "prefixed"]), default="literal", show_default=True, help="LITERAL names one resource ('*': every one); PREFIXED every resource starting with the name.")
@pass_env
def acls_add(env: Env, allow_principal, deny_principal, allow_host, deny_host, operations, topic, group, cluster, transactional_id, resource_pattern_type) -> None:
    """Add ACLs: every combination of the principals, hosts, operations and resources
    given. Open connections obey them at their next request (within a second).

    \b
    Examples:
      kcoord acls add --allow-principal User:alice --operation WRITE --topic orders
      kcoord acls add --allow-principal User:alice --operation READ --topic orders --group billing
      kcoord acls add --allow-principal User:ops --operation ALL --cluster
      kcoord acls add --deny-principal User:* --deny-host 10.0.0.66 --operation ALL --topic '*'
    """
    new = _acls_from(allow_principal, deny_principal, allow_host, deny_host, operations, _resources(topic, group, cluster, transactional_id), resource_pattern_type.upper(), False)
    result = env.admin().create_acls(new)
    if result["failed"]:
        raise CliError("; ".join(str(e) for e in result["failed"]))
    env.out.print(f"added {len(result['succeeded'])} ACLs")
    _print_acls(env, result["succeeded"], False)


@acls.command("list")
@click.option("--principal", default=None, metavar="User:NAME", help="Only this principal's ACLs.")
@resource_options
@click.option("--resource-pattern-type", type=click.Choice(["any", "match", "literal", "prefixed"]), default="any", show_default=True, help="MATCH: the ACLs that apply to the named resource (literal, '*', prefixes).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_env
def acls_list(env: Env, principal, topic, group, cluster, transactional_id, resource_pattern_type, as_json) -> None:
    """List ACLs (all, or those of a principal or resource).

    \b
    Examples:
      kcoord acls list
      kcoord acls list --principal User:alice
      kcoord acls list --topic orders --resource-pattern-type match
    """
    from ..security.acl import ACLFilter, ACLOperation, ACLPermissionType, ResourcePatternFilter, ResourceType

    resources = _resources(topic, group, cluster, transactional_id) or [(ResourceType.ANY, None)]
    found: list = []
    admin = env.admin()
    for rtype, name in resources:
        f = ACLFilter(principal, None, ACLOperation.ANY, ACLPermissionType.ANY, ResourcePatternFilter(rtype, name, resource_pattern_type.upper()))
        found += [a for a in admin.describe_acls(f)[0] if a not in found]
    _print_acls(env, found, as_json)


@acls.command("remove")
@_acl_common
@click.option("--resource-pattern-type", type=click.Choice(["literal", "prefixed", "any"]), default="literal", show_default=True, help="Which patterns to remove.")
@pass_env
def acls_remove(env: Env, allow_principal, deny_principal, allow_host, deny_host, operations, topic, group, cluster, transactional_id, resource_pattern_type) -> None:
    """Remove the ACLs that match (no --operation: every operation; no host: every host).

    \b
    Examples:
      kcoord acls remove --allow-principal User:alice --operation WRITE --topic orders
      kcoord acls remove --allow-principal User:alice --topic '*' --resource-pattern-type any
    """
    filters = _acls_from(allow_principal, deny_principal, allow_host, deny_host, operations, _resources(topic, group, cluster, transactional_id), resource_pattern_type.upper(), True)
    removed = [a for _, deleted, _ in env.admin().delete_acls(filters) for a in deleted]
    env.out.print(f"removed {len(removed)} ACLs")
    if removed:
        _print_acls(env, removed, False)


COMMANDS = [users, acls, listeners]
