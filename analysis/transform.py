"""`lakehouse transform`: Spark over the shared catalog, `dbt build`, the docs catalog and
source freshness, in one process, with the time each step took."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from pyspark.sql import SparkSession

from analysis.dbt_project import DbtOutcome, DbtPaths, TransformError, prepare_project, run_dbt
from lakehouse.catalog import registered_tables
from lakehouse.definitions import LAYERS
from settings import Settings

Report = Callable[[str], None]


@dataclass
class TransformResult:
    seconds: dict[str, float] = field(default_factory=dict)
    tables: list[str] = field(default_factory=list)
    outcomes: list[DbtOutcome] = field(default_factory=list)


@contextmanager
def _timed(result: TransformResult, step: str) -> Iterator[None]:
    began = time.perf_counter()
    try:
        yield
    finally:
        result.seconds[step] = round(time.perf_counter() - began, 2)


def _check(outcome: DbtOutcome, report: Report) -> None:
    counts = ", ".join(f"{n} {status}" for status, n in sorted(outcome.counts.items()))
    report(f"dbt {outcome.command}: {counts or 'done'}")
    if not outcome.success:
        lines = "\n  ".join(outcome.failures) or "see the dbt log"
        raise TransformError(f"dbt {outcome.command} failed:\n  {lines}")


@contextmanager
def analysis_session(settings: Settings, result: TransformResult,
                     report: Report) -> Iterator[tuple[SparkSession, DbtPaths]]:
    """A SparkSession on the shared catalog, and the dbt project ready to run in it."""
    from spark_streaming.session import build_spark_session

    paths = prepare_project(settings)
    result.tables = sorted(name for name in registered_tables(settings)
                           if name.split(".", 1)[0] in LAYERS)  # not dbt's marts
    if not result.tables:
        raise TransformError(
            "the table catalog has no lakehouse tables (metastore database "
            f"{settings.postgres.metastore_database!r}): run `make ingest` (or `lakehouse "
            "ingest --until-caught-up`) first")
    with _timed(result, "spark_start"):
        spark = build_spark_session(settings, app_name="lakehouse-transform")
    try:
        report(f"{len(result.tables)} lakehouse tables in the catalog")
        yield spark, paths
    finally:
        spark.stop()


def transform(settings: Settings, dbt_args: list[str], report: Report, *,
              docs: bool = True, freshness: bool = True) -> TransformResult:
    """dbt build (tests included) over the lakehouse; raises TransformError on a failure."""
    result = TransformResult()
    with analysis_session(settings, result, report) as (_, paths):
        with _timed(result, "dbt_build"):
            outcome = run_dbt(paths, ["build", *dbt_args])
            result.outcomes.append(outcome)
            _check(outcome, report)
        # docs first: a stale source fails the command, but the site still gets built
        if docs:
            with _timed(result, "docs_generate"):
                generate_docs(settings, paths, report, result)
        if freshness:
            with _timed(result, "source_freshness"):
                outcome = run_dbt(paths, ["source", "freshness"])
                result.outcomes.append(outcome)
                _check(outcome, report)
    return result


def generate_docs(settings: Settings, paths: DbtPaths, report: Report,
                  result: TransformResult) -> None:
    outcome = run_dbt(paths, ["docs", "generate"])
    result.outcomes.append(outcome)
    _check(outcome, report)
    report(f"docs site files in {paths.target_dir} (`lakehouse docs` serves them)")
