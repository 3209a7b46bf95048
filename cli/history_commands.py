"""`lakehouse backfill` (past days through the front doors) and `lakehouse replay` (silver
and gold rebuilt from bronze by the same jobs: Kappa)."""

from __future__ import annotations

import sys
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta

import click
from confluent_kafka import KafkaException

from cli.context import settings_of
from cli.exit_codes import BAD_INPUT, FAILED
from cli.terminal import console, say
from connectors.connect_config import ConnectorFileError
from connectors.scrapers.source_config import SourceConfigError


@click.command()
@click.option("--days", type=click.IntRange(1, 366), default=21, show_default=True,
              help="How many whole UTC days to make, ending with --until.")
@click.option("--until", "last_day", type=click.DateTime(formats=["%Y-%m-%d"]),
              default=None, help="The last day to make (YYYY-MM-DD, before today in UTC). "
                                 "Default: yesterday.")
@click.pass_context
def backfill(ctx: click.Context, days: int, last_day: datetime | None) -> None:
    """Make DAYS past days of history and feed them in as live data enters.

    Trip CSV lines are appended to the file the FileStream connector tails (a day per
    append), hourly weather is fetched from the weather source's archive_url and
    station_status snapshots every `scraper.backfill_step_seconds` (15 minutes by
    default) from the GBFS source (`?at=<epoch>`), both
    through the scrapers' own fetch, validation and producers. The feeds are the embedded
    simulator's (started here when nothing serves its port); the broker must be up
    (`lakehouse up`). Idempotent: days already backfilled add nothing. Then `lakehouse
    ingest --until-caught-up` carries the history through bronze, silver and gold.
    """
    from cli.ingest_service import start_simulator
    from connectors.backfill import Backfill, past_days
    from spark_streaming.table_lock import running_alone

    settings = settings_of(ctx)
    today = datetime.now(UTC).date()
    if last_day is not None and last_day.date() >= today:
        raise click.BadParameter(f"{last_day.date()} is not over yet (today is {today} "
                                 "in UTC): a backfill makes whole past days", param_hint="--until")
    try:
        job = Backfill(settings)
    except (SourceConfigError, ConnectorFileError) as exc:
        console.print("[red]error:[/red] ", end="")
        console.print(str(exc), markup=False)
        sys.exit(BAD_INPUT)
    with ExitStack() as resources:
        resources.callback(job.close)
        # two backfills at once could both append a day before either marks it
        resources.enter_context(running_alone(settings, "lakehouse backfill"))
        try:
            created = job.ensure_topics()
        except KafkaException as exc:
            console.print(f"[red]error:[/red] cannot reach the broker at "
                          f"{settings.kafka.bootstrap_servers}: {exc}; the backfill needs the "
                          "stack up (`lakehouse up`, `lakehouse status`)")
            sys.exit(BAD_INPUT)
        if created:
            say(f"created topics: {', '.join(created)}")
        start_simulator(settings, resources, say)
        chosen = past_days(days, today if last_day is None
                           else last_day.date() + timedelta(days=1))
        say(f"backfill: {chosen[0]} .. {chosen[-1]} ({days} days), trips to {job.drop}")
        totals = job.run(chosen, say)
    say(f"backfill done: {totals.as_json()}")
    if totals.errors:
        for error in totals.errors:
            console.print(f"[red]error:[/red] {error}", markup=True)
        console.print("backfill stopped; run it again to resume (what was produced is kept)")
        sys.exit(FAILED)
    if totals.days:
        say("next: `lakehouse ingest --until-caught-up` carries it through bronze, silver, gold")


@click.command()
@click.pass_context
def replay(ctx: click.Context) -> None:
    """Rebuild every silver table from bronze, then gold from silver (Kappa).

    Each silver query starts again from the first bronze version with a new checkpoint,
    on an emptied table (quarantine keeps its rows and gets none twice); then gold is
    brought up to date by its incremental job from silver's change feed. The result
    equals what the incremental ingest built. Refused (exit 3) while an ingest or another
    job writes these tables. Every silver table is emptied before the queries start: a
    replay that fails or is stopped leaves silver partly rebuilt (readers see fewer rows)
    until `lakehouse replay` runs again to the end.
    """
    from spark_streaming.gold import METRICS, run_gold
    from spark_streaming.session import command_session
    from spark_streaming.silver import rebuild_silver
    from spark_streaming.silver.spec import load_specs
    from spark_streaming.table_lock import writing

    settings = settings_of(ctx)
    specs = load_specs()
    tables = [s.table for s in specs] + list(METRICS)
    say(f"replay: {len(specs)} silver tables from bronze, then gold, on {settings.tables_uri}")
    with (writing(settings, tables, "lakehouse replay"),
          command_session(settings, "lakehouse-replay", managed_tables=False) as spark):
        rebuild_silver(spark, settings, [s.table for s in specs], say, specs=specs)
        written = run_gold(spark, settings, report=say)
    say(f"replay done: gold rows written {written}")
