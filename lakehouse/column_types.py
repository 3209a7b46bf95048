"""The column type language of table definitions, to and from Delta schema types.

Definitions spell types the way Spark SQL prints them: `string`, `long`, `int`, `short`,
`byte`, `double`, `float`, `boolean`, `timestamp` (UTC instant), `timestamp_ntz`, `date`,
`binary`, `decimal(p,s)`, `array<T>`, `map<K,V>` and `struct<name:T,...>`. Every type has
one canonical spelling, so a definition and a live table compare as strings. Nested
elements, values and fields are always nullable (only top-level columns carry NOT NULL).
"""

from __future__ import annotations

import re
from typing import Any

# canonical name -> Delta primitive type name
_PRIMITIVES = {
    "string": "string", "long": "long", "int": "integer", "short": "short", "byte": "byte",
    "double": "double", "float": "float", "boolean": "boolean", "timestamp": "timestamp",
    "timestamp_ntz": "timestamp_ntz", "date": "date", "binary": "binary",
}
_ALIASES = {"integer": "int", "bigint": "long", "smallint": "short", "tinyint": "byte",
            "bool": "boolean"}
_DELTA_TO_CANONICAL = {delta: name for name, delta in _PRIMITIVES.items()}
_TOKEN = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*|\d+|[<>(),:])")
_DECIMAL = re.compile(r"decimal\((\d+),(\d+)\)")

DeltaType = str | dict[str, Any]


class ColumnTypeError(ValueError):
    """A type that the definition language does not know."""


def known_types() -> str:
    return ", ".join([*_PRIMITIVES, "decimal(p,s)", "array<T>", "map<K,V>", "struct<a:T,...>"])


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[str] = []
        position = 0
        while position < len(text.rstrip()):
            match = _TOKEN.match(text, position)
            if not match:
                raise ColumnTypeError(f"unexpected {text[position:].strip()!r} in type {text!r}")
            self.tokens.append(match.group(1))
            position = match.end()
        self.at = 0

    def _next(self) -> str:
        if self.at >= len(self.tokens):
            raise ColumnTypeError(f"type {self.text!r} ends too early")
        token = self.tokens[self.at]
        self.at += 1
        return token

    def _expect(self, token: str) -> None:
        got = self._next()
        if got != token:
            raise ColumnTypeError(f"expected {token!r} but found {got!r} in type {self.text!r}")

    def parse(self) -> DeltaType:
        parsed = self._type()
        if self.at != len(self.tokens):
            raise ColumnTypeError(f"unexpected {self.tokens[self.at]!r} in type {self.text!r}")
        return parsed

    def _type(self) -> DeltaType:
        word = self._next().lower()
        word = _ALIASES.get(word, word)
        if word in _PRIMITIVES:
            return _PRIMITIVES[word]
        if word == "decimal":
            self._expect("(")
            precision = int(self._next())
            self._expect(",")
            scale = int(self._next())
            self._expect(")")
            if not 1 <= precision <= 38 or not 0 <= scale <= precision:
                raise ColumnTypeError(f"decimal({precision},{scale}): precision must be "
                                      "1..38 and scale 0..precision")
            return f"decimal({precision},{scale})"
        if word == "array":
            self._expect("<")
            element = self._type()
            self._expect(">")
            return {"type": "array", "elementType": element, "containsNull": True}
        if word == "map":
            self._expect("<")
            key = self._type()
            self._expect(",")
            value = self._type()
            self._expect(">")
            return {"type": "map", "keyType": key, "valueType": value,
                    "valueContainsNull": True}
        if word == "struct":
            return {"type": "struct", "fields": self._struct_fields()}
        where = "" if self.text.strip().lower() == word else f" in {self.text!r}"
        raise ColumnTypeError(f"unknown type {word!r}{where} (known: {known_types()})")

    def _struct_fields(self) -> list[dict[str, Any]]:
        self._expect("<")
        fields: list[dict[str, Any]] = []
        while True:
            name = self._next()
            self._expect(":")
            fields.append({"name": name, "type": self._type(), "nullable": True, "metadata": {}})
            separator = self._next()
            if separator == ">":
                return fields
            if separator != ",":
                raise ColumnTypeError(f"expected ',' or '>' but found {separator!r} in type "
                                      f"{self.text!r}")


def to_delta(text: str) -> DeltaType:
    """The Delta schema type (JSON form) of a type written in the definition language."""
    return _Parser(text).parse()


def render(delta_type: DeltaType) -> str:
    """The canonical definition-language spelling of a Delta schema type (JSON form)."""
    if isinstance(delta_type, str):
        if delta_type in _DELTA_TO_CANONICAL:
            return _DELTA_TO_CANONICAL[delta_type]
        decimal = _DECIMAL.fullmatch(delta_type.replace(" ", ""))
        if decimal:
            return f"decimal({decimal.group(1)},{decimal.group(2)})"
        return delta_type  # a type this language cannot write: shown as Delta names it
    kind = delta_type.get("type")
    if kind == "array":
        return f"array<{render(delta_type['elementType'])}>"
    if kind == "map":
        return f"map<{render(delta_type['keyType'])},{render(delta_type['valueType'])}>"
    if kind == "struct":
        inner = ",".join(f"{f['name']}:{render(f['type'])}" for f in delta_type["fields"])
        return f"struct<{inner}>"
    return str(delta_type)


def canonical(text: str) -> str:
    """`text` in its one canonical spelling (raises ColumnTypeError if it is not a type)."""
    return render(to_delta(text))


def is_primitive(text: str) -> bool:
    return isinstance(to_delta(text), str)
