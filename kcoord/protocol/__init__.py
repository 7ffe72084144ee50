"""Wire protocol: msgpack messages (one dataclass per API), Kafka error codes, versions."""

from .codec import Message, api_versions, decode_any, message_class, register, unpack
from .errors import DecodeError, ErrorCode, KafkaError, error_name, raise_for_error
from . import controller, group, replication, txn  # noqa: F401  (registers the message classes)

__all__ = [
    "DecodeError",
    "ErrorCode",
    "KafkaError",
    "Message",
    "api_versions",
    "decode_any",
    "error_name",
    "message_class",
    "raise_for_error",
    "register",
    "unpack",
]
