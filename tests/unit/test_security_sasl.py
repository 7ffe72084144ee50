"""SCRAM credentials, the PLAIN and SCRAM server exchanges (against scramp's client), TLS
principal mapping (Kafka's SslPrincipalMapperTest cases) and ``kafka_security``
validation -- no Ray, no sockets."""

from __future__ import annotations

import pytest
import scramp

from kcoord.security.config import SecurityConfig
from kcoord.security.principal import NoMatchingRule, PrincipalMapper, subject_dn
from kcoord.security.sasl import PlainServer, SaslAuthenticationFailed, ScramServer, server_for
from kcoord.security.scram import (
    ScramMechanism,
    credential_from_password,
    credential_from_salted_password,
    salted_password,
    verify_password,
)

S256, S512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512
SALT = b"0123456789abcdef01234567"


def users(**passwords: str) -> dict:
    return {u: {m: credential_from_password(m, p, 4096, SALT) for m in (S256, S512)} for u, p in passwords.items()}


# -- credentials -----------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", [S256, S512])
def test_a_credential_is_scramps_and_kip_554s_salted_password_gives_the_same(mechanism) -> None:
    cred = credential_from_password(mechanism, "pencil", 4096, SALT)
    salt, stored, server, i = scramp.ScramMechanism(mechanism.mechanism_name).make_auth_info("pencil", 4096, SALT)
    assert (cred.salt, cred.stored_key, cred.server_key, cred.iterations) == (salt, stored, server, i)
    assert credential_from_salted_password(mechanism, SALT, salted_password(mechanism, "pencil", SALT, 4096), 4096) == cred
    assert "pencil" not in repr(cred) and b"pencil" not in cred.stored_key + cred.server_key + cred.salt
    assert verify_password(cred, "pencil") and not verify_password(cred, "pencil2") and not verify_password(cred, "")


def test_a_new_credential_has_a_random_salt_and_kafkas_iteration_bounds() -> None:
    a, b = credential_from_password(S256, "x"), credential_from_password(S256, "x")
    assert a.salt != b.salt and a.fingerprint != b.fingerprint and len(a.salt) == 24
    for bad in (4095, 16385, "4096"):
        with pytest.raises(ValueError, match="iterations"):
            credential_from_password(S256, "x", bad)
    with pytest.raises(ValueError, match="password"):
        credential_from_password(S256, "")
    assert ScramMechanism.parse("scram-sha-512") == S512 and ScramMechanism.parse(1) == S256
    with pytest.raises(ValueError):
        ScramMechanism.parse("SCRAM-SHA-1")


# -- PLAIN -------------------------------------------------------------------------------------


def plain(token: bytes, creds=None):
    server = PlainServer(lambda u: (creds if creds is not None else users(alice="secret")).get(u))
    return server, server.step(token)


def test_plain_accepts_the_password_of_the_users_scram_credential() -> None:
    server, answer = plain(b"\x00alice\x00secret")
    assert answer == b"" and server.complete and server.result.user == "alice" and server.result.mechanism == "PLAIN"
    server, _ = plain(b"alice\x00alice\x00secret")  # authzid equal to the user: fine
    assert server.complete
    only_512 = {"alice": {S512: credential_from_password(S512, "secret", 4096, SALT)}}
    assert plain(b"\x00alice\x00secret", only_512)[0].result.credential.mechanism == S512


@pytest.mark.parametrize(
    "token,message",
    [
        (b"\x00alice\x00wrong", "Invalid username or password"),
        (b"\x00mallory\x00secret", "Invalid username or password"),
        (b"bob\x00alice\x00secret", "authorization id"),
        (b"\x00\x00secret", "username not specified"),
        (b"\x00alice\x00", "password not specified"),
        (b"alice:secret", "expected 3 tokens"),
        (b"\xff\xfe", "UTF-8"),
    ],
)
def test_plain_refusals_say_why_without_telling_which_part_was_wrong(token: bytes, message: str) -> None:
    with pytest.raises(SaslAuthenticationFailed, match=message):
        plain(token)


# -- SCRAM -------------------------------------------------------------------------------------


