"""One silver micro-batch: parse, judge, stop on `fail` rules, then commit quarantine,
silver and quality metrics (each exactly once for the run and batch id)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.storagelevel import StorageLevel

from lakehouse.definitions import TableDefinition
from settings import Settings
from spark_streaming.phase_timer import PhaseTimer
from spark_streaming.session import use_small_batch_confs
from spark_streaming.silver import cdc_merge, dedupe_append, scd2
from spark_streaming.silver.batch_metrics import BatchMetricsTable
from spark_streaming.silver.delta_writes import DeltaTarget
from spark_streaming.silver.expectations import Suite
from spark_streaming.silver.parsing import Parser
from spark_streaming.silver.quarantine import QuarantineTable
from spark_streaming.silver.routing import (
    LATE_RULE,
    check_fail_rules,
    count,
    good_rows,
    quarantine_rows,
    route,
)
from spark_streaming.silver.spec import PipelineSpec

# Figures run_silver reports per table: bronze rows read, rows that passed to the silver
# write, rows quarantined, passed rows with a warning, tombstones skipped, silver rows
# inserted/updated/deleted.
TOTALS = ("read", "passed", "quarantined", "warned", "tombstones", "changed")
log = logging.getLogger("lakehouse.silver")


@dataclass
class SilverPipeline:
    """Everything one silver query needs; `process` is its foreachBatch function."""

    settings: Settings
    spec: PipelineSpec
    table: TableDefinition
    suite: Suite
    run_id: str
    totals: dict[str, int] = field(default_factory=dict)
    batches: int = 0  # micro-batches committed (with `totals`: what a progress line counts)
    last_phases: dict[str, float] = field(default_factory=dict)  # the last batch's seconds

    def __post_init__(self) -> None:
        self.silver = DeltaTarget(self.settings, self.spec.table)
        self.quarantine = QuarantineTable(self.settings, self.spec.quarantine)
        self.metrics = BatchMetricsTable(self.settings)
        self.rules = self.suite.row_rules
        self.parser = Parser(self.spec, self.table)
        # the MERGE's time bounds, on a table of many files, come with the batch's counts
        # (no job of their own)
        self.ranged = (dedupe_append.ranged_columns(self.table)
                       if self.spec.mode == "dedupe_append" else [])
        self.totals = {name: 0 for name in TOTALS} | self.totals

    def process(self, batch: DataFrame, batch_id: int) -> None:
        spark = batch.sparkSession
        phases = PhaseTimer()
        rows = batch.count()  # reads the bronze files' row counts, a fraction of a second
        if not rows:
            # a new bronze table's first batch: parsing and judging nothing cost 2-3 s of
            # CPU and a metrics commit of zeros; an idle table commits nothing
            log.info("%s batch %d: no rows, nothing committed", self.spec.table, batch_id)
            return
        # generated code pays only for large batches (spark_conf.SMALL_BATCH_ROWS)
        use_small_batch_confs(spark, self.settings, rows)
        phases.done("size")
        # Checkpointed between parsing and routing: Spark would otherwise inline the wide
        # parsing expressions into every rule and stage column (slow planning and codegen).
        # Lazily: the checkpoint and the routed rows' cache fill in the one job that counts
        # the routed rows (no job of the parse's own).
        parsed = self.parser(batch).localCheckpoint(eager=False)
        routed = route(parsed, self.spec, self.table, self.rules)
        frame = routed.frame.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            routed = type(routed)(frame, routed.rules, routed.late)
            # The bounds narrow Spark's MERGE only: a batch that commits from the driver
            # (passed <= rows <= the limit) needs neither them nor the file count, whose
            # first call loads the table's snapshot in Spark (5.5-9.8 s in a continuous
            # ingest's first batch)
            ranged = self.ranged if not self._on_driver(rows) else []
            if ranged:
                ranged = ranged if dedupe_append.bounded(self.silver, spark) else []
                phases.done("files")
            counts = count(routed, self.quarantine.may_hold(), ranged)
            phases.done("count")
            check_fail_rules(routed, self.spec.table, batch_id, counts)
            if counts["quarantined"]:
                self.quarantine.add(quarantine_rows(routed), counts["_held"] > 0,
                                    self.run_id, batch_id,
                                    on_driver=self._on_driver(counts["quarantined"]))
                phases.done("quarantine")
            counts["changed"] = (self._write_silver(spark, good_rows(routed, self.table),
                                                    batch_id, counts)
                                 if counts["passed"] else 0)
            phases.done("silver")
            self.metrics.append(self._metrics_rows(counts, batch_id), self.run_id, batch_id)
            phases.done("metrics")
        finally:
            frame.unpersist()
        log.info("%s batch %d: %d rows read, %d changed; %s", self.spec.table, batch_id,
                 counts["read"], counts["changed"], phases)
        for name in TOTALS:
            self.totals[name] += counts.get(name, 0)
        self.batches += 1
        self.last_phases = phases.seconds

    def _on_driver(self, rows: int) -> bool:
        """Whether a write of `rows` rows commits from the driver (delta-rs)."""
        return rows <= self.settings.spark.driver_commit_rows

    def _write_silver(self, spark: SparkSession, rows: DataFrame, batch_id: int,
                      counts: dict[str, Any]) -> int:
        mode, target, run_id = self.spec.mode, self.silver, self.run_id
        on_driver = self._on_driver(counts["passed"])
        if mode == "dedupe_append":
            return dedupe_append.write(rows, self.table, target, run_id, batch_id, counts,
                                       on_driver=on_driver)
        if mode == "cdc_merge":
            return cdc_merge.write(rows, list(self.spec.key), self.table, target, run_id,
                                   batch_id, on_driver=on_driver)
        return scd2.write(spark, rows, self.spec, self.table, target, run_id, batch_id,
                          on_driver=on_driver)

    def _metrics_rows(self, counts: dict[str, int], batch_id: int) -> list[dict[str, object]]:
        checked = counts["checked"]
        read_not_tombstone = counts["read"] - counts["tombstones"]
        rows = [(rule.name, rule.severity, checked, counts[f"_r{i}"])
                for i, rule in enumerate(self.rules)]
        if "_late" in counts:
            rows.append((LATE_RULE, "quarantine", checked, counts["_late"]))
        rows += [("_parse", "parse", read_not_tombstone, counts["parse"]),
                 ("_schema", "schema", read_not_tombstone - counts["parse"], counts["schema"]),
                 ("_tombstones", "skipped", counts["read"], counts["tombstones"]),
                 ("_batch", "batch", counts["read"], counts["quarantined"])]
        now = datetime.now(UTC)
        return [{
            "silver_table": self.spec.table, "run_id": self.run_id, "batch_id": batch_id,
            "rule": rule, "severity": severity, "rows_checked": checked_rows,
            "rows_failed": failed,
            "rows_passed": counts["passed"] if rule == "_batch" else checked_rows - failed,
            "recorded_at": now,
        } for rule, severity, checked_rows, failed in rows]
