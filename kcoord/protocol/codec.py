"""msgpack encoding of protocol messages.

Every request and response is a dataclass deriving from :class:`Message`. On the wire it is
a msgpack map of its fields plus two reserved keys: ``"_k"`` (the API key) and ``"_v"`` (the
version the sender wrote). Named fields make the format forward compatible: a reader
ignores fields it does not know, and a missing field falls back to its default or, when it
is required, fails with INVALID_REQUEST. Bytes that are not msgpack at all fail with
CORRUPT_MESSAGE. Decoding never raises anything but :class:`DecodeError`.

Record batches travel inside messages as msgpack ``bin`` values: one memcpy, never parsed.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Callable, ClassVar, TypeVar, Union

import msgpack

from .errors import DecodeError, ErrorCode

M = TypeVar("M", bound="Message")

_MISSING = dataclasses.MISSING
_REGISTRY: dict[tuple[int, bool], type["Message"]] = {}


class Message:
    """Base of every protocol message. Subclasses are dataclasses with class attributes
    ``API_KEY`` (shared by a request and its response), ``VERSION`` (what we write) and
    ``MIN_VERSION`` (the oldest we can read)."""

    API_KEY: ClassVar[int] = -1
    VERSION: ClassVar[int] = 0
    MIN_VERSION: ClassVar[int] = 0
    IS_RESPONSE: ClassVar[bool] = False
    _spec: ClassVar[tuple | None] = None

    # -- encoding -----------------------------------------------------------------
    def to_obj(self) -> dict[str, Any]:
        spec = _spec_of(type(self))
        obj: dict[str, Any] = {"_k": self.API_KEY, "_v": self.VERSION}
        for name, _conv, _default, to_wire in spec:
            value = getattr(self, name)
            obj[name] = value if to_wire is None else to_wire(value)
        return obj

    def encode(self) -> bytes:
        return msgpack.packb(self.to_obj(), use_bin_type=True)

    # -- decoding -----------------------------------------------------------------
    @classmethod
    def from_obj(cls: type[M], obj: Any) -> M:
        if not isinstance(obj, dict):
            raise DecodeError(
                ErrorCode.INVALID_REQUEST, f"{cls.__name__}: expected a map, got {type(obj).__name__}"
            )
        key = obj.get("_k", cls.API_KEY)
        if key != cls.API_KEY:
            raise DecodeError(
                ErrorCode.INVALID_REQUEST,
                f"{cls.__name__}: message has API key {key!r}, expected {cls.API_KEY}",
            )
        version = obj.get("_v", cls.VERSION)
        if not isinstance(version, int) or version < cls.MIN_VERSION:
            raise DecodeError(
                ErrorCode.UNSUPPORTED_VERSION,
                f"{cls.__name__}: version {version!r} is older than the oldest supported ({cls.MIN_VERSION})",
            )
        kwargs: dict[str, Any] = {}
        for name, conv, default, _to_wire in _spec_of(cls):
            if name in obj:
                try:
                    kwargs[name] = conv(obj[name])
                except DecodeError:
                    raise
                except _ConvError as exc:
                    raise DecodeError(ErrorCode.INVALID_REQUEST, f"{cls.__name__}.{name}: {exc}") from None
            elif default is _MISSING:
                raise DecodeError(ErrorCode.INVALID_REQUEST, f"{cls.__name__}: missing required field '{name}'")
        return cls(**kwargs)

    @classmethod
    def decode(cls: type[M], data: bytes | bytearray | memoryview) -> M:
        return cls.from_obj(unpack(data, cls.__name__))


def unpack(data: Any, what: str = "message") -> Any:
    """msgpack-decode ``data``; anything that is not msgpack raises CORRUPT_MESSAGE."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise DecodeError(ErrorCode.CORRUPT_MESSAGE, f"{what}: expected bytes, got {type(data).__name__}")
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception as exc:  # ExtraData, FormatError, StackError, UnicodeDecodeError, ValueError...
        raise DecodeError(ErrorCode.CORRUPT_MESSAGE, f"{what}: not a valid msgpack message ({exc.__class__.__name__}: {exc})") from None


def register(cls: type[M]) -> type[M]:
    """Class decorator: make ``cls`` a dataclass message and record it by (API key, kind)."""
    if not dataclasses.is_dataclass(cls):
        cls = dataclasses.dataclass(cls)
    _REGISTRY[(cls.API_KEY, cls.IS_RESPONSE)] = cls
    return cls


def message_class(api_key: int, response: bool) -> type[Message]:
    try:
        return _REGISTRY[(api_key, response)]
    except KeyError:
        raise DecodeError(ErrorCode.INVALID_REQUEST, f"unknown API key {api_key}") from None


