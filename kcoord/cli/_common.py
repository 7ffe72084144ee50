"""What every ``kcoord`` command shares: the global options, connecting to Ray quietly,
turning expected errors into one line on stderr, and rich output helpers."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from typing import IO, Any, Callable, Iterable

import click
from rich.console import Console
from rich.table import Table

from ..protocol import names

DEFAULT_NAME = "kcoord"


class CliError(click.ClickException):
    """An expected failure: printed as ``error: <message>`` and exit code 1."""


@dataclass
class Env:
    """The global options (``--name``, ``--namespace``, ``--address``) and lazily made
    connections, passed to every command as the click context object."""

    name: str = DEFAULT_NAME
    namespace: str = names.DEFAULT_NAMESPACE
    address: str = "auto"
    debug: bool = False
    # Command output goes here: the process's stdout as it was at start. Once Ray is
    # connected, ``sys.stdout`` points at stderr (see connect_ray).
    stdout: IO[str] = field(default_factory=lambda: sys.stdout)
    out: Console = field(default_factory=lambda: make_console(sys.stdout))
    err: Console = field(default_factory=lambda: make_console(sys.stderr))
    _client: Any = None

    def connect_ray(self) -> None:
        connect_ray(self.address, self.namespace)

    def client(self) -> Any:
        """A ClusterClient for ``--name`` (ClusterNotFoundError says how to deploy one)."""
        if self._client is None:
            self.connect_ray()
            from ..client.cluster import ClusterClient

            self._client = ClusterClient(self.name, namespace=self.namespace, address=None)
        return self._client

    def admin(self) -> Any:
        from ..client.admin import Admin

        return Admin(self.client())


def make_console(stream: IO[str]) -> Console:
    """A rich console; when piped it is wide (rich would assume 80 columns and cut topic
    and actor names in tables short)."""
    width = None
    try:
        piped = not stream.isatty()
    except (AttributeError, ValueError):
        piped = True
    if piped:
        width = max(int(os.environ.get("COLUMNS", "0") or 0), 200)
    return Console(file=stream, width=width, soft_wrap=True)


def connect_ray(address: str, namespace: str) -> None:
    """``ray.init`` without Ray's connection chatter; a clear error if nothing runs there."""
    import ray

    if ray.is_initialized():
        return
    _probe_gcs(address)
    try:
        ray.init(
            address=address,
            namespace=namespace,
            logging_level="ERROR",
            log_to_driver=False,
            configure_logging=True,
        )
    except ConnectionError as exc:
        raise CliError(
            f"cannot reach a Ray cluster at {address!r} ({first_line(str(exc))}); "
            f"start one with `ray start --head`, or pass --address HOST:PORT"
        ) from None
    # Ray's driver prints cluster events (a node marked dead, a worker killed) to whatever
    # sys.stdout is at that moment; keep them off the command's data output (records of
    # `kcoord consume`, JSON), which goes to Env.stdout.
    sys.stdout = sys.stderr


def _probe_gcs(address: str, timeout_s: float = 5.0) -> None:
    """Fail fast when nothing listens at the Ray address: ``ray.init`` would otherwise
    retry for minutes, printing connection warnings."""
    import socket

    try:
        from ray._private.services import canonicalize_bootstrap_address_or_die

        resolved = canonicalize_bootstrap_address_or_die(address)
    except ConnectionError as exc:
        raise CliError(f"no Ray cluster found ({first_line(str(exc))}); start one with `ray start --head`, or pass --address HOST:PORT") from None
    except Exception:  # private Ray API moved: let ray.init decide
        return
    host, _, port = str(resolved).rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except (OSError, ValueError) as exc:
        raise CliError(
            f"cannot reach a Ray cluster at {resolved} ({exc.__class__.__name__}: {exc}); "
            f"start one with `ray start --head`, or pass --address HOST:PORT"
        ) from None


def first_line(text: str) -> str:
    text = text.strip()
    return text.splitlines()[0].strip() if text else ""


