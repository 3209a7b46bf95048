"""Message field types: how a field's raw JSON text becomes a typed Spark column.

Fields are first read as text (Spark's JSON reader gives any value's JSON text for a
string field), then converted with try_* functions, so a value that does not fit its
type yields null and is reported by the parser as a schema error rather than failing the
batch.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column
from pyspark.sql import functions as F


def _try_cast(spark_type: str) -> Callable[[Column], Column]:
    return lambda raw: raw.try_cast(spark_type)


def _epoch_seconds(raw: Column) -> Column:
    """Epoch seconds (an integer, as the message contract says) -> timestamp."""
    return F.timestamp_seconds(raw.try_cast("long"))


def _timestamp(raw: Column) -> Column:
    """ISO 8601 text; without a zone it is the session's (UTC)."""
    return F.try_to_timestamp(raw)


def _debezium_timestamp(raw: Column) -> Column:
    """Debezium ZonedTimestamp text (timestamptz) or MicroTimestamp (epoch microseconds)."""
    return (F.when(raw.rlike(r"^-?[0-9]+$"), F.timestamp_micros(raw.try_cast("long")))
            .otherwise(F.try_to_timestamp(raw)))


CONVERTERS: dict[str, Callable[[Column], Column]] = {
    "string": lambda raw: raw,
    "int": _try_cast("int"),
    "long": _try_cast("long"),
    "double": _try_cast("double"),
    "boolean": _try_cast("boolean"),
    "epoch_seconds": _epoch_seconds,
    "timestamp": _timestamp,
    "debezium_timestamp": _debezium_timestamp,
}


def convert(raw: Column, field_type: str) -> Column:
    return CONVERTERS[field_type](raw)
