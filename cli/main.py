"""`lakehouse`: the project's command line (setup, the embedded stack, pipeline commands)."""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import shutil
import sys
import time

import click

from cli.analysis_commands import docs, transform
from cli.connectors_commands import connectors
from cli.context import settings_of
from cli.exit_codes import BAD_INPUT, FAILED, INTERRUPTED, REFUSED, document_exit_codes
from cli.gold_commands import gold
from cli.history_commands import backfill, replay
from cli.kafka_commands import kafka
from cli.notebooks_commands import notebooks
from cli.quality_commands import quality
from cli.rentals_commands import rentals
from cli.scrape_commands import scrape, simulator
from cli.silver_commands import silver
from cli.sql_commands import sql
from cli.status_commands import print_servers, status
from cli.tables_commands import maintain, tables
from cli.terminal import console, report_failure, say, set_verbosity
from cli.topics_commands import topics
from cli.trigger_interval import TriggerInterval
from infra.components.base import StackError
from infra.components.postgres import Postgres
from infra.install import SetupError, run_setup
from infra.stack import Stack, replication_advice
from settings import ConfigError, Settings
from settings.env_file import ensure_env_file
from settings.layout import StateLayout
from spark_streaming.table_lock import TableBusy, running_alone

DISTRIBUTION = "lakehouse-ingest"  # pyproject.toml [project] name


def _say(message: str) -> None:
    say(message, markup=True)


def _package_version() -> str:
    """The installed distribution's version (no import of the heavy modules)."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed: `pip install -e .`)"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(version=_package_version(), prog_name="lakehouse",
                      message="%(prog)s %(version)s")
@click.option("--profile", envvar="LAKEHOUSE_PROFILE", default=None,
              help="Configuration profile of lakehouse.yaml (default: its default_profile).")
@click.option("-v", "--verbose", is_flag=True,
              help="Also show the INFO lines of every module (the log file has them anyway).")
@click.option("-q", "--quiet", is_flag=True,
              help="Only warnings and errors on the terminal.")
@click.pass_context
def cli(ctx: click.Context, profile: str | None, verbose: bool, quiet: bool) -> None:
    """Kafka -> Spark -> Delta lakehouse: run it on a laptop or against real clusters.

    Each command logs in full to .state/logs/lakehouse-<command>.log (the profile's state
    folder); the terminal shows its progress lines.
    """
    ctx.ensure_object(dict)
    ctx.obj["profile"] = profile
    set_verbosity(verbose, quiet)


@cli.command()
@click.pass_context
def setup(ctx: click.Context) -> None:
    """Install the stack's binaries and jars (checksummed) and write .env if missing."""
    from settings.loader import PROJECT_DIR

    if ensure_env_file(PROJECT_DIR):
        _say(f"wrote {PROJECT_DIR / '.env'}: generated local secrets for what it lacked")
        changed = 1
    else:
        changed = 0
    settings = settings_of(ctx)
    from spark_streaming import class_archive

    changed += run_setup(StateLayout(settings.state_path, settings.tools_path), _say,
                         then=lambda: class_archive.build(settings, _say))
    if changed:
        _say(f"[green]setup done[/green]: {changed} change(s); state in {settings.state_path}")
    else:
        _say("[green]setup: nothing to do[/green], everything is installed and verified")


@cli.command()
@click.option("--brokers", type=click.IntRange(1, 9), default=None,
              help="Kafka nodes (broker + controller each) for this start; default: the "
                   "setting embedded.kafka_brokers (1).")
@click.option("--sql-endpoint/--no-sql-endpoint", default=None,
              help="Also start the SQL endpoint (Spark Thrift Server on 127.0.0.1:"
                   "embedded.sql_endpoint_port) for this start; default: the setting "
                   "embedded.sql_endpoint (false). `down` stops it.")
@click.option("--airflow/--no-airflow", default=None,
              help="Also start Airflow (API server and UI on http://127.0.0.1:"
                   "embedded.airflow_port, scheduler, DAG processor, triggerer) for this "
                   "start; default: the setting embedded.airflow (false). With the rest "
                   "running, only Airflow starts. `down` (or `down --airflow` alone) stops "
                   "it.")
