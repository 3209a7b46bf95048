"""The quality figures of each silver micro-batch, appended with delta-rs.

About ten rows per batch: through Spark that was a job and a Delta commit of its own in
every micro-batch of every silver query (all of them on one table), seconds each on a
busy driver. delta-rs appends them from the driver's Python in a fraction of a second,
with Delta's app transaction (run id, batch id) as Spark's writer set it before, so a
batch redone after a crash finds its figures there and adds none. The silver queries of a
process append one at a time: at once, delta-rs's optimistic retries ran out (8 threads
appending 5 times each: one gave up after 15 conflicts), and one append takes 0.06 s.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from lakehouse.storage import storage_options, table_uri
from settings import Settings
from spark_streaming.driver_commits import once, recorded

METRICS_TABLE = "quality_batch_metrics"
_ONE_AT_A_TIME = threading.Lock()


class BatchMetricsTable:
    """quality_batch_metrics, appended once per (run id, batch id)."""

    def __init__(self, settings: Settings, name: str = METRICS_TABLE) -> None:
        self.uri = table_uri(settings, name)
        self._options = storage_options(settings, self.uri)

    def append(self, records: Sequence[dict[str, Any]], run_id: str, batch_id: int) -> bool:
        """Append `records` unless the table recorded this batch of this run already;
        whether it did append."""
        with _ONE_AT_A_TIME:
            return self._append(records, run_id, batch_id)

    def _append(self, records: Sequence[dict[str, Any]], run_id: str, batch_id: int) -> bool:
        table = DeltaTable(self.uri, storage_options=self._options)
        try:
            if recorded(table, run_id, batch_id):
                return False
            rows = pa.Table.from_pylist(list(records), schema=pa.schema(table.schema().to_arrow()))
            write_deltalake(table, rows, mode="append", commit_properties=once(run_id, batch_id))
            return True
        finally:
            del table  # see docs/architecture.md: delta-rs objects are dropped explicitly
