"""Batch writes (`mode("append")`, `mode("overwrite")`, SQL INSERT INTO / INSERT OVERWRITE):
executors write Parquet files, the driver commits them all in one Delta commit."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from spark_streaming.delta_source.commit import commit_files, discard_files
from spark_streaming.delta_source.parquet_files import files_of, write_files
from spark_streaming.delta_source.write_target import WriteTarget


class DeltaBatchWriter(DataSourceArrowWriter):
    def __init__(self, target: WriteTarget) -> None:
        self.target = target

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_files(self.target, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        operation = "overwrite" if self.target.overwrite else "append"
        commit_files(self.target, files_of(messages), operation)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        discard_files(self.target, files_of(messages), "write job failed")
