"""Table maintenance with delta-rs: compaction or Z-order, vacuum, log checkpoint.

Why each step and its guard:
- Compaction merges small files (streaming micro-batches write many); delta-rs skips
  partitions that are already one file, so a second run commits nothing.
- Z-order (tables with `zorder_by`) clusters rows for data skipping, but delta-rs rewrites
  every file of the table each time (measured on 1.6.6, even a single file), so it only
  runs when some partition holds more than one file.
- Vacuum deletes files removed longer ago than the table's own
  delta.deletedFileRetentionDuration (delta-rs reads it from the table and refuses a
  shorter retention); time travel within the retention keeps working.
- A checkpoint bounds log replay for readers; old log files past
  delta.logRetentionDuration are then cleaned up.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
from deltalake import DeltaTable

from lakehouse.definitions import TableDefinition
from lakehouse.table_manager import open_table, table_location

Report = Callable[[str], None]


@dataclass(frozen=True)
class FileCount:
    files: int
    bytes: int
    largest_partition_files: int


@dataclass(frozen=True)
class MaintenanceReport:
    name: str
    status: str  # "maintained" | "missing"
    before: FileCount | None = None
    after: FileCount | None = None
    optimize: str = ""
    vacuumed_files: int = 0
    version_before: int | None = None
    version_after: int | None = None
    checkpoint_version: int | None = None

    def summary(self) -> str:
        if self.status != "maintained" or self.before is None or self.after is None:
            return f"{self.name}: table does not exist (run `lakehouse tables apply`)"
        return (f"{self.name}: files {self.before.files} -> {self.after.files} "
                f"({self.before.bytes} -> {self.after.bytes} bytes), {self.optimize}, "
                f"vacuum removed {self.vacuumed_files} file(s), checkpoint at version "
                f"{self.checkpoint_version}")


def count_files(table: DeltaTable) -> FileCount:
    """Live data files, their total size and the most files in any one partition."""
    actions = pa.table(table.get_add_actions(flatten=True))
    if actions.num_rows == 0:
        return FileCount(0, 0, 0)
    partition_columns = [c for c in actions.column_names if c.startswith("partition.")]
    if partition_columns:
        grouped = actions.group_by(partition_columns).aggregate([("path", "count")])
        largest = max(grouped.column("path_count").to_pylist())
    else:
        largest = actions.num_rows
    total = sum(actions.column("size_bytes").to_pylist())
    return FileCount(actions.num_rows, total, largest)


def _optimize(definition: TableDefinition, table: DeltaTable, before: FileCount) -> str:
    if before.largest_partition_files <= 1:
        return "already compact"
    if definition.zorder_by:
        metrics = table.optimize.z_order(definition.zorder_by)
        how = f"z-ordered on {', '.join(definition.zorder_by)}"
    else:
        metrics = table.optimize.compact()
        how = "compacted"
    return (f"{how} ({metrics['numFilesRemoved']} files -> {metrics['numFilesAdded']} in "
            f"{metrics['partitionsOptimized']} partition(s))")


def maintain_table(definition: TableDefinition, root: str, storage: dict[str, str],
                   report: Report, vacuum: bool = True) -> MaintenanceReport:
    """Compact or Z-order, vacuum within the table's retention, checkpoint the log."""
    uri = table_location(root, definition.name)
    table = open_table(uri, storage)
    if table is None:
        return MaintenanceReport(definition.name, "missing")
    version_before = table.version()
    before = count_files(table)
    report(f"{definition.name}: {before.files} files, {before.bytes} bytes, version "
           f"{version_before}")
    optimize = _optimize(definition, table, before)
    table = DeltaTable(uri, storage_options=storage)
    vacuumed: list[str] = []
    if vacuum:
        # retention_hours=None: the table's delta.deletedFileRetentionDuration (enforced)
        candidates = table.vacuum(dry_run=True)
        if candidates:  # a vacuum with nothing to delete would still commit twice
            vacuumed = table.vacuum(dry_run=False)
        table = DeltaTable(uri, storage_options=storage)
    table.create_checkpoint()
    table.cleanup_metadata()
    after = count_files(table)
    return MaintenanceReport(definition.name, "maintained", before, after, optimize,
                             len(vacuumed), version_before, table.version(), table.version())


def maintain_tables(definitions: list[TableDefinition], root: str, storage: dict[str, str],
                    report: Report, vacuum: bool = True) -> list[MaintenanceReport]:
    results = []
    for definition in definitions:
        result = maintain_table(definition, root, storage, report, vacuum)
        report(result.summary())
        results.append(result)
    return results
