"""Small Delta commits from the driver with delta-rs, exactly once per (app id, batch id).

A micro-batch of a few dozen rows paid seconds through delta-spark: its every commit, and
every later read of the new version, rebuilt the table's state in Spark jobs
(benchmarks/README.md, "Where a MERGE's time goes"). delta-rs commits such a batch from
the driver's Python in a fraction of a second with the same app transaction Spark's
writers record (`txnAppId`/`txnVersion`, the streaming sink's query id and batch id), so
either writer recognises a batch the other committed. delta-rs does not skip a recorded
batch by itself: callers ask `recorded` first, in the same table snapshot they commit on.
"""

from __future__ import annotations

from collections.abc import Sequence

import deltalake
import pyarrow as pa

from spark_streaming.merge_clauses import Clause

_CHANGED = ("num_target_rows_inserted", "num_target_rows_updated", "num_target_rows_deleted")


def recorded(table: deltalake.DeltaTable, app_id: str, batch_id: int) -> bool:
    """Whether the table holds batch `batch_id` (or a later one) of `app_id`."""
    done = table.transaction_version(app_id)
    return done is not None and done >= batch_id


def once(app_id: str, batch_id: int) -> deltalake.CommitProperties:
    """Commit properties recording the batch, as Spark's writers do."""
    return deltalake.CommitProperties(
        app_transactions=[deltalake.Transaction(app_id=app_id, version=batch_id)])


def table_rows(rows: pa.Table, table: deltalake.DeltaTable) -> pa.Table:
    """`rows` (from Spark's `toArrow`) in the table's column types, the columns the table
    lacks after them (a MERGE's conditions may use them).

    Built again from Python values, not cast: a MERGE whose source column of lists held
    only empty lists, as Spark's `toArrow` gives them, made delta-rs 1.6.6 panic in its
    join (a slice of the lists' values out of range)."""
    schema = pa.schema(table.schema().to_arrow())
    fields = [f.with_nullable(True) for f in schema]
    fields += [rows.schema.field(n) for n in rows.column_names if n not in schema.names]
    return pa.Table.from_pylist(rows.to_pylist(), schema=pa.schema(fields))


def append_once(uri: str, options: dict[str, str], rows: pa.Table, app_id: str,
                batch_id: int) -> bool:
    """Append `rows` (Spark's Arrow) to the table at `uri` unless it recorded the batch;
    whether it appended."""
    table = deltalake.DeltaTable(uri, storage_options=options)
    try:
        if recorded(table, app_id, batch_id):
            return False
        deltalake.write_deltalake(table, table_rows(rows, table), mode="append",
                                  commit_properties=once(app_id, batch_id))
        return True
    finally:
        del table  # see docs/architecture.md: delta-rs objects are dropped explicitly


def record_only(uri: str, options: dict[str, str], *, user_metadata: str) -> None:
    """A commit that adds no rows and carries `user_metadata` (an empty append)."""
    table = deltalake.DeltaTable(uri, storage_options=options)
    try:
        empty = pa.schema(table.schema().to_arrow()).empty_table()
        deltalake.write_deltalake(table, empty, mode="append", commit_properties=(
            deltalake.CommitProperties(custom_metadata={"userMetadata": user_metadata})))
    finally:
        del table  # see docs/architecture.md: delta-rs objects are dropped explicitly


def merge(uri: str, options: dict[str, str], rows: pa.Table, predicate: str,
          clauses: Sequence[Clause], *, once_for: tuple[str, int] | None = None,
          user_metadata: str | None = None) -> int:
    """MERGE `rows` (Spark's Arrow, alias s) into the table at `uri` (alias t); rows it
    inserted, updated or deleted. `once_for` (app id, batch id): skipped (0) when the table
    recorded that batch, recorded with the commit otherwise. `user_metadata`: the commit's
    `userMetadata`, as Spark's `spark.databricks.delta.commitInfo.userMetadata` sets it."""
    table = deltalake.DeltaTable(uri, storage_options=options)
    try:
        if once_for is not None and recorded(table, *once_for):
            return 0
        properties = once(*once_for) if once_for is not None else deltalake.CommitProperties()
        if user_metadata is not None:
            properties = deltalake.CommitProperties(
                custom_metadata={"userMetadata": user_metadata},
                app_transactions=properties.app_transactions)
        merger = table.merge(table_rows(rows, table), predicate, source_alias="s",
                             target_alias="t", commit_properties=properties)
        for clause in clauses:
            merger = clause.on_delta_rs(merger)
        metrics = merger.execute()
    finally:
        del table  # see docs/architecture.md: delta-rs objects are dropped explicitly
    return sum(int(metrics.get(name) or 0) for name in _CHANGED)
