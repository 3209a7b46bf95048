"""Run the gold metrics: for each gold table, read what its silver sources changed since
its last run, recompute exactly the affected keys and replace them in one commit that also
records the silver versions consumed. Nothing new in silver: no commit at all."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError
from pyspark.sql import SparkSession

from lakehouse.definitions import load_definitions
from lakehouse.storage import spark_uri, storage_options, table_uri
from lakehouse.table_status import row_count
from settings import ConfigError, Settings
from settings.report import Report
from spark_streaming.gold import (
    driver_inputs,
    rentals_weather,
    station_availability,
    system_utilisation,
)
from spark_streaming.gold.metric import GoldMetric, PinnedViews, Views, materialize
from spark_streaming.gold.progress import (
    SourceProgress,
    changed_rows,
    consumed_versions,
    source_progress,
)
from spark_streaming.gold.writer import replace_all, replace_keys, replace_keys_from_driver
from spark_streaming.phase_timer import PhaseTimer
from spark_streaming.session import activate_in_thread, confs_for_rows
from spark_streaming.spark_conf import SMALL_BATCH_CONFS, SMALL_READ_ROWS
from spark_streaming.table_lock import writing

log = logging.getLogger("lakehouse.gold")
# Confs a gold table's own session takes from the caller's: days and hours are cut in the
# session time zone; the small-batch confs may be set at run time.
CALLER_CONFS = ("spark.sql.session.timeZone", *SMALL_BATCH_CONFS)

# gold table -> seconds of each phase of its last update in this process (benchmarks)
LAST_PHASES: dict[str, dict[str, float]] = {}

METRICS: dict[str, GoldMetric] = {m.table: m for m in (
    station_availability.METRIC, rentals_weather.METRIC, system_utilisation.METRIC)}


class GoldError(ConfigError):
    """A gold run that cannot start (unknown table, missing table); names what to do."""


def _open(settings: Settings, name: str) -> DeltaTable:
    """The table's Delta log (delta-rs, read-only: existence and versions before Spark)."""
    uri = table_uri(settings, name)
    try:
        return DeltaTable(uri, storage_options=storage_options(settings, uri))
    except TableNotFoundError:
        raise GoldError(f"table {name} does not exist at {uri}: run `lakehouse tables apply` "
                        "first") from None


def _register_changes(spark: SparkSession, settings: Settings, metric: GoldMetric,
                      progress: Sequence[SourceProgress],
                      views: Views) -> dict[str, str] | None:
    """Views of each source's changed rows (empty when it has no news); None: a change
    feed cannot be read, rebuild."""
    changes = {}
    for source in progress:
        columns = list(metric.sources[source.table])
        name = f"gold_changes_{source.table}"
        if source.has_news:
            rows = changed_rows(spark, spark_uri(table_uri(settings, source.table)), source,
                                columns)
            if rows is None:
                return None
            rows.createOrReplaceTempView(name)
        else:
            materialize(spark, spark.table(views[source.table]).select(*columns).limit(0), name)
        changes[source.table] = name
    return changes


def run_metric(spark: SparkSession, settings: Settings, metric: GoldMetric, rebuild: bool,
               report: Report) -> int:
    """Bring one gold table up to date with its sources; rows written (0: nothing to do)."""
    consumed = consumed_versions(_open(settings, metric.table))
    sources = {name: _open(settings, name) for name in metric.sources}
    progress = [source_progress(consumed, name, table) for name, table in sources.items()]
    if not rebuild and not any(p.has_news for p in progress):
        del sources  # see docs/architecture.md: delta-rs objects are dropped explicitly
        report(f"{metric.table}: up to date with "
               + ", ".join(f"{p.table} v{p.current}" for p in progress))
        return 0
    # what the round may read at most: every row of its sources (no statistics: many)
    read_rows = sum(SMALL_READ_ROWS if rows is None else rows
                    for rows in map(row_count, sources.values()))
    del sources
    with confs_for_rows(spark, settings, read_rows, SMALL_READ_ROWS):
        return _update(spark, settings, metric, progress, rebuild, report)


