"""`lakehouse ingest`: the whole pipeline as one service.

Order matters and each step is idempotent, so the command can be re-run at any time (each
step does what its own `lakehouse` command does, in this process):
stack up (embedded) -> tables apply -> rentals provision and seed (embedded) -> connectors apply ->
feed simulator (embedded) -> scrapers -> bronze -> silver -> gold. With
`--until-caught-up` every source is read once, every layer drains and the command exits;
otherwise everything keeps running until Ctrl-C/SIGTERM, with a progress line per layer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field

from deltalake.exceptions import DeltaError
from pyspark.sql import SparkSession

from connectors.scrapers.scheduler import Scraper, SourceProgress
from connectors.scrapers.source_config import load_sources
from connectors.simulator.server import FeedSimulator
from infra.ports import port_is_free
from settings import ConfigError, Settings
from settings.report import Report
from spark_streaming.query_restarts import RetryClock, first_line
from spark_streaming.session import SessionInBackground

LOG = logging.getLogger(__name__)


class IngestError(Exception):
    """A step of the ingest service failed; the message names the step."""


@dataclass
class IngestOptions:
    until_caught_up: bool = False
    # Rentals changes made by the embedded traffic generator in a caught-up run.
    traffic_events: int = 40
    traffic_rate: float = 20.0
    # Seconds to wait for Debezium to hand every change made so far to Kafka.
    cdc_drain_timeout: float = 60.0
    # The bronze queries' trigger (silver's is half of it); None: the profile's
    # ingest.trigger_interval_seconds.
    trigger_interval_seconds: float | None = None
    skip: set[str] = field(default_factory=set)


def run_step(report: Report, command: str, step: Callable[[], object]) -> None:
    """Do what `lakehouse <command>` does, in this process (no interpreter start and no
    second import of the CLI): its lines as that command prints them, and its failure as
    its exit code would say."""
    from cli.exit_codes import BAD_INPUT
    from cli.terminal import console
    from infra.components.base import StackError

    report(f"step: lakehouse {command}")
    try:
        step()
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
    except (ConfigError, StackError) as exc:
        console.print("[red]error:[/red] ", end="")
        console.print(str(exc), markup=False)
        code = BAD_INPUT
    if code:
        raise IngestError(f"step `lakehouse {command}` failed with exit code {code} (its "
                          "output is above)")


def bronze_topics(settings: Settings, report: Report) -> list[str]:
    """Topics with a bronze table definition that exist on the broker; a missing one is
    reported (its table stays empty until the topic exists), never skipped silently."""
    from clients import kafka_admin
    from spark_streaming.bronze import declared_bronze_topics

    wanted = declared_bronze_topics(settings)
    existing = kafka_admin(settings).list_topics(timeout=15).topics
    for topic in sorted(set(wanted) - set(existing)):
        report(f"bronze: topic {topic} (table {wanted[topic]}) does not exist on "
               f"{settings.kafka.bootstrap_servers}: `lakehouse topics apply` creates it")
    return sorted(t for t in wanted if t in existing)


def prepare(settings: Settings, options: IngestOptions, report: Report,
            spark: SessionInBackground) -> None:
    """Servers, tables, source database and connectors: all idempotent. `spark` is the
    ingest's own session: its driver starts as soon as the servers are up (it needs the
    metastore's database) and runs its start beside the other steps; the tables' DDL
    waits for it when there is any."""
    from cli.connectors_commands import apply_connectors
    from cli.main import bring_up
    from cli.rentals_commands import provision_rentals, seed_rentals
    from cli.topics_commands import apply_topics

    embedded = settings.embedded.enabled
    if embedded:
        run_step(report, "up", lambda: bring_up(settings))
    spark.begin()
    run_step(report, "topics apply", lambda: apply_topics(settings))
    apply_tables(settings, report, spark.get)
    write_dbt_sources(settings, report)
    if embedded and "rentals" not in options.skip:
        # the roles too: a server started by an older version has not got them yet
        run_step(report, "rentals provision", lambda: provision_rentals(settings))
        run_step(report, "rentals seed", lambda: seed_rentals(settings))
    if "connectors" not in options.skip:
        run_step(report, "connectors apply --wait", lambda: apply_connectors(settings))


def apply_tables(settings: Settings, report: Report, spark: Callable[[], SparkSession]) -> None:
    """`lakehouse tables apply`, in this process: the DDL runs on the ingest's own session
    (one Spark start, and on a cluster one application, instead of two)."""
    from lakehouse.catalog import registered_tables
    from lakehouse.definitions import load_definitions
    from lakehouse.storage import storage_options
    from lakehouse.table_manager import apply_definitions

    report("step: tables apply (in the ingest's Spark session)")
    root = settings.tables_uri
    try:
        storage = storage_options(settings, root)
        summary = apply_definitions(load_definitions(), root, storage,
                                    registered_tables(settings), spark,
                                    lambda line: LOG.info("tables: %s", line), report)
    except (DeltaError, OSError, ValueError, ConfigError) as exc:
        raise IngestError(f"step `tables apply` cannot work on the tables under {root}: "
                          f"{exc}") from None
    report(f"tables: {summary.line()}")
    problems = summary.failed + [f"{name}: its definition holds a change that would break "
                                 "readers (`lakehouse tables diff` shows it)"
                                 for name in summary.refused]
    if problems:
        raise IngestError("step `tables apply` failed: " + "; ".join(problems))


def write_dbt_sources(settings: Settings, report: Report) -> None:
    """dbt/models/lakehouse from the table definitions, so a plain `dbt build` in dbt/
    finds the tables this ingest writes (`lakehouse transform` writes them as well)."""
    from analysis.dbt_project import TransformError, prepare_project

    try:
        changed = prepare_project(settings).changed
    except TransformError as exc:
        report(f"dbt sources not written: {exc}")
        return
    if changed:
        report(f"dbt: {len(changed)} generated files of dbt/models/lakehouse updated")


def start_simulator(settings: Settings, stack: ExitStack, report: Report) -> None:
    """The embedded profile's feeds; left alone if something already serves that port."""
    config = settings.simulator
    if not settings.embedded.enabled:
        return
    if not port_is_free(config.port):
        if not settings.embedded.simulator:  # else the stack's own simulator server
            report(f"simulator: port {config.port} is taken, assuming a simulator runs there")
        return
    simulator = FeedSimulator(port=config.port, host=config.host, seed=config.seed,
                              tick_interval=30.0)
    stack.enter_context(simulator)
    report(f"simulator: serving GBFS and weather feeds on {simulator.url}")


