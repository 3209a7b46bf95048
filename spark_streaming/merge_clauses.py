"""A MERGE's WHEN clauses as data, so delta-spark and delta-rs run the same statement.

Silver's and gold's writes are MERGEs of a micro-batch or a round's rows (alias s) into
the table (alias t). Small ones are committed by delta-rs from the driver
(`driver_commits.merge`): a 25-change CDC MERGE took 0.24-0.34 s there against 2.1-2.6 s
through delta-spark, whose every commit rebuilds the table's state in Spark jobs
(benchmarks/README.md). Large ones stay on Spark's executors. Conditions are SQL both
engines parse: plain column references (`t.col`, `s.col`), comparisons, AND/OR/NOT.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from delta.tables import DeltaMergeBuilder

Kind = Literal["update_all", "insert_all", "delete", "update", "insert"]


@dataclass(frozen=True)
class Clause:
    """WHEN MATCHED (update_all, delete, update) or WHEN NOT MATCHED (insert_all, insert),
    with an optional condition; `assignments` (target column -> SQL) for update/insert."""

    kind: Kind
    condition: str | None = None
    assignments: Mapping[str, str] | None = None

    def on_spark(self, merge: DeltaMergeBuilder) -> DeltaMergeBuilder:
        if self.kind == "update_all":
            return merge.whenMatchedUpdateAll(condition=self.condition)
        if self.kind == "insert_all":
            return merge.whenNotMatchedInsertAll(condition=self.condition)
        if self.kind == "delete":
            return merge.whenMatchedDelete(condition=self.condition)
        if self.kind == "update":
            return merge.whenMatchedUpdate(condition=self.condition, set=dict(self._set()))
        return merge.whenNotMatchedInsert(condition=self.condition, values=dict(self._set()))

    def on_delta_rs(self, merge: Any) -> Any:
        """The clause on a `deltalake.TableMerger`."""
        if self.kind == "update_all":
            return merge.when_matched_update_all(predicate=self.condition)
        if self.kind == "insert_all":
            return merge.when_not_matched_insert_all(predicate=self.condition)
        if self.kind == "delete":
            return merge.when_matched_delete(predicate=self.condition)
        if self.kind == "update":
            return merge.when_matched_update(updates=dict(self._set()), predicate=self.condition)
        return merge.when_not_matched_insert(updates=dict(self._set()), predicate=self.condition)

    def _set(self) -> Mapping[str, str]:
        if not self.assignments:
            raise ValueError(f"a MERGE clause {self.kind} needs assignments")
        return self.assignments


def key_predicate(columns: Sequence[str]) -> str:
    """t.c = s.c for each column, ANDed."""
    return " AND ".join(f"t.{c} = s.{c}" for c in columns)
