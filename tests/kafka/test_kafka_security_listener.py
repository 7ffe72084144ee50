"""The Kafka listener's security over real sockets, without Ray: the listener's own server
and handlers over a fake backend whose controller part is the real security metadata core.

SASL's state machine and its refusals (each with Kafka's code, then the connection
closed), limits before and after authentication (a 100 MiB frame, a thousand idle
connections from one address, half an exchange then silence), sessions that end when a
credential changes or its lifetime runs out (KIP-368, re-authentication), TLS and mutual
TLS principals, and ACLs on Metadata and the ACL APIs. After every abuse the listener
still serves a well-behaved client."""

from __future__ import annotations

import asyncio
import ssl
import struct
import threading
import time

import pytest
from kafka.protocol.admin import DescribeAclsRequest, DescribeAclsResponse
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from kcoord.kafka.handlers import ListenerContext, build_apis
from kcoord.kafka.listener_security import ConnectionLimits, ListenerSecurity
from kcoord.kafka.server import KafkaServer
from kcoord.protocol.controller import (
    CreateTopicsResponse,
    DescribeClusterResponse,
    MetadataResponse as ControllerMetadata,
    PartitionMetadata,
    TopicMetadata,
)
from kcoord.protocol.errors import ErrorCode as E
from kcoord.protocol.security import (
    AclRecord,
    AlterUserScramCredentialsRequest,
    CreateAclsRequest,
    ScramCredentialRecord,
    ScramDeletion,
    ScramUpsertion,
)
from kcoord.replication.security_metadata import SecurityMetadata
from kcoord.security.acl import ACLOperation as Op, ACLPermissionType as Perm, ResourceType as RT
from kcoord.security.config import SecurityConfig
from kcoord.security.scram import ScramMechanism, credential_from_password

from wire import Closed, RawClient
from waiting import wait_until

pytestmark = pytest.mark.kafka

MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


class Backend:
    """The controller's security metadata core (real), and a cluster of one broker with a
    few topics (fake)."""

    def __init__(self) -> None:
        self.security = SecurityMetadata()
        self.security.load({}, 1)
        self.topics = {"alpha": 1, "beta": 1, "team-a-orders": 1}
        self.created: list[str] = []

    def call(self, request):
        response, _ = self.security.decisions()[type(request)](request, 0)
        return response

    async def security_metadata(self, req):
        return self.call(req)

    async def create_acls(self, req):
        return self.call(req)

    async def describe_acls(self, req):
        return self.call(req)

    async def delete_acls(self, req):
        return self.call(req)

    async def alter_user_scram_credentials(self, req):
        return self.call(req)

    async def describe_user_scram_credentials(self, req):
        return self.call(req)

    async def describe_cluster(self):
        return DescribeClusterResponse(cluster="fake", brokers=[0], group_coordinators=1)

    async def broker_nodes(self):
        return {}

    async def group_coordinators(self):
        return 1

    async def metadata(self, topics):
        names = sorted(self.topics) if topics is None else topics
        return ControllerMetadata(
            topics=[
                TopicMetadata(n, partitions=[PartitionMetadata(0, leader=0, leader_epoch=0, replicas=[0], isr=[0])])
                if n in self.topics
                else TopicMetadata(n, E.UNKNOWN_TOPIC_OR_PARTITION)
                for n in names
            ]
        )

    async def create_topic(self, req):
        self.topics[req.name] = req.partitions
        self.created.append(req.name)
        return CreateTopicsResponse()

    # test helpers
    def set_password(self, user: str, password: str, mechanisms=(ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)) -> None:
        ups = []
        for m in mechanisms:
            c = credential_from_password(m, password)
            ups.append(ScramUpsertion(user, ScramCredentialRecord(int(m), c.iterations, c.salt, c.stored_key, c.server_key)))
        for u in ups:  # one upsertion per user and request, as Kafka requires
            assert self.call(AlterUserScramCredentialsRequest(upsertions=[u])).results[0].error_code == 0

    def delete_user(self, user: str) -> None:
        for m in (1, 2):
            self.call(AlterUserScramCredentialsRequest(deletions=[ScramDeletion(user, m)]))

    def allow(self, principal: str, op: Op, rtype: RT, name: str, perm: Perm = Perm.ALLOW, pattern: int = 3) -> None:
        resp = self.call(CreateAclsRequest(acls=[AclRecord(int(rtype), name, pattern, principal, "*", int(op), int(perm))]))
        assert resp.results[0].error_code == 0, resp


