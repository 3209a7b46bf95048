"""Driver-side Delta commits with delta-rs, exactly once per (table, run, micro-batch).

Silver and quarantine tables carry CHECK constraints, which the lakehouse_delta Spark
writer refuses; delta-rs enforces them (and NOT NULL). Every commit carries the app
transaction (run id, batch id); a batch whose id the table already recorded for the run
is skipped, so a micro-batch replayed after a crash never writes twice.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from lakehouse.storage import storage_options, table_uri
from settings import Settings


class DeltaTarget:
    """One Delta table the silver job commits to."""

    def __init__(self, settings: Settings, name: str) -> None:
        self.name = name
        self.uri = table_uri(settings, name)
        self.storage = storage_options(settings, self.uri)

    def open(self) -> DeltaTable:
        return DeltaTable(self.uri, storage_options=self.storage)

    def already_committed(self, run_id: str, batch_id: int) -> bool:
        done = self.open().transaction_version(run_id)
        return done is not None and done >= batch_id

    @staticmethod
    def commit_properties(run_id: str, batch_id: int) -> CommitProperties:
        return CommitProperties(app_transactions=[Transaction(run_id, batch_id)])

    def conform(self, data: pa.Table) -> pa.Table:
        """Columns in the table's order and types (Spark hands every column as nullable)."""
        schema = pa.schema(self.open().schema().to_arrow())
        return pa.table([data.column(f.name).cast(f.type) for f in schema],
                        schema=schema.with_metadata(None) if schema.metadata else schema)

    def append(self, data: pa.Table, run_id: str, batch_id: int) -> bool:
        """Append `data` once for (run, batch); False when skipped (done before or empty)."""
        if data.num_rows == 0 or self.already_committed(run_id, batch_id):
            return False
        write_deltalake(self.uri, self.conform(data), mode="append",
                        storage_options=self.storage,
                        commit_properties=self.commit_properties(run_id, batch_id))
        return True

    def append_new_records(self, data: pa.Table, run_id: str, batch_id: int) -> bool:
        """Append the rows whose Kafka coordinates the table does not hold yet: quarantine
        is append-only and keyed by (topic, partition, offset), so a rebuild from bronze
        does not add a record twice."""
        if data.num_rows == 0:
            return False
        existing = self.open().to_pyarrow_dataset().to_table(
            columns=["kafka_topic", "kafka_partition", "kafka_offset"],
            filter=pc.field("kafka_offset").isin(data.column("kafka_offset")))
        seen = {(t, p, o) for t, p, o in zip(*(existing.column(c).to_pylist()
                                               for c in existing.column_names), strict=True)}
        if seen:
            keep = [(t, p, o) not in seen for t, p, o in zip(
                data.column("kafka_topic").to_pylist(), data.column("kafka_partition").to_pylist(),
                data.column("kafka_offset").to_pylist(), strict=True)]
            data = data.filter(pa.array(keep))
        return self.append(data, run_id, batch_id)

    def merge(self, data: pa.Table, predicate: str, run_id: str, batch_id: int
              ) -> DeltaTable | None:
        """A TableMerger over `data` (source alias s, target t) for the caller to finish,
        or None when there is nothing to do (done before or empty)."""
        if data.num_rows == 0 or self.already_committed(run_id, batch_id):
            return None
        return self.open().merge(data, predicate=predicate, source_alias="s",
                                 target_alias="t", error_on_type_mismatch=False,
                                 commit_properties=self.commit_properties(run_id, batch_id))
