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

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition
from pyspark.sql.types import StructType

from spark_streaming.delta_source.file_reader import read_file
from spark_streaming.delta_source.filesystem import arrow_filesystem
from spark_streaming.delta_source.filters import split_supported
from spark_streaming.delta_source.options import DeltaOptions
from spark_streaming.delta_source.scan import (
    FileGroup,
    ScanPlan,
    group_files,
    plan_scan,
    share_of,
)
from spark_streaming.delta_source.scan_registry import ScanRegistry, current_execution
from spark_streaming.delta_source.schema import check_readable, to_arrow
from spark_streaming.delta_source.table import open_snapshot

log = logging.getLogger(__name__)


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
            yield from read_file(filesystem, scan_file, self._schema, filters)
