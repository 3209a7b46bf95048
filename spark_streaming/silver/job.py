"""The silver streaming queries: one per silver table, reading its bronze table as a
Delta stream (delta-spark, table versions in the checkpoint) into a foreachBatch that
parses, checks and commits with delta-spark.

Checkpoints live at <checkpoint root>/<silver table>; next to each, <silver table>.run_id
holds the id of the checkpoint's generation, used as the Delta app-transaction id of every
commit, so batch ids (which restart with a new checkpoint) never collide with an earlier
generation's. A rebuild removes both and empties the silver table: the next run reads
bronze from its first version (Kappa-style replay).
"""

from __future__ import annotations

import shutil
import threading
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import deltalake
from delta.tables import DeltaTable
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from lakehouse.catalog import registered_tables
from lakehouse.definitions import TableDefinition, load_definitions
from lakehouse.storage import storage_options, table_uri
from lakehouse.table_manager import apply_plan, plan_table
from lakehouse.table_status import holds_data
from settings import ConfigError, Settings
from settings.report import Report
from spark_streaming.checkpoint_offsets import committed_source_offsets
from spark_streaming.layer_progress import LayerProgress
from spark_streaming.query_restarts import RestartingQuery
from spark_streaming.silver.batch import SilverPipeline
from spark_streaming.silver.batch_metrics import METRICS_TABLE
from spark_streaming.silver.delta_writes import DeltaTarget
from spark_streaming.silver.expectations import load_suite
from spark_streaming.silver.routing import FailRuleBroken
from spark_streaming.silver.spec import PipelineSpec, load_specs
from spark_streaming.table_lock import writing

RESET_CONCURRENCY = 4  # tables emptied at once by a rebuild


def _checkpoint(settings: Settings, table: str) -> Path:
    root = settings.checkpoint_root
    if "://" in root:
        raise ConfigError(f"lakehouse.checkpoint_dir: the silver job keeps checkpoints in a "
                          f"local folder, got {root!r}")
    return Path(root) / table


def run_id(settings: Settings, table: str) -> str:
    """The app-transaction id of the table's current checkpoint generation."""
    path = _checkpoint(settings, table).with_suffix(".run_id")
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"lakehouse-silver-{table}-{uuid.uuid4().hex[:12]}\n")
    return path.read_text().strip()


def ensure_tables(spark: SparkSession, settings: Settings, names: list[str],
                  report: Report) -> None:
    """Create the tables the silver queries need that do not exist yet (apply's create
    step only, with their catalog names; converging drift is `lakehouse tables apply`'s
    job).

    Asked first whether each log exists (delta-rs): in an ingest, `tables apply` made
    them all, and planning each against its definition and the catalog cost seconds of
    every silver run's start."""
    root = settings.tables_uri
    storage = storage_options(settings, root)
    missing = [name for name in names
               if not deltalake.DeltaTable.is_deltatable(table_uri(settings, name), storage)]
    if not missing:
        return
    catalog = registered_tables(settings)
    for definition in load_definitions(tables=missing):
        plan = plan_table(definition, root, storage, catalog)
        if plan.version is None:
            apply_plan(spark, plan, storage, report)


def _pipeline(settings: Settings, spec: PipelineSpec,
              definitions: dict[str, TableDefinition]) -> SilverPipeline:
    return SilverPipeline(settings, spec, definitions[spec.table], load_suite(spec.suite_path),
                          run_id(settings, spec.table))


def start_query(spark: SparkSession, settings: Settings, pipeline: SilverPipeline, *,
                available_now: bool, interval: str = "10 seconds",
                max_files_per_trigger: int | None = None) -> StreamingQuery:
    source = pipeline.table.source
    assert source is not None  # checked by the spec loader
    checkpoint = str(_checkpoint(settings, pipeline.spec.table))
    reader = spark.readStream.format("delta")
    if max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", str(max_files_per_trigger))
    bronze = DeltaTarget(settings, source.tables[0])
    writer = (reader.load(bronze.path).writeStream.queryName(pipeline.spec.table)
              .foreachBatch(pipeline.process).option("checkpointLocation", checkpoint))
    writer = (writer.trigger(availableNow=True) if available_now
              else writer.trigger(processingTime=interval))
    return writer.start()


def _prepare(spark: SparkSession, settings: Settings, chosen: list[PipelineSpec],
             report: Report) -> list[SilverPipeline]:
    definitions = {d.name: d for d in load_definitions()}
    needed = {METRICS_TABLE}
    for spec in chosen:
        source = definitions[spec.table].source
        needed |= {spec.table, spec.quarantine, *(source.tables if source else [])}
    ensure_tables(spark, settings, sorted(needed), report)
    return [_pipeline(settings, spec, definitions) for spec in chosen]


