"""Kafka's ACL model: what an ACL names and how filters select ACLs.

Numbers are Kafka's (they travel in CreateAcls/DescribeAcls/DeleteAcls); class and member
names are kafka-python's (``kafka.admin``), so code written for kafka-python's admin
client reads the same. An :class:`ACL` says "principal P is ALLOWED/DENIED operation O
from host H on resources matching pattern R"; an :class:`ACLFilter` selects ACLs (ANY,
MATCH, None for "any value") for DescribeAcls and DeleteAcls.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any

CLUSTER_NAME = "kafka-cluster"  # the one CLUSTER resource's name
WILDCARD = "*"  # a LITERAL resource name or host that matches any
WILDCARD_PRINCIPAL = "User:*"  # the principal that matches any principal
ANONYMOUS = "User:ANONYMOUS"  # an unauthenticated connection's principal


class ResourceType(IntEnum):
    """ANY is only valid in a filter."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class ACLOperation(IntEnum):
    """ANY is only valid in a filter; ALL in an ACL matches every operation."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class ACLPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


class ACLResourcePatternType(IntEnum):
    """LITERAL names one resource (or every one, with the name ``*``); PREFIXED every
    resource whose name starts with it (KIP-290). ANY and MATCH are filters only: MATCH
    selects the ACLs that would apply to a named resource."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


def coerce(enum: type[IntEnum], value: Any) -> Any:
    """``value`` as a member of ``enum``: a member, its number, or its name in any case
    (``"describe-configs"`` too). ValueError naming the choices otherwise."""
    if isinstance(value, enum):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return enum(value)
        except ValueError:
            pass
    elif isinstance(value, str):
        try:
            return enum[value.strip().upper().replace("-", "_")]
        except KeyError:
            pass
    raise ValueError(f"{value!r} is not a {enum.__name__} (one of {', '.join(m.name for m in enum)})")


def parse_principal(principal: str) -> tuple[str, str]:
    """``"User:alice"`` -> ``("User", "alice")``; ValueError unless it is ``TYPE:NAME``."""
    if not isinstance(principal, str) or ":" not in principal or not principal.split(":", 1)[0]:
        raise ValueError(f"principal {principal!r} must be TYPE:NAME, e.g. User:alice")
    kind, name = principal.split(":", 1)
    return kind, name


@dataclass(frozen=True)
class ResourcePatternFilter:
    """Selects resource patterns: ``resource_type`` ANY, ``resource_name`` None and
    ``pattern_type`` ANY match anything; MATCH selects the patterns that apply to the
    resource named ``resource_name`` (literal, the ``*`` wildcard, prefixes of it)."""

    resource_type: ResourceType
    resource_name: str | None
    pattern_type: ACLResourcePatternType

    def __post_init__(self) -> None:
        object.__setattr__(self, "resource_type", coerce(ResourceType, self.resource_type))
        object.__setattr__(self, "pattern_type", coerce(ACLResourcePatternType, self.pattern_type))
        if self.resource_name is not None and not isinstance(self.resource_name, str):
            raise ValueError(f"resource_name must be a string or None, got {self.resource_name!r}")

    def matches(self, pattern: "ResourcePattern") -> bool:
        """Kafka's ResourcePatternFilter.matches."""
        if self.resource_type != ResourceType.ANY and self.resource_type != pattern.resource_type:
            return False
        P = ACLResourcePatternType
        if self.pattern_type not in (P.ANY, P.MATCH) and self.pattern_type != pattern.pattern_type:
            return False
        if self.resource_name is None:
            return True
        if self.pattern_type in (P.ANY, pattern.pattern_type):
            return self.resource_name == pattern.resource_name
        # MATCH: the pattern applies to the resource named resource_name
        if pattern.pattern_type == P.LITERAL:
            return self.resource_name == pattern.resource_name or pattern.resource_name == WILDCARD
        if pattern.pattern_type == P.PREFIXED:
            return self.resource_name.startswith(pattern.resource_name)
        return False

    @property
    def unknown(self) -> bool:
        return self.resource_type == ResourceType.UNKNOWN or self.pattern_type == ACLResourcePatternType.UNKNOWN


@dataclass(frozen=True)
class ResourcePattern(ResourcePatternFilter):
    """A resource (or resources) an ACL applies to: ``LITERAL`` by default."""

    pattern_type: ACLResourcePatternType = ACLResourcePatternType.LITERAL

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.resource_type == ResourceType.ANY:
            raise ValueError("a ResourcePattern's resource_type cannot be ANY (ANY is for filters)")
        if self.pattern_type in (ACLResourcePatternType.ANY, ACLResourcePatternType.MATCH):
            raise ValueError(f"a ResourcePattern's pattern_type cannot be {self.pattern_type.name} (it is for filters)")
        if self.resource_name is None:
            raise ValueError("a ResourcePattern needs a resource_name")


