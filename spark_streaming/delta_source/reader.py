"""Batch reads: the driver plans file groups from the Delta log (delta-rs), executors read
the Parquet files with pyarrow and yield Arrow record batches.

Spark 4.1.4 keeps ONE planned read (the pickled reader and its partitions, see
scan_registry) per provider, i.e. per DataFrame or temporary view, and every scan of that
provider in a query reads whatever the provider's last planning produced. Measured on
`SELECT k FROM v WHERE k >= 5 UNION ALL SELECT k FROM v WHERE k <= 2`: both scans read the
`k <= 2` plan. An unfiltered scan (`SELECT count(*) FROM v UNION ALL ... WHERE k <= 2`)
does not even call Python at planning time, yet reads the filtered plan too; executors see
identical inputs for every scan of the provider, so no check at `read()` time can tell
which scan a task serves. Pruning or filtering by Spark's pushed filters is therefore never
safe here: `pushFilters` hands every filter back to Spark, which applies it above a scan
that reads the whole snapshot.

What is safe is what every scan of a provider shares: its options. The `filters` option
((column, operator, value) triples, like delta-rs's `filters`) defines the relation as the
table restricted to matching rows, so it prunes files (partition values, min/max
statistics) and filters rows exactly, whatever Spark does with the plan.
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
from spark_streaming.delta_source.filters import from_triples
from spark_streaming.delta_source.options import FILTERS, DeltaOptionError, DeltaOptions
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
        try:
            self._filters: list[Filter] = from_triples(options.filters, self._schema)
        except ValueError as exc:
            raise DeltaOptionError(f"option {FILTERS}: {exc}") from exc

    def pushFilters(self, filters: list[Filter]) -> list[Filter]:
        """Every pushed filter goes back to Spark: the plan this pushdown makes may be read
        by another scan of the same DataFrame or view (module docstring)."""
        return filters

    def plan(self, version: int | None = None) -> ScanPlan:
        """The files this read will touch, after pruning by the `filters` option."""
        options = self._options
        if version is None:
            table = open_snapshot(options.table_uri, self._storage, options.version_as_of,
                                  options.timestamp_as_of)
        else:
            table = open_snapshot(options.table_uri, self._storage, version)
        check_readable(table)
        _, root = arrow_filesystem(options.table_uri, self._storage)
        return plan_scan(table, options.table_uri, root, self._filters)

    def partitions(self) -> Sequence[InputPartition]:
        plan = self.plan()
        return group_files(plan.files, self._options.files_per_partition,
                           self._options.max_partition_bytes, plan_id=uuid.uuid4().hex)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, FileGroup)
        filesystem, _ = arrow_filesystem(self._options.table_uri, self._storage)
        files = partition.files
        execution = current_execution()
        registry = ScanRegistry(self._options.scan_registry_dir)
        if execution is not None and partition.plan_id and not registry.owns(
                partition.plan_id, execution):
            # Spark reused another query's plan (an older snapshot) for this query.
            version = registry.agreed_version(partition.plan_id, execution,
                                              lambda: self.plan().version)
            files = tuple(share_of(self.plan(version=version).files,
                                   partition.index, partition.group_count))
            log.warning("lakehouse_delta: Spark reused scan plan %s for execution %s: "
                        "re-planned %s at v%d", partition.plan_id, execution,
                        self._options.table_uri, version)
        for scan_file in files:
            yield from read_file(filesystem, scan_file, self._schema, self._filters)