def _cdc_slot(settings: Settings) -> str | None:
    from connectors.rentals.roles import cdc_capture

    capture = cdc_capture(settings)
    return capture.slot if capture else None


def make_rentals_changes(settings: Settings, options: IngestOptions, report: Report) -> None:
    """A burst of inserts, updates and deletes, then wait until Debezium confirmed them."""
    from connectors.rentals.database import connect
    from connectors.rentals.traffic import run_traffic

    with connect(settings) as conn:
        counts = run_traffic(conn, settings.rentals, rate=options.traffic_rate,
                             seed=settings.rentals.seed + int(time.time()),
                             events=options.traffic_events)
        report(f"rentals traffic: {counts.summary()}")
        slot = _cdc_slot(settings)
        if slot is None:
            return
        # Debezium confirms the LSN of the last commit it handled, never the WAL end (other
        # WAL records follow it). So: note the WAL position, make one more captured change
        # (touch a station), and wait until the slot confirmed a commit beyond that mark.
        mark = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
        with conn.transaction():
            conn.execute("UPDATE stations SET updated_at = now() WHERE station_id = "
                         "(SELECT min(station_id) FROM stations)")
        deadline = time.monotonic() + options.cdc_drain_timeout
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT confirmed_flush_lsn > %s::pg_lsn FROM pg_replication_slots "
                "WHERE slot_name = %s", (mark, slot)).fetchone()
            if row and row[0]:
                report(f"cdc: slot {slot} confirmed every change made before {mark}")
                return
            time.sleep(1)
        report(f"cdc: slot {slot} has not confirmed the changes after {mark} within "
               f"{options.cdc_drain_timeout:.0f} s; continuing with what Kafka has")


def scrape_once(settings: Settings, report: Report) -> int:
    scraper = Scraper(settings, load_sources(settings))
    try:
        scraper.ensure_topics()
        reports = scraper.run_once()
    finally:
        scraper.close()
    produced = sum(r.produced for r in reports)
    failed = [r for r in reports if r.failed]
    report(f"scrapers: {produced} message(s) produced by {len(reports)} source(s)"
           + (f", {len(failed)} failed" if failed else ""))
    return produced