@dataclass(frozen=True)
class ACLFilter:
    """Selects ACLs: ``principal``/``host`` None, ``operation`` ANY and
    ``permission_type`` ANY match anything (kafka-python's ACLFilter)."""

    principal: str | None
    host: str | None
    operation: ACLOperation
    permission_type: ACLPermissionType
    resource_pattern: ResourcePatternFilter

    def __post_init__(self) -> None:
        object.__setattr__(self, "operation", coerce(ACLOperation, self.operation))
        object.__setattr__(self, "permission_type", coerce(ACLPermissionType, self.permission_type))
        if not isinstance(self.resource_pattern, ResourcePatternFilter):
            raise ValueError(f"resource_pattern must be a ResourcePatternFilter, got {self.resource_pattern!r}")

    def matches(self, acl: "ACL") -> bool:
        """Kafka's AclBindingFilter.matches."""
        if not self.resource_pattern.matches(acl.resource_pattern):
            return False
        if self.principal is not None and self.principal != acl.principal:
            return False
        if self.host is not None and self.host != acl.host:
            return False
        if self.operation != ACLOperation.ANY and self.operation != acl.operation:
            return False
        return self.permission_type == ACLPermissionType.ANY or self.permission_type == acl.permission_type

    def problem(self) -> str | None:
        """Why a broker refuses this filter (INVALID_REQUEST), or None."""
        if self.resource_pattern.unknown:
            return "unknown resource type or pattern type in the ACL filter"
        if self.operation == ACLOperation.UNKNOWN or self.permission_type == ACLPermissionType.UNKNOWN:
            return "unknown operation or permission type in the ACL filter"
        return None


@dataclass(frozen=True)
class ACL(ACLFilter):
    """One ACL (kafka-python's ACL): ``ACL("User:alice", "*", ACLOperation.READ,
    ACLPermissionType.ALLOW, ResourcePattern(ResourceType.TOPIC, "events"))``."""

    resource_pattern: ResourcePattern

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.operation == ACLOperation.ANY:
            raise ValueError("an ACL's operation cannot be ANY (ANY is for filters; ALL means every operation)")
        if self.permission_type == ACLPermissionType.ANY:
            raise ValueError("an ACL's permission_type cannot be ANY (ANY is for filters)")
        if not isinstance(self.resource_pattern, ResourcePattern):
            raise ValueError(f"an ACL's resource_pattern must be a ResourcePattern, got {self.resource_pattern!r}")
        if not isinstance(self.principal, str) or not isinstance(self.host, str):
            raise ValueError("an ACL needs a principal and a host (\"*\" for any host)")

    def problem(self) -> str | None:
        """Why a broker refuses to create this ACL (INVALID_REQUEST), or None. Kafka's
        checks: concrete resource type, pattern, operation and permission; a resource
        name; the CLUSTER resource only by its name; a TYPE:NAME principal."""
        p = self.resource_pattern
        if p.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
            return f"invalid resource type {p.resource_type.name}"
        if p.pattern_type not in (ACLResourcePatternType.LITERAL, ACLResourcePatternType.PREFIXED):
            return f"invalid pattern type {p.pattern_type.name}"
        if self.operation in (ACLOperation.UNKNOWN, ACLOperation.ANY):
            return f"invalid operation {self.operation.name}"
        if self.permission_type not in (ACLPermissionType.ALLOW, ACLPermissionType.DENY):
            return f"invalid permission type {self.permission_type.name}"
        if not p.resource_name:
            return "the resource name must not be empty"
        if p.resource_type == ResourceType.CLUSTER and p.resource_name != CLUSTER_NAME:
            return f"the only valid name for the CLUSTER resource is {CLUSTER_NAME}"
        try:
            parse_principal(self.principal)
        except ValueError as exc:
            return str(exc)
        if not self.host:
            return "the host must not be empty (\"*\" for any host)"
        return None

    def describe(self) -> str:
        """One line, as kafka-acls.sh prints an ACL."""
        p = self.resource_pattern
        return (
            f"{p.resource_type.name}:{p.pattern_type.name}:{p.resource_name} "
            f"principal={self.principal} host={self.host} operation={self.operation.name} permission={self.permission_type.name}"
        )


def any_filter() -> ACLFilter:
    """The filter that selects every ACL."""
    return ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY, ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY))
