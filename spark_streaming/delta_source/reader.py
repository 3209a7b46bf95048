"""Batch reads: the driver plans file groups from the Delta log (delta-rs), executors read
the Parquet files with pyarrow and yield Arrow record batches.

Spark calls `pushFilters` then `partitions` in one planner process and ships this object
(pickled) to the executors for `read`; everything `read` needs travels in the partitions.
Spark 4.1.4 may hand the same plan to a later query (see scan_registry): `read` detects that
and re-plans the snapshot without the stale filters.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition
from pyspark.sql.types import StructType

from spark_streaming.delta_source.filesystem import arrow_filesystem
from spark_streaming.delta_source.filters import column_of, conjunction, split_supported
from spark_streaming.delta_source.options import DeltaOptions
from spark_streaming.delta_source.scan import (
    FileGroup,
    ScanFile,
    ScanPlan,
    group_files,
    plan_scan,
    share_of,
)
from spark_streaming.delta_source.scan_registry import ScanRegistry, current_execution
from spark_streaming.delta_source.schema import check_readable, to_arrow
from spark_streaming.delta_source.table import open_snapshot

log = logging.getLogger(__name__)

BATCH_ROWS = 65536


def _constant(value: Any, dtype: pa.DataType, rows: int) -> pa.Array:
    if value is None:
        return pa.nulls(rows, dtype)
    return pa.repeat(pa.scalar(value, type=dtype), rows)


class DeltaReader(DataSourceReader):
    def __init__(self, options: DeltaOptions, schema: StructType) -> None:
        self._options = options
        self._storage = options.storage_options()
        self._schema = to_arrow(schema)
        self._filters: list[Filter] = []

    def pushFilters(self, filters: list[Filter]) -> list[Filter]:
        """Keep the filters this reader applies exactly (file pruning + row filtering);
        hand the rest back to Spark."""
        accepted, rejected = split_supported(filters, self._schema)
        self._filters = accepted
        return rejected

    def plan(self, filters: Sequence[Filter] | None = None,
             version: int | None = None) -> ScanPlan:
        """The files this read will touch, after pruning by the pushed filters."""
        options = self._options
        if version is None:
            table = open_snapshot(options.table_uri, self._storage, options.version_as_of,
                                  options.timestamp_as_of)
        else:
            table = open_snapshot(options.table_uri, self._storage, version)
        check_readable(table)
        _, root = arrow_filesystem(options.table_uri, self._storage)
        return plan_scan(table, options.table_uri, root,
                         self._filters if filters is None else filters)

    def partitions(self) -> Sequence[InputPartition]:
        plan = self.plan()
        return group_files(plan.files, self._options.files_per_partition,
                           self._options.max_partition_bytes, plan_id=uuid.uuid4().hex)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, FileGroup)
        filesystem, _ = arrow_filesystem(self._options.table_uri, self._storage)
        files, filters = partition.files, self._filters
        execution = current_execution()
        registry = ScanRegistry(self._options.scan_registry_dir)
        if execution is not None and partition.plan_id and not registry.owns(
                partition.plan_id, execution):
            # Spark reused another query's plan for a query that pushed no filter.
            version = registry.agreed_version(partition.plan_id, execution,
                                              lambda: self.plan(filters=()).version)
            files = tuple(share_of(self.plan(filters=(), version=version).files,
                                   partition.index, partition.group_count))
            filters = []
            log.warning("lakehouse_delta: Spark reused scan plan %s for execution %s: "
                        "re-planned %s v%d without its pushed filters", partition.plan_id,
                        execution, self._options.table_uri, version)
        for scan_file in files:
            yield from self._read_file(filesystem, scan_file, filters)

    def _read_file(self, filesystem: Any, scan_file: ScanFile,
                   filters: Sequence[Filter]) -> Iterator[pa.RecordBatch]:
        partition_values = scan_file.partition_values
        on_partition = [f for f in filters if column_of(f) in partition_values]
        on_data = [f for f in filters if column_of(f) not in partition_values]
        if on_partition and not self._partition_matches(partition_values, on_partition):
            return
        data_schema = pa.schema([f for f in self._schema if f.name not in partition_values])
        # An explicit schema fills columns a file lacks (added later) with nulls and casts
        # physical types (e.g. nanosecond timestamps) to the table's.
        dataset = ds.dataset(scan_file.path, schema=data_schema, format="parquet",
                             filesystem=filesystem)
        expression = conjunction(on_data, data_schema) if on_data else None
        for batch in dataset.to_batches(filter=expression, batch_size=BATCH_ROWS,
                                        use_threads=False):
            if batch.num_rows:
                yield self._assemble(batch, partition_values)

    def _assemble(self, batch: pa.RecordBatch, partition_values: dict[str, Any]
                  ) -> pa.RecordBatch:
        arrays = []
        for field in self._schema:
            if field.name in partition_values:
                arrays.append(_constant(partition_values[field.name], field.type,
                                        batch.num_rows))
            else:
                arrays.append(batch.column(field.name))
        return pa.RecordBatch.from_arrays(arrays, schema=self._schema)

    def _partition_matches(self, values: dict[str, Any], filters: list[Filter]) -> bool:
        fields = [self._schema.field(name) for name in values]
        row = pa.RecordBatch.from_arrays([_constant(values[f.name], f.type, 1) for f in fields],
                                         schema=pa.schema(fields))
        return row.filter(conjunction(filters, row.schema)).num_rows == 1
