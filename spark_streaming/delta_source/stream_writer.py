"""Streaming writes: one Delta commit per micro-batch, idempotent through a Delta app
transaction (`txn` action) keyed by the query's stable `txnAppId` and the batch id.

Spark replays the last batch after a crash between the Delta commit and its own checkpoint
commit; the `txn` version tells that the batch is already in the table, so the replay's
files are deleted instead of committed (exactly once).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from spark_streaming.delta_source.commit import commit_files, discard_files
from spark_streaming.delta_source.parquet_files import files_of, write_files
from spark_streaming.delta_source.table import try_open
from spark_streaming.delta_source.write_target import WriteTarget

log = logging.getLogger(__name__)


class DeltaStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, target: WriteTarget, app_id: str) -> None:
        self.target = target
        self.app_id = app_id

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_files(self.target, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        files = files_of(messages)
        table = try_open(self.target.table_uri, self.target.storage)
        done = None if table is None else table.transaction_version(self.app_id)
        if done is not None and done >= batchId:
            discard_files(self.target, files,
                          f"batch {batchId} of {self.app_id} already committed (txn {done})")
            return
        operation = "streaming overwrite" if self.target.overwrite else "streaming append"
        commit_files(self.target, files, operation, app_txn=(self.app_id, batchId), table=table)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        discard_files(self.target, files_of(messages), f"batch {batchId} aborted")
