"""Rows shaped like the Delta table they are written to."""

from __future__ import annotations

import json

import deltalake
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType


def conformed(data: DataFrame, schema: StructType, keep_extra: bool = False) -> DataFrame:
    """`data` with the table's columns in the table's order and types; with `keep_extra`,
    followed by the columns the table does not have (MERGE conditions may use them)."""
    names = set(schema.fieldNames())
    extra = [F.col(f"`{c}`") for c in data.columns if c not in names] if keep_extra else []
    return data.select(*[F.col(f"`{f.name}`").cast(f.dataType).alias(f.name) for f in schema],
                       *extra)


def delta_schema(uri: str, storage: dict[str, str]) -> StructType:
    """A Delta table's schema as Spark's type, read from its log with delta-rs (a few
    milliseconds): delta-spark's `DeltaTable.forPath(...).toDF()` first loads the table's
    snapshot in Spark jobs, which a commit from the driver never needs."""
    table = deltalake.DeltaTable(uri, storage_options=storage)
    try:
        return StructType.fromJson(json.loads(table.schema().to_json()))
    finally:
        del table  # see docs/architecture.md: delta-rs objects are dropped explicitly
