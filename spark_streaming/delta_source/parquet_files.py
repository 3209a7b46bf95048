"""Executor side of a write: Arrow batches into Parquet data files under the table folder,
one file per partition value per task, each with its Delta statistics.

Nothing here touches the Delta log; the files stay invisible until the driver commits
them. A task that fails deletes the files it wrote, so only its commit message (or its
absence) decides what the driver commits or discards.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import fs as pafs
from pyspark.sql.datasource import WriterCommitMessage

from spark_streaming.delta_source import partition_values
from spark_streaming.delta_source.filesystem import arrow_filesystem, delete_quietly, join
from spark_streaming.delta_source.schema import DeltaSchemaError
from spark_streaming.delta_source.stats import FileStats
from spark_streaming.delta_source.write_target import WriteTarget

COMPRESSION = "snappy"


@dataclass(frozen=True)
class WrittenFile:
    """A data file ready to be added to the log (`path` relative to the table root)."""

    path: str
    size: int
    partition_values: dict[str, str | None]
    stats: str
    num_records: int
    modification_time: int


@dataclass(frozen=True)
class DeltaCommitMessage(WriterCommitMessage):
    files: tuple[WrittenFile, ...]


def files_of(messages: Iterable[WriterCommitMessage | None]) -> list[WrittenFile]:
    """All files in the commit messages of the tasks that succeeded."""
    return [f for m in messages if isinstance(m, DeltaCommitMessage) for f in m.files]


def conform(batch: pa.RecordBatch, target: WriteTarget) -> pa.RecordBatch:
    """`batch` with the table's column names, order and types; NOT NULL columns checked."""
    by_target = {target.column_map[name]: batch.column(i)
                 for i, name in enumerate(batch.schema.names)}
    arrays = []
    for field in target.schema:
        array = by_target[field.name]
        if not field.nullable and array.null_count:
            raise DeltaSchemaError(f"column {field.name} is NOT NULL in {target.table_uri} "
                                   f"but {array.null_count} rows are null")
        arrays.append(array if array.type.equals(field.type) else array.cast(field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=target.schema)


def _split(batch: pa.RecordBatch, columns: tuple[str, ...]
           ) -> Iterable[tuple[tuple, pa.RecordBatch]]:
    """(partition key, rows of that partition) for each partition present in `batch`."""
    if not columns:
        yield (), batch
        return
    rows = pa.Table.from_batches([batch]).select(list(columns)).append_column(
        "__row", pa.array(np.arange(batch.num_rows, dtype=np.int64)))
    groups = rows.group_by(list(columns), use_threads=False).aggregate([("__row", "list")])
    for group in groups.to_pylist():
        key = tuple(group[c] for c in columns)
        yield key, batch.take(pa.array(group["__row_list"], pa.int64()))


class _OpenFile:
    def __init__(self, filesystem: pafs.FileSystem, root: str, relative: str,
                 schema: pa.Schema, encoded: dict[str, str | None]) -> None:
        self.relative = relative
        self.full_path = join(root, relative)
        self.encoded = encoded
        self.stats = FileStats(schema)
        self.sink = filesystem.open_output_stream(self.full_path)
        self.writer = pq.ParquetWriter(self.sink, schema, compression=COMPRESSION)

    def write(self, batch: pa.RecordBatch) -> None:
        self.writer.write_batch(batch)
        self.stats.update(batch)

    def close(self) -> WrittenFile:
        self.writer.close()
        size = self.sink.tell()
        self.sink.close()
        return WrittenFile(self.relative, size, self.encoded, self.stats.to_json(),
                           self.stats.records, int(time.time() * 1000))

    def close_quietly(self) -> None:
        for closer in (self.writer.close, self.sink.close):
            with contextlib.suppress(Exception):  # already failing: the file is deleted next
                closer()


def _task_token() -> str:
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        return "00000"
    return f"{context.partitionId():05d}-{context.attemptNumber()}"


def write_files(target: WriteTarget, batches: Iterable[pa.RecordBatch]) -> DeltaCommitMessage:
    """Write one task's rows as Parquet files; return them for the driver's commit."""
    filesystem, root = arrow_filesystem(target.table_uri, target.storage)
    local = isinstance(filesystem, pafs.LocalFileSystem)
    data_schema = target.data_schema
    token = f"{_task_token()}-{uuid.uuid4().hex}"
    open_files: dict[tuple, _OpenFile] = {}
    try:
        for raw in batches:
            if raw.num_rows == 0:
                continue
            batch = conform(raw, target)
            for key, rows in _split(batch, target.partition_by):
                handle = open_files.get(key)
                if handle is None:
                    encoded = {c: partition_values.encode(v)
                               for c, v in zip(target.partition_by, key, strict=True)}
                    folder = partition_values.folder(target.partition_by, encoded)
                    name = f"part-{token}-{len(open_files):04d}.c000.{COMPRESSION}.parquet"
                    relative = f"{folder}/{name}" if folder else name
                    if local:
                        filesystem.create_dir(join(root, folder) if folder else root,
                                              recursive=True)
                    handle = _OpenFile(filesystem, root, relative, data_schema, encoded)
                    open_files[key] = handle
                handle.write(rows.select(data_schema.names))
        written = tuple(handle.close() for handle in open_files.values())
    except BaseException:
        for handle in open_files.values():
            handle.close_quietly()
        delete_quietly(filesystem, [h.full_path for h in open_files.values()])
        raise
    return DeltaCommitMessage(written)


def delete_written(target: WriteTarget, files: Iterable[WrittenFile]) -> int:
    """Delete data files that will not be committed (abort, replayed stream batch)."""
    filesystem, root = arrow_filesystem(target.table_uri, target.storage)
    return delete_quietly(filesystem, [join(root, f.path) for f in files])
