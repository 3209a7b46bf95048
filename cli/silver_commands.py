"""`lakehouse silver`: bronze -> silver Delta tables (typed, deduplicated, SCD2, CDC merge,
expectations with quarantine), and the table-level quality checks.

Exit codes: 0 success; 1 a silver query stopped (e.g. a `fail` expectation, named with a
sample of its rows); 2 invalid configuration, pipeline spec or suite; 3 refused because
another process is writing one of the tables (a running ingest or silver job).
"""

from __future__ import annotations

import json
import sys
from contextlib import ExitStack
from typing import TYPE_CHECKING

import click

from cli.context import settings_of
from cli.terminal import console, say

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from settings import Settings
    from spark_streaming.silver.spec import PipelineSpec


@click.command()
@click.option("--table", "tables", multiple=True,
              help="Only this silver table (repeatable). Default: every pipeline spec in "
                   "spark_streaming/silver/pipelines/.")
@click.option("--continuous", is_flag=True,
              help="Keep running on a processing-time trigger until Ctrl-C (default: catch "
                   "up with bronze and exit).")
@click.option("--interval", default="10 seconds", show_default=True,
              help="Trigger interval with --continuous.")
@click.option("--rebuild", is_flag=True,
              help="Replay the table(s) from bronze: new checkpoint, table emptied, rebuilt.")
@click.option("--check", is_flag=True,
              help="Afterwards run the table-level expectations (Great Expectations) and "
                   "build the Data Docs site.")
@click.pass_context
def silver(ctx: click.Context, tables: tuple[str, ...], continuous: bool, interval: str,
           rebuild: bool, check: bool) -> None:
    """Bronze -> silver tables, exactly once, bad records to quarantine with the reason.

    Exit codes: 0 ok; 1 a query stopped; 2 bad configuration or spec; 3 refused: another
    process is writing one of the tables.
    """
    from spark_streaming.session import command_session
    from spark_streaming.silver.spec import load_specs
    from spark_streaming.table_lock import writing

    settings = settings_of(ctx)
    specs = load_specs(tables=tables)  # invalid specs stop here, before Spark starts
    if rebuild and continuous:
        raise click.UsageError("--rebuild catches up once; run --continuous afterwards")
    say(f"silver: {', '.join(s.table for s in specs)} on {settings.tables_uri}")
    command = "lakehouse " + " ".join(sys.argv[1:])
    with ExitStack() as held:
        # before Spark starts: refused at once while another process writes these tables
        held.enter_context(writing(settings, [s.table for s in specs], command))
        spark = held.enter_context(command_session(settings, "lakehouse-silver",
                                                   managed_tables=False))
        _run(spark, settings, specs, continuous, interval, rebuild, check)


def _run(spark: SparkSession, settings: Settings, specs: list[PipelineSpec], continuous: bool,
         interval: str, rebuild: bool, check: bool) -> None:
    from spark_streaming.bronze import stop_on_signals
    from spark_streaming.silver import rebuild_silver, run_silver, run_table_checks

    try:
        with stop_on_signals() as stop:
            if rebuild:
                totals = rebuild_silver(spark, settings, [s.table for s in specs], say,
                                        specs=specs)
            else:
                totals = run_silver(spark, settings, [s.table for s in specs],
                                    available_now=not continuous, stop=stop, report=say,
                                    interval=interval)
            say(f"silver done: {json.dumps(totals)}")
            if check and not stop.is_set():
                results = run_table_checks(spark, settings, [s.table for s in specs],
                                           report=say)
                failed = [f"{r['checked_table']}.{r['rule']}" for r in results
                          if not r["success"]]
                say(f"table checks: {len(results)} run, failed: {failed or 'none'}")
    except RuntimeError as exc:
        console.print("[red]error:[/red] ", end="")
        console.print(str(exc), markup=False)
        sys.exit(1)
