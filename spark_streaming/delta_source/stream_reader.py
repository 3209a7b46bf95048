"""Streaming reads: each micro-batch reads the data files that Delta commits added.

Offsets are table versions, `{"tableId": <the table's id>, "version": N}` (the batch ends
after commit N), kept by Spark in its checkpoint. Version -1 is "before the first commit":
a batch starting there reads the snapshot of its end version (the whole table, whatever
its history), later batches read the files each commit added. A commit that removed data
files (overwrite, delete, update, merge) cannot be followed as a stream of appends: it
fails the batch unless `skipChangeCommits` (skip the commit) or `ignoreChanges` (read only
the files it added, so rewritten rows come again). The table id in the offset detects a
table that was dropped and re-created under the same URI.

Spark 4.1 never tells `latestOffset` where the batch starts; this reader tracks it (the
initial offset, the `partitions(x, x)` call by which Spark reports a restarted query's
position, then each batch's end). With availableNow, Spark asks for the latest offset once
per run, before anything else: a cap then needs the option `checkpointLocation` (the
query's own) to find the start, and such a run makes one capped batch.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from spark_streaming.checkpoint_offsets import last_source_offset
from spark_streaming.delta_source import partition_values
from spark_streaming.delta_source.commit_log import AddedFile, Commit, read_commit
from spark_streaming.delta_source.file_reader import read_file
from spark_streaming.delta_source.filesystem import arrow_filesystem
from spark_streaming.delta_source.options import (
    LATEST,
    STARTING_VERSION,
    DeltaOptionError,
    DeltaOptions,
)
from spark_streaming.delta_source.scan import FileGroup, ScanFile, fs_path, group_files, plan_scan
from spark_streaming.delta_source.schema import check_readable, to_arrow
from spark_streaming.delta_source.table import open_snapshot

log = logging.getLogger(__name__)

BEFORE_FIRST_COMMIT = -1


class DeltaStreamError(RuntimeError):
    """A micro-batch that cannot be read as a stream of appended files."""


class DeltaStreamReader(DataSourceStreamReader):
    def __init__(self, options: DeltaOptions, schema: StructType) -> None:
        self._options = options
        self._storage = options.storage_options()
        self._schema = to_arrow(schema)
        self._table: DeltaTable | None = None
        self._commits: dict[int, Commit] = {}
        self._next_start: int | None = None  # where the next batch starts, when known

    def __getstate__(self) -> dict[str, Any]:
        # Executors get this reader pickled: they need the options, not driver caches.
        return {**self.__dict__, "_table": None, "_commits": {}}

    # -- the table and its log ------------------------------------------------------------

    def _latest(self) -> DeltaTable:
        if self._table is None:
            self._table = open_snapshot(self._options.table_uri, self._storage)
            check_readable(self._table)
        else:
            self._table.update_incremental()
        return self._table

    @property
    def _table_id(self) -> str:
        if self._table is None:
            self._latest()
        assert self._table is not None
        return str(self._table.metadata().id)

    def _commit(self, version: int) -> Commit | None:
        if version not in self._commits:
            filesystem, root = arrow_filesystem(self._options.table_uri, self._storage)
            commit = read_commit(filesystem, root, version)
            if commit is None:
                return None
            self._commits[version] = commit
        return self._commits[version]

    def _offset(self, version: int) -> dict:
        return {"tableId": self._table_id, "version": version}

    def _version_of(self, offset: dict) -> int:
        if offset.get("tableId") != self._table_id:
            raise DeltaStreamError(
                f"table {self._options.table_uri} is not the table this query's checkpoint "
                f"was reading (table id {offset.get('tableId')} there, {self._table_id} "
                "now: dropped and re-created?); start the query with a new checkpoint "
                "location")
        return int(offset["version"])

    # -- offsets --------------------------------------------------------------------------

    def _initial_version(self) -> int:
        latest = self._latest().version()
        start = self._options.starting_version
        if start is None:
            return BEFORE_FIRST_COMMIT
        if start == LATEST:
            return latest
        assert isinstance(start, int)
        if start > latest:
            raise DeltaOptionError(f"option {STARTING_VERSION}={start}: table "
                                   f"{self._options.table_uri} is at version {latest}")
        return start - 1

    def initialOffset(self) -> dict:
        version = self._initial_version()
        if self._next_start is None:
            self._next_start = version
        return self._offset(version)

    def latestOffset(self) -> dict:
        latest = self._latest().version()
        options = self._options
        if options.max_files_per_trigger is None and options.max_versions_per_trigger is None:
            return self._offset(latest)
        start = self._batch_start()
        if start is None:
            log.warning("lakehouse_delta stream of %s: start of this batch unknown (give the "
                        "option checkpointLocation); this batch is not capped",
                        options.table_uri)
            return self._offset(latest)
        end = self._capped_end(start, latest)
        self._next_start = end
        return self._offset(end)

    def _batch_start(self) -> int | None:
        if self._next_start is not None:
            return self._next_start
        checkpoint = self._options.checkpoint_location
        if not checkpoint or "://" in checkpoint:
            return None
        table_id = self._table_id
        found = last_source_offset(
            checkpoint, lambda value: value.get("tableId") == table_id and "version" in value)
        return int(found["version"]) if found else self._initial_version()

    def _capped_end(self, start: int, latest: int) -> int:
        """The last version of a batch starting after `start`: whole commits, at least one,
        within maxVersionsPerTrigger and, past the first, maxFilesPerTrigger."""
        end = latest
        if self._options.max_versions_per_trigger is not None:
            end = min(end, start + self._options.max_versions_per_trigger)
        cap = self._options.max_files_per_trigger
        if cap is None:
            return max(end, start)
        files = 0
        for version in range(start + 1, end + 1):
            commit = self._commit(version)
            if commit is None:  # log cleaned up: partitions() says what to do
                return end
            if files and files + len(commit.added) > cap:
                return version - 1
            files += len(commit.added)
        return max(end, start)

    # -- batches --------------------------------------------------------------------------

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        first, last = self._version_of(start), self._version_of(end)
        self._next_start = last
        if last < first:
            raise DeltaStreamError(
                f"stream of {self._options.table_uri}: batch end version {last} is before its "
                f"start {first} (is the option checkpointLocation the query's own?)")
        if last == first:
            return []
        if first == BEFORE_FIRST_COMMIT:
            files = self._snapshot_files(last)
        else:
            files = self._added_files(first, last)
        log.info("lakehouse_delta stream of %s: versions %d..%d, %d files",
                 self._options.table_uri, first + 1, last, len(files))
        return group_files(files, self._options.files_per_partition,
                           self._options.max_partition_bytes)

    def _snapshot_files(self, version: int) -> list[ScanFile]:
        table = open_snapshot(self._options.table_uri, self._storage, version)
        check_readable(table)
        _, root = arrow_filesystem(self._options.table_uri, self._storage)
        return list(plan_scan(table, self._options.table_uri, root).files)

    def _added_files(self, first: int, last: int) -> list[ScanFile]:
        uri = self._options.table_uri
        commits = []
        for version in range(first + 1, last + 1):
            commit = self._commit(version)
            if commit is None:
                raise DeltaStreamError(
                    f"table {uri}: commit {version} is no longer in the Delta log (removed by "
                    "log cleanup): this query's checkpoint is older than the log retention; "
                    "start it again with a new checkpoint location (and startingVersion)")
            commits.append(commit)
        changes = [c for c in commits if c.removed]
        options = self._options
        if changes and not (options.ignore_changes or options.skip_change_commits):
            listed = ", ".join(f"{c.version} ({c.operation or 'unknown'}, {c.removed} files "
                               "removed)" for c in changes)
            raise DeltaStreamError(
                f"table {uri}: versions {first + 1}..{last} of this micro-batch include "
                f"commits that removed data files: {listed}. A stream reads appended files "
                "only: set the option skipChangeCommits=true to skip such commits, or "
                "ignoreChanges=true to read the files they added (rewritten rows come "
                "again), or restart the query from a new checkpoint")
        if changes and options.skip_change_commits:
            log.warning("lakehouse_delta stream of %s: skipped change commits %s (option "
                        "skipChangeCommits)", uri, [c.version for c in changes])
            commits = [c for c in commits if not c.removed]
        _, root = arrow_filesystem(uri, self._storage)
        return [self._scan_file(root, added) for commit in commits for added in commit.added]

    def _scan_file(self, root: str, added: AddedFile) -> ScanFile:
        values = {}
        for column, text in added.partition_values.items():
            index = self._schema.get_field_index(column)
            if index >= 0:
                values[column] = partition_values.decode(text, self._schema.field(index).type)
        return ScanFile(fs_path(root, added.path), added.size, values)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, FileGroup)
        filesystem, _ = arrow_filesystem(self._options.table_uri, self._storage)
        for scan_file in partition.files:
            yield from read_file(filesystem, scan_file, self._schema)

    def commit(self, end: dict) -> None:
        """Offsets live in Spark's checkpoint; the Delta table is only read."""

    def stop(self) -> None:
        self._table = None
        self._commits.clear()
