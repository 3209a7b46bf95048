"""Rows shaped like the Delta table they are written to."""

from __future__ import annotations

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