class Listener:
    """A KafkaServer on its own event loop thread."""

    def __init__(self, config: SecurityConfig, options: dict | None = None) -> None:
        self.backend = Backend()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        limits = ConnectionLimits.from_options(options or {}, secure=True)
        self.security = ListenerSecurity(config, self.backend, limits, poll_interval_s=0.05)
        ctx = ListenerContext(backend=self.backend, host="127.0.0.1", cluster_id="fake", security=self.security)
        self.server = KafkaServer(build_apis(ctx), "127.0.0.1", {0: 0}, security=self.security)

        async def start():
            ports = await self.server.start()
            ctx.ports = dict(ports)
            self.security.start()
            return ports[0]

        self.port = self.run(start())

    def run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def version(self):
        st = self.security.state
        return None if st is None else (st.epoch, st.version)

    def sync(self) -> None:
        """Wait until the listener polled the backend's current metadata."""
        want = (self.backend.security.epoch, self.backend.security.version)
        wait_until(lambda: self.version() == want, timeout=5, what="the listener to poll the new security metadata")

    def close(self) -> None:
        async def stop():
            self.security.stop()
            await self.server.close()
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in others:
                t.cancel()
            await asyncio.gather(*others, return_exceptions=True)

        self.run(stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


def sasl_config(**kw) -> SecurityConfig:
    return SecurityConfig.parse({"protocol": "SASL_PLAINTEXT", "super_users": ["admin"], **kw})


@pytest.fixture(scope="module")
def listener():
    lst = Listener(sasl_config(mechanisms=["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]), {"connections.max.reauth.ms": 60_000})
    lst.backend.set_password("alice", "alice-secret")
    lst.backend.set_password("admin", "admin-secret")
    lst.backend.allow("User:alice", Op.DESCRIBE, RT.TOPIC, "alpha")
    lst.sync()
    yield lst
    lst.close()


def healthy(lst: Listener, mechanism: str = "SCRAM-SHA-256") -> None:
    """A well-behaved client still authenticates and is served."""
    c = RawClient(lst.port)
    try:
        assert c.login(mechanism, "alice", "alice-secret").error_code == 0
        assert [t.name for t in c.metadata().topics] == ["alpha"]
    finally:
        c.close()


# -- authentication ---------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_each_mechanism_authenticates_and_the_session_has_a_lifetime(listener, mechanism) -> None:
    c = RawClient(listener.port)
    versions = {k.api_key: (k.min_version, k.max_version) for k in c.api_versions().api_keys}
    assert versions[17] == (0, 1) and versions[36] == (0, 2)
    answer = c.login(mechanism, "alice", "alice-secret")
    assert answer.error_code == 0 and answer.session_lifetime_ms == 60_000
    assert [t.name for t in c.metadata().topics] == ["alpha"], "alice may describe alpha only"
    c.close()


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("user,password", [("alice", "wrong"), ("mallory", "alice-secret")])
def test_bad_credentials_are_refused_and_the_connection_closed(listener, mechanism, user, password) -> None:
    c = RawClient(listener.port)
    answer = c.login(mechanism, user, password)
    assert answer.error_code == E.SASL_AUTHENTICATION_FAILED
    assert "mallory" not in (answer.error_message or "") and "wrong" not in (answer.error_message or "")
    assert c.closed_within(2)
    healthy(listener, mechanism)


def test_a_mechanism_not_enabled_is_refused_with_the_enabled_ones(listener) -> None:
    c = RawClient(listener.port)
    answer = c.handshake("GSSAPI")
    assert answer.error_code == E.UNSUPPORTED_SASL_MECHANISM and answer.mechanisms == MECHANISMS
    assert c.closed_within(2)
    healthy(listener)


def test_skipping_sasl_is_refused_with_illegal_sasl_state_and_closed(listener) -> None:
    c = RawClient(listener.port)
    answer = c.call(FindCoordinatorRequest(key="g", key_type=0), 2, FindCoordinatorResponse)
    assert answer.error_code == E.ILLEGAL_SASL_STATE
    assert c.closed_within(2)
    c = RawClient(listener.port)
    assert c.authenticate_token(b"\0alice\0alice-secret").error_code == E.ILLEGAL_SASL_STATE, "SaslAuthenticate before SaslHandshake"
    assert c.closed_within(2)
    healthy(listener)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_sasl_handshake_v0_then_bare_tokens(listener, mechanism) -> None:
    """Old clients: SaslHandshake v0, then the SASL tokens without Kafka's framing."""
    import scramp
    from kafka.protocol.sasl import SaslHandshakeRequest, SaslHandshakeResponse

    def bare(c: RawClient, token: bytes) -> bytes:
        c.send_bytes(struct.pack(">i", len(token)) + token)
        (size,) = struct.unpack(">i", c._read(4))
        return c._read(size)

    c = RawClient(listener.port)
    assert c.call(SaslHandshakeRequest(mechanism=mechanism), 0, SaslHandshakeResponse).error_code == 0
    if mechanism == "PLAIN":
        assert bare(c, b"\0alice\0alice-secret") == b""
    else:
        client = scramp.ScramClient([mechanism], "alice", "alice-secret")
        client.set_server_first(bare(c, client.get_client_first().encode()).decode())
        client.set_server_final(bare(c, client.get_client_final().encode()).decode())
    assert [t.name for t in c.metadata().topics] == ["alpha"]
    wrong = RawClient(listener.port)
    assert wrong.call(SaslHandshakeRequest(mechanism="PLAIN"), 0, SaslHandshakeResponse).error_code == 0
    token = b"\0alice\0wrong"
    wrong.send_bytes(struct.pack(">i", len(token)) + token)
    assert wrong.closed_within(2), "a failure is a closed connection (v0 carries no error)"


def test_a_second_handshake_before_authenticating_is_illegal(listener) -> None:
    c = RawClient(listener.port)
    assert c.handshake("PLAIN").error_code == 0
    assert c.handshake("PLAIN").error_code == E.ILLEGAL_SASL_STATE
    assert c.closed_within(2)


# -- sessions: a changed credential, a lifetime (KIP-368) ---------------------------------


def test_a_changed_password_or_a_deleted_user_closes_open_sessions_at_their_next_request() -> None:
    lst = Listener(sasl_config())
    try:
        lst.backend.set_password("bob", "one")
        lst.backend.allow("User:bob", Op.DESCRIBE, RT.TOPIC, "*")
        lst.sync()
        plain, scram, other = RawClient(lst.port), RawClient(lst.port), RawClient(lst.port)
        assert plain.login("PLAIN", "bob", "one").error_code == 0
        assert scram.login("SCRAM-SHA-512", "bob", "one").error_code == 0
        lst.backend.set_password("carol", "c")
        lst.backend.allow("User:carol", Op.DESCRIBE, RT.TOPIC, "*")
        lst.sync()
        assert other.login("SCRAM-SHA-256", "carol", "c").error_code == 0
        # bob's SCRAM-SHA-512 password changes: that session ends; the PLAIN one was proved
        # with his SHA-256 credential, which is unchanged
        lst.backend.set_password("bob", "two", mechanisms=(ScramMechanism.SCRAM_SHA_512,))
        lst.sync()
        with pytest.raises(Closed):
            scram.metadata()
        assert len(plain.metadata().topics) == 3
        lst.backend.delete_user("bob")
        lst.sync()
        with pytest.raises(Closed):
            plain.metadata()
        assert len(other.metadata().topics) == 3, "other users' sessions go on"
        assert RawClient(lst.port).login("PLAIN", "bob", "one").error_code == E.SASL_AUTHENTICATION_FAILED
    finally:
        lst.close()


def test_a_session_lifetime_closes_a_client_that_does_not_reauthenticate_and_reauthentication_extends_it() -> None:
    lst = Listener(sasl_config(), {"connections.max.reauth.ms": 1500})
    try:
        lst.backend.set_password("bob", "pw")
        lst.backend.set_password("eve", "pw")
        lst.backend.allow("User:bob", Op.DESCRIBE, RT.TOPIC, "*")
        lst.sync()
        lazy, diligent, thief = RawClient(lst.port), RawClient(lst.port), RawClient(lst.port)
        for c in (lazy, diligent, thief):
            assert c.login("SCRAM-SHA-256", "bob", "pw").session_lifetime_ms == 1500
        time.sleep(1.1)  # the passage of time is what is tested
        # re-authentication (at most once a second, the same mechanism and principal)
        assert diligent.login("SCRAM-SHA-256", "bob", "pw").error_code == 0
        assert thief.login("SCRAM-SHA-256", "eve", "pw").error_code == E.SASL_AUTHENTICATION_FAILED, "a session cannot change principals"
        assert thief.closed_within(2)
        time.sleep(0.6)  # lazy's 1.5 s lifetime runs out: the passage of time is what is tested
        with pytest.raises(Closed):
            lazy.metadata()  # its lifetime is over
        assert len(diligent.metadata().topics) == 3, "its re-authentication started a new lifetime"
    finally:
        lst.close()


def test_librdkafka_reauthenticates_within_its_session_lifetime() -> None:
    from confluent_kafka.admin import AdminClient

    lst = Listener(sasl_config(), {"connections.max.reauth.ms": 1000})
    try:
        lst.backend.set_password("bob", "pw")
        lst.backend.allow("User:bob", Op.DESCRIBE, RT.TOPIC, "*")
        lst.sync()
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{lst.port}", "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "bob", "sasl.password": "pw"})
        wait_until(lambda: len(admin.list_topics(timeout=5).topics) == 3 and lst.security.stats["reauthentications"] >= 2, timeout=15, interval=0.2, what="librdkafka to re-authenticate")
        assert lst.server.stats["closed_sessions"] == 0, "it re-authenticated in time: no session ran out"
    finally:
        lst.close()


def test_without_a_lifetime_a_handshake_after_authentication_is_illegal_but_not_fatal() -> None:
    lst = Listener(sasl_config())
    try:
        lst.backend.set_password("bob", "pw")
        lst.backend.allow("User:bob", Op.DESCRIBE, RT.TOPIC, "*")
        lst.sync()
        c = RawClient(lst.port)
        assert c.login("PLAIN", "bob", "pw").session_lifetime_ms == 0
        assert c.handshake("PLAIN").error_code == E.ILLEGAL_SASL_STATE
        assert len(c.metadata().topics) == 3
    finally:
        lst.close()


# -- limits and abuse --------------------------------------------------------------------------


def test_a_100_mib_frame_before_authentication_closes_at_its_size(listener) -> None:
    c = RawClient(listener.port)
    started = time.monotonic()
    c.send_bytes(struct.pack(">i", 100 * 1024 * 1024) + b"\0" * 1024)
    assert c.closed_within(2) and time.monotonic() - started < 2, "refused at the size, not after reading 100 MiB"
    healthy(listener)


def test_a_thousand_connections_from_one_address_are_held_to_its_limit_and_others_are_served() -> None:
    lst = Listener(sasl_config(), {"max.connections.per.ip": 20, "connections.max.idle.ms": 60_000})
    try:
        lst.backend.set_password("alice", "alice-secret")
        lst.backend.allow("User:alice", Op.DESCRIBE, RT.TOPIC, "alpha")
        lst.sync()
        flood = []
        for _ in range(1000):
            try:
                flood.append(RawClient(lst.port, source="127.0.0.2", timeout=2))
            except OSError:
                break
        wait_until(lambda: lst.server.stats["refused_connections"] >= len(flood) - 20, timeout=10, what="the listener to refuse the flood beyond its limit")
        assert lst.server._per_ip.get("127.0.0.2") == 20
        open_ = sum(1 for c in flood if not c.closed_within(0.001))
        assert open_ <= 20
        healthy(lst)  # another address is served
        for c in flood:
            c.close()
        wait_until(lambda: "127.0.0.2" not in lst.server._per_ip, timeout=10, what="the flood's connections to be released")
    finally:
        lst.close()


def test_half_an_exchange_then_silence_and_a_partial_frame_are_closed_when_idle() -> None:
    lst = Listener(sasl_config(), {"connections.max.idle.ms": 400})
    try:
        lst.backend.set_password("alice", "alice-secret")
        lst.backend.allow("User:alice", Op.DESCRIBE, RT.TOPIC, "alpha")
        lst.sync()
        half = RawClient(lst.port)
        assert half.handshake("SCRAM-SHA-256").error_code == 0  # ... and nothing more
        partial = RawClient(lst.port)
        partial.send_bytes(struct.pack(">i", 200) + b"\0" * 50)
        silent = RawClient(lst.port)
        for c in (half, partial, silent):
            assert c.closed_within(3), "an idle, unauthenticated connection is closed"
        assert lst.server.stats["closed_idle"] >= 3
        healthy(lst)
    finally:
        lst.close()


def test_max_connections_counts_every_address() -> None:
    lst = Listener(sasl_config(), {"max.connections": 3})
    try:
        held = [RawClient(lst.port) for _ in range(3)]
        wait_until(lambda: lst.server.stats["open"] == 3, timeout=5, what="three open connections")
        assert RawClient(lst.port, source="127.0.0.3").closed_within(2)
        held[0].close()
        wait_until(lambda: lst.server.stats["open"] == 2, timeout=5, what="a connection to close")
        ok = RawClient(lst.port)
        assert ok.api_versions().error_code == 0
    finally:
        lst.close()


# -- ACLs through the listener ------------------------------------------------------------


def test_metadata_auto_create_and_acl_apis_follow_the_acls() -> None:
    lst = Listener(sasl_config())
    try:
        b = lst.backend
        b.set_password("alice", "a")
        b.set_password("admin", "x")
        b.allow("User:alice", Op.READ, RT.TOPIC, "team-a-", pattern=4)
        b.allow("User:alice", Op.DESCRIBE, RT.TOPIC, "new-a")
        lst.sync()
        alice = RawClient(lst.port)
        assert alice.login("PLAIN", "alice", "a").error_code == 0
        assert [t.name for t in alice.metadata().topics] == ["team-a-orders"], "READ on a prefix implies DESCRIBE; the rest is hidden"
        from kafka.protocol.metadata import MetadataRequest, MetadataResponse

        ops = alice.call(MetadataRequest(topics=None, allow_auto_topic_creation=False, include_cluster_authorized_operations=True, include_topic_authorized_operations=True), 8, MetadataResponse)
        assert ops.topics[0].authorized_operations == {int(Op.READ), int(Op.DESCRIBE)} and ops.authorized_operations == set(), "Metadata v8's authorized operations"
        named = {t.name: t.error_code for t in alice.metadata(["alpha", "team-a-orders", "nope"]).topics}
        assert named == {"alpha": E.TOPIC_AUTHORIZATION_FAILED, "team-a-orders": 0, "nope": E.TOPIC_AUTHORIZATION_FAILED}
        # auto-creation needs CREATE, on the cluster or the topic
        assert alice.metadata(["new-a"], auto_create=True).topics[0].error_code == E.TOPIC_AUTHORIZATION_FAILED
        assert b.created == []
        b.allow("User:alice", Op.CREATE, RT.TOPIC, "new-a")
        lst.sync()
        assert alice.metadata(["new-a"], auto_create=True).topics[0].error_code == E.LEADER_NOT_AVAILABLE
        assert b.created == ["new-a"]
        denied = alice.call(DescribeAclsRequest(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1, principal_filter=None, host_filter=None, operation=1, permission_type=1), 2, DescribeAclsResponse)
        assert denied.error_code == E.CLUSTER_AUTHORIZATION_FAILED
        admin = RawClient(lst.port)
        assert admin.login("SCRAM-SHA-512", "admin", "x").error_code == 0
        everything = admin.call(DescribeAclsRequest(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1, principal_filter=None, host_filter=None, operation=1, permission_type=1), 2, DescribeAclsResponse)
        assert everything.error_code == 0 and len([a for r in everything.resources for a in r.acls]) == 3
        assert len(admin.metadata().topics) == 4, "a super user sees every topic"
    finally:
        lst.close()


# -- TLS and mutual TLS ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    d = tmp_path_factory.mktemp("pki")
    server = ca.issue_cert("localhost", "127.0.0.1")
    server.private_key_and_cert_chain_pem.write_to_path(str(d / "server.pem"))
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    alice = ca.issue_cert("alice@example", common_name="alice", organization_unit_name="eng", organization_name="Example")
    alice.private_key_and_cert_chain_pem.write_to_path(str(d / "alice.pem"))
    stranger_ca = trustme.CA()
    stranger = stranger_ca.issue_cert("mallory@example", common_name="mallory")
    stranger.private_key_and_cert_chain_pem.write_to_path(str(d / "mallory.pem"))
    return {"dir": d, "ca": ca}


def client_tls(pki, cert: str | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki["dir"] / "ca.pem"))
    if cert:
        ctx.load_cert_chain(str(pki["dir"] / f"{cert}.pem"))
    return ctx


def test_mutual_tls_principal_mapping_and_refusals(pki) -> None:
    d = pki["dir"]
    lst = Listener(
        SecurityConfig.parse(
            {
                "protocol": "SSL",
                "certfile": str(d / "server.pem"),
                "cafile": str(d / "ca.pem"),
                "client_auth": "required",
                "principal_mapping_rules": "RULE:^CN=([a-z]+),OU=eng,.*$/$1/L",
            }
        )
    )
    try:
        lst.backend.allow("User:alice", Op.DESCRIBE, RT.TOPIC, "beta")
        lst.sync()
        alice = RawClient(lst.port, tls=client_tls(pki, "alice"))
        assert [t.name for t in alice.metadata().topics] == ["beta"], "the certificate's CN, mapped, is the principal"
        # no certificate, or one from another CA: the handshake fails
        for bad in (client_tls(pki), client_tls(pki, "mallory")):
            try:
                c = RawClient(lst.port, tls=bad)
                assert c.closed_within(3)
            except (ssl.SSLError, ConnectionError, OSError):
                pass
        wait_until(lambda: lst.server.stats["tls_failures"] >= 2, timeout=5, what="two failed TLS handshakes")
        plain = RawClient(lst.port)  # no TLS at all
        plain.send_bytes(b"\x00\x00\x00\x0a" + b"\x00" * 10)
        assert plain.closed_within(3)
        assert [t.name for t in RawClient(lst.port, tls=client_tls(pki, "alice")).metadata().topics] == ["beta"]
    finally:
        lst.close()


def test_sasl_over_tls_and_a_dn_no_rule_maps(pki) -> None:
    d = pki["dir"]
    lst = Listener(SecurityConfig.parse({"protocol": "SASL_SSL", "certfile": str(d / "server.pem"), "cafile": str(d / "ca.pem"), "client_auth": "requested", "principal_mapping_rules": "RULE:^CN=nobody$/x/"}))
    try:
        lst.backend.set_password("alice", "alice-secret")
        lst.backend.allow("User:alice", Op.DESCRIBE, RT.TOPIC, "alpha")
        lst.sync()
        c = RawClient(lst.port, tls=client_tls(pki))  # requested, not required: no certificate is fine
        assert c.login("SCRAM-SHA-512", "alice", "alice-secret").error_code == 0
        assert [t.name for t in c.metadata().topics] == ["alpha"]
        # a certificate whose DN no rule maps is refused
        refused = RawClient(lst.port, tls=client_tls(pki, "alice"))
        assert refused.closed_within(3)
        assert lst.server.stats["tls_principal_failures"] == 1
    finally:
        lst.close()
