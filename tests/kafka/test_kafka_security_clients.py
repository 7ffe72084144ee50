"""Unchanged Kafka clients against a secured kcoord cluster on Ray: kcat, confluent-kafka,
kafka-python and aiokafka, each over SASL_PLAINTEXT and SASL_SSL with PLAIN, SCRAM-SHA-256
and SCRAM-SHA-512, and over mutual TLS -- create a topic, produce (idempotently), consume
with a group and commit, describe, list and delete -- as a user whose ACLs allow all of
that on its own prefix only; then ACLs (one topic to write, one group to read, refused
everything else with Kafka's codes), changes reaching open connections, and abuse of the
real listener actor. Certificates are made in the test (trustme)."""

from __future__ import annotations

import asyncio
import ssl
import struct
import subprocess
import time
import uuid

import pytest

from kcoord.client.admin import Admin
from kcoord.client.security_admin import UserScramCredentialDeletion, UserScramCredentialUpsertion
from kcoord.security.acl import ACL, ACLOperation as Op, ACLPermissionType as Perm, ACLResourcePatternType as Pat, ResourcePattern, ResourceType as RT

from tests.conftest import TEST_CONTROLLER_CONFIG
from waiting import wait_until
from wire import Closed, RawClient

pytestmark = [pytest.mark.ray, pytest.mark.kafka]

MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
USERS = {"admin": "admin-secret", "alice": "alice-secret", "writer": "writer-secret"}
PREFIX = "m-"  # alice may do anything on topics and groups named m-...


def acl(principal: str, op: Op, rtype: RT, name: str, pattern: Pat = Pat.LITERAL, perm: Perm = Perm.ALLOW) -> ACL:
    return ACL(principal, "*", op, perm, ResourcePattern(rtype, name, pattern))


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    trustme = pytest.importorskip("trustme")
    d = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    server = ca.issue_cert("localhost", "127.0.0.1")
    server.private_key_and_cert_chain_pem.write_to_path(str(d / "server.pem"))
    alice = ca.issue_cert("alice.clients.example", common_name="alice", organization_unit_name="clients", organization_name="Example")
    alice.private_key_pem.write_to_path(str(d / "alice.key"))
    alice.cert_chain_pems[0].write_to_path(str(d / "alice.crt"))
    return d


@pytest.fixture(scope="module")
def secure(ray_session, tmp_path_factory):
    """A 3-broker cluster whose listener starts as SASL_PLAINTEXT; users admin (super
    user), alice (everything on m-...) and writer (see the ACL test)."""
    from kcoord.cluster.deploy import deploy, teardown
    from kcoord.cluster.group_coordinators import configure_group_coordinators

    name = f"sec-{uuid.uuid4().hex[:6]}"
    data_dir = tmp_path_factory.mktemp("kcoord-sec")
    client = deploy(
        name,
        brokers=3,
        data_dir=str(data_dir),
        group_coordinators=1,
        address=None,
        controller_config=TEST_CONTROLLER_CONFIG,
        kafka_port=0,
        kafka_local=True,
        kafka_security={"protocol": "SASL_PLAINTEXT", "users": USERS, "super_users": ["admin"]},
    )
    configure_group_coordinators(client, {"group.initial.rebalance.delay.ms": 0})
    added = Admin(client).create_acls([acl("User:alice", Op.ALL, RT.TOPIC, PREFIX, Pat.PREFIXED), acl("User:alice", Op.ALL, RT.GROUP, PREFIX, Pat.PREFIXED)])
    assert not added["failed"]
    port = int(client.bootstrap_servers.split(",")[0].split(":")[1])
    wait_until(lambda: _metadata_code(port, "alice", f"{PREFIX}probe") == 3, timeout=10, what="the listener to poll alice's ACLs")  # UNKNOWN_TOPIC, not refused
    yield client
    teardown(name, delete_data=True, address=None, data_dir=str(data_dir))


def restart(secure, security: dict, options: dict | None = None) -> str:
    from kcoord.cluster.listeners import restart_listeners

    return restart_listeners(secure.name, secure.namespace, kafka_security={"super_users": ["admin"], **security}, kafka_options=options)