def _caught_up(settings: Settings, pipeline: SilverPipeline) -> bool:
    """The query's last finished batch read the bronze table's latest version to its end
    (saves starting a query only to find nothing new). Delta's source offset after a fully
    read version v is (v + 1, index -1). The table's id and version come from its log
    through delta-rs: two Spark jobs (detail, history) took 1-3 s a table."""
    source = pipeline.table.source
    assert source is not None
    offsets = committed_source_offsets(str(_checkpoint(settings, pipeline.spec.table)))
    offset = next((o for o in offsets or [] if "reservoirVersion" in o), None)
    if offset is None:
        return False
    uri = table_uri(settings, source.tables[0])
    bronze = deltalake.DeltaTable(uri, storage_options=storage_options(settings, uri))
    try:
        return (offset.get("reservoirId") == bronze.metadata().id
                and int(offset["reservoirVersion"]) > bronze.version())
    finally:
        del bronze  # see docs/architecture.md: delta-rs objects are dropped explicitly


def _nothing_to_read(settings: Settings, pipeline: SilverPipeline) -> bool:
    """Before a catch-up's first round: the query would provably read nothing, as its
    checkpoint has read bronze to the end or, without a checkpoint, bronze holds no data
    yet (from the logs alone). A query start and an empty first batch cost seconds of
    driver time each, and a catch-up on new topics meets several empty bronze tables."""
    if _caught_up(settings, pipeline):
        return True
    if committed_source_offsets(str(_checkpoint(settings, pipeline.spec.table))) is not None:
        return False
    source = pipeline.table.source
    assert source is not None
    return not holds_data(settings, source.tables[0])


def _terminated(query: StreamingQuery) -> bool:
    try:
        return bool(query.awaitTermination(1))
    except StreamingQueryException:
        return True  # reported through query.exception()


def _reason(text: str) -> str:
    """The reason a query stopped, without the JVM and Python stack traces around it."""
    marker = f"{FailRuleBroken.__name__}: "
    if marker in text:
        text = text.split(marker, 1)[1].split("\n\tat ", 1)[0].strip()
    return text


def _failed(query: StreamingQuery, table: str) -> RuntimeError:
    return RuntimeError(f"silver query {table} stopped: {_reason(str(query.exception()))}")


def _broken_rule(text: str, table: str) -> str | None:
    """A broken `fail` rule stops the layer (replaying the batch breaks it again)."""
    if f"{FailRuleBroken.__name__}: " not in text:
        return None
    return f"silver query {table} stopped: {_reason(text)}"


def run_silver(spark: SparkSession, settings: Settings, tables: list[str] | None = None,
               available_now: bool = True, stop: threading.Event | None = None,
               report: Report = print, *, interval: str = "10 seconds",
               max_files_per_trigger: int | None = None,
               specs: list[PipelineSpec] | None = None) -> dict[str, dict[str, int]]:
    """Bronze -> silver for `tables` (default: every pipeline spec); counts per table.

    available_now: catch up and return, re-running until a round reads nothing (an
    availableNow run ends at the versions seen when it started). Otherwise run on a
    processing-time trigger until `stop` is set. A query that fails (e.g. a `fail` rule)
    raises RuntimeError naming the table and the reason.
    """
    chosen = specs if specs is not None else load_specs(tables=tables or ())
    with writing(settings, [s.table for s in chosen], "silver queries"):
        pipelines = _prepare(spark, settings, chosen, report)
        if not available_now:
            _run_continuous(spark, settings, pipelines, report, stop or threading.Event(),
                            interval, max_files_per_trigger)
        else:
            _catch_up(spark, settings, pipelines, report, stop, max_files_per_trigger)
    return {p.spec.table: dict(p.totals) for p in pipelines}


def _catch_up(spark: SparkSession, settings: Settings, pipelines: list[SilverPipeline],
              report: Report, stop: threading.Event | None,
              max_files_per_trigger: int | None) -> None:
    """Rounds of availableNow queries, every pending table's query running at once (their
    start-up and commits overlap), until each table has read its bronze to the end."""
    round_number = 0
    pending = [p for p in pipelines if not _nothing_to_read(settings, p)]
    for pipeline in pipelines:
        if pipeline not in pending:
            report(f"silver: {pipeline.spec.table}: nothing new in bronze, no query started")
    while pending and (stop is None or not stop.is_set()):
        round_number += 1
        before = {id(p): p.totals.get("read", 0) for p in pending}
        running = [(p, start_query(spark, settings, p, available_now=True,
                                   max_files_per_trigger=max_files_per_trigger))
                   for p in pending]
        for _pipeline, query in running:
            while not _terminated(query):
                if stop is not None and stop.is_set():
                    query.stop()
        failed = next(((p, q) for p, q in running if q.exception() is not None), None)
        if failed is not None:
            raise _failed(failed[1], failed[0].spec.table)
        read_this_round = 0
        for pipeline, _query in running:
            rows = pipeline.totals.get("read", 0) - before[id(pipeline)]
            read_this_round += rows
            report(f"silver round {round_number}: {pipeline.spec.table}: {rows} bronze rows, "
                   f"totals {pipeline.totals}")
            if rows == 0 or _caught_up(settings, pipeline):
                pending.remove(pipeline)
        if read_this_round == 0:
            break


