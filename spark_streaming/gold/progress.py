"""Which silver versions a gold table has consumed, and the silver rows changed since.

The consumed version of each source is an app transaction in the gold table's own log
(`lakehouse-gold-<silver table>` -> silver version), written in the same commit as the gold
rows it produced; a crash therefore never leaves gold and its progress out of step.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from deltalake import DeltaTable, Transaction
from deltalake.exceptions import DeltaError

CDF_COLUMNS = ("_change_type", "_commit_version", "_commit_timestamp")


def app_id(source: str) -> str:
    """Id of the app transaction recording how far a gold table read `source`."""
    return f"lakehouse-gold-{source}"


@dataclass(frozen=True)
class SourceProgress:
    """One silver source of a gold table: last consumed version and the version to read."""

    table: str
    consumed: int | None  # None: never consumed (the gold table needs a full build)
    current: int

    @property
    def has_news(self) -> bool:
        return self.consumed != self.current

    @property
    def replayable(self) -> bool:
        """Changes since `consumed` can be read (else the table was recreated: rebuild)."""
        return self.consumed is not None and self.consumed <= self.current

    def transaction(self) -> Transaction:
        return Transaction(app_id(self.table), self.current)


def source_progress(gold: DeltaTable, source: str, silver: DeltaTable) -> SourceProgress:
    return SourceProgress(source, gold.transaction_version(app_id(source)), silver.version())


def _plain_types(rows: pa.Table) -> pa.Table:
    """delta-rs hands string/binary views, which Spark cannot convert: plain types."""
    plain = {pa.types.is_string_view: pa.string(), pa.types.is_binary_view: pa.binary()}
    fields = [next((pa.field(f.name, target) for test, target in plain.items()
                    if test(f.type)), f) for f in rows.schema]
    return rows.cast(pa.schema(fields))


def changed_rows(silver: DeltaTable, progress: SourceProgress,
                 columns: list[str]) -> pa.Table | None:
    """`columns` of every row inserted, deleted or updated (both images) in the versions
    after `consumed` up to `current`; None when the change feed cannot give them (log or
    change files already cleaned up), which makes the caller rebuild."""
    assert progress.consumed is not None
    if not progress.has_news:
        return None
    try:
        reader = silver.load_cdf(starting_version=progress.consumed + 1,
                                 ending_version=progress.current, columns=columns)
        return _plain_types(pa.table(reader).select(columns))
    except DeltaError:
        return None