ABUSE_LIMITS = {"max.connections.per.ip": 30, "connections.max.idle.ms": 1000}
# The order the listener's legs run in (tests/kafka/conftest.py sorts this module by it).
LEG_ORDER = ["SASL_PLAINTEXT", "SASL_SSL", "MTLS", "ABUSE"]


class Legs:
    """The listener, restarted with one security protocol at a time (only when a test
    asks for another one than it runs: the tests of one leg run together)."""

    def __init__(self, secure, pki) -> None:
        self.secure, self.pki = secure, pki
        self.current: tuple[str, str] | None = ("SASL_PLAINTEXT", secure.bootstrap_servers)  # as deployed

    def use(self, name: str) -> tuple[str, str]:
        if self.current is not None and self.current[0] == name:
            return self.current
        pki, options = self.pki, None
        if name == "SASL_PLAINTEXT":
            security = {"protocol": "SASL_PLAINTEXT"}
        elif name == "SASL_SSL":
            security = {"protocol": "SASL_SSL", "certfile": str(pki / "server.pem")}
        elif name == "ABUSE":
            security, options = {"protocol": "SASL_SSL", "certfile": str(pki / "server.pem")}, ABUSE_LIMITS
        else:
            security = {
                "protocol": "SSL",
                "certfile": str(pki / "server.pem"),
                "cafile": str(pki / "ca.pem"),
                "client_auth": "required",
                "principal_mapping_rules": "RULE:^CN=([^,]+),OU=clients,.*$/$1/,DEFAULT",
            }
        self.current = (name, restart(self.secure, security, options))
        return self.current


@pytest.fixture(scope="module")
def legs(secure, pki) -> Legs:
    return Legs(secure, pki)


def leg_of(item) -> str:
    """The leg a test of this module runs on (for the ordering hook)."""
    callspec = getattr(item, "callspec", None)
    if callspec is not None and "auth" in callspec.params:
        return callspec.params["auth"][0]
    return getattr(item.function, "leg", "SASL_PLAINTEXT")


def on_leg(name: str):
    def mark(fn):
        fn.leg = name
        return fn

    return mark


class Auth:
    """One way of being alice: a protocol, and a SASL mechanism or alice's certificate."""

    def __init__(self, protocol: str, mechanism: str | None, bootstrap: str, pki) -> None:
        self.protocol, self.mechanism, self.bootstrap, self.pki = protocol, mechanism, bootstrap, pki
        self.tls = protocol in ("SASL_SSL", "MTLS")
        self.wire_protocol = "SSL" if protocol == "MTLS" else protocol

    def kafka_python(self) -> dict:
        cfg = {"bootstrap_servers": self.bootstrap, "security_protocol": self.wire_protocol}
        if self.mechanism:
            cfg.update(sasl_mechanism=self.mechanism, sasl_plain_username="alice", sasl_plain_password=USERS["alice"])
        if self.tls:
            cfg["ssl_cafile"] = str(self.pki / "ca.pem")
        if self.protocol == "MTLS":
            cfg.update(ssl_certfile=str(self.pki / "alice.crt"), ssl_keyfile=str(self.pki / "alice.key"))
        return cfg

    def librdkafka(self) -> dict:
        cfg = {"bootstrap.servers": self.bootstrap, "security.protocol": self.wire_protocol}
        if self.mechanism:
            cfg.update({"sasl.mechanism": self.mechanism, "sasl.username": "alice", "sasl.password": USERS["alice"]})
        if self.tls:
            cfg["ssl.ca.location"] = str(self.pki / "ca.pem")
        if self.protocol == "MTLS":
            cfg.update({"ssl.certificate.location": str(self.pki / "alice.crt"), "ssl.key.location": str(self.pki / "alice.key")})
        return cfg

    def aiokafka(self) -> dict:
        cfg: dict = {"bootstrap_servers": self.bootstrap, "security_protocol": self.wire_protocol}
        if self.mechanism:
            cfg.update(sasl_mechanism=self.mechanism, sasl_plain_username="alice", sasl_plain_password=USERS["alice"])
        if self.tls:
            from aiokafka.helpers import create_ssl_context

            mtls = self.protocol == "MTLS"
            cfg["ssl_context"] = create_ssl_context(cafile=str(self.pki / "ca.pem"), certfile=str(self.pki / "alice.crt") if mtls else None, keyfile=str(self.pki / "alice.key") if mtls else None)
        return cfg


