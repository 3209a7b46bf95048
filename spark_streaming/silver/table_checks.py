"""Table-level expectations (uniqueness, row counts, freshness) run by Great Expectations
over whole silver tables, results appended to quality_results and the GX Data Docs site.

The suites are the same files the streaming job compiles its row rules from; only their
table-level expectations run here (the row-level ones are enforced on every micro-batch).
A freshness expectation takes its bound as a suite parameter ({"$PARAMETER": name}) with
meta.max_age_seconds: the parameter is set to now minus that age at check time.
"""

from __future__ import annotations

import json
import os
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from settings import Settings
from settings.report import Report
from spark_streaming.silver.delta_writes import DeltaTarget
from spark_streaming.silver.expectations import Expectation, Suite, load_suite
from spark_streaming.silver.job import ensure_tables
from spark_streaming.silver.spec import load_specs

RESULTS_TABLE = "quality_results"


def _parameters(expectations: list[Expectation]) -> dict[str, Any]:
    now = datetime.now(UTC).replace(tzinfo=None)  # Spark hands timestamps as naive UTC
    parameters = {}
    for expectation in expectations:
        age = expectation.meta.get("max_age_seconds")
        for value in expectation.kwargs.values():
            if isinstance(value, dict) and "$PARAMETER" in value and age is not None:
                parameters[value["$PARAMETER"]] = now - timedelta(seconds=float(age))
    return parameters


def _gx_suite(suite: Suite, expectations: list[Expectation]) -> Any:
    from great_expectations.core import ExpectationSuite

    return ExpectationSuite(name=suite.name, expectations=[
        {"type": e.type, "kwargs": e.kwargs, "meta": e.meta} for e in expectations])


def docs_folder(settings: Settings) -> Path:
    """The GX project folder (file context) under the state folder."""
    return settings.state_path / "gx"


def data_docs_index(settings: Settings) -> Path:
    return docs_folder(settings) / "gx" / "uncommitted" / "data_docs" / "local_site" / "index.html"


def run_table_checks(spark: SparkSession, settings: Settings, tables: list[str] | None = None,
                     build_docs: bool = True, report: Report = print) -> list[dict[str, Any]]:
    """Validate each silver table against its suite's table-level expectations; one result
    dict per expectation (also appended to quality_results)."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx

    ensure_tables(spark, settings, [RESULTS_TABLE], report)
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="file", project_root_dir=str(docs_folder(settings)))
    # progress bars would interleave with the job's own progress lines
    context.variables.progress_bars = ProgressBarsConfig(globally=False,
                                                         metric_calculations=False)
    source = context.data_sources.add_or_update_spark(name="lakehouse")
    check_run = uuid.uuid4().hex[:12]
    checked_at = datetime.now(UTC)
    results: list[dict[str, Any]] = []
    for spec in load_specs(tables=tables or ()):
        suite = load_suite(spec.suite_path)
        expectations = suite.table_expectations
        if not expectations:
            continue
        frame = DeltaTarget(settings, spec.table).read(spark)
        asset = next((a for a in source.assets if a.name == spec.table), None) or \
            source.add_dataframe_asset(name=spec.table)
        batch_definition = next(
            (b for b in asset.batch_definitions if b.name == "whole_table"), None
        ) or asset.add_batch_definition_whole_dataframe("whole_table")
        gx_suite = context.suites.add_or_update(_gx_suite(suite, expectations))
        validation = context.validation_definitions.add_or_update(gx.ValidationDefinition(
            name=f"{spec.table}_table_checks", data=batch_definition, suite=gx_suite))
        checkpoint = context.checkpoints.add_or_update(gx.Checkpoint(
            name=f"{spec.table}_checkpoint", validation_definitions=[validation]))
        outcome = checkpoint.run(batch_parameters={"dataframe": frame},
                                 expectation_parameters=_parameters(expectations))
        for validation_result in outcome.run_results.values():
            for item in validation_result.results:
                config = item.expectation_config
                meta = config.meta or {}
                observed = (item.result or {}).get("observed_value")
                results.append({
                    "check_run_id": check_run, "checked_table": spec.table,
                    "suite": suite.name, "rule": str(meta.get("rule", config.type)),
                    "expectation_type": config.type,
                    "severity": str(meta.get("severity", "warn")),
                    "success": bool(item.success),
                    "observed_value": json.dumps(observed, default=str),
                    "checked_at": checked_at})
        failed = [r["rule"] for r in results if r["checked_table"] == spec.table
                  and not r["success"]]
        report(f"{spec.table}: {len(expectations)} table checks, failed: {failed or 'none'}")
    if build_docs and results:
        context.build_data_docs()
    if results:
        target = DeltaTarget(settings, RESULTS_TABLE)
        data = spark.createDataFrame(results, schema=target.schema())
        target.append(data, f"lakehouse-table-checks-{check_run}", 0)
    return results
