"""``kcoord produce`` (lines from stdin) and ``kcoord consume`` (records to stdout)."""

from __future__ import annotations

import signal
import sys
import threading
import time
from typing import IO, Any

import click

from ._common import CliError, Env

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
@click.option("--linger-ms", type=click.FloatRange(min=0), default=5, show_default=True, help="Batching delay.")
@click.option("--input", "input_", type=click.File("rb"), default="-", show_default=True, help="Read lines from this file instead of stdin.")
@pass_env
def produce(env: Env, topic: str, key_separator: str | None, acks: str, partition: int | None, linger_ms: float, input_: IO[bytes]) -> None:
    """Write each line of stdin to TOPIC as one record.

    Blank lines are skipped. With --key-separator every line must contain the separator;
    the part before it is the key (records with one key go to one partition, in order).
    Lines are sent as they are read: at a line without the separator the command stops
    with an error, after writing the lines before it.

    \b
    Examples:
      seq 100 | kcoord produce events
      printf 'user1:login\\nuser2:logout\\n' | kcoord produce events --key-separator :
      kcoord produce events --acks 1 --input events.txt
    """
    if key_separator == "":
        raise click.BadParameter("must not be empty", param_hint="--key-separator")
    from ..client.producer import Producer

    sep = key_separator.encode() if key_separator is not None else None
    cluster = env.client()
    cluster.topic(topic, refresh=True)  # UNKNOWN_TOPIC_OR_PARTITION before reading any input
    producer = Producer(cluster, acks=_ACKS[acks], linger_ms=linger_ms)
    futures: list[Any] = []
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
            futures.append(producer.send(topic, value=value, key=key, partition=partition))
        producer.flush()
    finally:
        producer.close()
    failed = 0
    first: BaseException | None = None
    partitions: set[int] = set()
    for fut in futures:
        try:
            meta = fut.get(timeout=60)
            partitions.add(meta.partition)
        except Exception as exc:  # noqa: BLE001 - counted and reported below
            failed += 1
            first = first or exc
    if bad_line is not None:
        raise CliError(f"{bad_line}; stopped there, after writing the {len(futures) - failed} records before it")
    if failed:
        from ._common import describe_exception

        detail = describe_exception(first) if first is not None else None
        raise CliError(f"{failed} of {len(futures)} records were not written to {topic!r}: {detail or first}")
    env.err.print(f"produced {len(futures)} records to {topic!r} ({len(partitions)} partition(s), acks={acks})")


def _text(data: bytes | None) -> str:
    return "null" if data is None else data.decode("utf-8", errors="replace")


@click.command("consume")
@click.argument("topic")
@click.option("--group", "group_id", default=None, help="Consume as a member of this consumer group and commit what was printed.")
@click.option("--from-beginning", is_flag=True, help="Start at the earliest offset (with --group: when the group has no committed offset).")
@click.option("--max-messages", type=click.IntRange(min=1), default=None, help="Exit after this many records.")
@click.option("--timeout-ms", type=click.IntRange(min=0), default=None, help="Exit when no record arrived for this long [default: wait forever].")
@click.option("--partition", "partitions", type=click.IntRange(min=0), multiple=True, help="Only these partitions (no --group; repeatable).")
@click.option("--print-key", is_flag=True, help="Print KEY<separator>VALUE.")
@click.option("--print-offset", is_flag=True, help="Prefix each record with PARTITION:OFFSET.")
@click.option("--key-separator", default="\t", show_default="tab", help="Separator for --print-key.")
@pass_env
def consume(
    env: Env,
    topic: str,
    group_id: str | None,
    from_beginning: bool,
    max_messages: int | None,
    timeout_ms: int | None,
    partitions: tuple[int, ...],
    print_key: bool,
    print_offset: bool,
    key_separator: str,
) -> None:
    """Print the records of TOPIC to stdout, one value per line.

    Without --group it reads every partition (or --partition ones) from the end, or from
    the beginning with --from-beginning, and commits nothing. With --group it joins the
    consumer group, reads the partitions the group assigns it and commits the offsets of
    the records it printed.

    \b
    Examples:
      kcoord consume events --from-beginning --max-messages 10
      kcoord consume events --group billing --timeout-ms 5000
      kcoord consume events --from-beginning --print-key --print-offset --partition 0
    """
    if group_id is not None and partitions:
        raise click.UsageError("--partition cannot be combined with --group (the group assigns partitions)")
    from ..client.consumer import Consumer
    from ..client.types import TopicPartition

    cluster = env.client()
    known = cluster.partitions_for(topic)  # UNKNOWN_TOPIC_OR_PARTITION if missing
    bad = sorted(set(partitions) - set(known))
    if bad:
        raise CliError(f"topic {topic!r} has no partition {bad[0]} (it has {len(known)})")
    reset = "earliest" if from_beginning else "latest"
    if group_id is not None:
        consumer = Consumer(topic, cluster=cluster, group_id=group_id, auto_offset_reset=reset, enable_auto_commit=False)
    else:
        consumer = Consumer(topic, cluster=cluster, auto_offset_reset=reset, enable_auto_commit=False)
        if partitions:
            consumer.assign([TopicPartition(topic, p) for p in sorted(set(partitions))])
    printed = _Printed()
    # Ctrl-C is how an open-ended consume ends, not an error. It only raises a flag: a
    # KeyboardInterrupt between writing a line and counting it (or committing it) would make
    # the summary and the group's committed offset disagree with what reached stdout.
    previous = signal.signal(signal.SIGINT, printed.interrupt) if threading.current_thread() is threading.main_thread() else None
    try:
        _consume_loop(consumer, group_id, max_messages, timeout_ms, print_key, print_offset, key_separator, env.stdout, printed)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        consumer.close()
    env.err.print(f"consumed {printed.count} records from {topic!r}" + (f" as group {group_id!r}" if group_id else ""))


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
    print_key: bool,
    print_offset: bool,
    key_separator: str,
    out: IO[str],
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
                prefix = f"{r.partition}:{r.offset}\t" if print_offset else ""
                body = f"{_text(r.key)}{key_separator}{_text(r.value)}" if print_key else _text(r.value)
                out.write(prefix + body + "\n")
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