def describe_exception(exc: BaseException) -> str | None:
    """One line for an expected error, or None if ``exc`` is not one (a bug)."""
    from ..protocol.errors import KafkaError

    if isinstance(exc, KafkaError):
        message = exc.message or "(no details)"
        return f"{message} ({exc.name})"
    try:
        from ..client.errors import ClusterNotFoundError
        from kcoord.cluster.deploy import ClusterExistsError
    except ImportError:  # pragma: no cover - partial installs
        ClusterNotFoundError = ClusterExistsError = ()  # type: ignore[assignment,misc]
    if isinstance(exc, (ClusterNotFoundError, ClusterExistsError)):
        return first_line(str(exc))
    if isinstance(exc, (ValueError, TimeoutError)):
        return first_line(str(exc)) or type(exc).__name__
    try:
        from ray.exceptions import GetTimeoutError, RayActorError
    except ImportError:  # pragma: no cover
        return None
    if isinstance(exc, GetTimeoutError):
        return f"timed out waiting for the cluster: {first_line(str(exc))}"
    if isinstance(exc, RayActorError):
        return f"a kcoord actor died during the request ({type(exc).__name__}); try again"
    return None


def make_table(title: str, columns: Iterable[str], right: Iterable[str] = ()) -> Table:
    """A table titled on the left with these columns; those in ``right`` (numbers) are
    right-aligned."""
    right = set(right)
    out = Table(title=title, title_justify="left")
    for col in columns:
        out.add_column(col, justify="right" if col in right else "left")
    return out


def echo_json(env: Env, value: Any, **dumps: Any) -> None:
    """``value`` as JSON on the command's stdout (``dumps``: ``json.dumps`` options)."""
    click.echo(json.dumps(value, **dumps), file=env.stdout)


def parse_properties(items: Iterable[str], what: str = "--config") -> dict[str, str]:
    """``["k=v", ...]`` -> ``{"k": "v"}`` (Kafka-style names are kept as they are)."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint=what)
        out[key.strip()] = value.strip()
    return out


def parse_offsets(text: str) -> str | dict[int, int]:
    """``earliest``, ``latest`` or ``P=O[,P=O...]`` (partition=offset)."""
    text = text.strip()
    if text in ("earliest", "latest"):
        return text
    out: dict[int, int] = {}
    for part in text.split(","):
        p, sep, o = part.partition("=")
        try:
            if not sep:
                raise ValueError
            out[int(p)] = int(o)
        except ValueError:
            raise click.BadParameter(f"expected earliest, latest or PARTITION=OFFSET[,...], got {text!r}", param_hint="--to") from None
    return out


def run_safely(fn: Callable[[], Any], debug: bool) -> int:
    """Run the click app; expected errors become one ``error: ...`` line and exit code
    1 (2 for usage errors). With ``--debug``/``KCOORD_DEBUG=1`` tracebacks are shown."""
    try:
        rv = fn()
        # standalone_mode=False: click returns Exit codes (--help, --version) as ints.
        return rv if isinstance(rv, int) and not isinstance(rv, bool) else 0
    except click.exceptions.NoArgsIsHelpError as exc:
        click.echo(exc.ctx.get_help() if exc.ctx else str(exc))
        return 0
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.UsageError as exc:
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        click.echo(f"error: {first_line(exc.format_message())}{hint}", err=True)
        return 2
    except click.ClickException as exc:
        click.echo(f"error: {first_line(exc.format_message())}", err=True)
        return exc.exit_code or 1
    except (click.Abort, KeyboardInterrupt):
        click.echo("aborted", err=True)
        return 130
    except BrokenPipeError:
        # `kcoord consume ... | head`: the reader went away; not an error. Point fd 1 at
        # /dev/null so flushing stdout at exit does not raise again.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.close(devnull)
        except OSError:
            pass
        return 0
    except Exception as exc:
        if debug:
            raise
        line = describe_exception(exc)
        if line is not None:
            click.echo(f"error: {line}", err=True)
            return 1
        click.echo(
            f"error: unexpected {type(exc).__name__}: {first_line(str(exc))} (run with --debug for the traceback)",
            err=True,
        )
        return 1
