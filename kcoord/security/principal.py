"""The principal of a TLS client certificate, as Kafka's default principal builder makes it.

The subject's distinguished name in RFC 2253 form (``CN=alice,OU=eng,O=Example,C=US``:
the most specific part first, no spaces after commas), mapped by Kafka's
``ssl.principal.mapping.rules``: a comma-separated list of ``RULE:pattern/replacement/``
(optionally ``/L`` or ``/U`` to lower- or upper-case the result) and ``DEFAULT`` (the DN
as it is), tried in order; the first rule whose pattern matches the whole DN gives the
name, and a DN no rule matches is refused. The principal is ``User:`` + that name.

Patterns are Python regular expressions (Kafka's are Java's; the usual ones -- groups,
classes, ``.*?``, anchors -- mean the same); the replacement uses Java's syntax: ``$1`` is
a group, ``\\`` escapes the next character, and ``$n`` beyond the pattern's groups is taken
literally, as Kafka does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_RULES = "DEFAULT"
_RULE = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)")
_PARSER = re.compile(_RULE)


class NoMatchingRule(ValueError):
    """No mapping rule applies to a certificate's distinguished name."""


@dataclass(frozen=True)
class _Rule:
    default: bool
    pattern: re.Pattern | None = None
    replacement: tuple = ()  # literal strings and group numbers, in order
    lower: bool = False
    upper: bool = False

    def apply(self, dn: str) -> str | None:
        if self.default:
            return dn
        assert self.pattern is not None
        if self.pattern.fullmatch(dn) is None:
            return None
        result = self.pattern.sub(lambda m: "".join(p if isinstance(p, str) else (m.group(p) or "") for p in self.replacement), dn)
        return result.lower() if self.lower else result.upper() if self.upper else result


def _java_replacement(text: str, groups: int) -> tuple:
    """Java's Matcher replacement syntax as (literal | group number) parts: ``\\x`` is a
    literal x; ``$`` then digits a group -- the longest number not above the pattern's
    groups, a number above them literal text (Kafka escapes those before replacing)."""
    parts: list = []
    literal: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            literal.append(text[i + 1])
            i += 2
            continue
        if c == "$":
            j = i + 1
            while j < len(text) and text[j].isdigit():
                j += 1
            digits = text[i + 1 : j]
            if not digits:
                raise ValueError(f"illegal group reference in replacement {text!r}: '$' must be followed by a group number (\\$ for a literal '$')")
            if digits[0] == "0" and len(digits) > 0:
                # Kafka leaves $0 (the whole match) alone
                n, used = 0, 1
            else:
                n, used = int(digits), len(digits)
                while n > groups and n >= 10:
                    n //= 10
                    used -= 1
            if n > groups:
                literal.append(text[i : i + 1 + used])
            else:
                if literal:
                    parts.append("".join(literal))
                    literal = []
                parts.append(n)
            i += 1 + used
            continue
        literal.append(c)
        i += 1
    if literal:
        parts.append("".join(literal))
    return tuple(parts)


def _split(rules: str) -> list[str]:
    return [m.group(1) for m in _SPLITTER.finditer(rules.strip())]


class PrincipalMapper:
    """``ssl.principal.mapping.rules``: ValueError for rules Kafka would refuse."""

    def __init__(self, rules: str | None = None) -> None:
        self.text = DEFAULT_RULES if rules is None else str(rules)
        self.rules: list[_Rule] = []
        for rule in _split(self.text):
            m = _PARSER.match(rule)
            if m is None or m.end() != len(rule):
                raise ValueError(f"invalid ssl.principal.mapping.rules rule {rule!r}")
            if m.group(1) is not None:
                self.rules.append(_Rule(True))
            elif m.group(2) is not None:
                try:
                    pattern = re.compile(m.group(2))
                except re.error as exc:
                    raise ValueError(f"invalid pattern in ssl.principal.mapping.rules rule {rule!r}: {exc}") from None
                replacement = _java_replacement(m.group(4), pattern.groups)
                self.rules.append(_Rule(False, pattern, replacement, m.group(6) == "L", m.group(6) == "U"))
            # an empty rule is ignored, as Kafka does

    def name(self, dn: str) -> str:
        for rule in self.rules:
            name = rule.apply(dn)
            if name is not None:
                return name
        raise NoMatchingRule(f"no ssl.principal.mapping.rules rule applies to {dn!r} (rules: {self.text})")


def subject_dn(der_certificate: bytes) -> str:
    """The subject of a DER certificate as an RFC 2253 string (Java's
    ``X500Principal.getName()``), through the ``cryptography`` library."""
    from cryptography import x509

    return x509.load_der_x509_certificate(der_certificate).subject.rfc4514_string()
