"""The `kcoord` console script against a real `ray start --head` (each call is its own
process, as a user runs it): every command's happy path and a bad-input case, whose error
must be one line on stderr with a non-zero exit code."""

from __future__ import annotations

import json
import signal
import subprocess

import pytest

from cli_support import KCOORD, RayHead, run_kcoord

pytestmark = [pytest.mark.ray, pytest.mark.slow]

NAME = "clitest"


@pytest.fixture(scope="module")
def head():
    h = RayHead().start()
    try:
        run_kcoord(h, "--name", NAME, "up", "--brokers", "3", "--group-coordinators", "1", "--kafka-port", "0", check=True)
        yield h
        run_kcoord(h, "--name", NAME, "down", "--delete-data", check=True)
    finally:
        h.stop()


def ok(head: RayHead, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
    return run_kcoord(head, "--name", NAME, *args, input=input, check=True)


def fails(head: RayHead, *args: str, expect: str, input: str | None = None, code: int | None = None) -> str:
    """Run a command that must fail: non-zero exit, exactly one `error: ...` line on stderr
    containing ``expect``, no traceback. Returns that line."""
    proc = run_kcoord(head, "--name", NAME, *args, input=input)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0, f"kcoord {' '.join(args)} succeeded: {proc.stdout}"
    if code is not None:
        assert proc.returncode == code
    assert len(lines) == 1 and lines[0].startswith("error: "), f"not one error line: {proc.stderr!r}"
    assert "Traceback" not in proc.stderr and expect in lines[0], lines[0]
    return lines[0]


def test_up_refuses_a_second_deploy_and_if_not_exists_accepts_it(head):
    fails(head, "up", expect="already running")
    assert "already running; nothing to do" in ok(head, "up", "--if-not-exists").stdout


def test_status_shows_the_cluster_and_a_missing_cluster_says_how_to_deploy(head):
    out = ok(head, "status", "--internal").stdout
    for fragment in ("controller epoch", "under-replicated", "offline", f"{NAME}/group/0", "__consumer_offsets", "partitions"):
        assert fragment in out, fragment
    assert "data directory: " in out and "/kcoord/data/" + NAME in out  # the per-user data dir
    snap = json.loads(ok(head, "status", "--json").stdout)
    assert snap["cluster"]["brokers"] == [0, 1, 2] and snap["coordinators"]["groups"][0]["loaded"]
    line = run_kcoord(head, "--name", "nope", "status")
    assert line.returncode == 1 and "kcoord up --name nope" in line.stderr and len(line.stderr.strip().splitlines()) == 1


def test_topics_create_list_describe_delete(head):
    assert "created topic 'clicks'" in ok(head, "topics", "create", "clicks", "-p", "2", "-r", "3", "-c", "min.insync.replicas=2").stdout
    fails(head, "topics", "create", "clicks", expect="TOPIC_ALREADY_EXISTS")
    assert "already exists; nothing to do" in ok(head, "topics", "create", "clicks", "--if-not-exists").stdout
    assert "clicks" in json.loads(ok(head, "topics", "list", "--json").stdout)
    fails(head, "topics", "create", "wide", "-r", "5", expect="INVALID_REPLICATION_FACTOR")
    assert "clicks" in ok(head, "topics", "list").stdout.split()
    desc = ok(head, "topics", "describe", "clicks").stdout
    assert "min.insync.replicas=2" in desc and desc.count("clicks") >= 3
    parts = json.loads(ok(head, "topics", "describe", "clicks", "--json").stdout)["partitions"]
    assert [len(p["isr"]) for p in parts] == [3, 3]
    fails(head, "topics", "describe", "nope", expect="topic 'nope' does not exist (UNKNOWN_TOPIC_OR_PARTITION)")
    assert "deleted topic 'clicks'" in ok(head, "topics", "delete", "clicks").stdout
    fails(head, "topics", "delete", "clicks", expect="UNKNOWN_TOPIC_OR_PARTITION")
    assert "does not exist; nothing to do" in ok(head, "topics", "delete", "clicks", "--if-exists").stdout


def test_topics_describe_config_alter_config_add_partitions_delete_records(head):
    ok(head, "topics", "create", "changing", "-p", "1", "-r", "3", "-c", "retention.ms=60000")
    shown = json.loads(ok(head, "topics", "describe-config", "changing", "--json").stdout)
    assert shown["retention.ms"]["source"] == "DYNAMIC_TOPIC_CONFIG" and shown["segment.bytes"]["source"] == "DEFAULT_CONFIG"
    assert "retention.ms" in ok(head, "topics", "describe-config", "changing").stdout
    out = ok(head, "topics", "alter-config", "changing", "--set", "segment.bytes=4096", "--delete", "retention.ms").stdout
    assert "segment.bytes=4096" in out and "retention.ms back to its default" in out
    overrides = json.loads(ok(head, "topics", "describe-config", "changing", "--overrides", "--json").stdout)
    assert {k: v["value"] for k, v in overrides.items()} == {"segment.bytes": "4096"}
    fails(head, "topics", "alter-config", "changing", "--set", "no.such=1", expect="no.such")
    assert "now has 3 partitions" in ok(head, "topics", "add-partitions", "changing", "--count", "3").stdout
    fails(head, "topics", "add-partitions", "changing", "--count", "2", expect="INVALID_PARTITIONS")
    ok(head, "produce", "changing", "--partition", "2", input="a\nb\nc\n")
    assert "low watermark 2" in ok(head, "topics", "delete-records", "changing", "-p", "2", "--offset", "2").stdout
    fails(head, "topics", "delete-records", "changing", "-p", "2", "--offset", "9", expect="OFFSET_OUT_OF_RANGE")
    ok(head, "topics", "delete", "changing")


def test_produce_and_consume(head):
    ok(head, "topics", "create", "lines", "-p", "2", "-r", "3")
    lines = "".join(f"user{i % 3}:event-{i}\n" for i in range(30))
    produced = ok(head, "produce", "lines", "--key-separator", ":", input=lines + "\n")
    assert "produced 30 records" in produced.stderr
    fails(head, "produce", "lines", "--key-separator", ":", input="a:1\nno separator here\nb:2\n", expect="line 2 has no key separator ':'")
    fails(head, "produce", "nope", input="x\n", expect="UNKNOWN_TOPIC_OR_PARTITION")

    out = ok(head, "consume", "lines", "--from-beginning", "--max-messages", "31", "--print-key", "--key-separator", "=").stdout
    got = sorted(out.split())
    # the line before the bad one was written ("a:1"), the ones from it on were not
    assert got == sorted([f"user{i % 3}=event-{i}" for i in range(30)] + ["a=1"])
    # records of one key keep their order (one partition per key)
    for k in range(3):
        mine = [line.split("=")[1] for line in out.split() if line.startswith(f"user{k}=")]
        assert mine == [f"event-{i}" for i in range(30) if i % 3 == k]
    # an open-ended consume ends with Ctrl-C, cleanly
    proc = subprocess.Popen([KCOORD, "--name", NAME, "consume", "lines", "--from-beginning"], env=head.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert len([proc.stdout.readline() for _ in range(31)]) == 31
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0 and "consumed 31 records" in err, err
    # --timeout-ms ends a consumer that reads from the end
    idle = ok(head, "consume", "lines", "--timeout-ms", "1500")
    assert idle.stdout == "" and "consumed 0 records" in idle.stderr
    fails(head, "consume", "nope", "--max-messages", "1", expect="UNKNOWN_TOPIC_OR_PARTITION")
    fails(head, "consume", "lines", "--partition", "7", "--max-messages", "1", expect="has no partition 7")


def test_consume_formats_offsets_and_produce_headers_compression_binary(head):
    ok(head, "topics", "create", "fmt", "-p", "1", "-r", "3")
    lines = "".join(f"k{i}:v{i}\n" for i in range(5))
    ok(head, "produce", "fmt", "--key-separator", ":", "-H", "src=cli", "-H", "n=1", "--compression", "gzip", input=lines)
    out = ok(head, "consume", "fmt", "--offset", "earliest", "--max-messages", "5", "--format", "%k|%s|%h|%p:%o\\n").stdout
    assert out.splitlines() == [f"k{i}|v{i}|src=cli,n=1|0:{i}" for i in range(5)]
    tail = [json.loads(line) for line in ok(head, "consume", "fmt", "--offset", "-2", "--max-messages", "2", "--json").stdout.splitlines()]
    assert [(d["offset"], d["key"], d["value"], d["headers"]) for d in tail] == [(i, f"k{i}", f"v{i}", [["src", "cli"], ["n", "1"]]) for i in (3, 4)]
    assert tail[0]["timestamp"] > 1_600_000_000_000
    # @timestamp: the first record at or after it; one from the future waits at the end
    at = ok(head, "consume", "fmt", "--offset", f"@{tail[1]['timestamp']}", "--max-messages", "1", "--format", "%o").stdout
    assert int(at) <= 4
    assert ok(head, "consume", "fmt", "--offset", "@99999999999999", "--timeout-ms", "1000").stdout == ""
    assert ok(head, "consume", "fmt", "--offset", "3", "--max-messages", "2", "--format", "%o ").stdout == "3 4 "
    # bytes that are not UTF-8 come out as they went in
    raw = subprocess.run([KCOORD, "--name", NAME, "produce", "fmt"], env=head.env, input=b"\xff\xfebin\n", capture_output=True, timeout=180)
    assert raw.returncode == 0, raw.stderr
    got = subprocess.run([KCOORD, "--name", NAME, "consume", "fmt", "--offset", "5", "--max-messages", "1"], env=head.env, capture_output=True, timeout=180)
    assert got.returncode == 0 and got.stdout == b"\xff\xfebin\n", got
    fails(head, "consume", "fmt", "--offset", "soon", expect="earliest, latest, N, -N or @TIMESTAMP_MS")
    fails(head, "consume", "fmt", "--format", "%q", expect="unknown format token '%q'")
    fails(head, "consume", "fmt", "--group", "g", "--offset", "3", expect="--offset takes only earliest or latest")
    fails(head, "produce", "fmt", "-H", "nokey", input="x\n", expect="KEY=VALUE")
    fails(head, "produce", "fmt", "--compression", "brotli", input="x\n", expect="'brotli' is not available")
    fails(head, "produce", "fmt", "--partition", "3", input="x\n", expect="has no partition 3")
    # a record that fails is reported with its line as it fails; the others are written
    ok(head, "topics", "create", "small", "-p", "1", "-r", "3", "-c", "max.message.bytes=1000")
    mixed = run_kcoord(head, "--name", NAME, "produce", "small", input="first\n" + "x" * 2000 + "\nlast\n")
    assert mixed.returncode == 1 and "1 of 3 records were not written" in mixed.stderr, mixed.stderr
    assert "line 2 was not written" in mixed.stderr and "MESSAGE_TOO_LARGE" in mixed.stderr, mixed.stderr
    assert ok(head, "consume", "small", "--offset", "earliest", "--max-messages", "2").stdout == "first\nlast\n"


def test_groups_consume_describe_reset_delete(head):
    ok(head, "topics", "create", "ledger", "-p", "2", "-r", "3")
    ok(head, "produce", "ledger", input="".join(f"entry-{i}\n" for i in range(20)))
    first = ok(head, "consume", "ledger", "--group", "audit", "--from-beginning", "--max-messages", "20")
    assert sorted(first.stdout.split()) == sorted(f"entry-{i}" for i in range(20))
    # the group committed what it printed: a second run has nothing left
    again = ok(head, "consume", "ledger", "--group", "audit", "--timeout-ms", "2000")
    assert again.stdout == ""

    assert "audit" in ok(head, "groups", "list").stdout
    assert [g["state"] for g in json.loads(ok(head, "groups", "list", "--json").stdout) if g["group_id"] == "audit"] == ["Empty"]
    desc = ok(head, "groups", "describe", "audit").stdout
    assert "total lag 0" in desc and "ledger" in desc

    # a dry run prints the plan and changes nothing
    dry = ok(head, "groups", "reset-offsets", "audit", "--topic", "ledger", "--to", "earliest")
    assert "dry run: nothing changed" in dry.stderr and "plan (dry run)" in dry.stdout
    assert json.loads(ok(head, "groups", "describe", "audit", "--json").stdout)["lag"] == 0
    plan = json.loads(ok(head, "groups", "reset-offsets", "audit", "--all-topics", "--to", "earliest", "--json").stdout)
    assert plan["executed"] is False and sorted((r["topic"], r["new"]) for r in plan["partitions"]) == [("ledger", 0), ("ledger", 0)]
    ok(head, "groups", "reset-offsets", "audit", "--topic", "ledger", "--to", "earliest", "--execute")
    desc = json.loads(ok(head, "groups", "describe", "audit", "--json").stdout)
    assert desc["lag"] == 20 and [o["committed_offset"] for o in desc["offsets"]] == [0, 0]
    ends = {o["partition"]: o["log_end_offset"] for o in desc["offsets"]}
    shifted = json.loads(ok(head, "groups", "reset-offsets", "audit", "--topic", "ledger", "--shift-by", "3", "--execute", "--json").stdout)
    assert shifted["executed"] and {r["partition"]: (r["current"], r["new"]) for r in shifted["partitions"]} == {p: (0, min(3, e)) for p, e in ends.items()}
    assert json.loads(ok(head, "groups", "describe", "audit", "--json").stdout)["lag"] == sum(e - min(3, e) for e in ends.values())
    # a time after every record: the end of each partition
    ok(head, "groups", "reset-offsets", "audit", "--topic", "ledger", "--to-datetime", "2099-01-01T00:00:00Z", "--execute")
    assert json.loads(ok(head, "groups", "describe", "audit", "--json").stdout)["lag"] == 0
    fails(head, "groups", "reset-offsets", "audit", "--topic", "ledger", "--to", "0=999", expect="OFFSET_OUT_OF_RANGE")
    fails(head, "groups", "describe", "ghosts", expect="GROUP_ID_NOT_FOUND")
    assert "deleted group 'audit'" in ok(head, "groups", "delete", "audit").stdout


def test_users_acls_and_security_on_a_running_cluster(head, tmp_path):
    """Issue 36 from the command line: the plaintext listener on the node's address is
    warned of; users and ACLs are made while it runs; the listeners restart with SASL (the
    warning is gone, a Kafka client authenticates as the user); then back."""
    status = run_kcoord(head, "--name", NAME, "status", check=True)
    assert "open to anyone" in status.stderr, status.stderr
    password = tmp_path / "alice.password"
    password.write_text("alice-secret\n")
    assert "SCRAM-SHA-256, SCRAM-SHA-512 credentials set" in ok(head, "users", "create", "alice", "--password-file", str(password)).stdout
    users = json.loads(ok(head, "users", "list", "--json").stdout)
    assert [c["mechanism"] for c in users["alice"]] == ["SCRAM-SHA-256", "SCRAM-SHA-512"] and "secret" not in json.dumps(users)
    assert "added 1 ACLs" in ok(head, "acls", "add", "--allow-principal", "User:alice", "--operation", "READ", "--topic", "cli-", "--resource-pattern-type", "prefixed").stdout
    listed = json.loads(ok(head, "acls", "list", "--principal", "User:alice", "--json").stdout)
    assert listed == [{"resource_type": "TOPIC", "resource_name": "cli-", "pattern_type": "PREFIXED", "principal": "User:alice", "host": "*", "operation": "READ", "permission_type": "ALLOW"}]
    restarted = ok(head, "listeners", "restart", "--kafka-security-protocol", "SASL_PLAINTEXT", "--kafka-super-user", "admin")
    assert "(SASL_PLAINTEXT)" in restarted.stdout and "open to anyone" not in restarted.stderr
    status = run_kcoord(head, "--name", NAME, "status", "--json", check=True)
    snap = json.loads(status.stdout)
    assert {rec["protocol"] for rec in snap["listeners"].values()} == {"SASL_PLAINTEXT"} and snap["warnings"] == []
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(bootstrap_servers=snap["bootstrap_servers"], security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="alice", sasl_plain_password="alice-secret")
    assert consumer.topics() == set(), "alice authenticated; she may describe no existing topic"
    consumer.close()
    assert "removed 1 ACLs" in ok(head, "acls", "remove", "--allow-principal", "User:alice", "--topic", "cli-", "--resource-pattern-type", "prefixed").stdout
    assert "deleted" in ok(head, "users", "delete", "alice").stdout
    assert json.loads(ok(head, "users", "list", "--json").stdout) == {}
    fails(head, "users", "delete", "alice", expect="does not exist")
    assert "(PLAINTEXT)" in ok(head, "listeners", "restart").stdout


def test_bench_rejects_an_unknown_benchmark(head):
    fails(head, "bench", "--only", "nope", "--out", "/tmp/kcoord-bench-test", expect="no benchmark named 'nope'")


def test_no_ray_at_the_address_is_one_line_and_fast():
    proc = subprocess.run([KCOORD, "--address", "127.0.0.1:1", "status"], capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1 and "cannot reach a Ray cluster" in lines[0], proc.stderr
