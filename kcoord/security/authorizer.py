"""Kafka's authorizer decision (its StandardAuthorizer's rules), as a pure function of the
ACLs, the super users and one request's principal, host, operation and resource.

The rules, each as Kafka has them:

* a super user may do anything;
* the ACLs that apply to a resource are those of its type whose pattern matches its name:
  LITERAL with the same name, LITERAL ``*``, PREFIXED with a prefix of the name;
* of those, an ACL counts for a request when its principal is the request's or
  ``User:*``, its host is the request's or ``*``, and its operation is the one asked,
  or ALL -- or, for an ALLOW ACL only, one that implies it: READ, WRITE, DELETE and
  ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS (a DENY READ does not deny
  DESCRIBE);
* any DENY that counts wins over every ALLOW; else any ALLOW allows;
* nothing counts: denied -- unless ``allow_everyone_if_no_acl_found`` and no ACL at all
  applies to the resource (whoever it is for), Kafka's ``allow.everyone.if.no.acl.found``.

:meth:`Authorizer.authorize_any` is Kafka's ``authorizeByResourceType`` (KIP-679): may the
principal do an operation on *some* resource of a type -- an idempotent producer's
InitProducerId needs WRITE on any topic.
"""

from __future__ import annotations

from typing import Iterable

from .acl import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ResourceType,
    WILDCARD,
    WILDCARD_PRINCIPAL,
)

Op = ACLOperation
IMPLIES_DESCRIBE = frozenset({Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER})
IMPLIES_DESCRIBE_CONFIGS = frozenset({Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS})
_CACHE_LIMIT = 16_384