@click.pass_context
def up(ctx: click.Context, brokers: int | None, sql_endpoint: bool | None,
       airflow: bool | None) -> None:
    """Start the embedded stack (idempotent: healthy components are left alone)."""
    settings = settings_of(ctx)
    optional = {key: value for key, value in
                (("sql_endpoint", sql_endpoint), ("airflow", airflow)) if value is not None}
    if optional:
        settings = settings.model_copy(update={"embedded": settings.embedded.model_copy(
            update=optional)})
    if brokers is not None and brokers != settings.embedded.kafka_brokers:
        try:
            settings = settings.with_kafka_brokers(brokers)
        except ValueError as exc:
            raise ConfigError(f"--brokers {brokers}: {exc}") from exc
        _say(f"{brokers} Kafka brokers for this start; other commands bootstrap from every "
             f"broker only with LAKEHOUSE_EMBEDDED__KAFKA_BROKERS={brokers} (or "
             "embedded.kafka_brokers in lakehouse.yaml)")
    bring_up(settings)


def bring_up(settings: Settings) -> None:
    """`lakehouse up`'s body (StackError when a server does not come up), which
    `lakehouse ingest` runs in its own process."""
    advice = replication_advice(settings)
    if advice:
        _say(f"[yellow]note:[/yellow] {advice}")
    stack = Stack(settings)
    began = time.monotonic()
    stack.up(_say)
    _say(f"[green]stack healthy[/green] in {time.monotonic() - began:.1f} s "
         f"(logs: {stack.layout.logs})")
    print_servers(stack, as_json=False)


@cli.command()
@click.option("--airflow", is_flag=True,
              help="Stop only Airflow (its four processes); the rest keeps running.")
@click.option("--sql-endpoint", is_flag=True,
              help="Stop only the SQL endpoint; the rest keeps running.")
@click.pass_context
def down(ctx: click.Context, airflow: bool, sql_endpoint: bool) -> None:
    """Stop every component gracefully, then forcefully; a no-op when nothing runs.
    With --airflow or --sql-endpoint, only those."""
    only = tuple(prefix for flag, prefix in ((airflow, "airflow-"),
                                              (sql_endpoint, "sql-endpoint")) if flag)
    Stack(settings_of(ctx)).down(_say, only)


@cli.command()
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
def clean(ctx: click.Context, yes: bool) -> None:
    """Stop the stack and delete the state folder (data, logs, binaries)."""
    settings = settings_of(ctx)
    stack = Stack(settings)
    if not yes:
        click.confirm(f"Stop the stack and delete {settings.state_path}?", abort=True)
    stack.down(_say)
    postgres = stack.component("postgres")
    assert isinstance(postgres, Postgres)
    postgres.remove_data()
    shutil.rmtree(settings.state_path, ignore_errors=True)
    _say(f"removed {settings.state_path}")


@cli.group()
def config() -> None:
    """Inspect the resolved configuration."""


@config.command("show")
@click.pass_context
def config_show(ctx: click.Context) -> None:
    """Print the active profile's settings (secrets masked) as JSON."""
    settings = settings_of(ctx)
    click.echo(settings.model_dump_json(indent=2))


@cli.command()
@click.option("--topic", "topics", multiple=True,
              help="Topic to ingest (repeatable). Default: every topic a bronze table file "
                   "declares (connectors/topics/ says which), with the profile's prefix.")
@click.option("--continuous", is_flag=True,
              help="Keep running on a processing-time trigger until Ctrl-C/SIGTERM "
                   "(default: catch up with availableNow, then exit).")
@click.option("--interval", default="10 seconds", show_default=True,
              help="Trigger interval in continuous mode.")
@click.option("--max-offsets-per-trigger", type=int, default=None,
              help="Cap on records per micro-batch (all partitions together).")
@click.pass_context
def bronze(ctx: click.Context, topics: tuple[str, ...], continuous: bool, interval: str,
           max_offsets_per_trigger: int | None) -> None:
    """Kafka topics -> bronze_<topic> Delta tables (raw, append-only, exactly once)."""
    from cli.ingest_service import bronze_topics
    from spark_streaming import bronze as job
    from spark_streaming.session import command_session

    settings = settings_of(ctx)
    chosen = list(topics) or bronze_topics(settings, _say)
    if not chosen:
        raise click.UsageError("no topics given and no declared bronze topic exists on the "
                               "broker (`lakehouse topics apply` creates them)")
    _say(f"bronze: {', '.join(chosen)} -> {settings.tables_uri}")
    # the signal handler after the session: pyspark installs its own when it starts
    with command_session(settings, "lakehouse-bronze", managed_tables=False) as spark, \
            job.stop_on_signals() as stop:
        if continuous:
            job.run_continuous(spark, settings, chosen, _say, stop, interval,
                               max_offsets_per_trigger)
        else:
            totals = job.run_available_now(spark, settings, chosen, _say,
                                           max_offsets_per_trigger, stop)
            _say(f"bronze caught up: {json.dumps(totals)}")