AUTHS = [(p, m) for p in ("SASL_PLAINTEXT", "SASL_SSL") for m in MECHANISMS] + [("MTLS", None)]


@pytest.fixture(params=AUTHS, ids=[f"{p}-{m or 'cert'}" for p, m in AUTHS])
def auth(request, legs, pki) -> Auth:
    protocol, mechanism = request.param
    return Auth(protocol, mechanism, legs.use(protocol)[1], pki)


@pytest.fixture
def leg(request, legs) -> tuple[str, str]:
    return legs.use(getattr(request.function, "leg", "SASL_PLAINTEXT"))


def names() -> tuple[str, str]:
    suffix = uuid.uuid4().hex[:6]
    return f"{PREFIX}t-{suffix}", f"{PREFIX}g-{suffix}"


N = 20


# -- kafka-python ------------------------------------------------------------------------------


def test_kafka_python(auth) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
    from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

    topic, group = names()
    cfg = auth.kafka_python()
    admin = KafkaAdminClient(**cfg)
    admin.create_topics([NewTopic(topic, 2, 1)])
    producer = KafkaProducer(acks="all", enable_idempotence=True, **cfg)
    for f in [producer.send(topic, b"v%d" % i) for i in range(N)]:
        f.get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(topic, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=15000, **cfg)
    got = []
    for msg in consumer:
        got.append(msg.value)
        if len(got) == N:
            break
    consumer.commit()
    consumer.close()
    assert sorted(got) == sorted(b"v%d" % i for i in range(N))
    configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    assert configs
    listed = admin.list_groups()
    assert group in [g["group_id"] if isinstance(g, dict) else g[0] for g in listed], listed
    admin.delete_topics([topic])
    admin.close()


# -- confluent-kafka -------------------------------------------------------------------------