def scram_exchange(mechanism: str, user: str, password: str, creds=None):
    client = scramp.ScramClient([mechanism], user, password)
    server = server_for(mechanism, lambda u: (creds if creds is not None else users(alice="secret")).get(u))
    first = server.step(client.get_client_first().encode())
    client.set_server_first(first.decode())
    final = server.step(client.get_client_final().encode())
    client.set_server_final(final.decode())  # the client checks the server's signature
    return server


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_exchange_with_scramps_client(mechanism: str) -> None:
    server = scram_exchange(mechanism, "alice", "secret")
    assert isinstance(server, ScramServer) and server.complete
    assert server.result.user == "alice" and server.result.mechanism == mechanism
    with pytest.raises(SaslAuthenticationFailed, match="already complete"):
        server.step(b"n,,n=alice,r=abc")


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_refuses_a_wrong_password_an_unknown_user_and_a_missing_credential(mechanism: str) -> None:
    with pytest.raises(SaslAuthenticationFailed, match=f"invalid credentials with SASL mechanism {mechanism}"):
        scram_exchange(mechanism, "alice", "wrong")
    with pytest.raises(SaslAuthenticationFailed, match="invalid credentials"):
        scram_exchange(mechanism, "mallory", "secret")
    other = S512 if mechanism == "SCRAM-SHA-256" else S256
    with pytest.raises(SaslAuthenticationFailed, match="invalid credentials"):
        scram_exchange(mechanism, "alice", "secret", {"alice": {other: credential_from_password(other, "secret")}})


def test_scram_accepts_a_final_nonce_that_ends_with_the_servers_as_kafka_does() -> None:
    """librdkafka 2.0 (kcat 1.7) sends the client nonce twice in its final message; Kafka's
    server accepts a nonce that ends with the one it sent. The proof still has to hold."""
    import base64
    import hashlib
    import hmac

    def final_for(server, password: str, tamper=lambda r: r) -> bytes:
        first_bare = "n=alice,r=cnonce"
        server_first = server.step(("n,," + first_bare).encode()).decode()
        r = dict(p.split("=", 1) for p in server_first.split(","))["r"]
        without_proof = f"c=biws,r={tamper('cnonce' + r)}"
        cred = users(alice="secret")["alice"][S256]
        salted = hashlib.pbkdf2_hmac("sha256", password.encode(), cred.salt, cred.iterations)
        client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
        signature = hmac.new(hashlib.sha256(client_key).digest(), f"{first_bare},{server_first},{without_proof}".encode(), hashlib.sha256).digest()
        proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()
        return f"{without_proof},p={proof}".encode()

    lookup = lambda u: users(alice="secret").get(u)  # noqa: E731
    server = server_for("SCRAM-SHA-256", lookup)
    server.step(final_for(server, "secret"))
    assert server.complete and server.result.user == "alice"
    with pytest.raises(SaslAuthenticationFailed):  # the same with a wrong password
        s = server_for("SCRAM-SHA-256", lookup)
        s.step(final_for(s, "wrong"))
    with pytest.raises(SaslAuthenticationFailed):  # a nonce that does not end with the server's
        s = server_for("SCRAM-SHA-256", lookup)
        s.step(final_for(s, "secret", tamper=lambda r: r + "x"))


def test_scram_refuses_garbage() -> None:
    for token in (b"", b"garbage", b"\xff", b"n,,n=alice"):
        server = server_for("SCRAM-SHA-256", lambda u: users(alice="secret").get(u))
        with pytest.raises(SaslAuthenticationFailed):
            server.step(token)
    with pytest.raises(ValueError, match="GSSAPI"):
        server_for("GSSAPI", lambda u: None)


# -- TLS principals: Kafka's SslPrincipalMapperTest --------------------------------------------


@pytest.mark.parametrize(
    "rules",
    [
        "DEFAULT",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
        "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
        "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
        "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
    ],
)
def test_valid_mapping_rules(rules: str) -> None:
    PrincipalMapper(rules)


@pytest.mark.parametrize(
    "rules",
    [
        "default",
        "DEFAUL",
        "DEFAULT/L",
        "DEFAULT/U",
        "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
        "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
    ],
)
def test_invalid_mapping_rules(rules: str) -> None:
    with pytest.raises(ValueError):
        PrincipalMapper(rules)


