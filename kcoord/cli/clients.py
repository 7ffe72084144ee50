"""``kcoord produce`` (lines from stdin) and ``kcoord consume`` (records to stdout)."""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections import deque
from typing import IO, Any, Callable

import click

from ._common import CliError, Env
from .formats import FORMAT_HELP

pass_env = click.make_pass_decorator(Env)

_ACKS = {"all": "all", "-1": "all", "1": 1, "0": 0}


def _split_lines(stream: IO[bytes]):
    """Lines of ``stream`` without their line ending; blank lines are skipped."""
    for number, raw in enumerate(stream, 1):
        line = raw.rstrip(b"\r\n") if raw.endswith(b"\n") else raw
        if line:
            yield number, line


@click.command("produce")
@click.argument("topic")
@click.option("--key-separator", default=None, metavar="SEP", help="Split each line at the first SEP into key and value.")
@click.option("--acks", type=click.Choice(sorted(_ACKS)), default="all", show_default=True, help="Acknowledgements to wait for.")
@click.option("--partition", type=click.IntRange(min=0), default=None, help="Write every record to this partition [default: by key].")
@click.option("-H", "--header", "headers", multiple=True, metavar="KEY=VALUE", help="Add this header to every record (repeatable).")
@click.option("--compression", default="none", show_default=True, metavar="CODEC", help="Compression codec: none, gzip, snappy, lz4 or zstd (those installed).")
@click.option("--linger-ms", type=click.FloatRange(min=0), default=5, show_default=True, help="Batching delay.")
@click.option("--input", "input_", type=click.File("rb"), default="-", show_default=True, help="Read lines from this file instead of stdin.")
@pass_env
def produce(
    env: Env, topic: str, key_separator: str | None, acks: str, partition: int | None, headers: tuple[str, ...], compression: str, linger_ms: float, input_: IO[bytes]
) -> None:
    """Write each line of stdin to TOPIC as one record.

    Blank lines are skipped. With --key-separator every line must contain the separator;
    the part before it is the key (records with one key go to one partition, in order).
    Lines are sent as they are read, with a bounded number in flight, so endless input
    (``tail -f``) works: a record that fails is reported on stderr as soon as it fails,
    with its line number, and the command exits non-zero at the end of input. At a line
    without the separator the command stops with an error, after writing the lines before it.

    \b
    Examples:
      seq 100 | kcoord produce events
      printf 'user1:login\\nuser2:logout\\n' | kcoord produce events --key-separator :
      tail -f app.log | kcoord produce logs -H host=web1 --compression gzip
      kcoord produce events --acks 1 --input events.txt
    """
    if key_separator == "":
        raise click.BadParameter("must not be empty", param_hint="--key-separator")
    from .. import record as _records
    from ..client.errors import KafkaError
    from ..client.producer import Producer
    from .formats import parse_headers

    try:
        record_headers = parse_headers(headers) or None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--header") from None
    if compression not in _records.available_codecs():
        raise click.BadParameter(f"{compression!r} is not available; choose from {', '.join(_records.available_codecs())}", param_hint="--compression")
    sep = key_separator.encode() if key_separator is not None else None
    cluster = env.client()
    partitions = cluster.partitions_for(topic)  # UNKNOWN_TOPIC_OR_PARTITION before reading any input
    if partition is not None and partition not in partitions:
        raise CliError(f"topic {topic!r} has no partition {partition} (it has {len(partitions)})")
    producer = Producer(cluster, acks=_ACKS[acks], linger_ms=linger_ms, compression_type=None if compression == "none" else compression)
    tally = _Delivery(env)
    bad_line: str | None = None
    try:
        for number, line in _split_lines(input_):
            key = None
            if sep is not None:
                key, found, value = line.partition(sep)
                if not found:
                    # Lines stream out as they come (stdin may never end), so the lines
                    # before this one are sent; stop here and say so.
                    bad_line = f"line {number} has no key separator {key_separator!r}: {line[:60]!r}"
                    break
            else:
                value = line
            try:
                future = producer.send(topic, value=value, key=key, partition=partition, headers=record_headers)
            except KafkaError as exc:  # this record only (too large, ...): say so and go on
                tally.refused(number, exc)
                continue
            tally.track(number, future)
        producer.flush()
        tally.wait_all()
    finally:
        producer.close()
    if bad_line is not None:
        raise CliError(f"{bad_line}; stopped there, after writing the {tally.sent - tally.failed} records before it")
    if tally.failed:
        raise CliError(f"{tally.failed} of {tally.sent} records were not written to {topic!r} (each is reported above)")
    env.err.print(f"produced {tally.sent} records to {topic!r} ({len(tally.partitions)} partition(s), acks={acks})")