def catch_up(spark: SparkSession, settings: Settings, options: IngestOptions,
             report: Report) -> dict[str, dict[str, object]]:
    """Read every source once and drain every layer; figures per table per layer.

    The table-level checks read silver only, so they run beside gold's round (gold's three
    tables leave the driver's cores idle between their small jobs, and the checks are
    mostly Great Expectations' own Python)."""
    from spark_streaming.bronze import run_available_now
    from spark_streaming.gold import run_gold
    from spark_streaming.silver import run_silver

    scrape_once(settings, report)
    if settings.embedded.enabled and "rentals" not in options.skip:
        make_rentals_changes(settings, options, report)
    topics = bronze_topics(settings, report)
    # every topic's query at once: their start-up, broker lookups and commits overlap
    results: dict[str, dict[str, object]] = {
        "bronze": dict(run_available_now(spark, settings, topics, report))}
    results["silver"] = dict(run_silver(spark, settings, available_now=True, report=report))
    if "quality" in options.skip:
        results["gold"] = dict(run_gold(spark, settings, report=report))
        report("quality: table-level checks skipped (--skip quality)")
        return results
    with ThreadPoolExecutor(1, thread_name_prefix="table-checks") as pool:
        checking = pool.submit(_table_checks_on_own_session, spark, settings, report)
        results["gold"] = dict(run_gold(spark, settings, report=report))
        checks = checking.result()
    failed = [c for c in checks if not c.get("success", True)]
    report(f"quality: {len(checks) - len(failed)} of {len(checks)} table-level expectations "
           f"passed" + (f"; failed: {[c.get('rule') for c in failed]}"
                        if failed else ""))
    return results


def _table_checks_on_own_session(spark: SparkSession, settings: Settings,
                                 report: Report) -> list[dict[str, object]]:
    """`run_table_checks` on a session of its own (the SparkContext is shared), the calling
    thread's active one, so gold's rounds beside it keep their own session settings."""
    from spark_streaming.session import activate_in_thread
    from spark_streaming.silver import run_table_checks

    session = spark.newSession()
    activate_in_thread(session)
    return run_table_checks(session, settings, report=report)


def run_forever(spark: SparkSession, settings: Settings, options: IngestOptions,
                report: Report, stop: threading.Event) -> None:
    """Scrapers, traffic, every layer's query and the watch of servers and connectors,
    until `stop` is set. Each part rides out a server outage by itself (see
    spark_streaming/query_restarts.py); one that cannot recover stops the service."""
    from spark_streaming.batch_log import log_batches
    from spark_streaming.bronze import run_continuous
    from spark_streaming.session import activate_in_thread, driver_ended, use_small_batch_confs
    from spark_streaming.silver import run_silver

    log_batches(spark)
    use_small_batch_confs(spark, settings)
    threads: list[threading.Thread] = []
    errors: list[str] = []

    def guarded(name: str, work: Callable[[], object]) -> None:
        def body() -> None:
            try:
                activate_in_thread(spark)
                work()
            except Exception as exc:  # one failed layer stops the whole service
                errors.append(f"{name}: {exc}")
                stop.set()
        thread = threading.Thread(target=body, name=name, daemon=True)
        thread.start()
        threads.append(thread)

    guarded("watch", lambda: _watch_until(settings, options, report, stop))
    scraper = Scraper(settings, load_sources(settings))
    scraper.ensure_topics()
    guarded("scrapers", lambda: scraper.run_forever(stop, _scraper_reporter(report)))
    if settings.embedded.enabled and "rentals" not in options.skip:
        guarded("rentals-traffic", lambda: _traffic_until(settings, report, stop))
    scraper_topics_ready = time.monotonic() + 5
    while time.monotonic() < scraper_topics_ready and not stop.is_set():
        stop.wait(1)
    topics = bronze_topics(settings, report)
    report(f"bronze: {', '.join(topics)}")
    triggers = (settings.ingest if options.trigger_interval_seconds is None else
                settings.ingest.model_copy(
                    update={"trigger_interval_seconds": options.trigger_interval_seconds}))
    report(f"triggers: bronze every {triggers.trigger_interval_seconds:g} s, silver every "
           f"{triggers.silver_trigger_seconds:g} s (between two of bronze's)")
    guarded("bronze", lambda: run_continuous(spark, settings, topics, report, stop,
                                             triggers.bronze_trigger))
    guarded("silver", lambda: run_silver(spark, settings, available_now=False, stop=stop,
                                         report=report, interval=triggers.silver_trigger))
    guarded("gold", lambda: _gold_until(spark, settings, options, report, stop))
    driver_code = None
    while not stop.is_set() and driver_code is None:
        stop.wait(1)
        driver_code = driver_ended(spark)
    stop.set()
    for thread in threads:  # bronze and silver end their current micro-batch first
        if thread.name != "gold":
            thread.join(timeout=60)
    gold = next(thread for thread in threads if thread.name == "gold")
    cancel_until = time.monotonic() + 60
    while driver_code is None and gold.is_alive() and time.monotonic() < cancel_until:
        # A gold round still running is cancelled, not waited for (each gold commit records
        # its own progress: the next round computes what this one had not). Only gold runs
        # jobs now; it may start another between two cancels, hence the loop.
        spark.sparkContext.cancelAllJobs()
        gold.join(timeout=1)
    for thread in threads:
        thread.join(timeout=60)
    scraper.close()  # flushes what the scrapers still queue
    if driver_code is not None:  # the threads' own errors only echo this one
        raise IngestError(f"the Spark driver JVM ended (exit code {driver_code}); start "
                          "`lakehouse ingest` again: every query resumes from its checkpoint")
    if errors:
        raise IngestError("; ".join(errors))


