"""Schemas between Spark, Arrow and Delta, and the checks that keep writes and reads honest.

delta-rs's `create_write_transaction` does not check the schema it is given against the
table (measured: an int32 schema was accepted on an int64 table), so writes check here.
"""

from __future__ import annotations

import pyarrow as pa
from deltalake import DeltaTable
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

# Reader features this reader implements: none that change how files are read.
_UNSUPPORTED_READER_FEATURES = {"deletionVectors", "columnMapping"}


class DeltaSchemaError(ValueError):
    """Data whose schema does not fit the table."""


def table_arrow_schema(table: DeltaTable) -> pa.Schema:
    """The table's schema as a pyarrow schema (delta-rs returns an arro3 schema)."""
    return pa.schema(table.schema().to_arrow())


def to_spark(schema: pa.Schema) -> StructType:
    # Zone-less Arrow timestamps are Delta timestamp_ntz: keep them as TIMESTAMP_NTZ.
    return from_arrow_schema(schema, prefer_timestamp_ntz=True)


def to_arrow(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark uses for `schema` (timestamps as UTC microseconds)."""
    return to_arrow_schema(schema, timestamp_utc=True)


def check_readable(table: DeltaTable) -> None:
    """Refuse tables whose files cannot be read as plain Parquet (wrong rows otherwise)."""
    protocol = table.protocol()
    features = set(protocol.reader_features or [])
    blocked = sorted(features & _UNSUPPORTED_READER_FEATURES)
    mapping = table.metadata().configuration.get("delta.columnMapping.mode", "none")
    if blocked or mapping not in ("none", None):
        raise DeltaSchemaError(
            f"{table.table_uri}: reader features {blocked or ['columnMapping']} are not "
            "supported by lakehouse_delta (plain Parquet files only)"
        )


def creation_schema(incoming: pa.Schema) -> pa.Schema:
    """Schema of a new table: every column nullable, as Spark's file sources do, so a
    later INSERT of a NULL does not fail only because the first DataFrame had none."""
    return pa.schema([f.with_nullable(True) for f in incoming])


def match_columns(incoming: pa.Schema, table: pa.Schema) -> dict[str, str]:
    """Map each incoming column to the table column it fills (by name, case-insensitively
    as Spark resolves names); raise naming every missing, extra or mistyped column."""
    by_lower = {name.lower(): name for name in table.names}
    mapping: dict[str, str] = {}
    extra: list[str] = []
    for name in incoming.names:
        target = name if name in table.names else by_lower.get(name.lower())
        if target is None:
            extra.append(name)
        else:
            mapping[name] = target
    missing = [n for n in table.names if n not in mapping.values()]
    mistyped = []
    table_spark = {f.name: f.dataType for f in to_spark(table)}
    incoming_spark = {f.name: f.dataType for f in to_spark(incoming)}
    for name, target in mapping.items():
        got, want = incoming_spark[name], table_spark[target]
        if got.simpleString() != want.simpleString():
            mistyped.append(f"{name}: {got.simpleString()} (table has {want.simpleString()})")
    problems = []
    if missing:
        problems.append(f"missing columns {missing}")
    if extra:
        problems.append(f"columns not in the table {extra}")
    if mistyped:
        problems.append("type mismatch " + "; ".join(mistyped) + " (cast them first)")
    if problems:
        raise DeltaSchemaError("data does not fit the table schema: " + ", ".join(problems))
    return mapping
