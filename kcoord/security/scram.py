"""SCRAM credentials (RFC 5802, RFC 7677) as Kafka stores them, and the PLAIN check
against them.

A credential is what a broker keeps of a password: a random salt, an iteration count, and
two keys derived from ``SaltedPassword = PBKDF2(password, salt, iterations)`` --
``StoredKey = H(HMAC(SaltedPassword, "Client Key"))`` and ``ServerKey =
HMAC(SaltedPassword, "Server Key")``. Neither gives the password back, and a client proves
it knows the password without sending it. The SCRAM exchange itself is the ``scramp``
library's (:mod:`.sasl`); deriving a credential from a password is scramp's too.

Kafka's AlterUserScramCredentials (KIP-554) sends the salt and the SaltedPassword; the
keys are derived from those on arrival (:func:`credential_from_salted_password`) and the
SaltedPassword is dropped. PLAIN (a password sent in the clear, so only over TLS in
production) is checked against the same credentials (:func:`verify_password`).
"""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass
from enum import IntEnum
from functools import cached_property

DEFAULT_ITERATIONS = 4096
# Kafka's bounds for SCRAM iterations (ScramMechanism's min/max iterations).
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
SALT_BYTES = 24


class ScramMechanism(IntEnum):
    """kafka-python's ScramMechanism (Kafka's numbers in AlterUserScramCredentials)."""

    UNKNOWN = 0
    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2

    @property
    def mechanism_name(self) -> str:
        """The SASL mechanism name: ``SCRAM-SHA-256``."""
        return self.name.replace("_", "-")

    @property
    def hash_name(self) -> str:
        return {ScramMechanism.SCRAM_SHA_256: "sha256", ScramMechanism.SCRAM_SHA_512: "sha512"}[self]

    @classmethod
    def parse(cls, value: object) -> "ScramMechanism":
        """A member, its number, or its name (``SCRAM-SHA-256``/``scram_sha_256``)."""
        if isinstance(value, cls):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return cls(value)
        if isinstance(value, str):
            try:
                return cls[value.strip().upper().replace("-", "_")]
            except KeyError:
                pass
        raise ValueError(f"{value!r} is not a SCRAM mechanism (SCRAM-SHA-256 or SCRAM-SHA-512)")


SCRAM_MECHANISMS = {m.mechanism_name: m for m in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)}


@dataclass(frozen=True)
class ScramCredential:
    mechanism: ScramMechanism
    iterations: int
    salt: bytes
    stored_key: bytes
    server_key: bytes

    @cached_property
    def fingerprint(self) -> bytes:
        """Changes whenever the credential does (a new password, salt or count): an
        open connection authenticated with an older one is closed."""
        return hashlib.sha256(self.salt + self.stored_key + self.iterations.to_bytes(4, "big")).digest()[:16]


def iterations_problem(iterations: object) -> str | None:
    if not isinstance(iterations, int) or isinstance(iterations, bool):
        return f"iterations must be an integer, got {iterations!r}"
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        return f"iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}, got {iterations}"
    return None


def credential_from_password(mechanism: ScramMechanism, password: str, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None) -> ScramCredential:
    """A new credential for ``password`` (a random salt unless given). ValueError for an
    iteration count outside Kafka's bounds or an empty password."""
    import scramp

    problem = iterations_problem(iterations)
    if problem:
        raise ValueError(problem)
    if not isinstance(password, str) or not password:
        raise ValueError("a password must be a non-empty string")
    salt_bytes, stored_key, server_key, i = scramp.ScramMechanism(mechanism.mechanism_name).make_auth_info(
        password, iteration_count=iterations, salt=salt if salt is not None else os.urandom(SALT_BYTES)
    )
    return ScramCredential(mechanism, i, salt_bytes, stored_key, server_key)


def salted_password(mechanism: ScramMechanism, password: str, salt: bytes, iterations: int) -> bytes:
    """``Hi(password, salt, iterations)``: what KIP-554's upsertion carries (the client
    derives it, as kafka-python's UserScramCredentialUpsertion does)."""
    import scramp.utils

    return hashlib.pbkdf2_hmac(mechanism.hash_name, scramp.utils.saslprep(password).encode("utf-8"), salt, iterations)


def credential_from_salted_password(mechanism: ScramMechanism, salt: bytes, salted: bytes, iterations: int) -> ScramCredential:
    """The stored credential for a KIP-554 upsertion (RFC 5802's key definitions)."""
    digest = getattr(hashlib, mechanism.hash_name)
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    stored_key = digest(client_key).digest()
    server_key = hmac.new(salted, b"Server Key", digest).digest()
    return ScramCredential(mechanism, iterations, bytes(salt), stored_key, server_key)


def verify_password(credential: ScramCredential, password: str) -> bool:
    """Whether ``password`` is the one ``credential`` was made from (PLAIN's check):
    derive the stored key again with the credential's salt and count, compare in constant
    time. Costs one PBKDF2 (``iterations`` rounds)."""
    try:
        again = credential_from_password(credential.mechanism, password, credential.iterations, credential.salt)
    except Exception:  # noqa: BLE001 - a password scramp refuses (SASLprep) matches nothing
        return False
    return hmac.compare_digest(again.stored_key, credential.stored_key)
