"""Silver: bronze records -> typed, deduplicated, CDC-merged, SCD2, quality-checked tables.

Modules, one job each: spec (pipeline spec files in pipelines/), expectations (suites and
row rules compiled to Spark predicates), field_types (message field conversions), parsing
(bronze -> typed columns, parse/schema failures), routing (silver / quarantine / fail,
counts), delta_writes (exactly-once delta-spark commits), dedupe_append, scd2 and cdc_merge
(the write modes), batch (one micro-batch), job (the streaming queries, run and rebuild),
table_checks (table-level expectations with Great Expectations).

Public API: run_silver, rebuild_silver, run_table_checks.
"""

from spark_streaming.silver.job import rebuild_silver, run_silver
from spark_streaming.silver.table_checks import run_table_checks

__all__ = ["rebuild_silver", "run_silver", "run_table_checks"]
