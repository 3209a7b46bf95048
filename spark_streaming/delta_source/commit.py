"""Driver side of a write: all files of a job (or micro-batch) become visible in ONE Delta
commit, or not at all.

delta-rs APIs (1.6.6, verified by experiment):
- `deltalake.transaction.create_table_with_add_actions`: creates the table and adds the
  files in version 0 (one commit); `mode="error"` so a concurrent creator is detected.
- `DeltaTable.create_write_transaction(actions, mode="append"|"overwrite", ...)`: adds the
  files (overwrite also removes every current file) in one commit, retrying on concurrent
  appends (conditional put on S3). It does not check the schema: `write_target` does.
- `CommitProperties(app_transactions=[Transaction(app_id, version)])` writes a `txn`
  action; `DeltaTable.transaction_version(app_id)` reads it back (streaming idempotency).
`AddAction.path` is the raw relative path: delta-rs URI-encodes it into the log itself.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from urllib.parse import unquote

import pyarrow as pa
from deltalake import DeltaTable, Schema
from deltalake.transaction import (
    AddAction,
    CommitProperties,
    Transaction,
    create_table_with_add_actions,
)

from spark_streaming.delta_source.parquet_files import WrittenFile, delete_written
from spark_streaming.delta_source.schema import DeltaSchemaError, table_arrow_schema
from spark_streaming.delta_source.table import try_open
from spark_streaming.delta_source.write_target import WriteTarget

log = logging.getLogger(__name__)

WRITER_NAME = "lakehouse_delta"


def _actions(files: Sequence[WrittenFile]) -> list[AddAction]:
    return [AddAction(f.path, f.size, f.partition_values, f.modification_time, True, f.stats)
            for f in files]


def _properties(operation: str, app_txn: tuple[str, int] | None) -> CommitProperties:
    metadata = {"lakehouse.writer": WRITER_NAME, "lakehouse.operation": operation}
    transactions = None
    if app_txn is not None:
        metadata["lakehouse.txnAppId"], metadata["lakehouse.batchId"] = app_txn[0], app_txn[1]
        transactions = [Transaction(app_txn[0], app_txn[1])]
    return CommitProperties(custom_metadata=metadata, app_transactions=transactions)


def _check_same_layout(target: WriteTarget, table: DeltaTable) -> None:
    """A table created by someone else since the write was planned must look like ours."""
    theirs = table_arrow_schema(table)
    if [(f.name, f.type) for f in theirs] != [(f.name, f.type) for f in target.schema] or (
            tuple(table.metadata().partition_columns) != target.partition_by):
        raise DeltaSchemaError(f"{target.table_uri} was created concurrently with another "
                               "schema or partitioning; nothing was committed")


def _create(target: WriteTarget, actions: list[AddAction],
            properties: CommitProperties) -> bool:
    """Create the table with the files; False if another writer created it first."""
    try:
        create_table_with_add_actions(
            target.table_uri, Schema.from_arrow(target.schema), actions, mode="error",
            partition_by=list(target.partition_by),
            configuration=target.properties or None, storage_options=target.storage,
            commit_properties=properties,
        )
        return True
    except Exception:
        if try_open(target.table_uri, target.storage) is None:
            raise
        return False


def _any_committed(target: WriteTarget, files: Sequence[WrittenFile]) -> bool | None:
    """Whether any of `files` is in the table now (None: cannot tell)."""
    try:
        table = try_open(target.table_uri, target.storage)
        if table is None:
            return False
        paths = pa.table(table.get_add_actions(flatten=False)).column("path").to_pylist()
    except Exception:
        return None
    active = {unquote(p) for p in paths}
    return any(f.path in active for f in files)


def commit_files(target: WriteTarget, files: Sequence[WrittenFile], operation: str,
                 app_txn: tuple[str, int] | None = None,
                 table: DeltaTable | None = None) -> bool:
    """Make `files` visible in one commit (append, or overwrite of the whole table).

    `table` is a snapshot the caller already loaded (saves reading the log twice). Returns
    False when there was nothing to commit (an empty append to an existing table outside a
    stream). On failure the files are deleted, unless the log might hold them.
    """
    actions = _actions(files)
    properties = _properties(operation, app_txn)
    try:
        if table is None:
            table = try_open(target.table_uri, target.storage)
        if table is None:
            if _create(target, actions, properties):
                log.info("lakehouse_delta: created %s with %d files", target.table_uri,
                         len(files))
                return True
            table = DeltaTable(target.table_uri, storage_options=target.storage)
            _check_same_layout(target, table)
        if not actions and not target.overwrite and app_txn is None:
            return False
        # delta-rs writes a new metaData action when an overwrite brings another schema
        schema = Schema.from_arrow(target.schema) if target.replace_schema else table.schema()
        table.create_write_transaction(
            actions, mode="overwrite" if target.overwrite else "append",
            schema=schema, partition_by=list(target.partition_by),
            commit_properties=properties,
        )
    except BaseException:
        if _any_committed(target, files) is False:
            delete_written(target, files)
        raise
    log.info("lakehouse_delta: committed %d files to %s (%s)", len(files), target.table_uri,
             operation)
    return True


def discard_files(target: WriteTarget, files: Sequence[WrittenFile], why: str) -> None:
    """Delete files that will never be committed."""
    deleted = delete_written(target, files)
    log.warning("lakehouse_delta: %s: deleted %d uncommitted files of %s", why, deleted,
                target.table_uri)
