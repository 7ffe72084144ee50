"""The server side of SASL PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802, RFC 7677),
token in, token out, as Kafka's SaslAuthenticate carries them.

``server_for(mechanism, lookup)`` gives an exchange; ``step(token)`` returns the token to
send back, or raises :class:`SaslAuthenticationFailed` with the message the client gets
(SASL_AUTHENTICATION_FAILED). Once ``complete``, ``result`` names the user and the
credential that proved it. SCRAM's messages are the ``scramp`` library's; ``lookup(user)``
returns the user's credentials by mechanism, or None for an unknown user.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

from .scram import SCRAM_MECHANISMS, ScramCredential, ScramMechanism, verify_password

PLAIN = "PLAIN"
MECHANISMS = (PLAIN, "SCRAM-SHA-256", "SCRAM-SHA-512")

CredentialLookup = Callable[[str], Mapping[ScramMechanism, ScramCredential] | None]


class SaslAuthenticationFailed(Exception):
    """The exchange failed; ``str(exc)`` is what the client is told."""


@dataclass(frozen=True)
class Authenticated:
    user: str
    mechanism: str
    credential: ScramCredential  # the one that proved the user (PLAIN: one of theirs)


def invalid_credentials(mechanism: str) -> str:
    # The message says nothing of which part was wrong, or whether the user exists.
    return f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"


class PlainServer:
    """One token: ``authzid NUL authcid NUL password``, checked against the user's SCRAM
    credential (one PBKDF2: the caller may run :meth:`step` off its event loop)."""

    mechanism = PLAIN

    def __init__(self, lookup: CredentialLookup) -> None:
        self.lookup = lookup
        self.complete = False
        self.result: Authenticated | None = None

    def step(self, token: bytes) -> bytes:
        if self.complete:
            raise SaslAuthenticationFailed("Authentication failed: the PLAIN exchange is already complete")
        try:
            text = bytes(token).decode("utf-8")
        except UnicodeDecodeError:
            raise SaslAuthenticationFailed("Invalid SASL/PLAIN response: not UTF-8") from None
        parts = text.split("\x00")
        if len(parts) != 3:
            raise SaslAuthenticationFailed(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authzid, user, password = parts
        if not user:
            raise SaslAuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationFailed("Authentication failed: password not specified")
        if authzid and authzid != user:
            raise SaslAuthenticationFailed("Authentication failed: Client requested an authorization id that is different from username")
        credentials = self.lookup(user) or {}
        # Any of the user's credentials will do; the same password made them all.
        credential = next((credentials[m] for m in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512) if m in credentials), None)
        if credential is None or not verify_password(credential, password):
            raise SaslAuthenticationFailed("Authentication failed: Invalid username or password")
        self.complete = True
        self.result = Authenticated(user, PLAIN, credential)
        return b""


class ScramServer:
    """Two rounds: client-first -> server-first, client-final -> server-final."""

    def __init__(self, mechanism: ScramMechanism, lookup: CredentialLookup) -> None:
        import scramp

        self.scram_mechanism = mechanism
        self.mechanism = mechanism.mechanism_name
        self.lookup = lookup
        self.complete = False
        self.result: Authenticated | None = None
        self._credential: ScramCredential | None = None
        self._user = ""
        self._server = scramp.ScramMechanism(self.mechanism).make_server(self._auth_info)
        self._round = 0

    def _auth_info(self, user: str) -> tuple[bytes, bytes, bytes, int] | None:
        credential = (self.lookup(user) or {}).get(self.scram_mechanism)
        if credential is None:
            return None
        self._credential = credential
        self._user = user
        return credential.salt, credential.stored_key, credential.server_key, credential.iterations

    def _accept_kafkas_nonce(self, client_final: str) -> None:
        """Kafka's server takes a client-final nonce that *ends with* the one it sent
        (ScramSaslServer's check), and librdkafka before 2.1 sends the client nonce twice
        there; RFC 5802 wants them equal, as scramp does. Such a nonce is accepted as
        Kafka accepts it: the proof is still checked over the message as sent."""
        sent = _attribute(client_final, "r")
        expected = str(self._server.nonce)
        if sent and sent != expected and sent.endswith(expected):
            self._server.nonce = type(self._server.nonce)(sent)

    def step(self, token: bytes) -> bytes:
        from scramp import ScramException

        try:
            message = bytes(token).decode("utf-8")
        except UnicodeDecodeError:
            raise SaslAuthenticationFailed(invalid_credentials(self.mechanism)) from None
        try:
            if self._round == 0:
                self._round = 1
                self._server.set_client_first(message)
                return self._server.get_server_first().encode("utf-8")
            if self._round == 1:
                self._round = 2
                self._accept_kafkas_nonce(message)
                self._server.set_client_final(message)
                final = self._server.get_server_final().encode("utf-8")
                assert self._credential is not None
                self.complete = True
                self.result = Authenticated(self._user, self.mechanism, self._credential)
                return final
        except ScramException:
            raise SaslAuthenticationFailed(invalid_credentials(self.mechanism)) from None
        raise SaslAuthenticationFailed(f"Authentication failed: the {self.mechanism} exchange is already complete")


def _attribute(message: str, name: str) -> str | None:
    for part in message.split(","):
        if part.startswith(name + "="):
            return part[len(name) + 1 :]
    return None


def server_for(mechanism: str, lookup: CredentialLookup) -> PlainServer | ScramServer:
    """The exchange for ``mechanism`` (one of :data:`MECHANISMS`); ValueError otherwise."""
    if mechanism == PLAIN:
        return PlainServer(lookup)
    if mechanism in SCRAM_MECHANISMS:
        return ScramServer(SCRAM_MECHANISMS[mechanism], lookup)
    raise ValueError(f"unsupported SASL mechanism {mechanism!r}; kcoord supports {', '.join(MECHANISMS)}")