# The operations each resource type has (for authorized_operations, Metadata v8+).
OPERATIONS = {
    ResourceType.TOPIC: (Op.READ, Op.WRITE, Op.CREATE, Op.DELETE, Op.ALTER, Op.DESCRIBE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS),
    ResourceType.GROUP: (Op.READ, Op.DELETE, Op.DESCRIBE),
    ResourceType.CLUSTER: (Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE, Op.ALTER, Op.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (Op.DESCRIBE, Op.WRITE),
}


def acl_verdict(acl: ACL, principal: str, host: str, operation: ACLOperation) -> bool | None:
    """What ``acl`` says about this request, its resource assumed to match: True (allow),
    False (deny) or None (it does not count)."""
    if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
        return None
    if acl.host != WILDCARD and acl.host != host:
        return None
    allow = acl.permission_type == ACLPermissionType.ALLOW
    if acl.operation != Op.ALL and acl.operation != operation:
        # only an ALLOW implies another operation
        if not allow:
            return None
        if operation == Op.DESCRIBE and acl.operation in IMPLIES_DESCRIBE:
            pass
        elif operation == Op.DESCRIBE_CONFIGS and acl.operation in IMPLIES_DESCRIBE_CONFIGS:
            pass
        else:
            return None
    return allow


def pattern_applies(acl: ACL, resource_type: ResourceType, name: str) -> bool:
    """Whether ``acl``'s resource pattern covers the resource ``(resource_type, name)``."""
    p = acl.resource_pattern
    if p.resource_type != resource_type:
        return False
    if p.pattern_type == ACLResourcePatternType.LITERAL:
        return p.resource_name == name or p.resource_name == WILDCARD
    if p.pattern_type == ACLResourcePatternType.PREFIXED:
        return name.startswith(p.resource_name or "")
    return False


class _ByType:
    """One resource type's ACLs, indexed by literal name and by prefix."""

    def __init__(self) -> None:
        self.literal: dict[str, list[ACL]] = {}
        self.prefixed: dict[str, list[ACL]] = {}
        self.prefix_lengths: list[int] = []

    def add(self, acl: ACL) -> None:
        p = acl.resource_pattern
        if p.pattern_type == ACLResourcePatternType.LITERAL:
            self.literal.setdefault(p.resource_name or "", []).append(acl)
        elif p.pattern_type == ACLResourcePatternType.PREFIXED:
            self.prefixed.setdefault(p.resource_name or "", []).append(acl)
            self.prefix_lengths = sorted({len(k) for k in self.prefixed})

    def applying(self, name: str) -> list[ACL]:
        out = list(self.literal.get(name, ()))
        if name != WILDCARD:
            out += self.literal.get(WILDCARD, ())
        for n in self.prefix_lengths:
            if n > len(name):
                break
            out += self.prefixed.get(name[:n], ())
        return out


class Authorizer:
    """The decision over one set of ACLs; immutable (a listener builds a new one when the
    ACLs change, so a request sees one consistent set)."""

    def __init__(self, acls: Iterable[ACL] = (), super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False) -> None:
        self.acls: tuple[ACL, ...] = tuple(acls)
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._by_type: dict[ResourceType, _ByType] = {}
        for acl in self.acls:
            self._by_type.setdefault(acl.resource_pattern.resource_type, _ByType()).add(acl)
        self._cache: dict[tuple, bool] = {}

    def applying(self, resource_type: ResourceType, name: str) -> list[ACL]:
        """Every ACL whose pattern covers the resource (whoever it is for)."""
        index = self._by_type.get(resource_type)
        return [] if index is None else index.applying(name)

    def authorize(self, principal: str, host: str, operation: ACLOperation, resource_type: ResourceType, name: str) -> bool:
        key = (principal, host, operation, resource_type, name)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        result = self._decide(principal, host, operation, resource_type, name)
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[key] = result
        return result

    def _decide(self, principal: str, host: str, operation: ACLOperation, resource_type: ResourceType, name: str) -> bool:
        if principal in self.super_users:
            return True
        applying = self.applying(resource_type, name)
        allowed = False
        for acl in applying:
            verdict = acl_verdict(acl, principal, host, operation)
            if verdict is False:
                return False
            allowed = allowed or verdict is True
        if allowed:
            return True
        return not applying and self.allow_everyone_if_no_acl_found

    def authorize_any(self, principal: str, host: str, operation: ACLOperation, resource_type: ResourceType) -> bool:
        """Kafka's authorizeByResourceType: allowed on at least one resource of the type.
        A DENY on ``*`` denies; otherwise some ALLOW whose name no DENY covers (an equal
        LITERAL, or a PREFIXED that is a prefix of it) allows. Operations must be equal or
        ALL here (no implications), as in Kafka."""
        # Super users, ALLOW on "*" and allow_everyone_if_no_acl_found, through a name no
        # ACL is likely to name (Kafka asks the same question of a resource "hardcode").
        if self.authorize(principal, host, operation, resource_type, "hardcode"):
            return True
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allow_literal: set[str] = set()
        allow_prefixed: set[str] = set()
        wildcard_allow = False
        index = self._by_type.get(resource_type)
        every = [] if index is None else [a for acls in (*index.literal.values(), *index.prefixed.values()) for a in acls]
        for acl in every:
            if acl.host != host and acl.host != WILDCARD:
                continue
            if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
                continue
            if acl.operation != operation and acl.operation != Op.ALL:
                continue
            name = acl.resource_pattern.resource_name or ""
            literal = acl.resource_pattern.pattern_type == ACLResourcePatternType.LITERAL
            if acl.permission_type == ACLPermissionType.DENY:
                if literal and name == WILDCARD:
                    return False
                (deny_literal if literal else deny_prefixed).add(name)
            elif acl.permission_type == ACLPermissionType.ALLOW:
                if literal and name == WILDCARD:
                    wildcard_allow = True
                    continue
                (allow_literal if literal else allow_prefixed).add(name)
        if wildcard_allow:
            return True
        for name in sorted(allow_literal):
            if name not in deny_literal and not _has_prefix_in(name, deny_prefixed):
                return True
        return any(not _has_prefix_in(name, deny_prefixed) for name in sorted(allow_prefixed))

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType, name: str) -> list[ACLOperation]:
        """The operations of the resource's type that would be allowed (Metadata and
        DescribeGroups report them as a bit field when asked)."""
        return [op for op in OPERATIONS.get(resource_type, ()) if self.authorize(principal, host, op, resource_type, name)]

    def describe(self, acl_filter: ACLFilter) -> list[ACL]:
        return [acl for acl in self.acls if acl_filter.matches(acl)]


def _has_prefix_in(name: str, prefixes: set[str]) -> bool:
    return any(name[:i] in prefixes for i in range(1, len(name) + 1))


def operations_bitfield(ops: Iterable[ACLOperation]) -> int:
    """Kafka's authorized-operations field: bit ``op`` set for each allowed operation."""
    bits = 0
    for op in ops:
        bits |= 1 << int(op)
    return bits
