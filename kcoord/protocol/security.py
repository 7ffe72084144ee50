"""Messages for the cluster's security metadata, served by the controller (its only
writer): SCRAM credentials (AlterUserScramCredentials, DescribeUserScramCredentials,
KIP-554), ACLs (CreateAcls, DescribeAcls, DeleteAcls) and the snapshot the Kafka
listeners poll (SecurityMetadata). API keys are Kafka's where Kafka has the API.

Credentials travel salted and hashed (salt, StoredKey, ServerKey, iterations): no message
ever carries a password or a SaltedPassword. Enum fields are Kafka's numbers
(kcoord.security.acl, kcoord.security.scram).
"""

from __future__ import annotations

from dataclasses import field
from typing import ClassVar

from .codec import Message, register


@register
class AclRecord(Message):
    """One ACL: Kafka's (resource type, name, pattern type) and (principal, host,
    operation, permission type)."""

    API_KEY: ClassVar[int] = 1200
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


@register
class AclFilterRecord(Message):
    """An ACL filter: None names and principals/hosts match anything, as do the ANY (1)
    enum values; pattern type MATCH (2) selects what applies to a named resource."""

    API_KEY: ClassVar[int] = 1201
    resource_type: int = 1
    resource_name: str | None = None
    pattern_type: int = 1
    principal: str | None = None
    host: str | None = None
    operation: int = 1
    permission_type: int = 1


@register
class ScramCredentialRecord(Message):
    """What is kept of a password for one SCRAM mechanism (1 SHA-256, 2 SHA-512)."""

    API_KEY: ClassVar[int] = 1202
    mechanism: int
    iterations: int
    salt: bytes
    stored_key: bytes
    server_key: bytes


@register
class ScramUpsertion(Message):
    API_KEY: ClassVar[int] = 1203
    user: str
    credential: ScramCredentialRecord


@register
class ScramDeletion(Message):
    API_KEY: ClassVar[int] = 1204
    user: str
    mechanism: int


@register
class UserResult(Message):
    API_KEY: ClassVar[int] = 1205
    user: str
    error_code: int = 0
    error_message: str | None = None
    # DescribeUserScramCredentials: (mechanism, iterations) of each credential
    credentials: list[tuple[int, int]] = field(default_factory=list)


@register
class AlterUserScramCredentialsRequest(Message):
    API_KEY: ClassVar[int] = 51
    VERSION: ClassVar[int] = 1
    deletions: list[ScramDeletion] = field(default_factory=list)
    upsertions: list[ScramUpsertion] = field(default_factory=list)


@register
class AlterUserScramCredentialsResponse(Message):
    API_KEY: ClassVar[int] = 51
    VERSION: ClassVar[int] = 1
    IS_RESPONSE: ClassVar[bool] = True
    error_code: int = 0
    error_message: str | None = None
    results: list[UserResult] = field(default_factory=list)


@register
class DescribeUserScramCredentialsRequest(Message):
    API_KEY: ClassVar[int] = 50
    VERSION: ClassVar[int] = 1
    users: list[str] | None = None  # None or []: every user


@register
class DescribeUserScramCredentialsResponse(Message):
    API_KEY: ClassVar[int] = 50
    VERSION: ClassVar[int] = 1
    IS_RESPONSE: ClassVar[bool] = True
    error_code: int = 0
    error_message: str | None = None
    results: list[UserResult] = field(default_factory=list)


@register
class AclResult(Message):
    API_KEY: ClassVar[int] = 1206
    error_code: int = 0
    error_message: str | None = None
    # DeleteAcls: the ACLs the filter matched (and deleted)
    acls: list[AclRecord] = field(default_factory=list)


@register
class CreateAclsRequest(Message):
    API_KEY: ClassVar[int] = 30
    VERSION: ClassVar[int] = 1
    acls: list[AclRecord] = field(default_factory=list)


@register
class CreateAclsResponse(Message):
    """One result per ACL asked for, in order."""

    API_KEY: ClassVar[int] = 30
    VERSION: ClassVar[int] = 1
    IS_RESPONSE: ClassVar[bool] = True
    error_code: int = 0
    error_message: str | None = None
    results: list[AclResult] = field(default_factory=list)


@register
class DescribeAclsRequest(Message):
    API_KEY: ClassVar[int] = 29
    VERSION: ClassVar[int] = 1
    filter: AclFilterRecord = field(default_factory=AclFilterRecord)


@register
class DescribeAclsResponse(Message):
    API_KEY: ClassVar[int] = 29
    VERSION: ClassVar[int] = 1
    IS_RESPONSE: ClassVar[bool] = True
    error_code: int = 0
    error_message: str | None = None
    acls: list[AclRecord] = field(default_factory=list)


@register
class DeleteAclsRequest(Message):
    API_KEY: ClassVar[int] = 31
    VERSION: ClassVar[int] = 1
    filters: list[AclFilterRecord] = field(default_factory=list)


@register
class DeleteAclsResponse(Message):
    """One result per filter, in order, with the ACLs it deleted."""

    API_KEY: ClassVar[int] = 31
    VERSION: ClassVar[int] = 1
    IS_RESPONSE: ClassVar[bool] = True
    error_code: int = 0
    error_message: str | None = None
    results: list[AclResult] = field(default_factory=list)


@register
class UserCredentials(Message):
    API_KEY: ClassVar[int] = 1207
    user: str
    credentials: list[ScramCredentialRecord] = field(default_factory=list)


@register
class SecurityMetadataRequest(Message):
    """A listener's poll: the version it holds ((controller epoch, change count); the
    controller answers everything when its own differs, nothing otherwise)."""

    API_KEY: ClassVar[int] = 1208
    VERSION: ClassVar[int] = 1
    known_epoch: int = -1
    known_version: int = -1


@register
class SecurityMetadataResponse(Message):
    API_KEY: ClassVar[int] = 1208
    VERSION: ClassVar[int] = 1
    IS_RESPONSE: ClassVar[bool] = True
    error_code: int = 0
    error_message: str | None = None
    epoch: int = -1
    version: int = -1
    changed: bool = False  # False: the listener's copy is current, nothing else is filled
    users: list[UserCredentials] = field(default_factory=list)
    acls: list[AclRecord] = field(default_factory=list)


RESPONSE_FOR: dict[type[Message], type[Message]] = {
    AlterUserScramCredentialsRequest: AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest: DescribeUserScramCredentialsResponse,
    CreateAclsRequest: CreateAclsResponse,
    DescribeAclsRequest: DescribeAclsResponse,
    DeleteAclsRequest: DeleteAclsResponse,
    SecurityMetadataRequest: SecurityMetadataResponse,
}
"""The answer to each request of this module (``kcoord.protocol.services`` has them all)."""