def test_mapping_rules_in_order() -> None:
    mapper = PrincipalMapper(
        ", ".join(
            [
                "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
                "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
                "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
                "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
                "DEFAULT",
            ]
        )
    )
    assert mapper.name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.name("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert mapper.name("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    assert mapper.name("OU=JavaSoft,O=Sun Microsystems,C=US") == "OU=JavaSoft,O=Sun Microsystems,C=US"
    assert PrincipalMapper("RULE:^CN=((\\\\, *|\\w)+)(,.*|$)/$1/,DEFAULT").name("CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz") == "Tkac\\, Adam"
    assert PrincipalMapper("RULE:^CN=(.*)$/$1-$9/").name("CN=x") == "x-$9"  # a group beyond the pattern's is text
    with pytest.raises(NoMatchingRule):
        PrincipalMapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/").name("CN=x,OU=Other")
    assert PrincipalMapper(",,RULE://,,,DEFAULT,,").name("CN=x") == "CN=x"  # empty rules are skipped; RULE:// matches only ""


def test_subject_dn_is_rfc_2253_most_specific_first() -> None:
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    cert = ca.issue_cert("client.example", common_name="alice", organization_name="Example", organization_unit_name="eng")
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    der = x509.load_pem_x509_certificate(cert.cert_chain_pems[0].bytes()).public_bytes(Encoding.DER)
    dn = subject_dn(der)
    assert dn.startswith("CN=alice,") and "OU=eng" in dn and "O=Example" in dn and ", " not in dn


# -- kafka_security ----------------------------------------------------------------------------


def test_security_config_defaults_and_listener_options_without_passwords(tmp_path) -> None:
    cert = tmp_path / "c.pem"
    cert.write_text("x")
    cfg = SecurityConfig.parse({"users": {"admin": "admin-secret"}, "super_users": ["admin"], "certfile": str(cert)})
    assert cfg.protocol == "SASL_SSL" and cfg.mechanisms == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    assert cfg.super_users == ("User:admin",) and cfg.tls and cfg.sasl and cfg.authenticates
    options = cfg.listener_options()
    assert "admin-secret" not in repr(options) and "admin-secret" not in repr(cfg)
    assert SecurityConfig.from_listener_options(options) == cfg
    assert not SecurityConfig.parse({"protocol": "PLAINTEXT"}).authenticates
    assert SecurityConfig.parse({"protocol": "ssl", "certfile": str(cert), "cafile": str(cert), "client_auth": "required"}).authenticates


@pytest.mark.parametrize(
    "spec,message",
    [
        ({"protocol": "TLS"}, "protocol"),
        ({"protocol": "SASL_PLAINTEXT", "mechanisms": ["GSSAPI"]}, "mechanisms"),
        ({"protocol": "SASL_PLAINTEXT", "mechanisms": []}, "mechanisms"),
        ({"protocol": "SASL_PLAINTEXT", "users": {"a": ""}}, "users"),
        ({"protocol": "SASL_PLAINTEXT", "users": ["a"]}, "users"),
        ({"protocol": "SASL_PLAINTEXT", "super_users": [""]}, "super_users"),
        ({"protocol": "SASL_SSL"}, "certfile"),
        ({"protocol": "SASL_PLAINTEXT", "client_auth": "required"}, "needs TLS"),
        ({"protocol": "SSL", "certfile": "c.pem", "client_auth": "required"}, "cafile"),
        ({"protocol": "SSL", "certfile": "c.pem", "client_auth": "always"}, "client_auth"),
        ({"protocol": "SASL_PLAINTEXT", "principal_mapping_rules": "rule:x"}, "rule"),
        ({"protocol": "SASL_PLAINTEXT", "allow_everyone_if_no_acl_found": "yes"}, "allow_everyone"),
        ({"protocol": "SASL_PLAINTEXT", "password": "x"}, "unknown key"),
    ],
)
def test_security_config_errors_name_the_key(spec: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SecurityConfig.parse(spec)
