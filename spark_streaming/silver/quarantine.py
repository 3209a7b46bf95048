"""Quarantine commits: an append by Kafka coordinates, a MERGE only where a row may be
there already.

Quarantine is append-only and keyed by (topic, partition, offset): a rebuild from bronze
must not add a record twice. A MERGE on those coordinates reads the table to find out, in
every batch that quarantined anything. But a record the table did not hold when the
pipeline first looked (its files' statistics: topic, partition and highest offset, read
with delta-rs at the first batch, no Spark job) can only have been written since by this
pipeline, and then only by the same batch of the same checkpoint, redone with its batch
id: Delta's app transaction skips that append. So a batch none of whose quarantined rows
is covered by those statistics is a plain append; one that may hold some (a rebuild
replaying bronze) is merged. A file without statistics makes every batch of the pipeline
take the MERGE.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import reduce

import deltalake
import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from lakehouse.storage import storage_options
from settings import Settings
from spark_streaming.silver.delta_writes import DeltaTarget

_STATS = ("min.kafka_topic", "max.kafka_topic", "min.kafka_partition",
          "max.kafka_partition", "max.kafka_offset")


@dataclass(frozen=True)
class HeldRange:
    """Files whose topics and partitions lie in these bounds hold offsets up to `offset`."""

    topics: tuple[str, str]
    partitions: tuple[int, int]
    offset: int

    def covers(self, topic: Column, partition: Column, offset: Column) -> Column:
        return (topic.between(*self.topics) & partition.between(*self.partitions)
                & (offset <= self.offset))


def held_ranges(files: Iterable[dict[str, object]]) -> list[HeldRange] | None:
    """The ranges of coordinates the files hold (merged per topic and partition bounds);
    None when a file has no statistics for them (then nothing can be ruled out)."""
    highest: dict[tuple[str, str, int, int], int] = {}
    for stats in files:
        values = [stats.get(name) for name in _STATS]
        if any(value is None for value in values):
            return None
        low_topic, high_topic, low_part, high_part, offset = values
        bounds = (str(low_topic), str(high_topic), int(low_part), int(high_part))  # type: ignore[call-overload]
        highest[bounds] = max(highest.get(bounds, -1), int(offset))  # type: ignore[call-overload]
    return [HeldRange((t0, t1), (p0, p1), offset)
            for (t0, t1, p0, p1), offset in sorted(highest.items())]


class QuarantineTable(DeltaTarget):
    """One quarantine table, as one silver run writes it."""

    def __init__(self, settings: Settings, name: str) -> None:
        super().__init__(settings, name)
        self._options = storage_options(settings, self.uri)
        self._held: Column | None = None

    def may_hold(self) -> Column:
        """True for a row whose coordinates the table may have held when this pipeline
        first asked (read once: see the module docstring for why that suffices)."""
        if self._held is None:
            self._held = self._read_held()
        return self._held

    def _read_held(self) -> Column:
        table = deltalake.DeltaTable(self.uri, storage_options=self._options)
        try:
            files = pa.table(table.get_add_actions(flatten=True)).to_pylist()
        finally:
            del table  # see docs/architecture.md: delta-rs objects are dropped explicitly
        ranges = held_ranges(files)
        if ranges is None:
            return F.lit(True)
        coordinates = (F.col("_b_topic"), F.col("_b_partition"), F.col("_b_offset"))
        return reduce(lambda a, b: a | b, (r.covers(*coordinates) for r in ranges),
                      F.lit(False))

    def add(self, rows: DataFrame, may_hold_some: bool, run_id: str, batch_id: int, *,
            on_driver: bool = False) -> None:
        """Add the batch's quarantined rows once: appended, or merged by coordinates when
        the table may hold some of them (a rebuild replaying bronze); `on_driver`: with
        delta-rs (see DeltaTarget.merge_once)."""
        if may_hold_some:
            self.append_new_records(rows, run_id, batch_id, on_driver=on_driver)
        else:
            self.append(rows, run_id, batch_id, on_driver=on_driver)