def test_confluent_kafka(auth) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    topic, group = names()
    cfg = auth.librdkafka()
    admin = AdminClient(cfg)
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    producer = Producer({**cfg, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    errors: list = []
    for i in range(N):
        producer.produce(topic, value=b"v%d" % i, on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert producer.flush(30) == 0 and not errors, errors
    consumer = Consumer({**cfg, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < N and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            got.append(msg.value())
    consumer.commit(asynchronous=False)
    consumer.close()
    assert sorted(got) == sorted(b"v%d" % i for i in range(N))
    described = admin.describe_configs([ConfigResource("topic", topic)])
    assert "retention.ms" in next(iter(described.values())).result(30)
    assert group in [g.group_id for g in admin.list_consumer_groups().result(30).valid]
    admin.delete_topics([topic])[topic].result(30)


# -- aiokafka ----------------------------------------------------------------------------------


def test_aiokafka(auth) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    topic, group = names()
    cfg = auth.aiokafka()

    async def main() -> list:
        admin = AIOKafkaAdminClient(**cfg)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, 2, 1)])
            producer = AIOKafkaProducer(enable_idempotence=True, **cfg)
            await producer.start()
            try:
                for i in range(N):
                    await producer.send_and_wait(topic, b"v%d" % i)
            finally:
                await producer.stop()
            consumer = AIOKafkaConsumer(topic, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False, **cfg)
            await consumer.start()
            got: list = []
            try:
                deadline = time.monotonic() + 30
                while len(got) < N and time.monotonic() < deadline:
                    for recs in (await consumer.getmany(timeout_ms=500)).values():
                        got += [r.value for r in recs]
                await consumer.commit()
            finally:
                await consumer.stop()
            groups = await admin.list_consumer_groups()
            assert group in [g[0] for g in groups]
            await admin.delete_topics([topic])
            return got
        finally:
            await admin.close()

    assert sorted(asyncio.run(main())) == sorted(b"v%d" % i for i in range(N))


# -- kcat ----------------------------------------------------------------------------------------


def test_kcat(auth, kcat) -> None:
    topic, group = names()
    x = [a for k, v in auth.librdkafka().items() if k != "bootstrap.servers" for a in ("-X", f"{k}={v}")]

    def run(args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([kcat, "-b", auth.bootstrap, *x, *args], input=stdin, capture_output=True, text=True, timeout=90)

    produced = run(["-P", "-t", topic, "-K:"], stdin="".join(f"k{i}:v{i}\n" for i in range(N)))  # auto-created: alice may CREATE m-...
    assert produced.returncode == 0, produced.stderr
    consumed = run(["-C", "-G", group, "-X", "auto.offset.reset=earliest", "-c", str(N), "-f", "%s\n", topic])
    assert consumed.returncode == 0, consumed.stderr
    assert sorted(consumed.stdout.split()) == sorted(f"v{i}" for i in range(N))
    listed = run(["-L", "-t", topic])
    assert listed.returncode == 0 and f'topic "{topic}"' in listed.stdout, listed.stderr


# -- ACLs: a user allowed to write one topic and read one group ------------------------------


def test_acls_allow_exactly_what_they_say(secure, leg) -> None:
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import ACLFilter as KFilter, ConfigResource, ConfigResourceType, NewPartitions, NewTopic
    from kafka.admin import ACLOperation as KOp, ACLPermissionType as KPerm, ResourcePatternFilter as KPF, ResourceType as KRT, ACLResourcePatternType as KPat
    import kafka.errors as KE

    bootstrap = leg[1]
    admin = Admin(secure)
    tag = uuid.uuid4().hex[:6]
    target, other, group = f"in-{tag}", f"other-{tag}", f"g-{tag}"
    for t in (target, other):
        admin.create_topic(t, partitions=1, replication_factor=1)
    admin.create_acls([acl("User:writer", Op.WRITE, RT.TOPIC, target), acl("User:writer", Op.READ, RT.GROUP, group)])

    def as_user(user: str) -> dict:
        return {"bootstrap_servers": bootstrap, "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": user, "sasl_plain_password": USERS[user]}

    wait_until(lambda: _describable(bootstrap, "writer", target), timeout=5, what="the listener to load writer's ACLs")
    producer = KafkaProducer(acks="all", enable_idempotence=True, max_block_ms=10000, **as_user("writer"))
    producer.send(target, b"allowed").get(timeout=30)  # WRITE implies DESCRIBE; idempotent: WRITE on a topic suffices (KIP-679)
    with pytest.raises(KE.TopicAuthorizationFailedError):
        producer.send(other, b"refused").get(timeout=30)
    producer.close()
    kadmin = KafkaAdminClient(**as_user("writer"))
    codes = {}

    def code_of(fn) -> int:
        try:
            result = fn()
        except KE.KafkaError as exc:
            return exc.errno
        return getattr(result, "errno", 0)

    raw = RawClient(int(bootstrap.split(":")[1]))
    assert raw.login("SCRAM-SHA-512", "writer", USERS["writer"]).error_code == 0
    codes["create topic"] = _create_topic_code(raw, f"new-{tag}")
    codes["delete topic"] = _delete_topic_code(raw, target)
    codes["alter config"] = _alter_config_code(raw, target)
    codes["create partitions"] = _create_partitions_code(raw, target)
    codes["read topic"] = _fetch_code(raw, target)
    codes["other group"] = _join_code(raw, f"g2-{tag}", target)
    codes["own group"] = _join_code(raw, group, target)
    codes["transactional id"] = _init_transactional_code(raw, "tx-1")
    codes["describe acls"] = code_of(lambda: kadmin.describe_acls(KFilter(None, None, KOp.ANY, KPerm.ANY, KPF(KRT.ANY, None, KPat.ANY))))
    codes["describe users"] = code_of(lambda: kadmin.describe_user_scram_credentials())
    codes["cluster configs"] = _broker_config_code(raw)
    codes["delete records"] = _delete_records_code(raw, target)
    assert codes == {
        "create topic": 29,  # TOPIC_AUTHORIZATION_FAILED
        "delete topic": 29,
        "alter config": 29,
        "create partitions": 29,
        "read topic": 29,
        "other group": 30,  # GROUP_AUTHORIZATION_FAILED
        "own group": 0,
        "transactional id": 53,  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        "describe acls": 31,  # CLUSTER_AUTHORIZATION_FAILED
        "describe users": 31,
        "cluster configs": 31,
        "delete records": 29,
    }, codes
    assert [t.name for t in raw.metadata().topics] == [target], "Metadata lists only what writer may describe"
    # DENY beats ALLOW, PREFIXED patterns, and the change reaches the open connection
    assert _produce_code(raw, target) == 0
    admin.create_acls([acl("User:writer", Op.WRITE, RT.TOPIC, "in-", Pat.PREFIXED, Perm.DENY)])
    started = time.monotonic()
    wait_until(lambda: _produce_code(raw, target) == 29, timeout=5, interval=0.05, what="the DENY to reach the open connection")
    assert time.monotonic() - started < 1.5
    # a DENY of WRITE does not deny the DESCRIBE the ALLOW of WRITE implied
    assert _describable(bootstrap, "writer", target, raw)
    admin.delete_acls([_filter_of(acl("User:writer", Op.WRITE, RT.TOPIC, "in-", Pat.PREFIXED, Perm.DENY))])
    wait_until(lambda: _produce_code(raw, target) == 0, timeout=5, interval=0.05, what="the DENY's removal to reach the open connection")
    # a super user may do everything the writer may not
    boss = KafkaAdminClient(**as_user("admin"))
    boss.create_topics([NewTopic(f"boss-{tag}", 1, 1)])
    boss.alter_configs([ConfigResource(ConfigResourceType.TOPIC, target, configs={"retention.ms": "3600000", "segment.ms": "7200000"})])  # IncrementalAlterConfigs
    boss_raw = RawClient(int(bootstrap.split(":")[1]))
    assert boss_raw.login("PLAIN", "admin", USERS["admin"]).error_code == 0
    assert _legacy_alter_config_code(boss_raw, target, {"retention.ms": "1800000"}) == 0  # AlterConfigs: the whole set
    boss_raw.close()
    boss.create_partitions({target: NewPartitions(2)})
    config = admin.describe_topic_config(target)
    assert config["retention.ms"]["value"] == "1800000" and config["segment.ms"]["is_default"], "legacy AlterConfigs replaces the whole set"
    assert len(admin.describe_topic(target)["partitions"]) == 2
    from kafka import TopicPartition as KTP

    deleted = boss.delete_records({KTP(target, 0): -1})
    assert admin.list_offsets(target, "earliest")[0] == admin.list_offsets(target, "latest")[0] >= 1, deleted
    boss.delete_topics([f"boss-{tag}", other])
    # users over the wire (KIP-554): the salted password is turned into a credential by the listener
    from kafka.admin import UserScramCredentialDeletion as KDel, UserScramCredentialUpsertion as KUps

    assert boss.alter_user_scram_credentials([KUps(f"wire-{tag}", "SCRAM-SHA-256", "wire-secret")]) == {f"wire-{tag}": None}
    assert boss.describe_user_scram_credentials([f"wire-{tag}"])[f"wire-{tag}"]["credential_infos"][0]["iterations"] == 4096
    fresh = RawClient(int(bootstrap.split(":")[1]))
    assert fresh.login("SCRAM-SHA-256", f"wire-{tag}", "wire-secret").error_code == 0
    assert boss.alter_user_scram_credentials([KDel(f"wire-{tag}", "SCRAM-SHA-256")]) == {f"wire-{tag}": None}
    wait_until(lambda: _session_closed(fresh), timeout=5, interval=0.05, what="the deleted user's session to end")
    boss.close()
    kadmin.close()
    raw.close()


def _session_closed(c: RawClient) -> bool:
    try:
        c.metadata()
        return False
    except Closed:
        return True


def _filter_of(a: ACL):
    from kcoord.security.acl import ACLFilter, ResourcePatternFilter

    p = a.resource_pattern
    return ACLFilter(a.principal, a.host, a.operation, a.permission_type, ResourcePatternFilter(p.resource_type, p.resource_name, p.pattern_type))


def _metadata_code(port: int, user: str, topic: str) -> int:
    c = RawClient(port)
    try:
        assert c.login("PLAIN", user, USERS[user]).error_code == 0
        return c.metadata([topic]).topics[0].error_code
    finally:
        c.close()


def _describable(bootstrap: str, user: str, topic: str, conn: RawClient | None = None) -> bool:
    c = conn or RawClient(int(bootstrap.split(":")[1]))
    try:
        if conn is None:
            assert c.login("PLAIN", user, USERS[user]).error_code == 0
        return c.metadata([topic]).topics[0].error_code == 0
    finally:
        if conn is None:
            c.close()


def _produce_code(c: RawClient, topic: str) -> int:
    from kafka.protocol.producer import ProduceRequest, ProduceResponse

    from kcoord.kafka.batches import build_kafka_batch

    T = ProduceRequest.TopicProduceData
    batch = build_kafka_batch([(None, b"x", [], int(time.time() * 1000))])
    req = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=10000, topic_data=[T(name=topic, partition_data=[T.PartitionProduceData(index=0, records=batch)])])
    return c.call(req, 8, ProduceResponse).responses[0].partition_responses[0].error_code


def _create_topic_code(c: RawClient, name: str) -> int:
    from kafka.protocol.admin import CreateTopicsRequest, CreateTopicsResponse

    T = CreateTopicsRequest.CreatableTopic
    r = c.call(CreateTopicsRequest(topics=[T(name=name, num_partitions=1, replication_factor=1, assignments=[], configs=[])], timeout_ms=10000, validate_only=False), 4, CreateTopicsResponse)
    return r.topics[0].error_code


def _delete_topic_code(c: RawClient, name: str) -> int:
    from kafka.protocol.admin import DeleteTopicsRequest, DeleteTopicsResponse

    return c.call(DeleteTopicsRequest(topic_names=[name], timeout_ms=10000), 3, DeleteTopicsResponse).responses[0].error_code


def _alter_config_code(c: RawClient, name: str) -> int:
    from kafka.protocol.admin import IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse

    R = IncrementalAlterConfigsRequest.AlterConfigsResource
    req = IncrementalAlterConfigsRequest(resources=[R(resource_type=2, resource_name=name, configs=[R.AlterableConfig(name="retention.ms", config_operation=0, value="1000")])], validate_only=False)
    return c.call(req, 1, IncrementalAlterConfigsResponse).responses[0].error_code


def _create_partitions_code(c: RawClient, name: str) -> int:
    from kafka.protocol.admin import CreatePartitionsRequest, CreatePartitionsResponse

    req = CreatePartitionsRequest(topics=[CreatePartitionsRequest.CreatePartitionsTopic(name=name, count=3, assignments=None)], timeout_ms=10000, validate_only=False)
    return c.call(req, 3, CreatePartitionsResponse).results[0].error_code


def _fetch_code(c: RawClient, name: str) -> int:
    from kafka.protocol.consumer import FetchRequest, FetchResponse

    T = FetchRequest.FetchTopic
    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1, topics=[T(topic=name, partitions=[T.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1, partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id="")
    return c.call(req, 11, FetchResponse).responses[0].partitions[0].error_code


def _join_code(c: RawClient, group: str, topic: str) -> int:
    from kafka.protocol.consumer import JoinGroupRequest, JoinGroupResponse

    req = JoinGroupRequest(group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="", group_instance_id=None, protocol_type="consumer", protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")])
    code = c.call(req, 5, JoinGroupResponse).error_code
    return 0 if code == 79 else code  # MEMBER_ID_REQUIRED: the join went through to the coordinator


def _init_transactional_code(c: RawClient, txn: str) -> int:
    from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse

    return c.call(InitProducerIdRequest(transactional_id=txn, transaction_timeout_ms=60000), 1, InitProducerIdResponse).error_code


def _legacy_alter_config_code(c: RawClient, name: str, configs: dict) -> int:
    from kafka.protocol.admin import AlterConfigsRequest, AlterConfigsResponse

    R = AlterConfigsRequest.AlterConfigsResource
    req = AlterConfigsRequest(resources=[R(resource_type=2, resource_name=name, configs=[R.AlterableConfig(name=k, value=v) for k, v in configs.items()])], validate_only=False)
    return c.call(req, 2, AlterConfigsResponse).responses[0].error_code


def _delete_records_code(c: RawClient, name: str) -> int:
    from kafka.protocol.admin.topics import DeleteRecordsRequest, DeleteRecordsResponse

    T = DeleteRecordsRequest.DeleteRecordsTopic
    req = DeleteRecordsRequest(topics=[T(name=name, partitions=[T.DeleteRecordsPartition(partition_index=0, offset=-1)])], timeout_ms=10000)
    return c.call(req, 2, DeleteRecordsResponse).topics[0].partitions[0].error_code


def _broker_config_code(c: RawClient) -> int:
    from kafka.protocol.admin import DescribeConfigsRequest, DescribeConfigsResponse

    R = DescribeConfigsRequest.DescribeConfigsResource
    req = DescribeConfigsRequest(resources=[R(resource_type=4, resource_name="0", configuration_keys=None)], include_synonyms=False, include_documentation=False)
    return c.call(req, 4, DescribeConfigsResponse).results[0].error_code


# -- users change under open connections; bad credentials over the real listener ------------


def test_user_changes_reach_open_connections_within_a_second(secure, leg) -> None:
    admin = Admin(secure)
    port = int(leg[1].split(":")[1])
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion("temp", "SCRAM-SHA-256", "t1")])
    admin.create_acls([acl("User:temp", Op.DESCRIBE, RT.TOPIC, "*")])
    c = RawClient(port)
    wait_until(lambda: RawClient(port).login("SCRAM-SHA-256", "temp", "t1").error_code == 0, timeout=5, what="temp to be known to the listener")
    assert c.login("SCRAM-SHA-256", "temp", "t1").error_code == 0
    c.metadata()
    admin.alter_user_scram_credentials([UserScramCredentialDeletion("temp", "SCRAM-SHA-256")])
    started = time.monotonic()

    wait_until(lambda: _session_closed(c), timeout=5, interval=0.05, what="the deleted user's session to be closed")
    elapsed = time.monotonic() - started
    assert elapsed < 1.5, f"took {elapsed:.2f} s"
    for mechanism in MECHANISMS:
        bad = RawClient(port)
        assert bad.login(mechanism, "temp", "t1").error_code == 58
        assert bad.closed_within(2)


@on_leg("ABUSE")
def test_abuse_of_the_real_listener(secure, leg, pki) -> None:
    """A 100 MiB frame before authentication, a thousand connections from one address,
    half an exchange then silence: each bounded; a good client is served throughout."""
    bootstrap = leg[1]
    port = int(bootstrap.split(":")[1])
    tls = ssl.create_default_context(cafile=str(pki / "ca.pem"))

    def healthy() -> None:
        c = RawClient(port, tls=tls)
        assert c.login("SCRAM-SHA-512", "alice", USERS["alice"]).error_code == 0
        assert c.metadata().brokers
        c.close()

    big = RawClient(port, tls=tls)
    big.send_bytes(struct.pack(">i", 100 * 1024 * 1024) + b"\0" * 4096)
    assert big.closed_within(3)
    healthy()
    flood = []
    for _ in range(1000):
        try:
            flood.append(RawClient(port, source="127.0.0.2", timeout=5))  # TCP only: the TLS handshake never comes
        except OSError:
            break
    def held() -> list:
        return [c for c in flood if not c.closed_within(0.001)]

    # the listener refuses all but 30 as it accepts them (until the idle timeout frees slots)
    wait_until(lambda: len(held()) <= 30, timeout=10, what="connections over max.connections.per.ip to be refused")
    alive = held()
    healthy()
    half = RawClient(port, tls=tls)
    assert half.handshake("SCRAM-SHA-256").error_code == 0
    assert half.closed_within(5), "half an exchange, then silence: closed at connections.max.idle.ms"
    assert all(c.closed_within(5) for c in alive), "idle connections are closed"
    for c in flood:
        c.close()
    healthy()

