"""``kafka_security``: how a cluster's Kafka listeners authenticate and authorize.

The contract of ``kcoord.local_cluster(kafka_security=...)``, ``kcoord.deploy`` and
``kcoord up``::

    {
        "protocol": "SASL_SSL",          # PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL
        "mechanisms": ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"],   # the default: all three
        "users": {"admin": "admin-secret"},   # created as SCRAM-SHA-256 and -512 credentials
        "super_users": ["admin"],            # user names (principal User:admin)
        "certfile": "...", "keyfile": "...", "cafile": "...",        # SSL, SASL_SSL (PEM)
        "client_auth": "none",           # none | requested | required (mutual TLS)
        "principal_mapping_rules": "DEFAULT",   # Kafka's ssl.principal.mapping.rules
        "allow_everyone_if_no_acl_found": False, # Kafka's allow.everyone.if.no.acl.found
    }

With ``kafka_security`` given, every listener checks ACLs (Kafka's authorizer); without
it the listener is plaintext with no authorization, as Kafka's default listener is.
``users`` are only read by whoever deploys (their credentials go to the controller,
salted and hashed); :meth:`SecurityConfig.listener_options` is what listeners get, with
no password in it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from .acl import parse_principal
from .principal import PrincipalMapper
from .sasl import MECHANISMS

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
CLIENT_AUTH = ("none", "requested", "required")
_KEYS = {
    "protocol",
    "mechanisms",
    "users",
    "super_users",
    "certfile",
    "keyfile",
    "cafile",
    "client_auth",
    "principal_mapping_rules",
    "allow_everyone_if_no_acl_found",
}


def _path(key: str, value: Any) -> str:
    if not isinstance(value, (str, os.PathLike)) or not str(value):
        raise ValueError(f"kafka_security[{key!r}] must be a file path, got {value!r}")
    return os.path.abspath(os.fspath(value))


@dataclass(frozen=True)
class SecurityConfig:
    protocol: str = "SASL_SSL"
    mechanisms: tuple[str, ...] = MECHANISMS
    super_users: tuple[str, ...] = ()  # principals, e.g. "User:admin"
    certfile: str | None = None
    keyfile: str | None = None
    cafile: str | None = None
    client_auth: str = "none"
    principal_mapping_rules: str = "DEFAULT"
    allow_everyone_if_no_acl_found: bool = False
    users: dict[str, str] = field(default_factory=dict, repr=False, compare=False)

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @property
    def authenticates(self) -> bool:
        """Whether every client is identified: SASL, or TLS with a required certificate."""
        return self.sasl or (self.tls and self.client_auth == "required")

    @classmethod
    def parse(cls, spec: Mapping[str, Any] | "SecurityConfig") -> "SecurityConfig":
        """Validate a ``kafka_security`` mapping; ValueError naming the key otherwise."""
        if isinstance(spec, SecurityConfig):
            return spec
        if not isinstance(spec, Mapping):
            raise ValueError(f"kafka_security must be a dict, got {type(spec).__name__}")
        unknown = sorted(set(spec) - _KEYS)
        if unknown:
            raise ValueError(f"kafka_security: unknown key(s) {', '.join(map(repr, unknown))}; known: {', '.join(sorted(_KEYS))}")
        protocol = str(spec.get("protocol", "SASL_SSL")).upper()
        if protocol not in PROTOCOLS:
            raise ValueError(f"kafka_security['protocol'] must be one of {', '.join(PROTOCOLS)}, got {spec.get('protocol')!r}")
        mechanisms = spec.get("mechanisms", MECHANISMS)
        if isinstance(mechanisms, str):
            mechanisms = [m for m in mechanisms.replace(" ", "").split(",") if m]
        mechanisms = tuple(str(m).upper() for m in mechanisms)
        bad = [m for m in mechanisms if m not in MECHANISMS]
        if bad or not mechanisms:
            raise ValueError(f"kafka_security['mechanisms'] must be a non-empty list of {', '.join(MECHANISMS)}, got {list(spec.get('mechanisms', []))!r}")
        users = spec.get("users") or {}
        if not isinstance(users, Mapping) or not all(isinstance(u, str) and u and isinstance(p, str) and p for u, p in users.items()):
            raise ValueError("kafka_security['users'] must map user names to non-empty password strings")
        super_users = spec.get("super_users") or ()
        if isinstance(super_users, str):
            super_users = [super_users]
        principals = []
        for s in super_users:
            if not isinstance(s, str) or not s:
                raise ValueError(f"kafka_security['super_users'] must list user names, got {s!r}")
            principal = s if ":" in s else f"User:{s}"
            parse_principal(principal)
            principals.append(principal)
        client_auth = str(spec.get("client_auth", "none")).lower()
        if client_auth not in CLIENT_AUTH:
            raise ValueError(f"kafka_security['client_auth'] must be one of {', '.join(CLIENT_AUTH)}, got {spec.get('client_auth')!r}")
        rules = spec.get("principal_mapping_rules", "DEFAULT")
        PrincipalMapper(rules)  # ValueError for a bad rule
        allow_all = spec.get("allow_everyone_if_no_acl_found", False)
        if not isinstance(allow_all, bool):
            raise ValueError(f"kafka_security['allow_everyone_if_no_acl_found'] must be True or False, got {allow_all!r}")
        config = cls(
            protocol=protocol,
            mechanisms=mechanisms,
            super_users=tuple(dict.fromkeys(principals)),
            certfile=_path("certfile", spec["certfile"]) if spec.get("certfile") else None,
            keyfile=_path("keyfile", spec["keyfile"]) if spec.get("keyfile") else None,
            cafile=_path("cafile", spec["cafile"]) if spec.get("cafile") else None,
            client_auth=client_auth,
            principal_mapping_rules=str(rules),
            allow_everyone_if_no_acl_found=allow_all,
            users=dict(users),
        )
        if config.tls and not config.certfile:
            raise ValueError(f"kafka_security: protocol {protocol} needs 'certfile' (the listener's certificate chain, PEM; 'keyfile' if the key is not in it)")
        if config.client_auth != "none" and not config.tls:
            raise ValueError(f"kafka_security['client_auth'] {client_auth!r} needs TLS (protocol SSL or SASL_SSL)")
        if config.client_auth != "none" and not config.cafile:
            raise ValueError("kafka_security['client_auth'] needs 'cafile': the CA certificates client certificates are checked against")
        return config

    def listener_options(self) -> dict[str, Any]:
        """What a listener needs (no password): plain data, kept in Ray's actor spec."""
        return {
            "protocol": self.protocol,
            "mechanisms": list(self.mechanisms),
            "super_users": list(self.super_users),
            "certfile": self.certfile,
            "keyfile": self.keyfile,
            "cafile": self.cafile,
            "client_auth": self.client_auth,
            "principal_mapping_rules": self.principal_mapping_rules,
            "allow_everyone_if_no_acl_found": self.allow_everyone_if_no_acl_found,
        }

    @classmethod
    def from_listener_options(cls, options: Mapping[str, Any]) -> "SecurityConfig":
        return replace(cls.parse({k: v for k, v in options.items() if k != "users"}), users={})

    def check_files(self) -> None:
        """The PEM files can be read here (a listener checks on its own node)."""
        for key in ("certfile", "keyfile", "cafile"):
            path = getattr(self, key)
            if path is not None and not os.access(path, os.R_OK):
                raise ValueError(f"kafka_security[{key!r}]: cannot read {path} on this node")