def decode_any(data: bytes, response: bool = False) -> Message:
    """Decode a message whose type is only known from its ``_k`` key."""
    obj = unpack(data)
    if not isinstance(obj, dict) or "_k" not in obj:
        raise DecodeError(ErrorCode.INVALID_REQUEST, "message has no API key")
    return message_class(obj["_k"], response).from_obj(obj)


def api_versions() -> dict[str, tuple[int, int]]:
    """{message class name: (oldest readable version, version written)}."""
    return {c.__name__: (c.MIN_VERSION, c.VERSION) for c in _REGISTRY.values()}


# -- field conversion driven by type hints ----------------------------------------------


class _ConvError(Exception):
    pass


def _spec_of(cls: type[Message]) -> tuple:
    spec = cls.__dict__.get("_spec")
    if spec is None:
        hints = typing.get_type_hints(cls)
        items = []
        for f in dataclasses.fields(cls):
            tp = hints[f.name]
            default = f.default
            if default is _MISSING and f.default_factory is not _MISSING:
                default = f.default_factory
            items.append((f.name, _converter(tp), default, _to_wire(tp)))
        spec = tuple(items)
        cls._spec = spec  # cached per class (set on the class itself, not the base)
    return spec


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def _is_message(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, Message)


def _converter(tp: Any) -> Callable[[Any], Any]:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return lambda v: v
    if origin in (Union, types.UnionType):
        non_none = [a for a in args if a is not type(None)]
        inner = _converter(non_none[0]) if len(non_none) == 1 else (lambda v: v)

        def conv_opt(v: Any) -> Any:
            return None if v is None else inner(v)

        return conv_opt
    if tp is float:

        def conv_float(v: Any) -> float:
            if type(v) in (int, float):
                return float(v)
            raise _ConvError(f"expected float, got {type(v).__name__}")

        return conv_float
    if tp in (int, bool, str, bytes):
        return _exactly(tp)
    if _is_message(tp):
        return lambda v: tp.from_obj(v)
    if origin is list:
        item = _converter(args[0]) if args else (lambda v: v)

        def conv_list(v: Any) -> list:
            if not isinstance(v, (list, tuple)):
                raise _ConvError(f"expected a list, got {type(v).__name__}")
            return [item(x) for x in v]

        return conv_list
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            item = _converter(args[0])

            def conv_vartuple(v: Any) -> tuple:
                if not isinstance(v, (list, tuple)):
                    raise _ConvError(f"expected a list, got {type(v).__name__}")
                return tuple(item(x) for x in v)

            return conv_vartuple
        items = [_converter(a) for a in args]

        def conv_tuple(v: Any) -> tuple:
            if not isinstance(v, (list, tuple)) or len(v) != len(items):
                raise _ConvError(f"expected a list of {len(items)} items")
            return tuple(c(x) for c, x in zip(items, v))

        return conv_tuple
    if origin is dict:
        kconv = _converter(args[0]) if args else (lambda v: v)
        vconv = _converter(args[1]) if args else (lambda v: v)

        def conv_dict(v: Any) -> dict:
            if not isinstance(v, dict):
                raise _ConvError(f"expected a map, got {type(v).__name__}")
            return {kconv(k): vconv(x) for k, x in v.items()}

        return conv_dict
    raise TypeError(f"unsupported field type in protocol message: {_type_name(tp)}")


def _exactly(tp: type) -> Callable[[Any], Any]:
    """A converter that takes values of type ``tp`` exactly (a bool is no int here)."""

    def conv_exact(v: Any) -> Any:
        if type(v) is tp:
            return v
        raise _ConvError(f"expected {tp.__name__}, got {type(v).__name__}")

    return conv_exact


def _to_wire(tp: Any) -> Callable[[Any], Any] | None:
    """How to turn a field value into msgpack-able data; None means 'as is'."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if _is_message(tp):
        return lambda v: v.to_obj()
    if origin in (Union, types.UnionType):
        non_none = [a for a in args if a is not type(None)]
        inner = _to_wire(non_none[0]) if len(non_none) == 1 else None
        if inner is None:
            return None
        return lambda v: None if v is None else inner(v)
    if origin in (list, tuple):
        inner = _to_wire(args[0]) if args else None
        if inner is None:
            return None
        return lambda v: [inner(x) for x in v]
    if origin is dict:
        inner = _to_wire(args[1]) if len(args) > 1 else None
        if inner is None:
            return None
        return lambda v: {k: inner(x) for k, x in v.items()}
    return None
