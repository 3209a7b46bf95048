"""What a write goes to, decided once on the driver before any task runs: the table's
schema and partitioning (existing, or to be created from the Spark schema), and how the
incoming columns map onto it. Tasks and the commit both get this object (it is pickled)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import pyarrow as pa
from deltalake import DeltaTable
from pyspark.sql.types import StructType

from spark_streaming.delta_source.options import DeltaOptions
from spark_streaming.delta_source.partition_values import check_partition_type
from spark_streaming.delta_source.schema import (
    DeltaSchemaError,
    creation_schema,
    match_columns,
    table_arrow_schema,
    to_arrow,
)
from spark_streaming.delta_source.table import try_open

log = logging.getLogger(__name__)

# Writer features whose rules a plain file append would silently break.
_UNSUPPORTED_WRITER_FEATURES = {"generatedColumns", "identityColumns", "rowTracking",
                                "columnMapping", "checkConstraints", "invariants"}


@dataclass(frozen=True)
class WriteTarget:
    table_uri: str
    storage: dict[str, str]
    schema: pa.Schema
    partition_by: tuple[str, ...]
    column_map: dict[str, str]
    properties: dict[str, str] = field(default_factory=dict)
    overwrite: bool = False
    # The table did not exist when the write was planned: the commit creates it.
    create: bool = False
    # An overwrite that replaces the table's schema (option overwriteSchema).
    replace_schema: bool = False

    @property
    def data_schema(self) -> pa.Schema:
        """Columns stored in the Parquet files (partition columns live in folder names)."""
        return pa.schema([f for f in self.schema if f.name not in self.partition_by])


def _check_writable(table: DeltaTable) -> None:
    protocol = table.protocol()
    blocked = sorted(set(protocol.writer_features or []) & _UNSUPPORTED_WRITER_FEATURES)
    constraints = [k for k in table.metadata().configuration if k.startswith("delta.constraints.")]
    if blocked or constraints:
        raise DeltaSchemaError(
            f"{table.table_uri}: lakehouse_delta cannot honour {blocked + constraints} "
            "when appending files; write this table with delta-rs instead"
        )


def _new_table_partitioning(schema: pa.Schema, requested: tuple[str, ...]) -> tuple[str, ...]:
    by_lower = {n.lower(): n for n in schema.names}
    columns = []
    for name in requested:
        actual = name if name in schema.names else by_lower.get(name.lower())
        if actual is None:
            raise DeltaSchemaError(f"option partitionBy: no column {name!r} in {schema.names}")
        check_partition_type(actual, schema.field(actual).type)
        columns.append(actual)
    if len(columns) == len(schema.names):
        raise DeltaSchemaError("option partitionBy: at least one column must not be a "
                               "partition column")
    return tuple(columns)


def prepare_write(options: DeltaOptions, spark_schema: StructType, overwrite: bool) -> WriteTarget:
    """Resolve the target of a write of `spark_schema` rows (driver side)."""
    storage = options.storage_options()
    incoming = to_arrow(spark_schema)
    table = try_open(options.table_uri, storage)
    if table is None:
        schema = creation_schema(incoming)
        return WriteTarget(
            table_uri=options.table_uri, storage=storage, schema=schema,
            partition_by=_new_table_partitioning(schema, options.partition_by),
            column_map={n: n for n in schema.names}, properties=dict(options.properties),
            overwrite=overwrite, create=True,
        )
    _check_writable(table)
    if overwrite and options.overwrite_schema:
        schema = creation_schema(incoming)
        return WriteTarget(
            table_uri=options.table_uri, storage=storage, schema=schema,
            partition_by=_new_table_partitioning(schema, options.partition_by),
            column_map={n: n for n in schema.names}, overwrite=True, replace_schema=True,
        )
    schema = table_arrow_schema(table)
    partition_by = tuple(table.metadata().partition_columns)
    if options.partition_by and [c.lower() for c in options.partition_by] != [
            c.lower() for c in partition_by]:
        raise DeltaSchemaError(f"option partitionBy {list(options.partition_by)} differs from "
                               f"the table's partition columns {list(partition_by)}")
    current = table.metadata().configuration
    differing = sorted(k for k, v in options.properties.items() if current.get(k) != v)
    if differing:
        log.warning("lakehouse_delta: table properties %s ignored: %s already exists "
                    "(they apply when a write creates the table; `lakehouse tables apply` "
                    "converges them)", differing, options.table_uri)
    return WriteTarget(
        table_uri=options.table_uri, storage=storage, schema=schema, partition_by=partition_by,
        column_map=match_columns(incoming, schema), overwrite=overwrite,
    )
