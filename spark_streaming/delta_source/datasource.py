"""`lakehouse_delta`: Delta Lake tables for Spark through delta-rs and pyarrow.

delta-spark's JVM jar cannot be installed here (see DESIGN.md section 2), so this Python
data source reads and writes Delta; the name differs from `delta` so both can coexist.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from spark_streaming.delta_source.batch_writer import DeltaBatchWriter
from spark_streaming.delta_source.options import (
    FILTERS,
    TXN_APP_ID,
    DeltaOptionError,
    DeltaOptions,
)
from spark_streaming.delta_source.reader import DeltaReader
from spark_streaming.delta_source.scan import ScanPlan
from spark_streaming.delta_source.schema import check_readable, table_arrow_schema, to_spark
from spark_streaming.delta_source.stream_reader import DeltaStreamReader
from spark_streaming.delta_source.stream_writer import DeltaStreamWriter
from spark_streaming.delta_source.table import open_snapshot
from spark_streaming.delta_source.write_target import prepare_write


class DeltaLakeDataSource(DataSource):
    """Options: `table` (local path or s3://bucket/prefix/name; required), `profile`
    (config profile for storage options; default LAKEHOUSE_PROFILE), reads: `versionAsOf`,
    `timestampAsOf`, `filters` (JSON [column, operator, value] triples: the only pruning,
    see reader.py), `filesPerPartition`, `maxPartitionBytes`, `scanRegistryDir` (shared
    folder on multi-host clusters, see scan_registry); streaming reads (readStream; offsets
    are table versions in the query's checkpoint, each batch reads the files commits
    added): `startingVersion` (a version or `latest`; default the whole table),
    `maxFilesPerTrigger` / `maxVersionsPerTrigger` (whole commits per batch, at least one;
    with availableNow also give `checkpointLocation`), `skipChangeCommits` or
    `ignoreChanges` (commits that removed files fail the stream otherwise); writes:
    `partitionBy` (comma list, on creation), `delta.*` table properties (on creation),
    `txnAppId` (streaming writes; required), `overwriteSchema` (an overwrite replaces the
    schema and partitioning with the incoming ones). Save modes: append and overwrite."""

    @classmethod
    def name(cls) -> str:
        return "lakehouse_delta"

    def _options(self) -> DeltaOptions:
        return DeltaOptions.parse(self.options)

    def schema(self) -> StructType:
        options = self._options()
        table = open_snapshot(options.table_uri, options.storage_options(),
                              options.version_as_of, options.timestamp_as_of)
        check_readable(table)
        return to_spark(table_arrow_schema(table))

    def reader(self, schema: StructType) -> DataSourceReader:
        return DeltaReader(self._options(), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = self._options()
        if options.time_travel:
            raise DeltaOptionError("versionAsOf/timestampAsOf are for batch reads; a stream "
                                   "starts at startingVersion")
        if options.filters:
            raise DeltaOptionError(f"option {FILTERS} is for batch reads; filter a stream "
                                   "with where()")
        return DeltaStreamReader(options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        options = self._options()
        if options.time_travel or options.filters:
            raise DeltaOptionError(f"versionAsOf/timestampAsOf/{FILTERS} are for reads; a "
                                   "write always goes to the whole latest version")
        return DeltaBatchWriter(prepare_write(options, schema, overwrite))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        options = self._options()
        if not options.txn_app_id:
            raise DeltaOptionError(
                f"option {TXN_APP_ID} is required for streaming writes: a stable id of the "
                "query (the same across restarts) that keys its idempotent Delta commits"
            )
        return DeltaStreamWriter(prepare_write(options, schema, overwrite), options.txn_app_id)


def scan_plan(options: Mapping[str, str]) -> ScanPlan:
    """The scan a read with `options` makes, planned exactly as Spark's planner does it
    (for tests and notebooks: how many files the `filters` option skips)."""
    source = DeltaLakeDataSource(dict(options))
    reader = source.reader(source.schema())
    assert isinstance(reader, DeltaReader)
    return reader.plan()
