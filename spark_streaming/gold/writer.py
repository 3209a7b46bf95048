"""Gold commits through delta-rs (the Spark `lakehouse_delta` writer refuses tables with
CHECK constraints, and every gold table has some): a full replace, or a replace of exactly
the affected unique keys, each one commit carrying the consumed silver versions."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

GONE = "_gold_gone"


def gold_schema(table: DeltaTable) -> pa.Schema:
    """The table's Arrow schema without NOT NULL (merge sources carry key-only tombstones)."""
    schema = pa.schema(table.schema().to_arrow())
    return pa.schema([field.with_nullable(True).remove_metadata() for field in schema])


def _conform(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    return rows.select(schema.names).cast(schema)


def _commit(transactions: Sequence[Transaction], mode: str) -> CommitProperties:
    return CommitProperties(app_transactions=list(transactions),
                            custom_metadata={"lakehouse.gold": mode})


def replace_all(table: DeltaTable, rows: pa.Table,
                transactions: Sequence[Transaction]) -> None:
    """Overwrite the whole table with `rows` (rebuild)."""
    full = pa.schema(table.schema().to_arrow())
    write_deltalake(table, _conform(rows, gold_schema(table)).cast(full), mode="overwrite",
                    commit_properties=_commit(transactions, "rebuild"))


def replace_keys(table: DeltaTable, rows: pa.Table, keys: pa.Table, unique_key: Sequence[str],
                 transactions: Sequence[Transaction]) -> None:
    """Make the rows with a unique key in `keys` equal `rows` (keys without a new row are
    deleted), in one MERGE commit; every key of `rows` must be in `keys`."""
    schema = gold_schema(table)
    rows = _conform(rows, schema)
    new_keys = {tuple(r.values()) for r in rows.select(list(unique_key)).to_pylist()}
    gone = [k for k in keys.select(list(unique_key)).to_pylist()
            if tuple(k.values()) not in new_keys]
    tombstones = pa.Table.from_pylist(gone, schema=pa.schema(
        [schema.field(c) for c in unique_key])) if gone else None
    source = rows.append_column(GONE, pa.array([False] * rows.num_rows, pa.bool_()))
    if tombstones is not None:
        padded = {name: (tombstones.column(name) if name in unique_key
                         else pa.nulls(len(gone), schema.field(name).type))
                  for name in schema.names}
        padded[GONE] = pa.array([True] * len(gone), pa.bool_())
        source = pa.concat_tables([source, pa.table(padded, schema=source.schema)])
    if source.num_rows == 0:
        # delta-rs makes no commit for an empty MERGE: record the consumed versions with an
        # empty append, so the silver versions that changed nothing here are not re-read
        write_deltalake(table, pa.schema(table.schema().to_arrow()).empty_table(),
                        mode="append", commit_properties=_commit(transactions, "incremental"))
        return
    match = " AND ".join(f"t.{c} = s.{c}" for c in unique_key)
    values = {c: f"s.{c}" for c in schema.names}
    (table.merge(source, match, source_alias="s", target_alias="t",
                 commit_properties=_commit(transactions, "incremental"))
     .when_matched_delete(f"s.{GONE}")
     .when_matched_update(values, f"NOT s.{GONE}")
     .when_not_matched_insert(values, f"NOT s.{GONE}")
     .execute())
