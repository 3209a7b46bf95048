"""Message field types: how a field's value becomes a typed Spark column, strictly.

The message is parsed once as a VARIANT; each declared field's JSON type is checked before
anything is converted, so nothing is coerced silently: `"name": 123` is not the string
"123" and `"num_bikes_available": "7"` is not 7. Both are problems naming the field and
the two types (`num_bikes_available: expected integer, got string`). JSON null stays null
(whether the column may be null is the table's and the suite's business).

What each field type accepts (JSON has one number type; "integer" means a number without
fraction, so `7.0` is the integer 7 - parse_json keeps no trailing zeros - while `7.5` or
`1e3` are not integers):

    string: string            int, long, epoch_seconds: integer
    double: integer, number   boolean: boolean
    timestamp: string (ISO 8601)   debezium_timestamp: string or integer (epoch micros)

CSV lines carry text only: every field is a JSON string and is converted from its text
(`text_only`). A value of the right JSON type that still does not fit (an int out of range,
a timestamp text that is no timestamp) is a problem too; every problem starts with the
field's name. String values longer than the spec's `max_field_bytes` (UTF-8 bytes) are
problems as well.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column
from pyspark.sql import functions as F

# The JSON types each field type accepts.
ACCEPTS: dict[str, tuple[str, ...]] = {
    "string": ("string",),
    "int": ("integer",),
    "long": ("integer",),
    "double": ("integer", "number"),
    "boolean": ("boolean",),
    "epoch_seconds": ("integer",),
    "timestamp": ("string",),
    "debezium_timestamp": ("string", "integer"),
}
_SHOWN_CHARACTERS = 80  # of a value quoted in a reason


# Epoch values a timestamp can hold (years 1-9999): beyond, Spark's conversion overflows
# and fails the batch; a value outside is a problem of its record instead.
_EPOCH_SECONDS = (-62_135_596_800, 253_402_300_799)


def _bounded(value: Column, unit: int) -> Column:
    low, high = _EPOCH_SECONDS
    return F.when(value.between(low * unit, high * unit), value)


def _seconds(value: Column) -> Column:
    return F.timestamp_seconds(_bounded(value, 1))


def _micros(value: Column) -> Column:
    return F.timestamp_micros(_bounded(value, 1_000_000))


def _epoch_seconds(raw: Column) -> Column:
    """Epoch seconds (an integer, as the message contract says) -> timestamp."""
    return _seconds(raw.try_cast("long"))


def _debezium_timestamp(raw: Column) -> Column:
    """Debezium ZonedTimestamp text (timestamptz) or MicroTimestamp (epoch microseconds)."""
    return (F.when(raw.rlike(r"^-?[0-9]+$"), _micros(raw.try_cast("long")))
            .otherwise(F.try_to_timestamp(raw)))


# Text -> typed value (CSV columns; timestamps and Debezium times given as strings).
TEXT_CONVERTERS: dict[str, Callable[[Column], Column]] = {
    "string": lambda raw: raw,
    "int": lambda raw: raw.try_cast("int"),
    "long": lambda raw: raw.try_cast("long"),
    "double": lambda raw: raw.try_cast("double"),
    "boolean": lambda raw: raw.try_cast("boolean"),
    "epoch_seconds": _epoch_seconds,
    "timestamp": F.try_to_timestamp,
    "debezium_timestamp": _debezium_timestamp,
}


def _get(value: Column, spark_type: str) -> Column:
    return F.try_variant_get(value, "$", spark_type)


def json_type(value: Column, schema: Column) -> Column:
    """The JSON type of a VARIANT value (`schema`: its `schema_of_variant`): string,
    integer, number, boolean, null, object or array; SQL NULL when the field is absent."""
    return (F.when(value.isNull(), F.lit(None))
            .when(schema == "VOID", F.lit("null"))
            .when(schema == "STRING", F.lit("string"))
            .when(schema == "BOOLEAN", F.lit("boolean"))
            .when(schema.isin("BIGINT", "INT", "SMALLINT", "TINYINT")
                  | schema.rlike(r"^DECIMAL\(\d+,0\)$"), F.lit("integer"))
            .when(schema.rlike("^(DECIMAL|DOUBLE|FLOAT)"), F.lit("number"))
            .when(schema.startswith("OBJECT"), F.lit("object"))
            .when(schema.startswith("ARRAY"), F.lit("array"))
            .otherwise(F.lower(schema)))


def _from_variant(value: Column, got: Column, field_type: str) -> Column:
    """A value already known to be of an accepted JSON type -> its typed column."""
    if field_type in ("int", "long", "double", "boolean", "string"):
        return _get(value, field_type)
    if field_type == "epoch_seconds":
        return _seconds(_get(value, "long"))
    if field_type == "timestamp":
        return F.try_to_timestamp(_get(value, "string"))
    return F.when(got == "integer", _micros(_get(value, "long"))).otherwise(
        _debezium_timestamp(_get(value, "string")))


def typed_field(value: Column, got: Column, name: str, field_type: str, max_bytes: int,
                text_only: bool = False) -> tuple[Column, Column]:
    """(typed column, problem or null) for the VARIANT `value` of field `name`, whose JSON
    type is `got` (`json_type`). Pass both as column references: each appears several
    times below, and every copy of an expression is analysed and evaluated again."""
    text = _get(value, "string")  # the string, for values that are JSON strings
    if text_only:
        typed = TEXT_CONVERTERS[field_type](F.when(got == "string", text))
    else:
        typed = _from_variant(value, got, field_type)
    accepted = ACCEPTS["string"] if text_only else ACCEPTS[field_type]
    shown = F.substring(F.to_json(value), 1, _SHOWN_CHARACTERS)
    size = F.octet_length(text)
    problem = (
        F.when(got.isNull() | (got == "null"), F.lit(None))
        .when(~got.isin(*accepted),
              F.concat(F.lit(f"{name}: expected {' or '.join(accepted)}, got "), got))
        .when((got == "string") & (size > max_bytes),
              F.concat(F.lit(f"{name}: "), size.cast("string"),
                       F.lit(f" bytes, more than the table's maximum of {max_bytes}")))
        .when(typed.isNull(), F.concat(F.lit(f"{name}: "), shown,
                                       F.lit(f" does not fit {field_type}"))))
    return typed, problem
