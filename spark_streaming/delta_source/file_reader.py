"""Executor side of every read: one data file into Arrow record batches of the read schema,
partition values filled in, pushed filters applied (batch and streaming reads share it)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
from pyspark.sql.datasource import Filter

from spark_streaming.delta_source.filters import column_of, conjunction
from spark_streaming.delta_source.scan import ScanFile

BATCH_ROWS = 65536


def _constant(value: Any, dtype: pa.DataType, rows: int) -> pa.Array:
    if value is None:
        return pa.nulls(rows, dtype)
    return pa.repeat(pa.scalar(value, type=dtype), rows)


def _assemble(batch: pa.RecordBatch, schema: pa.Schema,
              partition_values: dict[str, Any]) -> pa.RecordBatch:
    arrays = []
    for field in schema:
        if field.name in partition_values:
            arrays.append(_constant(partition_values[field.name], field.type, batch.num_rows))
        else:
            arrays.append(batch.column(field.name))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _partition_matches(schema: pa.Schema, values: dict[str, Any],
                       filters: list[Filter]) -> bool:
    fields = [schema.field(name) for name in values]
    row = pa.RecordBatch.from_arrays([_constant(values[f.name], f.type, 1) for f in fields],
                                     schema=pa.schema(fields))
    return row.filter(conjunction(filters, row.schema)).num_rows == 1


def read_file(filesystem: Any, scan_file: ScanFile, schema: pa.Schema,
              filters: Sequence[Filter] = ()) -> Iterator[pa.RecordBatch]:
    """The rows of `scan_file` that match `filters`, as batches of `schema`."""
    partition_values = scan_file.partition_values
    on_partition = [f for f in filters if column_of(f) in partition_values]
    on_data = [f for f in filters if column_of(f) not in partition_values]
    if on_partition and not _partition_matches(schema, partition_values, on_partition):
        return
    data_schema = pa.schema([f for f in schema if f.name not in partition_values])
    # An explicit schema fills columns a file lacks (added later) with nulls and casts
    # physical types (e.g. nanosecond timestamps) to the table's.
    dataset = ds.dataset(scan_file.path, schema=data_schema, format="parquet",
                         filesystem=filesystem)
    expression = conjunction(on_data, data_schema) if on_data else None
    for batch in dataset.to_batches(filter=expression, batch_size=BATCH_ROWS,
                                    use_threads=False):
        if batch.num_rows:
            yield _assemble(batch, schema, partition_values)