def _gold_until(spark: SparkSession, settings: Settings, options: IngestOptions,
                report: Report, stop: threading.Event) -> None:
    """One round per interval and one line per round; each table's own lines go to the
    log (level INFO). A failed round (S3 or the metastore away) is tried at the next."""
    from spark_streaming.gold import run_gold
    from spark_streaming.session import driver_ended

    log = logging.getLogger("lakehouse.gold")
    clock = RetryClock("gold", report, settings.ingest.recovery_timeout_seconds,
                       settings.ingest.retry_pauses)
    while not stop.wait(settings.ingest.gold_interval_seconds):
        try:
            written = run_gold(spark, settings, report=log.info)
        except Exception as exc:  # any cause: the retry clock judges how long it lasts
            if stop.is_set():  # its jobs were cancelled by the stop
                log.info("the round in progress ended with the stop: %s", first_line(exc))
                return
            if driver_ended(spark) is not None:
                return  # the service reports that itself
            clock.failed(first_line(exc))
            continue
        clock.recovered()
        updated = {name: rows for name, rows in written.items() if rows}
        report(f"gold: {len(written)} tables, {len(written) - len(updated)} up to date"
               + "".join(f", {name} +{rows:,} rows" for name, rows in updated.items()))


def _scraper_reporter(report: Report) -> Callable[[SourceProgress], None]:
    """A line per scrape, and one when a source starts failing (produced nothing, with
    errors; dead-lettered records of a produced snapshot are not a failure) and when it is
    back."""
    failing: set[str] = set()

    def on_report(entry: SourceProgress) -> None:
        name, last = entry.source.name, entry.last
        if last is not None and last.failed and not last.produced:
            if name not in failing:
                failing.add(name)
                report(f"scrapers: {name} failed: {last.errors[0]}; tried again every "
                       f"{entry.source.spec.interval_seconds:.0f} s")
            return
        if name in failing:
            failing.discard(name)
            report(f"scrapers: {name} works again")
        report(f"scrapers: {name} produced {entry.produced} so far")
    return on_report


def _watch_until(settings: Settings, options: IngestOptions, report: Report,
                 stop: threading.Event) -> None:
    """The embedded stack's servers and the repository's connectors, checked every
    ingest.watch_interval_seconds: a dead server is started again, a FAILED task restarted."""
    from connectors.connect_config import CONNECTORS_DIR, load_connector_dir
    from connectors.connector_watch import ConnectorWatch
    from infra.stack_watch import StackWatch

    checks: list[Callable[[], None]] = []
    if settings.embedded.enabled:
        checks.append(StackWatch(settings, report).check)
    connector_watch = None
    if "connectors" not in options.skip:
        names = [c.name for c in load_connector_dir(CONNECTORS_DIR, settings)]
        connector_watch = ConnectorWatch(settings, names, report)
        checks.append(connector_watch.check)
    try:
        while not stop.wait(settings.ingest.watch_interval_seconds):
            for check in checks:
                try:
                    check()
                except Exception:  # a server still settling: asked again at the next check
                    LOG.info("watch: check failed", exc_info=True)
    finally:
        if connector_watch is not None:
            connector_watch.close()


def _traffic_until(settings: Settings, report: Report, stop: threading.Event) -> None:
    """The rentals traffic generator; reconnects when PostgreSQL was away."""
    import psycopg

    from connectors.rentals.database import connect
    from connectors.rentals.traffic import run_traffic

    clock = RetryClock("rentals traffic", report, settings.ingest.recovery_timeout_seconds,
                       settings.ingest.retry_pauses)
    while not stop.is_set():
        try:
            with connect(settings) as conn:
                while not stop.is_set():
                    run_traffic(conn, settings.rentals,
                                rate=settings.rentals.traffic_rate_per_s,
                                seed=settings.rentals.seed + int(time.time()), duration=5)
                    clock.recovered()
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            clock.failed(first_line(exc))
            stop.wait(max(0.0, clock.retry_at - time.monotonic()))
