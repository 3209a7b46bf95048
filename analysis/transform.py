"""`lakehouse transform`: Spark over the shared catalog, `dbt build`, the docs catalog and
source freshness, in one process, with the time each step took. When nothing changed since
the last successful build (analysis.build_inputs), it says so and starts nothing."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field

from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError
from pyspark.sql import SparkSession

from analysis.build_inputs import BuildInputs, BuildRecord, current_inputs, freshness_now
from analysis.dbt_lakehouse_models import source_selector
from analysis.dbt_project import DbtOutcome, DbtPaths, TransformError, prepare_project, run_dbt
from analysis.lakehouse_rows import lakehouse_tables, rows_held
from lakehouse.definitions import LAYERS, load_definitions
from lakehouse.storage import storage_options, table_uri
from settings import Settings
from settings.report import Report


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
def analysis_session(settings: Settings, result: TransformResult, report: Report,
                     paths: DbtPaths | None = None) -> Iterator[tuple[SparkSession, DbtPaths]]:
    """A SparkSession on the shared catalog, and the dbt project ready to run in it."""
    from spark_streaming.session import command_session, confs_for_rows
    from spark_streaming.spark_conf import SMALL_READ_ROWS

    paths = paths or prepare_project(settings)
    result.tables = lakehouse_tables(settings)
    if not result.tables:
        raise TransformError(
            "the table catalog has no lakehouse tables (metastore database "
            f"{settings.postgres.metastore_database!r}): run `make ingest` (or `lakehouse "
            "ingest --until-caught-up`) first")
    with ExitStack() as held:
        with _timed(result, "spark_start"):
            spark = held.enter_context(command_session(settings, "lakehouse-transform"))
        report(f"{len(result.tables)} lakehouse tables in the catalog")
        # dbt's queries on this session: interpreted when the lakehouse is small (a full
        # build over a test-sized lakehouse 64.3-64.5 s generated, 56.3-56.8 interpreted)
        rows = rows_held(settings, result.tables, SMALL_READ_ROWS)
        held.enter_context(confs_for_rows(spark, settings, rows, SMALL_READ_ROWS))
        yield spark, paths


def transform(settings: Settings, dbt_args: list[str], report: Report, *,
              docs: bool = True, freshness: bool = True, force: bool = False) -> TransformResult:
    """dbt build (tests included) over the lakehouse; raises TransformError on a failure.
    Skips the build when its inputs are those of the last successful one, unless `force`."""
    result = TransformResult()
    paths = prepare_project(settings)
    record = BuildRecord(paths.target_dir.parent / "last_build.json")
    with _timed(result, "inputs_check"):
        before = current_inputs(settings, paths.project_dir, dbt_args)
    if not force and "--full-refresh" not in dbt_args and _nothing_new(
            record, before, paths, report, docs=docs, freshness=freshness):
        return result
    record.forget()  # until this build succeeds
    with analysis_session(settings, result, report, paths) as (_, paths):
        with _timed(result, "dbt_build"):
            outcome = run_dbt(paths, ["build", *dbt_args])
            result.outcomes.append(outcome)
            _check(outcome, report)
        # docs first: a stale source fails the command, but the site still gets built
        if docs:
            with _timed(result, "docs_generate"):
                generate_docs(settings, paths, report, result)
        built = _read_and_written(before, current_inputs(settings, paths.project_dir,
                                                           dbt_args))
        record.record(built, docs=docs, freshness=False)
        if freshness:
            with _timed(result, "source_freshness"):
                left_out = [f"--exclude={selector}"
                            for selector in sources_not_judged(settings, report)]
                outcome = run_dbt(paths, ["source", "freshness", *left_out])
                outcome.command = "source freshness"
                result.outcomes.append(outcome)
                # sources.json now judges this state, whatever the judgement
                record.record(built, docs=docs, freshness=True)
                _check(outcome, report)
    return result


def _never_received(settings: Settings, name: str) -> bool:
    """The table holds no data file: nothing was ever written to it (bronze is
    append-only: a table that received records keeps them)."""
    uri = table_uri(settings, name)
    try:
        table = DeltaTable(uri, storage_options=storage_options(settings, uri))
    except TableNotFoundError:
        return True
    return not table.file_uris()


def sources_not_judged(settings: Settings, report: Report) -> list[str]:
    """dbt selectors of the topic sources `dbt source freshness` leaves out: those whose
    table file says `freshness.when_empty: skip` and whose bronze table never received a
    record (its feed never ran). Each is reported; once a record lands it is judged."""
    selectors = []
    for definition in load_definitions():
        source = definition.source
        if (definition.layer == "bronze" and source is not None and source.topic
                and source.freshness.when_empty == "skip"
                and _never_received(settings, definition.name)):
            selector = source_selector(definition)
            report(f"{selector.removeprefix('source:')}: no record yet (its feed never ran); "
                   "source freshness not judged until one lands")
            selectors.append(selector)
    return selectors


def _read_and_written(before: BuildInputs, after: BuildInputs) -> BuildInputs:
    """The lakehouse tables as they were when the build began (an ingest committing
    meanwhile makes the next transform build again) and dbt's own tables as it left them."""
    versions = {name: (before if name.split(".", 1)[0] in LAYERS else after)
                .table_versions.get(name, "") for name in after.table_versions}
    return BuildInputs(arguments=after.arguments, catalog=after.catalog,
                       project_digest=before.project_digest, table_versions=versions)


def _nothing_new(record: BuildRecord, inputs: BuildInputs, paths: DbtPaths, report: Report,
                 *, docs: bool, freshness: bool) -> bool:
    """True, after saying so and re-judging source freshness, when the last successful build
    ran over the same inputs (and generated the docs, if they are wanted)."""
    last = record.last(inputs.arguments)
    if (last is None or last.inputs != inputs or (docs and not last.docs)
            or (freshness and not last.freshness)):
        return False
    statuses = freshness_now(paths.target_dir / "sources.json") if freshness else {}
    if freshness and not statuses:
        return False  # no freshness result of these inputs to judge: build and check
    report(f"nothing new since the last build ({last.finished_at[:19]} UTC): "
           f"{inputs.describe()}; dbt build{' and docs' if docs else ''} skipped "
           "(--force rebuilds)")
    if freshness:
        counts = ", ".join(f"{len(names)} {status}" for status, names in sorted(statuses.items()))
        report(f"dbt source freshness (newest records unchanged, ages now): {counts}")
        if statuses.get("error"):
            raise TransformError("dbt source freshness failed: stale sources "
                                 + ", ".join(statuses["error"]))
    return True


def generate_docs(settings: Settings, paths: DbtPaths, report: Report,
                  result: TransformResult) -> None:
    outcome = run_dbt(paths, ["docs", "generate"])
    result.outcomes.append(outcome)
    _check(outcome, report)
    report(f"docs site files in {paths.target_dir} (`lakehouse docs` serves them)")