class _Delivery:
    """The records ``produce`` has in flight: at most ``window`` futures are kept (memory
    stays bounded on endless input); a failure is printed from the producer's callback the
    moment it happens, with the line it came from."""

    def __init__(self, env: Env, window: int = 10_000, timeout_s: float = 120.0) -> None:
        self.env = env
        self.window = window
        self.timeout_s = timeout_s
        self.pending: deque = deque()
        self.partitions: set[int] = set()
        self.sent = 0
        self.failed = 0
        self._lock = threading.Lock()

    def track(self, number: int, future: Any) -> None:
        self.sent += 1
        future.add_errback(self._report, number)
        self.pending.append(future)
        while self.pending and (self.pending[0].done() or len(self.pending) > self.window):
            self._settle(self.pending.popleft())

    def refused(self, number: int, exc: BaseException) -> None:
        self.sent += 1
        self._report(number, exc)

    def wait_all(self) -> None:
        while self.pending:
            self._settle(self.pending.popleft())

    def _settle(self, future: Any) -> None:
        try:
            self.partitions.add(future.get(timeout=self.timeout_s).partition)
        except Exception as exc:  # noqa: BLE001 - failures were reported by the errback
            if not future.failed():  # not acknowledged in time: the errback did not run
                self._report(-1, exc)

    def _report(self, number: int, exc: BaseException) -> None:
        from ._common import describe_exception

        with self._lock:
            self.failed += 1
            where = f"line {number}" if number >= 0 else "a record"
            print(f"warning: {where} was not written: {describe_exception(exc) or exc}", file=sys.stderr, flush=True)