def _round_from_driver(spark: SparkSession, settings: Settings, metric: GoldMetric,
                       progress: list[SourceProgress], phases: PhaseTimer
                       ) -> tuple[str, int] | None:
    """An incremental round on inputs read into the driver (driver_inputs), committed
    with delta-rs (Spark's MERGE for more keys than `spark.driver_commit_rows`): (what it
    did, rows written). None when the round is not small: more changed rows than that,
    scoped files of more than driver_inputs.DRIVER_READ_ROWS rows, or a change feed
    delta-rs cannot read (the round on Spark then decides)."""
    limit = settings.spark.driver_commit_rows
    changes = {}
    for source in progress:
        rows = driver_inputs.changed_rows(settings, source, list(metric.sources[source.table]))
        if rows is None:
            return None
        changes[source.table] = rows
    if sum(t.num_rows for t in changes.values()) > limit:
        return None
    scopes = metric.scope(changes)
    sources = {}
    for source in progress:
        rows = driver_inputs.scoped_rows(settings, source.table, source.current,
                                         scopes[source.table])
        if rows is None:
            return None
        sources[source.table] = rows
    phases.done("changes")
    read = sum(t.num_rows for t in sources.values())
    views = driver_inputs.LocalViews(spark, "gold_src_", sources)
    changed = driver_inputs.LocalViews(spark, "gold_changes_", changes)
    try:
        with confs_for_rows(spark, settings, read, SMALL_READ_ROWS):
            frame, key_frame = metric.compute_changed(spark, settings, views, changed)
            phases.done("affected keys")
            rows, keys = frame.toArrow(), key_frame.toArrow()
        phases.done("compute")
    finally:
        views.close()
        changed.close()
    uri = table_uri(settings, metric.table)
    unique_key = load_definitions(tables=[metric.table])[0].unique_key
    reading = {p.table: p.current for p in progress}
    if keys.num_rows > limit:  # a few changes that touch many keys: Spark's MERGE
        replaced = replace_keys(spark, spark_uri(uri), spark.createDataFrame(rows),
                                spark.createDataFrame(keys), unique_key, reading)
    else:
        replaced = replace_keys_from_driver(uri, storage_options(settings, uri), rows, keys,
                                            unique_key, reading)
    phases.done("write")
    return (f"replaced {replaced} key(s) from {read} silver row(s) read into the driver",
            rows.num_rows)


def _update(spark: SparkSession, settings: Settings, metric: GoldMetric,
            progress: list[SourceProgress], rebuild: bool, report: Report) -> int:
    """run_metric's work once it knows the table is behind (or rebuilt)."""
    began = time.monotonic()
    phases = PhaseTimer()
    small = (None if rebuild or not all(p.replayable for p in progress)
             else _round_from_driver(spark, settings, metric, progress, phases))
    if small is not None:
        return _done(metric, progress, *small, phases, began, report)
    gold_path = spark_uri(table_uri(settings, metric.table))
    views = PinnedViews(spark, {p.table: p.current for p in progress},
                        {name: spark_uri(table_uri(settings, name)) for name in metric.sources})
    phases.done("views")
    try:
        reading = {p.table: p.current for p in progress}
        changes = None
        if not rebuild and all(p.replayable for p in progress):
            changes = _register_changes(spark, settings, metric, progress, views)
            phases.done("changes")
            if changes is None:
                report(f"{metric.table}: a silver change feed is no longer readable; rebuilding")
        elif not rebuild:
            report(f"{metric.table}: no consumed silver versions recorded; building in full")
        if changes is None:
            rows = metric.compute_all(spark, settings, views).localCheckpoint(eager=True)
            phases.done("compute")
            replace_all(spark, gold_path, rows, reading)
            phases.done("write")
            mode = "rebuilt"
        else:
            frame, key_frame = metric.compute_changed(spark, settings, views, changes)
            phases.done("affected keys")
            rows = frame.localCheckpoint(eager=True)
            keys = key_frame.localCheckpoint(eager=True)
            phases.done("compute")
            unique_key = load_definitions(tables=[metric.table])[0].unique_key
            uri = table_uri(settings, metric.table)
            replaced = replace_keys(spark, gold_path, rows, keys, unique_key, reading,
                                    driver=(uri, storage_options(settings, uri),
                                            settings.spark.driver_commit_rows))
            phases.done("write")
            mode = f"replaced {replaced} key(s)"
        written = rows.count()
        phases.done("count")
    finally:
        views.close()
    return _done(metric, progress, mode, written, phases, began, report)