def _run_continuous(spark: SparkSession, settings: Settings, pipelines: list[SilverPipeline],
                    report: Report, stop: threading.Event, interval: str,
                    max_files_per_trigger: int | None) -> None:
    """Every table's query until `stop` is set; one that stops for an outage is started
    again from its checkpoint, one stopped by a broken `fail` rule ends the layer."""
    running = [(p, RestartingQuery(
        "silver", p.spec.table,
        lambda p=p: start_query(spark, settings, p, available_now=False, interval=interval,
                                max_files_per_trigger=max_files_per_trigger),
        report, settings.ingest.recovery_timeout_seconds,
        permanent=lambda text, table=p.spec.table: _broken_rule(text, table),
        pauses=settings.ingest.retry_pauses))
               for p in pipelines]
    last_report = time.monotonic()
    progress = LayerProgress("silver")
    reported = {name: 0 for name in ("batches", "read", "passed", "quarantined")}
    try:
        while not stop.is_set():
            for _pipeline, query in running:
                query.check()
            if time.monotonic() - last_report > settings.ingest.progress_interval_seconds:
                # one reading of the pipelines' own counters: the figures add up
                totals = {name: sum(p.batches if name == "batches" else p.totals[name]
                                    for p, _ in running) for name in reported}
                since = {name: totals[name] - reported[name] for name in reported}
                report(progress.line({q.table: q.query.recentProgress
                                      for _, q in running if q.query is not None},
                                     counted=(since["batches"], since["read"]))
                       + f"; {since['passed']:,} passed, {since['quarantined']:,} quarantined")
                reported = totals
                last_report = time.monotonic()
            stop.wait(1)
    finally:
        for _, query in running:
            query.stop()
        report(f"silver: {len(running)} queries stopped")


def rebuild_silver(spark: SparkSession, settings: Settings, table: str | Sequence[str],
                   report: Report = print, *, specs: list[PipelineSpec] | None = None
                   ) -> dict[str, dict[str, int]]:
    """Replay `table` (or several tables at once, their queries side by side) from bronze:
    new checkpoint and run id, table emptied, caught up.

    Quarantine is append-only and keeps its rows; records already there are not added
    again. Refused (TableBusy) while another process runs the table's query.
    """
    tables = [table] if isinstance(table, str) else list(table)
    chosen = [s for s in (specs or load_specs(tables=tables)) if s.table in tables]
    missing = sorted(set(tables) - {s.table for s in chosen})
    if missing:
        raise ConfigError(f"--table: no silver pipeline for {', '.join(missing)}")
    with writing(settings, tables, f"silver rebuild of {', '.join(tables)}"):
        # each DELETE waits mostly on the bucket: one after the other, emptying the 8
        # silver tables took 16 s of a cluster replay's 77
        with ThreadPoolExecutor(RESET_CONCURRENCY) as pool:
            list(pool.map(lambda name: _reset(spark, settings, name, report), tables))
        return run_silver(spark, settings, tables, available_now=True, report=report,
                          specs=chosen)


def _reset(spark: SparkSession, settings: Settings, table: str, report: Report) -> None:
    """Remove the table's run id and checkpoint, and empty the table.

    The run id goes first: a crash between the two then leaves the old checkpoint under a
    new run id (the next run goes on from it), never a new checkpoint under the old run
    id, whose batch ids 0, 1, ... Delta would skip as already written."""
    checkpoint = _checkpoint(settings, table)
    checkpoint.with_suffix(".run_id").unlink(missing_ok=True)
    shutil.rmtree(checkpoint, ignore_errors=True)
    target = DeltaTarget(settings, table)
    if DeltaTable.isDeltaTable(spark, target.path):
        target.open(spark).delete()
        report(f"{table}: emptied, checkpoint {checkpoint} removed; replaying bronze")
    else:
        report(f"{table}: no table yet; building it from bronze")