@cli.command()
@click.option("--until-caught-up", is_flag=True,
              help="Read every source once, drain bronze, silver and gold, then exit 0 "
                   "(what tests and CI use). Default: run until Ctrl-C/SIGTERM.")
@click.option("--interval", type=TriggerInterval(), default=None,
              help="The bronze queries' trigger interval in continuous mode, e.g. "
                   "'10 seconds' (silver's is half of it). Default: the profile's "
                   "ingest.trigger_interval_seconds.")
@click.option("--skip", type=click.Choice(["connectors", "rentals", "quality"]),
              multiple=True,
              help="Leave out a part (repeatable): the Kafka Connect connectors, the "
                   "rentals database traffic, or (with --until-caught-up) the table-level "
                   "quality checks at the end.")
@click.pass_context
def ingest(ctx: click.Context, until_caught_up: bool, interval: float | None,
           skip: tuple[str, ...]) -> None:
    """Run the pipeline: sources -> Kafka -> bronze/silver/gold Delta tables.

    Brings the embedded stack up if needed, applies table definitions and connectors,
    starts the feed simulator (embedded profile), the scrapers and the rentals traffic,
    and the streaming queries of every layer. Every step is idempotent.
    """
    from cli import ingest_service as service
    from spark_streaming.bronze import stop_on_signals
    from spark_streaming.session import SessionInBackground

    settings = settings_of(ctx)
    options = service.IngestOptions(until_caught_up=until_caught_up,
                                    trigger_interval_seconds=interval, skip=set(skip))
    began = time.monotonic()
    try:
        with running_alone(settings, "lakehouse ingest"), contextlib.ExitStack() as resources:
            # the ingest's one SparkSession: its driver starts once the stack is up, beside
            # the steps that follow (prepare), and every step that needs it waits for it
            session = SessionInBackground(settings, app_name="lakehouse-ingest")
            resources.callback(session.stop)
            service.prepare(settings, options, _say, session)
            service.start_simulator(settings, resources, _say)
            spark = session.get()
            # After the session: pyspark installs its own SIGINT handler (cancel every job,
            # raise KeyboardInterrupt) when the context starts; ours stops queries cleanly.
            stop = resources.enter_context(stop_on_signals())
            if until_caught_up:
                results = service.catch_up(spark, settings, options, _say)
                for layer, tables in results.items():
                    for table, figures in sorted(tables.items()):
                        _say(f"{layer}: {table}: {figures}")
                _say(f"[green]ingest caught up[/green] in {time.monotonic() - began:.0f} s")
            else:
                _say("ingest running; Ctrl-C stops every query (an interrupted micro-batch is "
                     "redone exactly once on the next start)")
                service.run_forever(spark, settings, options, _say, stop)
                _say("ingest stopped cleanly")
    except service.IngestError as exc:
        console.print("[red]ingest failed:[/red] ", end="")
        console.print(str(exc), markup=False)
        sys.exit(1)


cli.add_command(connectors)
cli.add_command(rentals)
cli.add_command(scrape)
cli.add_command(simulator)
cli.add_command(tables)
cli.add_command(topics)
cli.add_command(kafka)
cli.add_command(status)
cli.add_command(maintain)
cli.add_command(silver)
cli.add_command(gold)
cli.add_command(backfill)
cli.add_command(replay)
cli.add_command(quality)
cli.add_command(transform)
cli.add_command(docs)
cli.add_command(notebooks)
cli.add_command(sql)
document_exit_codes(cli)


def main() -> None:
    try:
        cli(obj={})
    except (ConfigError, SetupError, StackError) as exc:
        console.print("[red]error:[/red] ", end="")
        console.print(str(exc), markup=False)
        sys.exit(BAD_INPUT)
    except TableBusy as exc:
        console.print("[red]refused:[/red] ", end="")
        console.print(str(exc), markup=False)
        sys.exit(REFUSED)
    except KeyboardInterrupt:
        console.print("interrupted")
        sys.exit(INTERRUPTED)
    except Exception as exc:  # a bug or an unforeseen failure: one line, the rest in the log
        report_failure("failed", exc)
        sys.exit(FAILED)


if __name__ == "__main__":
    main()