def _done(metric: GoldMetric, progress: list[SourceProgress], mode: str, written: int,
          phases: PhaseTimer, began: float, report: Report) -> int:
    LAST_PHASES[metric.table] = phases.seconds
    log.info("%s: %s; %s", metric.table, mode, phases)
    report(f"{metric.table}: {mode}, {written} row(s) written from "
           + ", ".join(f"{p.table} v{p.consumed if p.consumed is not None else '-'}"
                       f"->v{p.current}" for p in progress)
           + f" in {time.monotonic() - began:.1f} s")
    return written


def preflight(settings: Settings, tables: Sequence[str] | None = None) -> list[str]:
    """The gold tables to run, checked before any Spark work: known names, and every gold
    table and silver source present (GoldError naming the first problem otherwise)."""
    chosen = list(tables) if tables else list(METRICS)
    unknown = [t for t in chosen if t not in METRICS]
    if unknown:
        raise GoldError(f"unknown gold table(s) {unknown} (known: {', '.join(METRICS)})")
    for name in chosen:
        for table in (name, *METRICS[name].sources):
            _open(settings, table)
    return chosen


def behind(settings: Settings, table: str) -> bool:
    """Whether silver has versions the gold `table` has not consumed (cheap: logs only)."""
    consumed = consumed_versions(_open(settings, table))
    return any(source_progress(consumed, name, _open(settings, name)).has_news
               for name in METRICS[table].sources)


def run_gold(spark: SparkSession, settings: Settings, tables: Sequence[str] | None = None,
             rebuild: bool = False, report: Report = print) -> dict[str, int]:
    """Update the gold tables (default: all) incrementally, or rebuild them from silver;
    rows written per table (0: already up to date). Refused (TableBusy) while another
    process writes one of them."""
    chosen = preflight(settings, tables)
    with writing(settings, chosen, "gold rebuild" if rebuild else "gold update"):
        if len(chosen) == 1:
            return {chosen[0]: run_metric(spark, settings, METRICS[chosen[0]], rebuild,
                                          report)}
        # The tables at once: a round is mostly plans and small jobs one after the other
        # on the driver, which one table at a time left a core idle.
        with ThreadPoolExecutor(len(chosen), thread_name_prefix="gold") as pool:
            running = {name: pool.submit(_run_on_own_session, spark, settings,
                                         METRICS[name], rebuild, report)
                       for name in chosen}
            return {name: future.result() for name, future in running.items()}


def _run_on_own_session(spark: SparkSession, settings: Settings, metric: GoldMetric,
                        rebuild: bool, report: Report) -> int:
    """run_metric on a session of its own (the SparkContext is shared): the metrics'
    temporary views and the commit-metadata setting have the same names in each. A new
    session starts from the confs the SparkContext started with; the caller's values of
    the confs gold depends on are copied (a session reused by a later command got its
    confs at run time), and the session is the thread's active one (Delta looks it up)."""
    session = spark.newSession()
    for key in CALLER_CONFS:
        value = spark.conf.get(key, None)
        if value is not None:
            session.conf.set(key, value)
    activate_in_thread(session)
    return run_metric(session, settings, metric, rebuild, report)


__all__ = ["METRICS", "GoldError", "behind", "preflight", "run_gold", "run_metric"]