@click.command("consume")
@click.argument("topic")
@click.option("--group", "group_id", default=None, help="Consume as a member of this consumer group and commit what was printed.")
@click.option("--offset", "offset_spec", default=None, metavar="SPEC", help="Where to start (no --group): earliest, latest, N, -N (N before the end) or @TIMESTAMP_MS. [default: latest]")
@click.option("--from-beginning", is_flag=True, help="Start at the earliest offset (with --group: when the group has no committed offset).")
@click.option("--max-messages", type=click.IntRange(min=1), default=None, help="Exit after this many records.")
@click.option("--timeout-ms", type=click.IntRange(min=0), default=None, help="Exit when no record arrived for this long [default: wait forever].")
@click.option("--partition", "partitions", type=click.IntRange(min=0), multiple=True, help="Only these partitions (no --group; repeatable).")
@click.option("-f", "--format", "fmt", default=None, metavar="FMT", help=FORMAT_HELP)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per record: topic, partition, offset, timestamp, key, value, headers (bytes that are not UTF-8 as {\"base64\": ...}).")
@click.option("--print-key", is_flag=True, help="Print KEY<separator>VALUE.")
@click.option("--print-offset", is_flag=True, help="Prefix each record with PARTITION:OFFSET.")
@click.option("--key-separator", default="\t", show_default="tab", help="Separator for --print-key.")
@click.option(
    "--isolation-level",
    type=click.Choice(["read_uncommitted", "read_committed"]),
    default="read_uncommitted",
    show_default=True,
    help="read_committed: only records of committed transactions, up to the last stable offset (kcat's -X isolation.level).",
)
@pass_env
def consume(
    env: Env,
    topic: str,
    group_id: str | None,
    offset_spec: str | None,
    from_beginning: bool,
    max_messages: int | None,
    timeout_ms: int | None,
    partitions: tuple[int, ...],
    fmt: str | None,
    as_json: bool,
    print_key: bool,
    print_offset: bool,
    key_separator: str,
    isolation_level: str,
) -> None:
    """Print the records of TOPIC to stdout, one value per line (bytes as stored).

    Without --group it reads every partition (or --partition ones) from the end, or from
    where --offset says, and commits nothing. With --group it joins the consumer group,
    reads the partitions the group assigns it and commits the offsets of the records it
    printed.

    \b
    Examples:
      kcoord consume events --from-beginning --max-messages 10
      kcoord consume events --offset -5 --format '%p:%o %k=%s\\n'
      kcoord consume events --offset @1700000000000 --json
      kcoord consume events --group billing --timeout-ms 5000
    """
    from .formats import compile_format, parse_offset, record_json

    if group_id is not None and partitions:
        raise click.UsageError("--partition cannot be combined with --group (the group assigns partitions)")
    if sum(bool(x) for x in (fmt is not None, as_json, print_key or print_offset)) > 1:
        raise click.UsageError("choose one of --format, --json and --print-key/--print-offset")
    if offset_spec is not None and from_beginning:
        raise click.UsageError("--from-beginning is --offset earliest: give one of them")
    try:
        start = parse_offset(offset_spec if offset_spec is not None else ("earliest" if from_beginning else "latest"))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--offset") from None
    if group_id is not None and start.kind not in ("earliest", "latest"):
        raise click.UsageError("with --group the group's committed offsets say where to start: --offset takes only earliest or latest")
    if as_json:
        render = record_json
    else:
        if fmt is None:
            fmt = ("%p:%o\\t" if print_offset else "") + (key_separator.replace("%", "%%").replace("\\", "\\\\").join(("%k", "")) if print_key else "") + "%s\\n"
        try:
            render = compile_format(fmt)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--format") from None

    from ..client.consumer import Consumer
    from ..client.consumer.consumer import ISOLATION_LEVELS
    from ..client.types import TopicPartition

    cluster = env.client()
    known = cluster.partitions_for(topic)  # UNKNOWN_TOPIC_OR_PARTITION if missing
    bad = sorted(set(partitions) - set(known))
    if bad:
        raise CliError(f"topic {topic!r} has no partition {bad[0]} (it has {len(known)})")
    reset = "earliest" if start.kind == "earliest" else "latest"
    if group_id is not None:
        consumer = Consumer(topic, cluster=cluster, group_id=group_id, auto_offset_reset=reset, enable_auto_commit=False, isolation_level=isolation_level)
    else:
        consumer = Consumer(topic, cluster=cluster, auto_offset_reset=reset, enable_auto_commit=False, isolation_level=isolation_level)
        chosen = sorted(set(partitions)) if partitions else sorted(known)
        if partitions or start.kind not in ("earliest", "latest"):
            consumer.assign([TopicPartition(topic, p) for p in chosen])
        if start.kind not in ("earliest", "latest"):
            for p, pos in _start_positions(cluster, topic, chosen, start, ISOLATION_LEVELS[isolation_level]).items():
                consumer.seek(TopicPartition(topic, p), pos)
    printed = _Printed()
    # Ctrl-C is how an open-ended consume ends, not an error. It only raises a flag: a
    # KeyboardInterrupt between writing a line and counting it (or committing it) would make
    # the summary and the group's committed offset disagree with what reached stdout.
    previous = signal.signal(signal.SIGINT, printed.interrupt) if threading.current_thread() is threading.main_thread() else None
    try:
        _consume_loop(consumer, group_id, max_messages, timeout_ms, render, _binary(env.stdout), printed)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        consumer.close()
    env.err.print(f"consumed {printed.count} records from {topic!r}" + (f" as group {group_id!r}" if group_id else ""))


def _start_positions(cluster: Any, topic: str, partitions: list[int], start: Any, isolation_level: int = 0) -> dict[int, int]:
    """``--offset`` N, -N or @TS as one position per partition, from the leaders' log start
    and end offsets (the LSO read committed) and the timestamp index."""
    from ..client.types import TopicPartition
    from ..protocol.replication import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
    from .formats import start_positions

    tps = [TopicPartition(topic, p) for p in partitions]

    def lookup(ts: int) -> dict[int, int]:
        return {tp.partition: off for tp, off in cluster.list_offsets(tps, ts, isolation_level=isolation_level).items()}

    by_time = lookup(start.value) if start.kind == "timestamp" else None
    return start_positions(start, lookup(EARLIEST_TIMESTAMP), lookup(LATEST_TIMESTAMP), by_time)


def _binary(out: IO[str]) -> IO[bytes]:
    """The byte stream under a text stdout: records are written as stored."""
    out.flush()
    return out.buffer  # type: ignore[attr-defined]


class _Printed:
    """How many records reached stdout, and whether Ctrl-C asked the loop to stop."""

    def __init__(self) -> None:
        self.count = 0
        self.stopped = False

    def interrupt(self, signum: int, frame: Any) -> None:
        if self.stopped:  # a second Ctrl-C: the user insists
            raise KeyboardInterrupt
        self.stopped = True


def _consume_loop(
    consumer: Any,
    group_id: str | None,
    max_messages: int | None,
    timeout_ms: int | None,
    render: Callable[[Any], bytes],
    out: IO[bytes],
    printed: _Printed,
) -> None:
    """Poll, print and (with a group) commit what was printed, until ``max_messages``
    records or ``timeout_ms`` without a record."""
    from ..client.types import OffsetAndMetadata

    last_record = time.monotonic()
    while not printed.stopped and (max_messages is None or printed.count < max_messages):
        wait = 500 if timeout_ms is None else max(1, min(500, int(timeout_ms - (time.monotonic() - last_record) * 1000)))
        want = None if max_messages is None else max_messages - printed.count
        batch = consumer.poll(timeout_ms=wait, max_records=want)
        done: dict[Any, Any] = {}
        for tp, recs in sorted(batch.items()):
            for r in recs:
                out.write(render(r))
                printed.count += 1
                done[tp] = OffsetAndMetadata(r.offset + 1)
        if done:
            out.flush()
            last_record = time.monotonic()
            if group_id is not None:
                consumer.commit(done)
        elif timeout_ms is not None and (time.monotonic() - last_record) * 1000 >= timeout_ms:
            return


COMMANDS = [produce, consume]
